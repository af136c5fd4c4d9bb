// Code bundles (docs/fleet-staging.md#code): a job's code as a gzip'd tar
// archive, packed by `ferry submit --workdir`, checked by the server when it
// is uploaded, and unpacked read-only by agents. A bundle holds regular
// files, directories and symbolic links that stay inside it; nothing else.
#pragma once

#include <cstdint>
#include <string>

#include "ferry/base/status.h"

namespace ferry::fleet {

struct BundleLimits {
  int64_t max_files = 100'000;             // entries of any kind
  int64_t max_unpacked_bytes = 4LL << 30;  // sum of the regular files' sizes
};

struct BundleInfo {
  std::string sha256;  // of the archive's bytes (64 lower-case hex digits)
  int64_t bytes = 0;   // the archive's size
  int64_t files = 0;   // entries
  int64_t unpacked_bytes = 0;
};

// Packs the tree under `dir` into `out_path` (replaced): entries in name
// order with their modes reduced to 0755/0644, owners and times zeroed, so
// the same tree always gives the same archive and digest. Skips `.git`
// directories. Refuses a link that points outside the tree, and a special
// file (a socket, a device).
Result<BundleInfo> PackDirectory(const std::string& dir, const std::string& out_path,
                                 const BundleLimits& limits = {});

// Reads a whole archive from memory and checks every entry (the server's
// check of an upload). The error says which entry is refused and why.
Result<BundleInfo> CheckBundle(const std::string& archive, const BundleLimits& limits = {});

// Unpacks the archive at `archive_path` into `dest` (created; must not
// exist), checking each entry as CheckBundle does and never writing through
// a link; the tree is left read-only. On failure `dest` is removed.
Status UnpackBundle(const std::string& archive_path, const std::string& dest,
                    const BundleLimits& limits = {});

// Drops the write permission of every file and directory under `dir`
// (RemoveStagedTree in staging.h gives it back to remove the tree).
void MakeTreeReadOnly(const std::string& dir);

}  // namespace ferry::fleet
