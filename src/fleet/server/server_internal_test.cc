// Unit tests of the server's stateless pieces: encodings, routing patterns,
// rate limiting, in-flight idempotency keys, the token cache, page tokens and
// the strict agent/admin body parsers.
#include "fleet/server/server_internal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "fleet/server/wire.h"
#include "testing/test_util.h"

namespace ferry::fleet::server_internal {
namespace {

using nlohmann::json;

TEST(Base64Url, RoundTripsEveryLength) {
  std::string data;
  for (int i = 0; i < 40; ++i) {
    const std::string encoded = Base64UrlEncode(data);
    EXPECT_EQ(encoded.find_first_of("+/="), std::string::npos);
    std::optional<std::string> decoded = Base64UrlDecode(encoded);
    ASSERT_TRUE(decoded.has_value()) << encoded;
    EXPECT_EQ(*decoded, data);
    data += static_cast<char>(i * 37 + 250);
  }
}

TEST(Base64Url, RefusesGarbage) {
  EXPECT_FALSE(Base64UrlDecode("a").has_value());     // impossible length
  EXPECT_FALSE(Base64UrlDecode("ab+c").has_value());  // standard alphabet
  EXPECT_FALSE(Base64UrlDecode("ab==").has_value());  // padding
  EXPECT_FALSE(Base64UrlDecode("ab c").has_value());
  EXPECT_FALSE(Base64UrlDecode("AB").has_value());  // non-zero leftover bits
  EXPECT_TRUE(Base64UrlDecode("AA").has_value());
}

TEST(NewToken, HasThePrefixAndLength) {
  ASSERT_OK_AND_ASSIGN(std::string a, NewToken());
  ASSERT_OK_AND_ASSIGN(std::string b, NewToken());
  EXPECT_EQ(a.substr(0, 3), "fy_");
  EXPECT_EQ(a.size(), 3u + 43u);
  EXPECT_NE(a, b);
}

TEST(MatchPath, CapturesSegments) {
  std::vector<std::string> captures;
  EXPECT_TRUE(MatchPath("/v1/jobs/{}", "/v1/jobs/42", &captures));
  EXPECT_EQ(captures, std::vector<std::string>{"42"});
  captures.clear();
  EXPECT_TRUE(MatchPath("/v1/jobs/{}:cancel", "/v1/jobs/7:cancel", &captures));
  EXPECT_EQ(captures, std::vector<std::string>{"7"});
  captures.clear();
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/7:cancel", &captures));
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/", &captures));
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/1/events", &captures));
  EXPECT_FALSE(MatchPath("/v1/jobs", "/v1/jobs/", &captures));
  captures.clear();
  EXPECT_TRUE(MatchPath("/v1/jobs/{}/logs", "/v1/jobs/x/logs", &captures));
  EXPECT_EQ(captures, std::vector<std::string>{"x"});
  // A very long path is no problem for the linear matcher.
  EXPECT_FALSE(MatchPath("/v1/jobs/{}", "/v1/jobs/" + std::string(100000, '9') + "/", &captures));
}

TEST(ParseQuery, SplitsAtTheFirstEqualsAndDecodes) {
  auto params = ParseQuery("/v1/jobs?label=batch=p&state=A,B&state=C&user=a%20b+c&flag&&x=%zz");
  EXPECT_EQ(params.count("state"), 2u);
  EXPECT_EQ(params.find("label")->second, "batch=p");
  EXPECT_EQ(params.find("user")->second, "a b c");
  EXPECT_EQ(params.find("flag")->second, "");
  EXPECT_EQ(params.find("x")->second, "%zz");
  EXPECT_EQ(ParseQuery("/v1/jobs?label=k%3Dv").find("label")->second, "k=v");
  EXPECT_TRUE(ParseQuery("/v1/jobs").empty());
  EXPECT_TRUE(ParseQuery("/v1/jobs?").empty());
}

TEST(Checks, IdempotencyKeysContentTypesNamesAndDepth) {
  EXPECT_TRUE(ValidIdempotencyKey("abc-123 ok"));
  EXPECT_FALSE(ValidIdempotencyKey(""));
  EXPECT_FALSE(ValidIdempotencyKey(std::string(256, 'a')));
  EXPECT_TRUE(ValidIdempotencyKey(std::string(255, 'a')));
  EXPECT_FALSE(ValidIdempotencyKey("tab\there"));
  EXPECT_FALSE(ValidIdempotencyKey("\xc3\xa9"));

  EXPECT_TRUE(IsJsonContentType("application/json"));
  EXPECT_TRUE(IsJsonContentType("Application/JSON; charset=utf-8"));
  EXPECT_FALSE(IsJsonContentType("text/plain"));
  EXPECT_FALSE(IsJsonContentType(""));
  EXPECT_FALSE(IsJsonContentType("application/jsonx"));

  EXPECT_TRUE(ValidName("gpu-a.b_1"));
  EXPECT_FALSE(ValidName(""));
  EXPECT_FALSE(ValidName(".hidden"));
  EXPECT_FALSE(ValidName("a/b"));
  EXPECT_FALSE(ValidName(std::string(129, 'a')));

  EXPECT_TRUE(JsonNestingWithin(R"({"a": [[1]], "b": "[[[[[[["})", 3));
  EXPECT_FALSE(JsonNestingWithin("[[[[", 3));
  EXPECT_TRUE(JsonNestingWithin(R"(["\"[[[[[["])", 1));

  EXPECT_EQ(ParseInt("42"), 42);
  EXPECT_EQ(ParseInt("-3"), -3);
  EXPECT_FALSE(ParseInt("4x").has_value());
  EXPECT_FALSE(ParseInt("").has_value());
  EXPECT_FALSE(ParseInt("99999999999999999999").has_value());
}

TEST(Problem, HasTheRfc9457Members) {
  json problem = Problem(422, "validation", "2 fields are invalid", "/v1/jobs");
  EXPECT_EQ(problem["type"], "urn:ferry:problem:validation");
  EXPECT_EQ(problem["status"], 422);
  EXPECT_EQ(problem["detail"], "2 fields are invalid");
  EXPECT_EQ(problem["instance"], "/v1/jobs");
  EXPECT_TRUE(problem["title"].is_string());
}

TEST(RateLimiter, EmptiesTheBucketAndRefills) {
  RateLimiter limiter(/*rate_per_second=*/2, /*burst=*/3);
  const int64_t t0 = 1'000'000;
  EXPECT_EQ(limiter.Acquire(1, t0), 0);
  EXPECT_EQ(limiter.Acquire(1, t0), 0);
  EXPECT_EQ(limiter.Acquire(1, t0), 0);
  EXPECT_EQ(limiter.Acquire(1, t0), 1);        // empty: 0.5 s to the next token, rounded up
  EXPECT_EQ(limiter.Acquire(2, t0), 0);        // buckets are per user
  EXPECT_EQ(limiter.Acquire(1, t0 + 500), 0);  // refilled one token
  EXPECT_EQ(limiter.Acquire(1, t0 + 500), 1);

  RateLimiter slow(/*rate_per_second=*/0.01, /*burst=*/1);
  EXPECT_EQ(slow.Acquire(1, t0), 0);
  EXPECT_EQ(slow.Acquire(1, t0), 100);

  RateLimiter disabled(0, 0);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(disabled.Acquire(1, t0), 0);
}

TEST(InFlightKeys, OneClaimPerUserAndKey) {
  InFlightKeys keys;
  {
    InFlightKeys::Claim first(&keys, 1, "k");
    EXPECT_TRUE(first.held());
    InFlightKeys::Claim second(&keys, 1, "k");
    EXPECT_FALSE(second.held());
    InFlightKeys::Claim other_user(&keys, 2, "k");
    EXPECT_TRUE(other_user.held());
    InFlightKeys::Claim other_key(&keys, 1, "k2");
    EXPECT_TRUE(other_key.held());
    EXPECT_EQ(keys.size(), 3u);
  }
  EXPECT_EQ(keys.size(), 0u);
  InFlightKeys::Claim again(&keys, 1, "k");
  EXPECT_TRUE(again.held());
}

TEST(InFlightKeys, ConcurrentClaimsHaveOneWinnerAtATime) {
  InFlightKeys keys;
  std::atomic<int> holders{0};
  std::atomic<int> max_holders{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        InFlightKeys::Claim claim(&keys, 7, "same");
        if (!claim.held()) {
          ++refused;
          continue;
        }
        const int now = ++holders;
        int seen = max_holders.load();
        while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
        }
        --holders;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(max_holders.load(), 1);
  EXPECT_EQ(keys.size(), 0u);
}

TEST(TokenCache, ExpiresAndStaysBounded) {
  TokenCache cache(/*capacity=*/4, /*ttl_ms=*/100);
  Principal p;
  p.user = "ana";
  cache.Put("h1", p, 1000);
  ASSERT_TRUE(cache.Get("h1", 1050).has_value());
  EXPECT_EQ(cache.Get("h1", 1050)->user, "ana");
  EXPECT_FALSE(cache.Get("h1", 1100).has_value());
  for (int i = 0; i < 100; ++i) cache.Put("k" + std::to_string(i), p, 2000);
  EXPECT_TRUE(cache.Get("k99", 2001).has_value());
}

TEST(TokenCache, DropUserForgetsItsTokensAndRefusesLookupsThatRacedIt) {
  TokenCache cache(/*capacity=*/16, /*ttl_ms=*/5000);
  Principal ana;
  ana.user_id = 7;
  ana.user = "ana";
  Principal bob;
  bob.user_id = 8;
  bob.user = "bob";
  cache.Put("ana-laptop", ana, 1000);
  cache.Put("ana-ci", ana, 1000);
  cache.Put("bob", bob, 1000);
  // A lookup that read the generation before the revocation...
  const uint64_t before = cache.generation();
  cache.DropUser(7);
  EXPECT_FALSE(cache.Get("ana-laptop", 1001).has_value());
  EXPECT_FALSE(cache.Get("ana-ci", 1001).has_value());
  EXPECT_TRUE(cache.Get("bob", 1001).has_value());
  // ...may not put what it found back.
  cache.Put("ana-laptop", ana, 1002, before);
  EXPECT_FALSE(cache.Get("ana-laptop", 1003).has_value());
  // A lookup after it may (a token issued later is valid).
  cache.Put("ana-new", ana, 1004, cache.generation());
  EXPECT_TRUE(cache.Get("ana-new", 1005).has_value());
}

TEST(PageToken, RoundTripsAndRefusesOtherFilters) {
  JobFilter a;
  a.states = {JobState::kRunning, JobState::kPending};
  a.labels = {{"project", "llm"}};
  JobFilter same = a;
  same.states = {JobState::kPending, JobState::kRunning};
  JobFilter other = a;
  other.user = "bob";
  EXPECT_EQ(FilterDigest(a), FilterDigest(same));
  EXPECT_NE(FilterDigest(a), FilterDigest(other));

  const std::string token = EncodePageToken(1234, FilterDigest(a));
  ASSERT_OK_AND_ASSIGN(int64_t before, DecodePageToken(token, FilterDigest(same)));
  EXPECT_EQ(before, 1234);
  EXPECT_FALSE(DecodePageToken(token, FilterDigest(other)).ok());
  EXPECT_FALSE(DecodePageToken("not a token", FilterDigest(a)).ok());
  EXPECT_FALSE(DecodePageToken(Base64UrlEncode("[1,2]"), FilterDigest(a)).ok());
  EXPECT_FALSE(DecodePageToken(Base64UrlEncode(R"({"b":-1,"f":"x"})"), "x").ok());
  EXPECT_FALSE(DecodePageToken(Base64UrlEncode(R"({"b":"1","f":"x"})"), "x").ok());
  EXPECT_FALSE(DecodePageToken("", FilterDigest(a)).ok());
}

TEST(Wire, NodeRegistration) {
  std::vector<FieldError> errors;
  auto ok = ParseNodeRegistration(json::parse(R"({"name": "gpu-a", "instance": "i1", "cpus": 8,
      "memory_mb": 1024, "labels": {"zone": "a"},
      "gpus": [{"index": 0, "model": "H200", "memory_mb": 141312},
               {"index": 1, "model": "H200", "uuid": "GPU-1"}]})"),
                                  &errors);
  ASSERT_TRUE(ok.has_value());
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(ok->pool, "default");
  ASSERT_EQ(ok->gpus.size(), 2u);
  EXPECT_EQ(ok->gpus[0].uuid, "gpu-a-gpu0");
  EXPECT_EQ(ok->gpus[1].uuid, "GPU-1");

  errors.clear();
  auto bad = ParseNodeRegistration(json::parse(R"({"name": "a/b", "cpus": "8", "extra": 1,
      "gpus": [{"index": 0, "model": "X"}, {"index": 0, "model": "X"}, 3]})"),
                                   &errors);
  EXPECT_FALSE(bad.has_value());
  std::set<std::string> fields;
  for (const auto& e : errors) fields.insert(e.field);
  EXPECT_TRUE(fields.count("name"));
  EXPECT_TRUE(fields.count("instance"));
  EXPECT_TRUE(fields.count("cpus"));
  EXPECT_TRUE(fields.count("extra"));
  EXPECT_TRUE(fields.count("gpus[1].index"));
  EXPECT_TRUE(fields.count("gpus[2]"));
}

TEST(Wire, SyncRequestAndReports) {
  std::vector<FieldError> errors;
  auto ok = ParseSyncRequest(json::parse(R"({"node": "n", "instance": "i",
      "running": [{"job_id": 1, "task": 0, "attempt": 1}],
      "reports": [{"job_id": 1, "task": 0, "attempt": 1, "kind": "exited", "exit_code": 3,
                   "signal": null, "message": "bye"},
                  {"job_id": 2, "task": 1, "attempt": 2, "kind": "started", "at_ms": 5}]})"),
                             777, &errors);
  ASSERT_TRUE(ok.has_value()) << (errors.empty() ? "" : errors[0].field + errors[0].detail);
  ASSERT_EQ(ok->reports.size(), 2u);
  EXPECT_EQ(ok->reports[0].kind, TaskReport::Kind::kExited);
  EXPECT_EQ(ok->reports[0].exit_code, 3);
  EXPECT_FALSE(ok->reports[0].signal.has_value());
  EXPECT_EQ(ok->reports[0].at_ms, 777);
  EXPECT_EQ(ok->reports[1].at_ms, 5);
  EXPECT_EQ(ok->running[0], (TaskRef{1, 0, 1}));

  errors.clear();
  EXPECT_FALSE(ParseSyncRequest(json::parse(R"({"node": "n", "instance": "i",
      "reports": [{"job_id": 1.5, "task": 0, "attempt": 1, "kind": "exploded"}]})"),
                                1, &errors)
                   .has_value());
  EXPECT_EQ(errors.size(), 2u);
  errors.clear();
  EXPECT_FALSE(ParseSyncRequest(json::array(), 1, &errors).has_value());
}

TEST(Wire, LogUploadAndCreateUser) {
  std::vector<FieldError> errors;
  EXPECT_TRUE(ParseAgentLogUpload(json::parse(R"({"node": "n", "job_id": 3, "attempt": 1,
      "task": 0, "stream": "stdout", "data": "hi\n"})"),
                                  &errors)
                  .has_value());
  EXPECT_FALSE(ParseAgentLogUpload(json::parse(R"({"node": "n", "job_id": 3, "attempt": 1,
      "task": 0, "stream": "stdin", "data": 5})"),
                                   &errors)
                   .has_value());
  EXPECT_EQ(errors.size(), 2u);

  errors.clear();
  auto user = ParseCreateUserRequest(
      json::parse(R"({"tenant": "acme", "team": "ml", "name": "ana", "role": "team_admin"})"),
      &errors);
  ASSERT_TRUE(user.has_value());
  EXPECT_EQ(user->role, Role::kTeamAdmin);
  EXPECT_FALSE(
      ParseCreateUserRequest(
          json::parse(R"({"tenant": "acme", "team": "ml", "name": "ana", "role": "god"})"), &errors)
          .has_value());
}

TEST(Wire, RevokeUser) {
  std::vector<FieldError> errors;
  auto ok = ParseRevokeUserRequest(json::parse(R"({"tenant": "acme", "name": "ana"})"), &errors);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->tenant, "acme");
  EXPECT_EQ(ok->name, "ana");
  // Both fields are required, names follow the name rule, nothing else is accepted.
  EXPECT_FALSE(ParseRevokeUserRequest(json::parse(R"({"name": "ana"})"), &errors).has_value());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "tenant");
  errors.clear();
  EXPECT_FALSE(ParseRevokeUserRequest(
                   json::parse(R"({"tenant": "acme", "name": "../x", "team": "ml"})"), &errors)
                   .has_value());
  EXPECT_EQ(errors.size(), 2u);
  errors.clear();
  EXPECT_FALSE(ParseRevokeUserRequest(json::array(), &errors).has_value());
  EXPECT_FALSE(errors.empty());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
