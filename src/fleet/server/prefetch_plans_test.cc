#include "fleet/server/prefetch_plans.h"

#include <gtest/gtest.h>

namespace ferry::fleet::server_internal {
namespace {

PrefetchOrder Order(int64_t job, int attempt) {
  PrefetchOrder order;
  order.job_id = job;
  order.attempt = attempt;
  order.tenant = "acme";
  StagedInput input;
  input.name = "d";
  input.objects.push_back({"a.bin", "s3://lake/a.bin", 10, std::string(64, 'a')});
  order.inputs.push_back(input);
  return order;
}

TEST(PrefetchPlans, ReplaceSaysWhichNodesChanged) {
  PrefetchPlans plans;
  EXPECT_EQ(plans.Replace({{"a", {Order(2, 1), Order(1, 1)}}, {"b", {Order(2, 1)}}}),
            (std::set<std::string>{"a", "b"}));
  // Ordered by job, one order per (job, attempt).
  std::vector<PrefetchOrder> on_a = plans.For("a");
  ASSERT_EQ(on_a.size(), 2u);
  EXPECT_EQ(on_a[0].job_id, 1);
  EXPECT_EQ(on_a[1].job_id, 2);
  EXPECT_TRUE(plans.For("c").empty());
  // The same plan again (in another order, with a repeat): nothing changed.
  EXPECT_TRUE(plans.Replace({{"a", {Order(1, 1), Order(2, 1), Order(1, 1)}}, {"b", {Order(2, 1)}}})
                  .empty());
  // A new attempt is a new order; a node without orders is gone.
  EXPECT_EQ(plans.Replace({{"a", {Order(1, 1), Order(2, 2)}}, {"b", {}}}),
            (std::set<std::string>{"a", "b"}));
  EXPECT_TRUE(plans.For("b").empty());
  ASSERT_TRUE(plans.Find(2, 2).has_value());
  EXPECT_EQ(plans.Find(2, 2)->inputs.at(0).objects.at(0).uri, "s3://lake/a.bin");
  EXPECT_FALSE(plans.Find(2, 1).has_value());
  EXPECT_EQ(plans.Replace({}), (std::set<std::string>{"a"}));
  EXPECT_FALSE(plans.Find(1, 1).has_value());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
