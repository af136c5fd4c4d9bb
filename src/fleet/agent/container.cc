// `podman run` for tasks in container images (container.h).
#include "fleet/agent/container.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "ferry/fleet/image_ref.h"
#include "fleet/slurm/run_command.h"

namespace ferry::fleet::agent_internal {

std::string ContainerName(const TaskRef& ref) {
  return "ferry-" + std::to_string(ref.job_id) + "-" + std::to_string(ref.attempt) + "-" +
         std::to_string(ref.task);
}

std::string ImageToRun(const JobSpec& spec) {
  if (spec.image_digest.empty()) return spec.image;
  Result<ImageRef> image = ParseImageRef(spec.image);
  if (!image.ok()) return spec.image;
  return image->Pinned(spec.image_digest);
}

namespace {
// --tls-verify=false for loopback and insecure registries; --authfile.
void AddRegistryFlags(const ContainerOptions& options, const JobSpec& spec,
                      std::vector<std::string>* argv) {
  Result<ImageRef> image = ParseImageRef(spec.image);
  if (image.ok() &&
      (image->IsLoopback() ||
       std::find(options.insecure_registries.begin(), options.insecure_registries.end(),
                 image->registry) != options.insecure_registries.end())) {
    argv->push_back("--tls-verify=false");
  }
  if (!options.auth_file.empty()) {
    argv->push_back("--authfile");
    argv->push_back(options.auth_file);
  }
}
}  // namespace

std::vector<std::string> PullArgv(const ContainerOptions& options, const JobSpec& spec) {
  std::vector<std::string> argv = {options.podman, "pull", "--quiet"};
  AddRegistryFlags(options, spec, &argv);
  argv.push_back(ImageToRun(spec));
  return argv;
}

void WrapInContainer(const ContainerOptions& options, const JobSpec& spec,
                     const std::vector<int>& gpu_indices, const ContainerMounts& mounts,
                     const std::map<std::string, std::string>& base_env, LaunchSpec* launch) {
  const TaskRef& ref = launch->ref;
  std::vector<std::string> argv = {options.podman, "run",    "--rm",
                                   "--replace",    "--name", ContainerName(ref)};
  for (const std::string& label :
       {"ferry.node=" + options.node_name, "ferry.job=" + std::to_string(ref.job_id),
        "ferry.task=" + std::to_string(ref.task), "ferry.attempt=" + std::to_string(ref.attempt)}) {
    argv.push_back("--label");
    argv.push_back(label);
  }
  // The stager pulled the image already (PullArgv); should it be gone
  // meanwhile, podman pulls it again.
  argv.push_back("--pull=missing");
  AddRegistryFlags(options, spec, &argv);
  // The host's network: rendezvous addresses and ports mean what they mean
  // for a process task (and rootless podman needs no slirp4netns).
  argv.push_back("--network=host");
  // An init process as PID 1 forwards SIGTERM to the command and reaps.
  argv.push_back("--init");
  if (!launch->working_dir.empty()) {
    argv.push_back("--volume");
    argv.push_back(launch->working_dir + ":" + launch->working_dir);
    argv.push_back("--workdir");
    argv.push_back(launch->working_dir);
  }
  for (const std::string& dir : mounts.read_only) {
    if (dir == launch->working_dir) continue;
    argv.push_back("--volume");
    argv.push_back(dir + ":" + dir + ":ro");
  }
  for (const std::string& dir : mounts.writable) {
    if (dir == launch->working_dir) continue;
    argv.push_back("--volume");
    argv.push_back(dir + ":" + dir);
  }
  for (const std::string& file : mounts.read_only_files) {
    argv.push_back("--volume");
    argv.push_back(file + ":" + file + ":ro");
  }
  // GPUs: CDI devices by node index; inside, CUDA numbers them from 0.
  std::string visible;
  for (size_t index = 0; index < gpu_indices.size(); ++index) {
    if (options.cdi_gpus) {
      argv.push_back("--device");
      argv.push_back("nvidia.com/gpu=" + std::to_string(gpu_indices[index]));
    }
    visible +=
        (index == 0 ? "" : ",") + std::to_string(options.cdi_gpus ? index : gpu_indices[index]);
  }
  launch->env["CUDA_VISIBLE_DEVICES"] = visible;
  if (launch->memory_limit_mb > 0) {
    const std::string bytes = std::to_string(launch->memory_limit_mb * 1024 * 1024);
    argv.push_back("--ulimit");
    argv.push_back("as=" + bytes + ":" + bytes);
    launch->memory_limit_mb = 0;
  }
  // Variables by name only: podman copies their values from its own
  // environment, so none shows in the process list.
  for (const auto& [key, value] : launch->env) {
    auto base = base_env.find(key);
    if (spec.env.count(key) > 0 || base == base_env.end() || base->second != value) {
      argv.push_back("--env");
      argv.push_back(key);
    }
  }
  argv.push_back(ImageToRun(spec));
  for (const std::string& arg : launch->argv) argv.push_back(arg);
  launch->argv = std::move(argv);
}

std::vector<std::string> RemoveContainersArgv(const ContainerOptions& options,
                                              const std::vector<std::string>& names) {
  std::vector<std::string> argv = {options.podman, "rm", "--force", "--ignore", "--time", "0"};
  for (const std::string& name : names) argv.push_back(name);
  return argv;
}

Result<std::string> FindProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t from = 0; from <= dirs.size();) {
    size_t colon = dirs.find(':', from);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string candidate = dirs.substr(from, colon - from) + "/" + program;
    if (colon > from && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    from = colon + 1;
  }
  return Status::Invalid(program + " is not installed here (not in PATH)");
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq != std::string::npos) env[text.substr(0, eq)] = text.substr(eq + 1);
  }
  return env;
}

std::string ContainerJanitor::Marker() const {
  return options_.state_dir.empty() ? std::string() : options_.state_dir + "/containers.started";
}

void ContainerJanitor::Started(const TaskRef& ref) {
  started_.insert(ContainerName(ref));
  if (marked_ || Marker().empty()) return;
  std::ofstream(Marker()) << "podman containers labelled ferry.node=" << options_.node_name
                          << " were started from this directory\n";
  marked_ = true;
}

Result<int> ContainerJanitor::RemoveLeftovers() {
  std::error_code ec;
  if (Marker().empty() || !std::filesystem::exists(Marker(), ec)) return 0;
  FERRY_ASSIGN_OR_RAISE(const std::string podman, FindProgram(options_.podman));
  // podman needs the agent's environment (HOME, XDG_RUNTIME_DIR, CONTAINERS_CONF).
  const std::map<std::string, std::string> env = ProcessEnvironment();
  FERRY_ASSIGN_OR_RAISE(slurm::internal::CommandResult listed,
                        slurm::internal::RunCommand(
                            {podman, "ps", "--all", "--filter",
                             "label=ferry.node=" + options_.node_name, "--format", "{{.Names}}"},
                            env, "", 120));
  if (listed.exit_code != 0) {
    return Status::IOError("podman ps failed: " + listed.err.substr(0, 400));
  }
  std::vector<std::string> names;
  std::istringstream lines(listed.out);
  for (std::string name; std::getline(lines, name);) {
    // Only the names this agent gives (ContainerName).
    if (name.rfind("ferry-", 0) == 0) names.push_back(name);
  }
  if (!names.empty()) {
    std::vector<std::string> argv = RemoveContainersArgv(options_, names);
    argv[0] = podman;
    FERRY_ASSIGN_OR_RAISE(slurm::internal::CommandResult removed,
                          slurm::internal::RunCommand(argv, env, "", 120));
    if (removed.exit_code != 0) {
      return Status::IOError("podman rm failed: " + removed.err.substr(0, 400));
    }
  }
  std::filesystem::remove(Marker(), ec);
  return static_cast<int>(names.size());
}

void ContainerJanitor::Ended(const TaskRef& ref) {
  auto it = started_.find(ContainerName(ref));
  if (it == started_.end()) return;
  RunDetached(RemoveContainersArgv(options_, {*it}));
  started_.erase(it);
}

void RunDetached(const std::vector<std::string>& argv) {
  if (argv.empty()) return;
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return;
  if (pid == 0) {
    const int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      dup2(null_fd, STDOUT_FILENO);
      dup2(null_fd, STDERR_FILENO);
    }
    setsid();
    execvp(args[0], args.data());
    _exit(127);
  }
  std::thread([pid] {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }).detach();
}

}  // namespace ferry::fleet::agent_internal
