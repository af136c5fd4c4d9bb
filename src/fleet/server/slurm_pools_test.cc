// The Slurm pools' settings and mappings that need no cluster (the
// controller itself runs against a real one in tests/python/fleet/test_slurm.py).
#include "fleet/server/slurm_pools.h"

#include <gtest/gtest.h>

#include <string>

#include "ferry/fleet/model.h"
#include "ferry/fleet/sched.h"
#include "testing/test_util.h"

namespace ferry::fleet::server_internal {
namespace {

sched::ProviderConfig Provider(std::map<std::string, std::string> params) {
  sched::ProviderConfig config;
  config.name = "hpc";
  config.type = "slurm";
  config.params = std::move(params);
  return config;
}

TEST(SlurmSettings, DefaultsFollowTheProviderAndDataDir) {
  ASSERT_OK_AND_ASSIGN(SlurmSettings s, SlurmSettingsFromConfig(Provider({}), "/var/lib/ferry"));
  EXPECT_EQ(s.endpoint, "cli");
  EXPECT_EQ(s.work_dir, "/var/lib/ferry/slurm/hpc");
  EXPECT_EQ(s.node_prefix, "hpc-");
  EXPECT_EQ(s.tag, "hpc");
  EXPECT_DOUBLE_EQ(s.sync_interval_s, 0.5);
  EXPECT_EQ(s.submit_parallelism, 4);
  EXPECT_EQ(s.fault_kill_after_submit, 0);
}

TEST(SlurmSettings, ParamsAreRead) {
  ASSERT_OK_AND_ASSIGN(SlurmSettings s,
                       SlurmSettingsFromConfig(Provider({{"endpoint", "unix:/run/slurmrestd.sock"},
                                                         {"api_version", "v0.0.38"},
                                                         {"work_dir", "/shared/ferry"},
                                                         {"sync_interval_s", "0.001"},
                                                         {"tag", "lab"},
                                                         {"submit_parallelism", "1"},
                                                         {"unreachable_requeue_s", "5"}}),
                                               "/data"));
  EXPECT_EQ(s.endpoint, "unix:/run/slurmrestd.sock");
  EXPECT_EQ(s.api_version, "v0.0.38");
  EXPECT_EQ(s.work_dir, "/shared/ferry");
  EXPECT_DOUBLE_EQ(s.sync_interval_s, 0.01);  // clamped: Slurm is not polled in a spin
  EXPECT_EQ(s.tag, "lab");
  EXPECT_EQ(s.submit_parallelism, 1);
  EXPECT_DOUBLE_EQ(s.unreachable_requeue_s, 5);
}

TEST(SlurmSettings, BadParamsAreRefusedByName) {
  auto message = [](std::map<std::string, std::string> params) {
    Result<SlurmSettings> s = SlurmSettingsFromConfig(Provider(std::move(params)), "/data");
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalid);
    return s.status().message();
  };
  EXPECT_EQ(message({{"submit_parallelism", "0"}}),
            "provider 'hpc': params.submit_parallelism: expected an integer from 1 to 64, got '0'");
  EXPECT_EQ(message({{"timeout_s", "ten"}}),
            "provider 'hpc': params.timeout_s: expected a number >= 0, got 'ten'");
  EXPECT_EQ(message({{"work_dir", "relative/dir"}}),
            "provider 'hpc': params.work_dir: must be an absolute path");
  EXPECT_EQ(message({{"tag", "a:b"}}),
            "provider 'hpc': params.tag: must be non-empty and without ':'");
  EXPECT_EQ(message({{"endpoint", "ssh://login"}}),
            "provider 'hpc': params.endpoint: expected cli, unix:/path or http(s)://...");
  EXPECT_NE(message({{"partition", "gpu"}})
                .find("params.partition: unknown setting of the slurm "
                      "provider (expected endpoint, "),
            std::string::npos);
}

TEST(SlurmReasons, PendingReasonsMapToFerrysReasons) {
  EXPECT_EQ(FerryReasonForSlurm("Resources"), reason::kNoCapacity);
  EXPECT_EQ(FerryReasonForSlurm("ReqNodeNotAvail, UnavailableNodes:n1"), reason::kNoCapacity);
  EXPECT_EQ(FerryReasonForSlurm("QOSMaxGRESPerUser"), reason::kQuotaExceeded);
  EXPECT_EQ(FerryReasonForSlurm("AssocGrpGRES"), reason::kQuotaExceeded);
  EXPECT_EQ(FerryReasonForSlurm("BadConstraints"), reason::kUnsatisfiable);
  EXPECT_EQ(FerryReasonForSlurm("Priority"), reason::kPolicy);
  EXPECT_EQ(FerryReasonForSlurm("PartitionDown"), reason::kPolicy);
}

}  // namespace
}  // namespace ferry::fleet::server_internal
