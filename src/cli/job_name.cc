// DefaultJobName: the name `ferry submit` gives a job without --name
// (docs/fleet-cli.md, "Job names").
#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>

#include "cli/fleet_cli.h"

namespace ferry::cli {
namespace {

// How a launcher's own options are read before the word it runs.
struct Launcher {
  std::string_view name{};                     // base name of the program
  std::string_view subcommand{};               // "run" for `uv run`; empty when none
  std::set<std::string_view> value_flags{};    // take the next word as their value
  std::set<std::string_view> boolean_flags{};  // take no value
  std::set<std::string_view> code_flags{};     // the next word is code, not a file
  std::set<std::string_view> module_flags{};   // python -m NAME: the job is NAME
  // torchrun -m: no value, but the word it runs is a module, not a file.
  std::set<std::string_view> module_switches{};
  int positionals = 0;        // plain words it takes before the command (timeout DURATION)
  bool guess_values = false;  // an unknown flag takes the next word unless it looks runnable
  bool shell = false;         // -c CODE is a command line: name it by its main command
};

bool IsPythonName(std::string_view base) {
  for (std::string_view stem : {"python", "pypy"}) {
    if (base.substr(0, stem.size()) != stem) continue;
    std::string_view rest = base.substr(stem.size());
    // python, python3, python3.11, pypy3.10
    bool ok = rest.empty() || std::isdigit(static_cast<unsigned char>(rest[0]));
    for (char c : rest) ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == '.');
    if (ok) return true;
  }
  return false;
}

const Launcher kPython = {.name = "python",
                          .value_flags = {"-W", "-X", "--check-hash-based-pycs"},
                          .code_flags = {"-c"},
                          .module_flags = {"-m"}};
const Launcher kTorchrun = {.name = "torchrun",
                            .boolean_flags = {"--standalone", "--no_python", "--no-python",
                                              "--run_path", "--run-path", "--use_env", "--use-env"},
                            .module_switches = {"-m", "--module"},
                            .guess_values = true};

const std::vector<Launcher>& Launchers() {
  static const std::vector<Launcher> kLaunchers = {
      {.name = "env",
       .value_flags = {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
       .boolean_flags = {"-i", "--ignore-environment", "-0", "--null", "-v", "--debug"}},
      {.name = "bash",
       .value_flags = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"},
       .code_flags = {"-c"},
       .shell = true},
      {.name = "sh", .value_flags = {"-o", "+o"}, .code_flags = {"-c"}, .shell = true},
      {.name = "dash", .value_flags = {"-o", "+o"}, .code_flags = {"-c"}, .shell = true},
      {.name = "zsh", .value_flags = {"-o", "+o"}, .code_flags = {"-c"}, .shell = true},
      {.name = "node",
       .value_flags = {"-r", "--require", "--import", "--loader", "--experimental-loader"},
       .code_flags = {"-e", "--eval", "-p", "--print"}},
      {.name = "nodejs",
       .value_flags = {"-r", "--require", "--import", "--loader"},
       .code_flags = {"-e", "--eval", "-p", "--print"}},
      {.name = "deno", .subcommand = "run", .guess_values = true},
      {.name = "bun", .subcommand = "run", .guess_values = true},
      {.name = "Rscript", .code_flags = {"-e"}},
      {.name = "julia",
       .value_flags = {"-p", "--procs", "-t", "--threads", "-J", "--sysimage", "-L", "--load", "-C",
                       "--cpu-target", "-H", "--home"},
       .code_flags = {"-e", "--eval", "-E", "--print"}},
      {.name = "ruby", .value_flags = {"-r", "-I", "-C"}, .code_flags = {"-e"}},
      {.name = "perl", .value_flags = {"-I", "-M", "-m"}, .code_flags = {"-e", "-E"}},
      {.name = "uv",
       .subcommand = "run",
       .value_flags = {"--with",
                       "--with-requirements",
                       "--with-editable",
                       "--python",
                       "-p",
                       "--project",
                       "--directory",
                       "--package",
                       "--extra",
                       "--group",
                       "--env-file",
                       "--index",
                       "--index-url",
                       "--default-index",
                       "--extra-index-url",
                       "--find-links",
                       "-f",
                       "--upgrade-package",
                       "-P",
                       "--reinstall-package",
                       "--cache-dir",
                       "--config-file",
                       "--color"},
       .module_flags = {"-m", "--module"},
       .guess_values = true},
      {.name = "poetry", .subcommand = "run"},
      {.name = "pipenv", .subcommand = "run"},
      {.name = "pdm", .subcommand = "run"},
      {.name = "hatch", .subcommand = "run"},
      {.name = "pixi", .subcommand = "run", .guess_values = true},
      {.name = "conda",
       .subcommand = "run",
       .value_flags = {"-n", "--name", "-p", "--prefix", "--cwd"},
       .guess_values = true},
      {.name = "mamba",
       .subcommand = "run",
       .value_flags = {"-n", "--name", "-p", "--prefix", "--cwd"},
       .guess_values = true},
      {.name = "micromamba",
       .subcommand = "run",
       .value_flags = {"-n", "--name", "-p", "--prefix", "--cwd"},
       .guess_values = true},
      kTorchrun,
      {.name = "accelerate",
       .subcommand = "launch",
       .value_flags = {"--config_file", "--config-file", "--num_processes", "--num_machines",
                       "--machine_rank", "--main_process_ip", "--main_process_port",
                       "--mixed_precision", "--gpu_ids", "--dynamo_backend"},
       .boolean_flags = {"--cpu", "--multi_gpu", "--tpu", "--use_deepspeed", "--use_fsdp",
                         "--use_megatron_lm", "--use_xpu", "--quiet", "-q", "--debug",
                         "--no_python", "--same_network", "--rdzv_conf"},
       .module_switches = {"-m", "--module"},
       .guess_values = true},
      {.name = "deepspeed",
       .value_flags = {"--num_gpus", "--num_nodes", "--hostfile", "-H", "--include", "-i",
                       "--exclude", "-e", "--master_port", "--master_addr", "--launcher"},
       .boolean_flags = {"--no_python", "--no_local_rank", "--force_multi",
                         "--enable_each_rank_log"},
       .module_switches = {"--module"},
       .guess_values = true},
      {.name = "mpirun", .guess_values = true},
      {.name = "mpiexec", .guess_values = true},
      {.name = "srun", .guess_values = true},
      {.name = "nohup"},
      {.name = "time", .value_flags = {"-f", "-o"}, .boolean_flags = {"-p", "-v"}},
      {.name = "exec", .value_flags = {"-a"}},
      {.name = "nice", .value_flags = {"-n", "--adjustment"}},
      {.name = "ionice", .value_flags = {"-c", "-n", "-p"}},
      {.name = "stdbuf", .value_flags = {"-i", "-o", "-e"}},
      {.name = "numactl", .guess_values = true},
      {.name = "timeout",
       .value_flags = {"-s", "--signal", "-k", "--kill-after"},
       .positionals = 1},
  };
  return kLaunchers;
}

std::string_view BaseName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The base name without its extension ("examples/train.py" -> "train").
std::string Stem(std::string_view path) {
  std::string_view base = BaseName(path);
  const size_t dot = base.rfind('.');
  if (dot != std::string_view::npos && dot > 0) base = base.substr(0, dot);
  return std::string(base);
}

// NAME=value, as env and shells take them.
bool IsAssignment(std::string_view word) {
  const size_t eq = word.find('=');
  if (eq == std::string_view::npos || eq == 0) return false;
  if (std::isdigit(static_cast<unsigned char>(word[0]))) return false;
  return std::all_of(word.begin(), word.begin() + eq, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

const Launcher* FindLauncher(const std::vector<std::string>& words, size_t i) {
  const std::string_view base = BaseName(words[i]);
  if (IsPythonName(base)) return &kPython;
  for (const Launcher& launcher : Launchers()) {
    if (launcher.name != base) continue;
    if (launcher.subcommand.empty()) return &launcher;
    if (i + 1 < words.size() && words[i + 1] == launcher.subcommand) return &launcher;
    return nullptr;  // `uv pip ...`, `conda install`: the tool itself
  }
  return nullptr;
}

// A word a launcher's unknown flag would not take as its value: a path, a
// source file, or another launcher.
bool LooksRunnable(const std::vector<std::string>& words, size_t i) {
  const std::string& word = words[i];
  if (word.find('/') != std::string::npos) return true;
  if (FindLauncher(words, i) != nullptr) return true;
  const size_t dot = word.rfind('.');
  if (dot == std::string::npos || dot == 0) return false;
  static const std::set<std::string_view> kSources = {
      "py", "sh", "bash", "js", "mjs", "cjs", "ts", "r", "R", "jl", "rb", "pl", "lua", "ipynb"};
  return kSources.count(std::string_view(word).substr(dot + 1)) > 0;
}

// A shell command line as its commands (split at ; & | and newlines), each
// as words. Quotes are dropped, not interpreted: enough to find a name.
std::vector<std::vector<std::string>> ShellCommands(const std::string& text) {
  std::vector<std::vector<std::string>> out(1);
  std::string word;
  auto end_word = [&] {
    if (!word.empty()) out.back().push_back(std::move(word));
    word.clear();
  };
  for (char c : text) {
    if (c == ';' || c == '&' || c == '|' || c == '\n') {
      end_word();
      if (!out.back().empty()) out.emplace_back();
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      end_word();
    } else if (c != '"' && c != '\'') {
      word += c;
    }
  }
  end_word();
  if (out.back().empty()) out.pop_back();
  return out;
}

// The command of a shell line that names the job: the first one that is not
// set-up (cd DIR && python train.py -> python train.py).
std::vector<std::string> MainShellCommand(const std::string& code) {
  static const std::set<std::string_view> kSetUp = {"cd",    "pushd", "popd",   "export", "source",
                                                    ".",     "set",   "ulimit", "umask",  "unset",
                                                    "shopt", "trap",  "true",   ":"};
  std::vector<std::vector<std::string>> commands = ShellCommands(code);
  for (const auto& command : commands) {
    auto first = std::find_if(command.begin(), command.end(),
                              [](const std::string& w) { return !IsAssignment(w); });
    if (first != command.end() && !kSetUp.count(*first)) return command;
  }
  return commands.empty() ? std::vector<std::string>{} : commands.front();
}

// "pkg.sub.train" -> "train".
std::string ModuleName(std::string_view module) {
  const size_t dot = module.rfind('.');
  return std::string(dot == std::string_view::npos ? module : module.substr(dot + 1));
}

std::string NameOfCommand(const std::vector<std::string>& words, int depth) {
  std::string fallback;  // the last launcher seen, for `python -c CODE` and the like
  size_t i = 0;
  while (i < words.size()) {
    if (IsAssignment(words[i])) {  // VAR=value before the program
      ++i;
      continue;
    }
    const Launcher* launcher = FindLauncher(words, i);
    if (launcher == nullptr) {
      std::string stem = Stem(words[i]);
      return stem.empty() ? fallback : stem;
    }
    fallback = std::string(BaseName(words[i]));
    i += launcher->subcommand.empty() ? 1 : 2;
    int positionals = launcher->positionals;
    bool module_next = false;
    while (i < words.size()) {
      const std::string& word = words[i];
      if (word == "--") {
        ++i;
        break;
      }
      if (word.size() < 2 || (word[0] != '-' && word[0] != '+')) {
        if (launcher->name == "env" && IsAssignment(word)) {
          ++i;
          continue;
        }
        if (positionals > 0) {
          --positionals;
          ++i;
          continue;
        }
        break;
      }
      const std::string flag = word.substr(0, word.find('='));
      const bool has_value = flag.size() < word.size();
      const bool glued_module = launcher == &kPython && flag.size() > 2 && flag[1] == 'm';
      if (launcher->module_flags.count(flag) || glued_module) {  // -m NAME, -mNAME, --module=NAME
        const bool attached = has_value || glued_module;
        std::string module = has_value              ? word.substr(flag.size() + 1)
                             : glued_module         ? flag.substr(2)
                             : i + 1 < words.size() ? words[i + 1]
                                                    : std::string();
        if (module.empty()) return fallback;
        if (module == "torch.distributed.run" || module == "torch.distributed.launch") {
          launcher = &kTorchrun;
          fallback = "torchrun";
          i += attached ? 1 : 2;
          continue;
        }
        return ModuleName(module);
      }
      if (launcher->module_switches.count(flag)) {
        module_next = true;
        ++i;
        continue;
      }
      // Shells take clustered options: bash -lc CODE.
      const bool shell_code = launcher->shell && !has_value && flag[0] == '-' && flag[1] != '-' &&
                              flag.find('c') != std::string::npos;
      if (launcher->code_flags.count(flag) || shell_code) {
        if (!launcher->shell || depth > 4) return fallback;
        const std::string code = has_value              ? word.substr(flag.size() + 1)
                                 : i + 1 < words.size() ? words[i + 1]
                                                        : std::string();
        std::string inner = NameOfCommand(MainShellCommand(code), depth + 1);
        return inner.empty() ? fallback : inner;
      }
      // A flag with its value in the next word: a known one, or a guess
      // (torchrun --nnodes 2, mpirun -np 4).
      const bool value_next = !has_value && !launcher->boolean_flags.count(flag) &&
                              (launcher->value_flags.count(flag) ||
                               (launcher->guess_values && i + 1 < words.size() &&
                                words[i + 1].rfind('-', 0) != 0 && !LooksRunnable(words, i + 1)));
      i += value_next ? 2 : 1;
    }
    if (module_next && i < words.size()) return ModuleName(words[i]);
  }
  return fallback;
}

// At most `max` code points; bytes that are not UTF-8 become '_'.
std::string CutName(const std::string& name, size_t max) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < name.size() && chars < max;) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xe  ? 3
                 : (c >> 3) == 0x1e ? 4
                                    : 0;
    bool valid = len > 0 && i + len <= name.size();
    for (size_t k = 1; valid && k < len; ++k) {
      valid = (static_cast<unsigned char>(name[i + k]) >> 6) == 0x2;
    }
    if (!valid) {
      out += '_';
      ++i;
    } else {
      // Control characters make poor names in a table.
      out += c < 0x20 || c == 0x7f ? std::string("_") : name.substr(i, len);
      i += len;
    }
    ++chars;
  }
  return out;
}

}  // namespace

std::string DefaultJobName(const std::vector<std::string>& command, const std::string& dataflow) {
  std::string name;
  if (!command.empty()) {
    name = NameOfCommand(command, 0);
  } else if (!dataflow.empty()) {
    const std::string_view base = BaseName(dataflow);
    if (base == "dataflow.yml" || base == "dataflow.yaml") {
      // examples/sensor/dataflow.yml -> sensor: the directory names the flow.
      const size_t slash = dataflow.rfind('/', dataflow.size() - base.size());
      const std::string_view dir = slash == std::string::npos
                                       ? std::string_view()
                                       : std::string_view(dataflow).substr(0, slash);
      name = std::string(BaseName(dir));
      if (name.empty() || name == "." || name == ".." || name == "/") name = "dataflow";
    } else {
      name = Stem(dataflow);
    }
  }
  if (name.empty() || name == "." || name == "..") name = "job";
  return CutName(name, 128);
}

}  // namespace ferry::cli
