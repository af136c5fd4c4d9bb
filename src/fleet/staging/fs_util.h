// File-system helpers of the staging code (cache.cc, stage.cc). Not installed.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/base/status.h"

namespace ferry::fleet::staging_internal {

// mkdir -p.
inline Status MakeDirs(const std::string& path) {
  size_t from = 0;
  while (from <= path.size()) {
    size_t slash = path.find('/', from);
    if (slash == std::string::npos) slash = path.size();
    const std::string at = path.substr(0, slash);
    from = slash + 1;
    if (at.empty()) continue;
    if (mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IOError("cannot create " + at + ": " + std::strerror(errno));
    }
  }
  return Status::OK();
}

// The names in a directory, without "." and ".."; empty if it cannot be read.
inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(std::move(name));
  }
  closedir(d);
  return out;
}

// rm -r (without following symbolic links).
inline void RemoveTree(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : ListDir(path)) RemoveTree(path + "/" + name);
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

}  // namespace ferry::fleet::staging_internal
