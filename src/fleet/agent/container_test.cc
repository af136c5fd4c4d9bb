#include "fleet/agent/container.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ferry::fleet::agent_internal {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'b');

bool Has(const std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  for (size_t index = 0; index + 1 < argv.size(); ++index) {
    if (argv[index] == flag && argv[index + 1] == value) return true;
  }
  return false;
}

bool Has(const std::vector<std::string>& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

struct Fixture {
  ContainerOptions options;
  JobSpec spec;
  LaunchSpec launch;
  std::map<std::string, std::string> base_env = {{"PATH", "/usr/bin"}, {"HOME", "/root"}};

  Fixture() {
    options.podman = "/usr/bin/podman";
    options.node_name = "gpu-a";
    spec.image = "registry.example.com/team/trainer:1";
    spec.image_digest = kDigest;
    spec.env = {{"HOME", "/home/user"}, {"LR", "0.1"}};
    launch.ref = TaskRef{42, 1, 2};
    launch.argv = {"python", "train.py"};
    launch.env = base_env;
    launch.env["HOME"] = "/home/user";  // the spec's env over the agent's
    launch.env["LR"] = "0.1";
    launch.env["FERRY_JOB_ID"] = "42";
    launch.env["CUDA_VISIBLE_DEVICES"] = "3,5";
    launch.working_dir = "/var/lib/ferry";
    launch.memory_limit_mb = 0;
  }
};

TEST(ContainerTest, RunsTheCommandInTheImageByDigest) {
  Fixture f;
  ContainerMounts mounts;
  mounts.read_only = {"/var/lib/ferry/inputs/42-2"};
  mounts.writable = {"/var/lib/ferry/checkpoints/42-1"};
  mounts.read_only_files = {"/var/lib/ferry/logs/42-2.hosts"};
  WrapInContainer(f.options, f.spec, {}, mounts, f.base_env, &f.launch);
  const std::vector<std::string>& argv = f.launch.argv;
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "/usr/bin/podman");
  EXPECT_EQ(argv[1], "run");
  EXPECT_TRUE(Has(argv, "--rm"));
  EXPECT_TRUE(Has(argv, "--name", "ferry-42-2-1"));
  EXPECT_TRUE(Has(argv, "--label", "ferry.node=gpu-a"));
  EXPECT_TRUE(Has(argv, "--pull=missing"));
  EXPECT_TRUE(Has(argv, "--network=host"));
  EXPECT_TRUE(Has(argv, "--init"));
  EXPECT_FALSE(Has(argv, "--tls-verify=false"));  // an https registry
  EXPECT_TRUE(Has(argv, "--workdir", "/var/lib/ferry"));
  EXPECT_TRUE(Has(argv, "--volume", "/var/lib/ferry:/var/lib/ferry"));
  EXPECT_TRUE(Has(argv, "--volume", "/var/lib/ferry/inputs/42-2:/var/lib/ferry/inputs/42-2:ro"));
  EXPECT_TRUE(
      Has(argv, "--volume", "/var/lib/ferry/checkpoints/42-1:/var/lib/ferry/checkpoints/42-1"));
  EXPECT_TRUE(
      Has(argv, "--volume", "/var/lib/ferry/logs/42-2.hosts:/var/lib/ferry/logs/42-2.hosts:ro"));
  // The variables the agent and the spec set, by name; the agent's own stay out.
  EXPECT_TRUE(Has(argv, "--env", "FERRY_JOB_ID"));
  EXPECT_TRUE(Has(argv, "--env", "LR"));
  EXPECT_TRUE(Has(argv, "--env", "HOME"));
  EXPECT_TRUE(Has(argv, "--env", "CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(Has(argv, "--env", "PATH"));
  for (const std::string& arg : argv) EXPECT_EQ(arg.find("0.1"), std::string::npos) << arg;
  // No GPUs: none visible inside either.
  EXPECT_EQ(f.launch.env["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_FALSE(Has(argv, "--device"));
  // The image by digest, then the command.
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[argv.size() - 3], "registry.example.com/team/trainer@" + kDigest);
  EXPECT_EQ(argv[argv.size() - 2], "python");
  EXPECT_EQ(argv[argv.size() - 1], "train.py");
}

TEST(ContainerTest, PassesRealGpusAsCdiDevices) {
  Fixture f;
  f.options.cdi_gpus = true;
  WrapInContainer(f.options, f.spec, {3, 5}, {}, f.base_env, &f.launch);
  EXPECT_TRUE(Has(f.launch.argv, "--device", "nvidia.com/gpu=3"));
  EXPECT_TRUE(Has(f.launch.argv, "--device", "nvidia.com/gpu=5"));
  // CDI exposes only these two; CUDA numbers them 0 and 1 in the container.
  EXPECT_EQ(f.launch.env["CUDA_VISIBLE_DEVICES"], "0,1");

  Fixture declared;  // declared GPUs are not devices: no CDI, indices as on the node
  WrapInContainer(declared.options, declared.spec, {3, 5}, {}, declared.base_env, &declared.launch);
  EXPECT_FALSE(Has(declared.launch.argv, "--device"));
  EXPECT_EQ(declared.launch.env["CUDA_VISIBLE_DEVICES"], "3,5");
}

TEST(ContainerTest, PlainHttpRegistriesAuthFileAndMemoryLimit) {
  Fixture f;
  f.spec.image = "localhost:5000/ferry-test:1";
  f.options.auth_file = "/etc/ferry/auth.json";
  f.launch.memory_limit_mb = 2;
  WrapInContainer(f.options, f.spec, {}, {}, f.base_env, &f.launch);
  EXPECT_TRUE(Has(f.launch.argv, "--tls-verify=false"));
  EXPECT_TRUE(Has(f.launch.argv, "--authfile", "/etc/ferry/auth.json"));
  EXPECT_TRUE(Has(f.launch.argv, "--ulimit", "as=2097152:2097152"));
  EXPECT_EQ(f.launch.memory_limit_mb, 0);  // not on podman itself
  EXPECT_TRUE(Has(f.launch.argv, "localhost:5000/ferry-test@" + kDigest));

  Fixture listed;
  listed.spec.image = "10.0.0.5:5000/app:2";
  listed.spec.image_digest.clear();
  listed.options.insecure_registries = {"10.0.0.5:5000"};
  WrapInContainer(listed.options, listed.spec, {}, {}, listed.base_env, &listed.launch);
  EXPECT_TRUE(Has(listed.launch.argv, "--tls-verify=false"));
  EXPECT_TRUE(Has(listed.launch.argv, "10.0.0.5:5000/app:2"));  // no digest: as given
}

TEST(ContainerTest, RemovesLeftoverContainers) {
  ContainerOptions options;
  options.podman = "podman";
  EXPECT_EQ(RemoveContainersArgv(options, {"ferry-1-1-0"}),
            (std::vector<std::string>{"podman", "rm", "--force", "--ignore", "--time", "0",
                                      "ferry-1-1-0"}));
  options.podman = "/bin/true";  // a harmless stand-in for podman
  ContainerJanitor janitor(options);
  const TaskRef ref{7, 0, 1};
  EXPECT_FALSE(janitor.Knows(ref));
  janitor.Started(ref);
  EXPECT_TRUE(janitor.Knows(ref));
  janitor.Ended(ref);
  EXPECT_FALSE(janitor.Knows(ref));
  janitor.Ended(TaskRef{8, 0, 1});  // never started in a container: nothing to do
  EXPECT_EQ(ContainerName(TaskRef{7, 0, 1}), "ferry-7-1-0");
}

TEST(ContainerTest, ANewAgentRemovesWhatAKilledOneLeftOnlyAfterTheMarker) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ferry-janitor-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A stand-in podman that logs its arguments and lists two containers of
  // this node, one of them not named by Ferry.
  const fs::path log = dir / "calls";
  const fs::path podman = dir / "podman";
  std::ofstream(podman) << "#!/bin/sh\necho \"$@\" >> " << log.string()
                        << "\n[ \"$1\" = ps ] && printf 'ferry-3-1-0\\nsomeone-else\\n'\nexit 0\n";
  fs::permissions(podman, fs::perms::owner_all);
  ContainerOptions options;
  options.podman = podman.string();
  options.node_name = "gpu-a";
  options.state_dir = dir.string();
  {
    // No marker: no podman call at all.
    ContainerJanitor fresh(options);
    Result<int> removed = fresh.RemoveLeftovers();
    ASSERT_TRUE(removed.ok()) << removed.status().message();
    EXPECT_EQ(*removed, 0);
    EXPECT_FALSE(fs::exists(log));
    fresh.Started(TaskRef{3, 0, 1});  // writes the marker; the agent is then "killed"
    EXPECT_TRUE(fs::exists(dir / "containers.started"));
  }
  ContainerJanitor next(options);
  Result<int> removed = next.RemoveLeftovers();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, 1);
  std::ifstream in(log);
  std::string ps, rm, extra;
  std::getline(in, ps);
  std::getline(in, rm);
  EXPECT_EQ(ps, "ps --all --filter label=ferry.node=gpu-a --format {{.Names}}");
  EXPECT_EQ(rm, "rm --force --ignore --time 0 ferry-3-1-0");
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_FALSE(fs::exists(dir / "containers.started"));
  // A podman that fails is an error, and the marker stays for the next try.
  fs::remove(log);
  std::ofstream(dir / "containers.started") << "x\n";
  std::ofstream(podman, std::ios::trunc) << "#!/bin/sh\necho broken >&2\nexit 3\n";
  Result<int> failed = next.RemoveLeftovers();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("broken"), std::string::npos)
      << failed.status().message();
  EXPECT_TRUE(fs::exists(dir / "containers.started"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ferry::fleet::agent_internal
