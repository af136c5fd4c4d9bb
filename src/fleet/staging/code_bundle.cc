// Code bundles (code_bundle.h) through libarchive: ustar/pax archives in gzip.
#include "ferry/fleet/code_bundle.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "ferry/base/hash.h"
#include "ferry/fleet/staging.h"

namespace ferry::fleet {
namespace {

namespace fs = std::filesystem;

struct ReadCloser {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct WriteCloser {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

std::string ArchiveError(archive* a) {
  const char* text = archive_error_string(a);
  return text != nullptr ? text : "unknown archive error";
}

// Splits a relative path into its components, dropping "." and empty ones.
std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= path.size()) {
    size_t slash = path.find('/', from);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(from, slash - from);
    if (!part.empty() && part != ".") out.push_back(std::move(part));
    from = slash + 1;
  }
  return out;
}

// Why a link at `link_path` (relative, checked) pointing to `target` would
// leave the tree, or "" when it stays inside.
std::string LinkEscapes(const std::string& link_path, const std::string& target) {
  if (target.empty()) return "an empty link target";
  if (target.front() == '/') return "a link to an absolute path (" + target + ")";
  std::vector<std::string> parts = Components(link_path);
  if (!parts.empty()) parts.pop_back();  // the link's own name
  int64_t depth = static_cast<int64_t>(parts.size());
  for (const std::string& part : Components(target)) {
    depth += part == ".." ? -1 : 1;
    if (depth < 0) return "a link that points outside the bundle (" + target + ")";
  }
  return "";
}

// The entry's path made relative and clean ("a/b"), or an error.
Result<std::string> CleanPath(const char* raw) {
  if (raw == nullptr || *raw == '\0') return Status::Invalid("an entry without a name");
  const std::string path = raw;
  if (path.front() == '/') return Status::Invalid(path + ": an absolute path");
  std::string clean;
  for (const std::string& part : Components(path)) {
    if (part == "..") return Status::Invalid(path + ": a path with '..'");
    clean += (clean.empty() ? "" : "/") + part;
  }
  if (clean.empty()) return std::string(".");
  return clean;
}

// Checks one entry; adds its size to *unpacked. Returns its clean path.
Result<std::string> CheckEntry(archive_entry* entry, const BundleLimits& limits, int64_t* files,
                               int64_t* unpacked) {
  FERRY_ASSIGN_OR_RAISE(std::string path, CleanPath(archive_entry_pathname(entry)));
  if (++*files > limits.max_files) {
    return Status::Invalid("more than " + std::to_string(limits.max_files) + " entries");
  }
  if (archive_entry_hardlink(entry) != nullptr) {
    return Status::Invalid(path + ": a hard link (bundles hold files, directories and links)");
  }
  switch (archive_entry_filetype(entry)) {
    case AE_IFREG: {
      const int64_t size = archive_entry_size(entry);
      if (size < 0) return Status::Invalid(path + ": a file of unknown size");
      *unpacked += size;
      if (*unpacked > limits.max_unpacked_bytes) {
        return Status::Invalid("more than " + FormatBytes(limits.max_unpacked_bytes) +
                               " when unpacked");
      }
      return path;
    }
    case AE_IFDIR:
      return path;
    case AE_IFLNK: {
      const char* target = archive_entry_symlink(entry);
      std::string why = LinkEscapes(path, target != nullptr ? target : "");
      if (!why.empty()) return Status::Invalid(path + ": " + why);
      return path;
    }
    default:
      return Status::Invalid(path + ": not a file, directory or link (bundles hold nothing else)");
  }
}

std::unique_ptr<archive, ReadCloser> NewReader() {
  std::unique_ptr<archive, ReadCloser> reader(archive_read_new());
  archive_read_support_filter_gzip(reader.get());
  archive_read_support_format_tar(reader.get());
  return reader;
}

// Makes the tree under `dir` read-only, deepest first.
void MakeReadOnly(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> dirs{dir};
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const fs::file_status status = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_directory(status)) {
      dirs.push_back(it->path());
    } else if (fs::is_regular_file(status)) {
      fs::permissions(it->path(),
                      fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      fs::perm_options::remove, ec);
    }
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    fs::permissions(*it, fs::perms(0555), fs::perm_options::replace, ec);
  }
}

}  // namespace

void MakeTreeReadOnly(const std::string& dir) { MakeReadOnly(dir); }

Result<BundleInfo> PackDirectory(const std::string& dir, const std::string& out_path,
                                 const BundleLimits& limits) {
  std::error_code ec;
  const fs::path root = fs::absolute(dir, ec);
  if (ec || !fs::is_directory(root, ec)) {
    return Status::Invalid(dir + " is not a directory");
  }
  // Every path under the root, in name order, .git directories left out.
  std::vector<fs::path> paths;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->path().filename() == ".git") {
      it.disable_recursion_pending();
      continue;
    }
    paths.push_back(it->path().lexically_relative(root));
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  std::sort(paths.begin(), paths.end());

  const std::string partial = out_path + ".partial";
  std::unique_ptr<archive, WriteCloser> writer(archive_write_new());
  if (archive_write_add_filter_gzip(writer.get()) != ARCHIVE_OK ||
      archive_write_set_filter_option(writer.get(), "gzip", "timestamp", nullptr) != ARCHIVE_OK ||
      archive_write_set_format_pax_restricted(writer.get()) != ARCHIVE_OK ||
      archive_write_open_filename(writer.get(), partial.c_str()) != ARCHIVE_OK) {
    return Status::IOError("cannot write " + partial + ": " + ArchiveError(writer.get()));
  }
  auto fail = [&](Status status) {
    writer.reset();
    std::remove(partial.c_str());
    return status;
  };
  BundleInfo info;
  std::vector<char> buffer(1 << 20);
  for (const fs::path& relative : paths) {
    const fs::path full = root / relative;
    struct stat st {};
    if (lstat(full.c_str(), &st) != 0) {
      return fail(Status::IOError("cannot read " + full.string()));
    }
    std::unique_ptr<archive_entry, EntryFree> entry(archive_entry_new());
    archive_entry_set_pathname(entry.get(), relative.c_str());
    archive_entry_set_mtime(entry.get(), 0, 0);
    archive_entry_set_uid(entry.get(), 0);
    archive_entry_set_gid(entry.get(), 0);
    std::string link_target;
    if (S_ISREG(st.st_mode)) {
      archive_entry_set_filetype(entry.get(), AE_IFREG);
      archive_entry_set_perm(entry.get(), (st.st_mode & 0111) != 0 ? 0755 : 0644);
      archive_entry_set_size(entry.get(), st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      archive_entry_set_filetype(entry.get(), AE_IFDIR);
      archive_entry_set_perm(entry.get(), 0755);
    } else if (S_ISLNK(st.st_mode)) {
      link_target = fs::read_symlink(full, ec).string();
      std::string why = LinkEscapes(relative.string(), link_target);
      if (ec || !why.empty()) {
        return fail(
            Status::Invalid(relative.string() + ": " + (ec ? "cannot read the link" : why)));
      }
      archive_entry_set_filetype(entry.get(), AE_IFLNK);
      archive_entry_set_perm(entry.get(), 0777);
      archive_entry_set_symlink(entry.get(), link_target.c_str());
    } else {
      return fail(Status::Invalid(relative.string() +
                                  ": not a file, directory or link (bundles hold nothing else)"));
    }
    int64_t files = info.files, unpacked = info.unpacked_bytes;
    Result<std::string> checked = CheckEntry(entry.get(), limits, &files, &unpacked);
    if (!checked.ok()) return fail(checked.status());
    info.files = files;
    info.unpacked_bytes = unpacked;
    if (archive_write_header(writer.get(), entry.get()) != ARCHIVE_OK) {
      return fail(Status::IOError(relative.string() + ": " + ArchiveError(writer.get())));
    }
    if (!S_ISREG(st.st_mode)) continue;
    std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(full.c_str(), "rb"), &std::fclose);
    if (!file) return fail(Status::IOError("cannot open " + full.string()));
    int64_t left = st.st_size;
    while (left > 0) {
      const size_t got = std::fread(buffer.data(), 1, buffer.size(), file.get());
      if (got == 0) break;
      const size_t take = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(got)));
      if (archive_write_data(writer.get(), buffer.data(), take) < 0) {
        return fail(Status::IOError(relative.string() + ": " + ArchiveError(writer.get())));
      }
      left -= static_cast<int64_t>(take);
    }
    if (left != 0) {
      return fail(Status::IOError(full.string() + " changed while it was packed"));
    }
  }
  if (archive_write_close(writer.get()) != ARCHIVE_OK) {
    return fail(Status::IOError("cannot finish " + partial + ": " + ArchiveError(writer.get())));
  }
  writer.reset();
  fs::rename(partial, out_path, ec);
  if (ec) return fail(Status::IOError("cannot write " + out_path + ": " + ec.message()));

  std::unique_ptr<FILE, int (*)(FILE*)> packed(std::fopen(out_path.c_str(), "rb"), &std::fclose);
  if (!packed) return Status::IOError("cannot read " + out_path);
  Sha256Stream digest;
  size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), packed.get())) > 0) {
    digest.Update(std::string_view(buffer.data(), got));
    info.bytes += static_cast<int64_t>(got);
  }
  info.sha256 = digest.FinishHex();
  return info;
}

Result<BundleInfo> CheckBundle(const std::string& data, const BundleLimits& limits) {
  std::unique_ptr<archive, ReadCloser> reader = NewReader();
  if (archive_read_open_memory(reader.get(), data.data(), data.size()) != ARCHIVE_OK) {
    return Status::Invalid("not a gzip'd tar archive: " + ArchiveError(reader.get()));
  }
  BundleInfo info;
  info.bytes = static_cast<int64_t>(data.size());
  info.sha256 = Sha256Hex(data);
  std::vector<char> buffer(1 << 16);
  for (;;) {
    archive_entry* entry = nullptr;
    const int next = archive_read_next_header(reader.get(), &entry);
    if (next == ARCHIVE_EOF) break;
    if (next != ARCHIVE_OK) {
      return Status::Invalid("not a valid gzip'd tar archive: " + ArchiveError(reader.get()));
    }
    FERRY_RETURN_NOT_OK(CheckEntry(entry, limits, &info.files, &info.unpacked_bytes).status());
    // Reading the data proves the compressed stream is whole.
    for (;;) {
      const la_ssize_t got = archive_read_data(reader.get(), buffer.data(), buffer.size());
      if (got == 0) break;
      if (got < 0) {
        return Status::Invalid("a damaged archive: " + ArchiveError(reader.get()));
      }
    }
  }
  if (archive_filter_code(reader.get(), 0) != ARCHIVE_FILTER_GZIP) {
    return Status::Invalid("not a gzip'd tar archive (it is not compressed with gzip)");
  }
  return info;
}

Status UnpackBundle(const std::string& archive_path, const std::string& dest,
                    const BundleLimits& limits) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dest, ec))) return Status::Invalid(dest + " exists already");
  fs::create_directories(dest, ec);
  if (ec) return Status::IOError("cannot create " + dest + ": " + ec.message());
  auto fail = [&](Status status) {
    RemoveStagedTree(dest);
    return status;
  };
  std::unique_ptr<archive, ReadCloser> reader = NewReader();
  if (archive_read_open_filename(reader.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    return fail(Status::IOError("cannot read the bundle " + archive_path + ": " +
                                ArchiveError(reader.get())));
  }
  std::unique_ptr<archive, WriteCloser> writer(archive_write_disk_new());
  archive_write_disk_set_options(writer.get(), ARCHIVE_EXTRACT_PERM |
                                                   ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                   ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  int64_t files = 0, unpacked = 0;
  for (;;) {
    archive_entry* entry = nullptr;
    const int next = archive_read_next_header(reader.get(), &entry);
    if (next == ARCHIVE_EOF) break;
    if (next != ARCHIVE_OK) {
      return fail(Status::Invalid("the bundle is damaged: " + ArchiveError(reader.get())));
    }
    Result<std::string> path = CheckEntry(entry, limits, &files, &unpacked);
    if (!path.ok()) return fail(path.status().WithPrefix("the bundle is refused: "));
    const std::string target = *path == "." ? dest : dest + "/" + *path;
    archive_entry_set_pathname(entry, target.c_str());
    // The task's own user owns what it unpacks; modes are kept but never setuid.
    archive_entry_set_perm(entry, archive_entry_perm(entry) & 0777);
    if (archive_write_header(writer.get(), entry) != ARCHIVE_OK) {
      return fail(Status::IOError("cannot unpack " + *path + ": " + ArchiveError(writer.get())));
    }
    const void* block = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    for (;;) {
      const int got = archive_read_data_block(reader.get(), &block, &size, &offset);
      if (got == ARCHIVE_EOF) break;
      if (got != ARCHIVE_OK) {
        return fail(Status::Invalid("the bundle is damaged: " + ArchiveError(reader.get())));
      }
      if (archive_write_data_block(writer.get(), block, size, offset) != ARCHIVE_OK) {
        return fail(Status::IOError("cannot unpack " + *path + ": " + ArchiveError(writer.get())));
      }
    }
    if (archive_write_finish_entry(writer.get()) != ARCHIVE_OK) {
      return fail(Status::IOError("cannot unpack " + *path + ": " + ArchiveError(writer.get())));
    }
  }
  if (archive_write_close(writer.get()) != ARCHIVE_OK) {
    return fail(Status::IOError("cannot unpack the bundle: " + ArchiveError(writer.get())));
  }
  MakeReadOnly(dest);
  return Status::OK();
}

}  // namespace ferry::fleet
