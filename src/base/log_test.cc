#include "ferry/base/log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace ferry::logging {
namespace {

constexpr int64_t kAt = 1'796'000'000'123;  // 2026-11-30T00:53:20.123Z

TEST(Log, ParseFormatAcceptsTextAndJsonOnly) {
  EXPECT_EQ(*ParseFormat("text"), Format::kText);
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  const auto bad = ParseFormat("JSON ");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("text or json"), std::string::npos);
}

TEST(Log, JsonLineHasTimeLevelComponentMessageAndTypedFields) {
  Logger log("server", Format::kJson);
  const std::string line = log.Render(
      "info", "request", {{"route", "/v1/jobs/{}"}, {"status", 201}, {"latency_ms", 1.5}}, kAt);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], "2026-11-30T00:53:20.123Z");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["component"], "server");
  EXPECT_EQ(j["msg"], "request");
  EXPECT_EQ(j["route"], "/v1/jobs/{}");
  EXPECT_EQ(j["status"], 201);
  EXPECT_DOUBLE_EQ(j["latency_ms"].get<double>(), 1.5);
  // Keys keep the order they were given in.
  EXPECT_LT(line.find("\"route\""), line.find("\"status\""));
}

TEST(Log, JsonLineSurvivesHostileText) {
  Logger log("agent", Format::kJson);
  const std::string hostile = std::string("a\"b\\c\nd\x01 \xff\xfe end");
  const std::string line = log.Render("error", hostile, {{"job", hostile}}, kAt);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["msg"], "a\"b\\c\nd\x01 \xEF\xBF\xBD\xEF\xBF\xBD end");
  EXPECT_EQ(j["job"], j["msg"]);
}

TEST(Log, NonFiniteNumbersAreNull) {
  Logger log("server", Format::kJson);
  const auto j = nlohmann::json::parse(log.Render("info", "m", {{"x", 0.0 / 0.0}}, kAt));
  EXPECT_TRUE(j["x"].is_null());
}

TEST(Log, TextLineKeepsThePrefixAndQuotesWhatNeedsIt) {
  Logger log("server", Format::kText);
  EXPECT_EQ(
      log.Render("error", "lease expiry: store down",
                 {{"job", int64_t{7}}, {"user", "ann lee"}, {"team", ""}, {"ok", "yes"}}, kAt),
      "ferry server: lease expiry: store down job=7 user=\"ann lee\" team=\"\" ok=yes");
}

TEST(Log, WriteAppendsOneLinePerEvent) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  Logger log("agent", Format::kJson, out);
  log.Info("one", {{"n", 1}});
  log.Warn("two");
  std::rewind(out);
  char buf[512];
  int lines = 0;
  while (std::fgets(buf, sizeof buf, out) != nullptr) {
    ++lines;
    EXPECT_TRUE(nlohmann::json::accept(buf)) << buf;
  }
  std::fclose(out);
  EXPECT_EQ(lines, 2);
}

}  // namespace
}  // namespace ferry::logging
