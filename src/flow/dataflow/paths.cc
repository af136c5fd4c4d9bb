// Resolving and checking the programs, scripts and libraries a descriptor names.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "flow/dataflow/dataflow_internal.h"

namespace ferry::flow::internal {
namespace {

namespace fs = std::filesystem;

std::string Absolute(const std::string& directory, const std::string& path) {
  fs::path candidate(path);
  if (candidate.is_relative()) {
    fs::path base(directory);
    if (base.empty() || base.is_relative()) {
      std::error_code error;
      const fs::path cwd = fs::current_path(error);
      base = error ? fs::path("/") / base : cwd / base;
    }
    candidate = base / candidate;
  }
  return candidate.lexically_normal().string();
}

enum class Need { kExecute, kRead };

// Checks `path` is a regular file the process may run (or read).
Status CheckFile(const std::string& path, Need need) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR)
      return Status::Invalid("'" + path + "' does not exist");
    return Status::Invalid("cannot access '" + path + "': " + std::strerror(error));
  }
  if (S_ISDIR(info.st_mode)) return Status::Invalid("'" + path + "' is a directory");
  if (!S_ISREG(info.st_mode)) return Status::Invalid("'" + path + "' is not a regular file");
  if (need == Need::kExecute && ::access(path.c_str(), X_OK) != 0) {
    return Status::Invalid("'" + path + "' is not executable (chmod +x, or give a .py script)");
  }
  if (need == Need::kRead && ::access(path.c_str(), R_OK) != 0) {
    return Status::Invalid("'" + path + "' is not readable");
  }
  return Status::OK();
}

bool Exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

bool IsExecutableFile(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// Looks `name` up on PATH like execvp does; "" when it is not there.
std::string SearchPath(const std::string& name) {
  const char* path_variable = std::getenv("PATH");
  const std::string search =
      path_variable != nullptr ? path_variable : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= search.size()) {
    size_t end = search.find(':', start);
    if (end == std::string::npos) end = search.size();
    const std::string entry = search.substr(start, end - start);
    std::string candidate = Absolute("", (entry.empty() ? "." : entry) + "/" + name);
    if (IsExecutableFile(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

}  // namespace

bool IsPythonScript(std::string_view path) {
  return path.size() > 3 && path.substr(path.size() - 3) == ".py";
}

Result<std::string> ResolveProgram(const std::string& text, const std::string& directory,
                                   bool check) {
  const bool python = IsPythonScript(text);
  std::string resolved = Absolute(directory, text);
  if (text.find('/') == std::string::npos && !python && !Exists(resolved)) {
    // A bare program name that is not next to the descriptor: PATH.
    std::string found = SearchPath(text);
    if (!found.empty()) return found;
    if (check) {
      std::string where = Absolute(directory, ".");
      if (where.size() > 1 && where.back() == '/') where.pop_back();
      return Status::Invalid("program '" + text + "' is neither in " + where + " nor on PATH");
    }
    return resolved;
  }
  if (check) FERRY_RETURN_NOT_OK(CheckFile(resolved, python ? Need::kRead : Need::kExecute));
  return resolved;
}

Result<std::string> ResolveOperatorFile(const std::string& text, const std::string& directory,
                                        bool check) {
  std::string resolved = Absolute(directory, text);
  if (check) FERRY_RETURN_NOT_OK(CheckFile(resolved, Need::kRead));
  return resolved;
}

}  // namespace ferry::flow::internal
