// The provisioning controller's bookkeeping and failure paths (the local
// provider's happy path runs end to end in tests/python/fleet).
#include "fleet/server/provisioning.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "testing/test_util.h"

namespace ferry::fleet::server_internal {
namespace {

class Collected {
 public:
  void Add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(line);
  }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  bool WaitFor(size_t count) {
    for (int i = 0; i < 500; ++i) {
      if (Lines().size() >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

sched::Config CloudConfig(const std::string& provider_type) {
  sched::Config config;
  sched::PoolConfig cloud;
  cloud.name = "cloud";
  cloud.cloud = true;
  cloud.provider = "p";
  cloud.max_nodes = 2;
  config.pools = {cloud};
  sched::ProviderConfig provider;
  provider.name = "p";
  provider.type = provider_type;
  config.providers = {provider};
  return config;
}

TEST(ProvisioningController, RefusesAnUnknownProviderType) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("sqlite::memory:"));
  ProvisioningController controller(store.get(), {});
  Status status = controller.Configure(CloudConfig("tin-can"));
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_NE(status.message().find("tin-can"), std::string::npos) << status.ToString();
  EXPECT_TRUE(controller.StatusJson().empty());
}

TEST(ProvisioningController, FailedRequestsStopCountingAndAreReported) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("sqlite::memory:"));
  Collected errors;
  std::atomic<int> changes{0};
  ProvisioningController::Options options;
  options.poll_interval_s = 0.01;
  options.log_error = [&](const std::string& what, const Status& status) {
    errors.Add(what + ": " + status.message());
  };
  options.on_change = [&](bool) { ++changes; };
  ProvisioningController controller(store.get(), options);
  // A pool whose provider is not configured (the config names none).
  sched::Config config = CloudConfig("local");
  config.providers.clear();
  ASSERT_OK(controller.Configure(config));
  controller.Start();
  controller.Submit({{"cloud", 2, {7}}}, {});
  ASSERT_TRUE(errors.WaitFor(1));
  EXPECT_NE(errors.Lines()[0].find("pool cloud"), std::string::npos) << errors.Lines()[0];
  // No longer counted as on its way, so a later pass may ask again.
  EXPECT_TRUE(controller.Provisioning({}).empty());
  EXPECT_GE(changes.load(), 1);

  // A scale-down it cannot carry out is reported and forgotten, so it may be
  // asked again; the same node queued twice is handled once.
  controller.Submit({}, {{"cloud", "cloud-x", 30}, {"cloud", "cloud-x", 31}});
  ASSERT_TRUE(errors.WaitFor(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(errors.Lines().size(), 2u);
  controller.Submit({}, {{"cloud", "cloud-x", 32}});
  ASSERT_TRUE(errors.WaitFor(3));

  controller.Stop();
  controller.Submit({{"cloud", 1, {8}}}, {});  // after Stop: ignored
  EXPECT_TRUE(controller.Provisioning({}).empty());
}

}  // namespace
}  // namespace ferry::fleet::server_internal
