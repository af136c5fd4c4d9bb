#include "fleet/server/node_caches.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace ferry::fleet::server_internal {
namespace {

std::string Digest(char hex) { return "sha256:" + std::string(64, hex); }

NodeCache Holding(std::vector<NodeCache::Input> inputs) {
  NodeCache cache;
  cache.inputs = std::move(inputs);
  return cache;
}

sched::Snapshot TwoNodes() {
  sched::Snapshot snapshot;
  snapshot.nodes.resize(2);
  snapshot.nodes[0].id = 11;
  snapshot.nodes[0].name = "a";
  snapshot.nodes[1].id = 12;
  snapshot.nodes[1].name = "b";
  return snapshot;
}

sched::PendingJob Reading(const std::string& tenant, std::vector<std::string> digests) {
  sched::PendingJob job;
  job.tenant = tenant;
  job.input_digests = std::move(digests);
  return job;
}

using Bytes = std::vector<std::pair<int64_t, int64_t>>;

TEST(NodeCaches, BytesPerNodeSumOverTheJobsInputsOfItsTenant) {
  NodeCaches caches;
  caches.Report("a", "i1",
                Holding({{"acme", Digest('1'), 100, 100}, {"acme", Digest('2'), 5, 50}}));
  caches.Report("b", "i1",
                Holding({{"acme", Digest('2'), 50, 50}, {"beta", Digest('1'), 900, 900}}));
  caches.Report("gone", "i1", Holding({{"acme", Digest('1'), 7, 7}}));  // not in the snapshot
  sched::Snapshot snapshot = TwoNodes();
  snapshot.pending = {Reading("acme", {Digest('1'), Digest('2')}), Reading("beta", {Digest('1')}),
                      Reading("acme", {Digest('9')}), Reading("acme", {})};
  caches.AddCachedBytes(&snapshot);
  EXPECT_EQ(snapshot.pending[0].cached_bytes, (Bytes{{11, 105}, {12, 50}}));
  EXPECT_EQ(snapshot.pending[1].cached_bytes, (Bytes{{12, 900}}));
  EXPECT_TRUE(snapshot.pending[2].cached_bytes.empty());
  EXPECT_TRUE(snapshot.pending[3].cached_bytes.empty());

  // A new report replaces the old; a forgotten node counts no more.
  caches.Report("a", "i1", Holding({{"acme", Digest('2'), 1, 50}}));
  caches.Forget("b");
  snapshot.pending = {Reading("acme", {Digest('1'), Digest('2')})};
  caches.AddCachedBytes(&snapshot);
  EXPECT_EQ(snapshot.pending[0].cached_bytes, (Bytes{{11, 1}}));
}

TEST(NodeCaches, GetAnswersOnlyForTheReportingInstance) {
  NodeCaches caches;
  NodeCache cache;
  cache.bytes = 42;
  caches.Report("a", "i1", cache);
  ASSERT_TRUE(caches.Get("a", "i1").has_value());
  EXPECT_EQ(caches.Get("a", "i1")->bytes, 42);
  EXPECT_FALSE(caches.Get("a", "i2").has_value());
  EXPECT_FALSE(caches.Get("b", "i1").has_value());
  caches.Forget("a");
  EXPECT_FALSE(caches.Get("a", "i1").has_value());
}

TEST(NodeCaches, JsonHidesOtherTenantsInputs) {
  NodeCache cache;
  cache.quota_bytes = 1000;
  cache.inputs = {{"acme", Digest('1'), 10, 10}, {"beta", Digest('2'), 20, 20}};
  Principal admin;
  admin.role = Role::kPlatformAdmin;
  Principal ann;
  ann.tenant = "acme";
  Principal team_admin;
  team_admin.tenant = "beta";
  team_admin.role = Role::kTeamAdmin;
  EXPECT_EQ(NodeCacheJson(cache, admin)["inputs"].size(), 2u);
  ASSERT_EQ(NodeCacheJson(cache, ann)["inputs"].size(), 1u);
  EXPECT_EQ(NodeCacheJson(cache, ann)["inputs"][0]["tenant"], "acme");
  ASSERT_EQ(NodeCacheJson(cache, team_admin)["inputs"].size(), 1u);
  EXPECT_EQ(NodeCacheJson(cache, team_admin)["inputs"][0]["tenant"], "beta");
  EXPECT_TRUE(NodeCacheJson(cache, ann)["hit_ratio"].is_null());  // nothing staged yet
  cache.hit_bytes = 1;
  cache.fetched_bytes = 3;
  EXPECT_DOUBLE_EQ(NodeCacheJson(cache, ann)["hit_ratio"].get<double>(), 0.25);
  EXPECT_TRUE(NodeCacheJson(std::nullopt, admin).is_null());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
