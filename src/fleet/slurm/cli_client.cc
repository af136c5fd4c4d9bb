// SlurmClient over the command-line tools: `sbatch --parsable`, `squeue
// --json`, `sinfo --json`, `scancel`, each run without a shell and with a
// deadline. The JSON is the shape of the tools' own Slurm (v0.0.38's in
// 22.05, data_parser's in 23.11+), read by the same parsers as REST.
#include <unistd.h>

#include <charconv>
#include <csignal>
#include <cstdlib>
#include <utility>

#include "ferry/fleet/slurm.h"
#include "fleet/slurm/run_command.h"
#include "fleet/slurm/slurm_json.h"

namespace ferry::fleet::slurm {

namespace {

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

class CliClient final : public SlurmClient {
 public:
  explicit CliClient(CliOptions options) : options_(std::move(options)) {}

  std::string Describe() const override {
    return "cli" +
           (options_.slurm_conf.empty() ? std::string() : " SLURM_CONF=" + options_.slurm_conf);
  }

  Result<ProbeResult> Probe() override {
    ProbeResult probe;
    FERRY_ASSIGN_OR_RAISE(internal::CommandResult version, Run("sinfo", {"--version"}, ""));
    // "slurm-wlm 22.05.8" (Debian), "slurm 23.11.4".
    std::string line = FirstLine(version.out);
    probe.slurm_release = line.substr(line.rfind(' ') + 1);
    FERRY_ASSIGN_OR_RAISE(internal::CommandResult ping, Run("scontrol", {"ping"}, ""));
    probe.controller_up = ping.exit_code == 0 && ping.out.find("is UP") != std::string::npos;
    if (!probe.controller_up) {
      return Status::IOError("slurm cli: slurmctld is not up: " + FirstLine(ping.out + ping.err));
    }
    return probe;
  }

  Result<std::vector<Node>> ListNodes() override {
    FERRY_ASSIGN_OR_RAISE(std::string body, RunJson("sinfo", {"--json"}));
    auto nodes = internal::ParseNodes(body, "sinfo --json");
    // Since 23.02 `sinfo --json` lists partition/node groups ("sinfo");
    // `scontrol show nodes --json` keeps the node list.
    if (!nodes.ok() && nodes.status().message().find("no \"nodes\" list") != std::string::npos) {
      FERRY_ASSIGN_OR_RAISE(body, RunJson("scontrol", {"show", "nodes", "--json"}));
      return internal::ParseNodes(body, "scontrol show nodes --json");
    }
    return nodes;
  }

  Result<std::vector<Job>> ListJobs(const JobFilter& filter) override {
    FERRY_ASSIGN_OR_RAISE(std::vector<Job> jobs, AllJobs());
    std::erase_if(jobs, [&](const Job& job) { return !filter.Matches(job); });
    return jobs;
  }

  // squeue of 22.05 ignores its filters (-j, -n) with --json: the whole
  // queue comes back and is filtered here.
  Result<std::optional<Job>> GetJob(int64_t job_id) override {
    FERRY_ASSIGN_OR_RAISE(std::vector<Job> jobs, AllJobs());
    for (Job& job : jobs) {
      if (job.id == job_id) return std::optional<Job>(std::move(job));
    }
    return std::optional<Job>();
  }

  Result<int64_t> Submit(const SubmitRequest& request) override {
    FERRY_RETURN_NOT_OK(internal::ValidateSubmit(request));
    // With --export=ALL the job gets exactly sbatch's environment: the
    // request's, and SLURM_CONF so that sbatch finds the cluster.
    std::map<std::string, std::string> environment = request.environment;
    if (!options_.slurm_conf.empty()) environment["SLURM_CONF"] = options_.slurm_conf;
    FERRY_ASSIGN_OR_RAISE(
        internal::CommandResult done,
        RunWith("sbatch", internal::SbatchArguments(request), request.script, environment));
    if (done.exit_code != 0) {
      return Status::Invalid("sbatch failed: " + FirstLine(done.err.empty() ? done.out : done.err));
    }
    // --parsable prints "<id>" or "<id>;<cluster>".
    std::string line = FirstLine(done.out);
    line = line.substr(0, line.find(';'));
    int64_t id = 0;
    auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), id);
    if (error != std::errc() || end != line.data() + line.size() || id <= 0) {
      return Status::Invalid("sbatch --parsable printed no job id: \"" + FirstLine(done.out) +
                             "\"");
    }
    return id;
  }

  Status Cancel(int64_t job_id, int signal) override {
    std::vector<std::string> args;
    // --full: the batch script too, as slurmrestd's DELETE does.
    if (signal != 0) args = {"--full", "--signal=" + std::to_string(signal)};
    args.push_back(std::to_string(job_id));
    FERRY_ASSIGN_OR_RAISE(internal::CommandResult done, Run("scancel", args, ""));
    // scancel exits 0 for unknown and finished jobs (22.05); newer ones say
    // "Invalid job id" or "already completing or completed": also done.
    const std::string text = done.err + done.out;
    if (done.exit_code == 0 || text.find("Invalid job id") != std::string::npos ||
        text.find("already completing or completed") != std::string::npos) {
      return Status::OK();
    }
    return Status::IOError("scancel " + std::to_string(job_id) + " failed: " + FirstLine(text));
  }

 private:
  std::string Program(const std::string& name) const {
    if (!options_.bin_dir.empty()) return options_.bin_dir + "/" + name;
    const char* path = std::getenv("PATH");
    std::string dirs = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    while (start <= dirs.size()) {
      size_t colon = dirs.find(':', start);
      std::string dir = dirs.substr(start, colon == std::string::npos ? colon : colon - start);
      if (!dir.empty()) {
        std::string candidate = dir + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      }
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    return "";
  }

  Result<internal::CommandResult> RunWith(const std::string& name,
                                          const std::vector<std::string>& args,
                                          const std::string& input,
                                          const std::map<std::string, std::string>& environment) {
    std::string program = Program(name);
    if (program.empty() || ::access(program.c_str(), X_OK) != 0) {
      return Status::NotImplemented(
          "slurm cli: " + name + " not found" +
          (options_.bin_dir.empty() ? " in PATH" : " in " + options_.bin_dir));
    }
    std::vector<std::string> argv = {program};
    argv.insert(argv.end(), args.begin(), args.end());
    auto done = internal::RunCommand(argv, environment, input, options_.timeout_s);
    if (!done.ok() && done.status().code() == StatusCode::kTimedOut) {
      return Status::IOError("slurm cli: " + done.status().message());
    }
    return done;
  }

  // The tools run with a minimal environment: PATH, HOME, SLURM_CONF.
  Result<internal::CommandResult> Run(const std::string& name, const std::vector<std::string>& args,
                                      const std::string& input) {
    std::map<std::string, std::string> environment;
    for (const char* key : {"PATH", "HOME", "USER", "LANG"}) {
      if (const char* value = std::getenv(key)) environment[key] = value;
    }
    if (!options_.slurm_conf.empty()) {
      environment["SLURM_CONF"] = options_.slurm_conf;
    } else if (const char* conf = std::getenv("SLURM_CONF")) {
      environment["SLURM_CONF"] = conf;
    }
    return RunWith(name, args, input, environment);
  }

  Result<std::string> RunJson(const std::string& name, const std::vector<std::string>& args) {
    FERRY_ASSIGN_OR_RAISE(internal::CommandResult done, Run(name, args, ""));
    if (done.exit_code != 0) {
      std::string command = name;
      for (const std::string& arg : args) command += " " + arg;
      return Status::IOError(command + " failed (exit " + std::to_string(done.exit_code) +
                             "): " + FirstLine(done.err.empty() ? done.out : done.err));
    }
    return std::move(done.out);
  }

  Result<std::vector<Job>> AllJobs() {
    FERRY_ASSIGN_OR_RAISE(std::string body, RunJson("squeue", {"--json"}));
    return internal::ParseJobs(body, "squeue --json");
  }

  const CliOptions options_;
};

}  // namespace

Result<std::unique_ptr<SlurmClient>> MakeCliClient(CliOptions options) {
  if (options.timeout_s <= 0) return Status::Invalid("slurm cli: timeout must be positive");
  if (!options.bin_dir.empty() && options.bin_dir.front() != '/') {
    return Status::Invalid("slurm cli: bin_dir must be absolute");
  }
  return std::unique_ptr<SlurmClient>(std::make_unique<CliClient>(std::move(options)));
}

}  // namespace ferry::fleet::slurm
