#include "fleet/server/webhooks.h"

#include <gtest/gtest.h>

#include <string>

namespace ferry::fleet::server_internal {
namespace {

TEST(WebhookUrl, SplitsSchemeHostPortAndPath) {
  Result<WebhookTarget> t = ParseWebhookUrl("https://hooks.example.com/ferry?team=ml");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->scheme_host_port, "https://hooks.example.com:443");
  EXPECT_EQ(t->path, "/ferry?team=ml");
  t = ParseWebhookUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->scheme_host_port, "http://127.0.0.1:8080");
  EXPECT_EQ(t->path, "/");
  t = ParseWebhookUrl("http://[::1]:9000/x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->scheme_host_port, "http://[::1]:9000");
  t = ParseWebhookUrl("http://example.com?q=1");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->path, "/?q=1");
}

TEST(WebhookUrl, RefusesWhatIsNotAPlainHttpUrl) {
  for (const char* bad :
       {"", "ftp://example.com/", "example.com/hook", "http://", "http:///path",
        "http://user:pw@example.com/", "http://example.com/#top", "http://exa mple.com/",
        "http://example.com:0/", "http://example.com:65536/", "http://example.com:/",
        "http://example.com:8x/", "http://-bad.example/", "http://ex_ample.com/", "http://[::1/",
        "http://[zz]/", "http://[::1]x/", "http://example.com/\x01"}) {
    Result<WebhookTarget> t = ParseWebhookUrl(bad);
    EXPECT_FALSE(t.ok()) << "accepted: " << bad;
    if (!t.ok()) {
      EXPECT_FALSE(t.status().message().empty());
    }
  }
  EXPECT_FALSE(ParseWebhookUrl("http://example.com/" + std::string(2048, 'a')).ok());
}

TEST(WebhookSignature, IsHmacSha256OfTimestampDotBody) {
  // Python's hmac.new(b"secret", b'1700000000.{"a":1}', hashlib.sha256).hexdigest().
  const std::string expected = "49f24e537407743fa4a0242bb63b94b9a47ee99cbbe071ccd8a22550ae411686";
  EXPECT_EQ(WebhookSignature("secret", "1700000000", "{\"a\":1}"), expected);
  EXPECT_NE(WebhookSignature("secret", "1700000001", "{\"a\":1}"), expected);
  EXPECT_NE(WebhookSignature("secres", "1700000000", "{\"a\":1}"), expected);
  EXPECT_NE(WebhookSignature("secret", "1700000000", "{\"a\":2}"), expected);
}

TEST(WebhookBackoff, DoublesFromTheBaseUpToTenMinutes) {
  EXPECT_EQ(WebhookBackoffMs(2000, 1, 1.0), 2000);
  EXPECT_EQ(WebhookBackoffMs(2000, 2, 1.0), 4000);
  EXPECT_EQ(WebhookBackoffMs(2000, 5, 1.0), 32000);
  EXPECT_EQ(WebhookBackoffMs(2000, 20, 1.0), 600000);
  EXPECT_EQ(WebhookBackoffMs(2000, 1000, 1.0), 600000);
  EXPECT_EQ(WebhookBackoffMs(1000, 1, 0.5), 800);  // jitter is clamped to 0.8-1.2
  EXPECT_EQ(WebhookBackoffMs(1000, 1, 1.2), 1200);
  EXPECT_EQ(WebhookBackoffMs(1, 0, 1.0), 1);
}

}  // namespace
}  // namespace ferry::fleet::server_internal
