#include "fleet/server/ui_assets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace ferry::fleet::server_internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(UiAssets, TheShellAndItsScriptsAreEmbedded) {
  const UiAsset* index = FindUiAsset("index.html");
  ASSERT_NE(index, nullptr);
  EXPECT_THAT(std::string(index->body), HasSubstr("src=\"/ui/app.js\""));
  EXPECT_THAT(std::string(index->body), HasSubstr("src=\"/ui/vendor/chart.js\""));
  for (const char* name : {"app.js", "api.js", "dom.js", "style.css", "job.js"}) {
    EXPECT_NE(FindUiAsset(name), nullptr) << name;
  }
  for (const UiAsset& asset : UiAssets()) {
    EXPECT_FALSE(asset.body.empty()) << asset.name;
    EXPECT_THAT(std::string(UiContentType(asset.name)), Not(HasSubstr("octet-stream")))
        << asset.name;
  }
}

TEST(UiAssets, OnlyTableNamesAreFound) {
  for (const char* name : {"", ".", "..", "../index.html", "ui/index.html", "/index.html",
                           "index.html/", "INDEX.HTML"}) {
    EXPECT_EQ(FindUiAsset(name), nullptr) << name;
  }
}

TEST(UiAssets, ContentTypesFollowTheExtension) {
  EXPECT_EQ(UiContentType("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(UiContentType("app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(UiContentType("style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(UiContentType("chart.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(UiContentType("README"), "application/octet-stream");
  EXPECT_EQ(UiContentType("a.exe"), "application/octet-stream");
}

// The pages put API data into the DOM as text only (dom.js): no script
// parses markup, evaluates strings, or runs inline, which the Content
// Security Policy would refuse anyway.
TEST(UiAssets, NoScriptParsesMarkupOrRunsInline) {
  for (const UiAsset& asset : UiAssets()) {
    const std::string body(asset.body);
    for (const char* banned : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                               "eval(", "new Function", "setAttribute('style'", "javascript:"}) {
      EXPECT_THAT(body, Not(HasSubstr(banned))) << asset.name << " uses " << banned;
    }
  }
  const std::string index(FindUiAsset("index.html")->body);
  EXPECT_THAT(index, Not(HasSubstr("<script>")));
  EXPECT_THAT(index, Not(HasSubstr("<style")));
  EXPECT_THAT(index, Not(HasSubstr(" style=")));
  EXPECT_THAT(index, Not(HasSubstr(" on")));  // no inline event handlers
}

TEST(UiAssets, ThePolicyAllowsNothingInlineOrForeign) {
  const std::string policy(kUiContentSecurityPolicy);
  EXPECT_THAT(policy, StartsWith("default-src 'none'"));
  EXPECT_THAT(policy, HasSubstr("script-src 'self';"));
  EXPECT_THAT(policy, HasSubstr("frame-ancestors 'none'"));
  EXPECT_THAT(policy, Not(HasSubstr("unsafe")));
  EXPECT_THAT(policy, Not(HasSubstr("http")));
}

}  // namespace
}  // namespace ferry::fleet::server_internal
