// Code bundles: packing is deterministic, what a tree holds comes back on
// unpacking (read-only), and hostile archives are refused with the entry
// and the reason, by the server's check and by the agent's unpacking.
#include "ferry/fleet/code_bundle.h"

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "ferry/base/hash.h"
#include "ferry/fleet/staging.h"
#include "testing/test_util.h"

namespace ferry::fleet {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// One entry of a hand-made archive.
struct Item {
  Item(std::string path_, mode_t type_ = AE_IFREG, std::string data_ = "", std::string link_ = "",
       std::string hardlink_ = "")
      : path(std::move(path_)),
        type(type_),
        data(std::move(data_)),
        link(std::move(link_)),
        hardlink(std::move(hardlink_)) {}
  std::string path;
  mode_t type;
  std::string data;      // a file's bytes
  std::string link;      // a symlink's target
  std::string hardlink;  // makes it a hard link to this path
};

// A gzip'd (or, with gzip false, plain) tar archive of `items`, in memory.
std::string Archive(const std::vector<Item>& items, bool gzip = true) {
  std::vector<char> buffer(1 << 20);
  size_t used = 0;
  archive* a = archive_write_new();
  if (gzip) archive_write_add_filter_gzip(a);
  archive_write_set_format_pax_restricted(a);
  archive_write_open_memory(a, buffer.data(), buffer.size(), &used);
  for (const Item& item : items) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, item.path.c_str());
    archive_entry_set_filetype(e, item.type);
    archive_entry_set_perm(e, item.type == AE_IFDIR ? 0755 : 0644);
    if (!item.link.empty()) archive_entry_set_symlink(e, item.link.c_str());
    if (!item.hardlink.empty()) archive_entry_set_hardlink(e, item.hardlink.c_str());
    if (item.type == AE_IFREG && item.hardlink.empty()) {
      archive_entry_set_size(e, static_cast<int64_t>(item.data.size()));
    }
    archive_write_header(a, e);
    if (!item.data.empty()) archive_write_data(a, item.data.data(), item.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(buffer.data(), used);
}

// Bytes that do not compress.
std::string Noise(size_t size) {
  std::string out(size, '\0');
  uint32_t state = 12345;
  for (char& c : out) {
    state = state * 1664525u + 1013904223u;
    c = static_cast<char>(state >> 24);
  }
  return out;
}

// The source tree the packing tests use.
void MakeTree(const ScratchDir& dir) {
  fs::create_directories(dir / "src/sub");
  fs::create_directories(dir / "src/.git/objects");
  dir.Write("src/train.py", "print('hello')\n");
  dir.Write("src/run.sh", "#!/bin/sh\necho run\n");
  ::chmod((dir / "src/run.sh").c_str(), 0700);
  dir.Write("src/sub/data.txt", std::string(300'000, 'd'));
  dir.Write("src/.git/HEAD", "ref: refs/heads/main\n");
  fs::create_symlink("sub/data.txt", dir / "src/link.txt");
}

TEST(CodeBundle, PacksDeterministicallyAndUnpacksReadOnly) {
  ScratchDir dir("ferry-bundle");
  ASSERT_TRUE(dir.ok());
  MakeTree(dir);
  auto first = PackDirectory(dir / "src", dir / "one.tar.gz");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->files, 5);  // train.py run.sh sub sub/data.txt link.txt; not .git
  EXPECT_EQ(first->unpacked_bytes, 15 + 19 + 300'000);
  const std::string bytes = ReadFile(dir / "one.tar.gz");
  EXPECT_EQ(first->bytes, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(first->sha256, Sha256Hex(bytes));
  EXPECT_LT(first->bytes, 20'000);  // compressed

  // Times, owners and exact modes do not change the digest; contents do.
  ::sleep(1);
  dir.Write("src/train.py", "print('hello')\n");
  ::chmod((dir / "src/train.py").c_str(), 0600);
  auto second = PackDirectory(dir / "src", dir / "two.tar.gz");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->sha256, first->sha256);
  dir.Write("src/train.py", "print('bye')\n");
  auto third = PackDirectory(dir / "src", dir / "three.tar.gz");
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->sha256, first->sha256);

  auto checked = CheckBundle(bytes);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(checked->sha256, first->sha256);
  EXPECT_EQ(checked->files, 5);

  const std::string out = dir / "out";
  ASSERT_TRUE(UnpackBundle(dir / "one.tar.gz", out).ok());
  EXPECT_EQ(ReadFile(out + "/train.py"), "print('hello')\n");
  EXPECT_EQ(ReadFile(out + "/sub/data.txt"), std::string(300'000, 'd'));
  EXPECT_EQ(fs::read_symlink(out + "/link.txt").string(), "sub/data.txt");
  EXPECT_EQ(ReadFile(out + "/link.txt"), std::string(300'000, 'd'));
  EXPECT_FALSE(fs::exists(out + "/.git"));
  struct stat st {};
  ASSERT_EQ(::stat((out + "/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555);  // executable kept, writable dropped
  ASSERT_EQ(::stat((out + "/train.py").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444);
  ASSERT_EQ(::stat((out + "/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555);
  // Unpacking never overwrites.
  EXPECT_FALSE(UnpackBundle(dir / "one.tar.gz", out).ok());
  RemoveStagedTree(out);
  EXPECT_FALSE(fs::exists(out));
}

TEST(CodeBundle, PackingRefusesLinksOutOfTheTreeAndSpecialFiles) {
  ScratchDir dir("ferry-bundle");
  ASSERT_TRUE(dir.ok());
  fs::create_directories(dir / "a/b");
  fs::create_symlink("../../outside", dir / "a/b/up");
  auto escaping = PackDirectory(dir / "a", dir / "x.tar.gz");
  ASSERT_FALSE(escaping.ok());
  EXPECT_NE(escaping.status().message().find("b/up: a link that points outside"), std::string::npos)
      << escaping.status().message();
  EXPECT_FALSE(fs::exists(dir / "x.tar.gz"));
  EXPECT_FALSE(fs::exists(dir / "x.tar.gz.partial"));

  fs::remove(dir / "a/b/up");
  fs::create_symlink("/etc/passwd", dir / "a/abs");
  auto absolute = PackDirectory(dir / "a", dir / "x.tar.gz");
  ASSERT_FALSE(absolute.ok());
  EXPECT_NE(absolute.status().message().find("absolute path"), std::string::npos);

  fs::remove(dir / "a/abs");
  ASSERT_EQ(::mkfifo((dir / "a/fifo").c_str(), 0600), 0);
  auto fifo = PackDirectory(dir / "a", dir / "x.tar.gz");
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("fifo: not a file, directory or link"), std::string::npos);

  EXPECT_FALSE(PackDirectory(dir / "missing", dir / "x.tar.gz").ok());

  fs::remove(dir / "a/fifo");
  dir.Write("a/one", "1");
  dir.Write("a/two", "22");
  BundleLimits few;
  few.max_files = 2;  // b, one, two
  auto many = PackDirectory(dir / "a", dir / "x.tar.gz", few);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("more than 2 entries"), std::string::npos);
}

TEST(CodeBundle, CheckRefusesHostileAndDamagedArchives) {
  struct Case {
    const char* what;
    std::string archive;
    const char* error;
  };
  const std::string good = Archive({{"dir", AE_IFDIR}, {"dir/f", AE_IFREG, "data"}});
  ASSERT_TRUE(CheckBundle(good).ok()) << CheckBundle(good).status().ToString();
  std::vector<Case> cases = {
      {"text", "just some text", "not a"},
      {"empty", "", "not a"},
      {"plain tar", Archive({{"f", AE_IFREG, "x"}}, /*gzip=*/false), "not compressed with gzip"},
      {"truncated", good.substr(0, good.size() / 2), "truncated"},
      {"dot-dot", Archive({{"a/../../etc/x", AE_IFREG, "x"}}), "a path with '..'"},
      {"absolute", Archive({{"/etc/x", AE_IFREG, "x"}}), "an absolute path"},
      {"hard link", Archive({{"f", AE_IFREG, "x"}, {"g", AE_IFREG, "", "", "/etc/shadow"}}),
       "g: a hard link"},
      {"fifo", Archive({{"p", AE_IFIFO}}), "p: not a file, directory or link"},
      {"device", Archive({{"d", AE_IFCHR}}), "d: not a file, directory or link"},
      {"escaping link", Archive({{"x/l", AE_IFLNK, "", "../../y"}}), "points outside"},
      {"absolute link", Archive({{"l", AE_IFLNK, "", "/etc"}}), "absolute path (/etc)"},
  };
  for (const Case& c : cases) {
    auto checked = CheckBundle(c.archive);
    ASSERT_FALSE(checked.ok()) << c.what;
    EXPECT_NE(checked.status().message().find(c.error), std::string::npos)
        << c.what << ": " << checked.status().message();
  }
  BundleLimits small;
  small.max_unpacked_bytes = 3;
  auto big = CheckBundle(good, small);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("when unpacked"), std::string::npos);
}

TEST(CodeBundle, UnpackingRefusesHostileArchivesAndLeavesNothing) {
  ScratchDir dir("ferry-bundle");
  ASSERT_TRUE(dir.ok());
  fs::create_directories(dir / "victim");
  struct Case {
    const char* what;
    std::string archive;
    const char* error;
  };
  std::vector<Case> cases = {
      // A link to a directory inside, then a file written through it.
      {"through a link",
       Archive({{"sub", AE_IFDIR}, {"l", AE_IFLNK, "", "sub"}, {"l/f", AE_IFREG, "x"}}),
       "cannot unpack l/f"},
      {"dot-dot", Archive({{"../victim/f", AE_IFREG, "x"}}), "a path with '..'"},
      {"escaping link", Archive({{"l", AE_IFLNK, "", "../victim"}}), "points outside"},
      {"truncated", Archive({{"f", AE_IFREG, Noise(100'000)}}).substr(0, 50'000), "truncated"},
  };
  int index = 0;
  for (const Case& c : cases) {
    const std::string file = dir.Write("case" + std::to_string(index) + ".tar.gz", c.archive);
    const std::string out = dir / ("out" + std::to_string(index++));
    Status status = UnpackBundle(file, out);
    ASSERT_FALSE(status.ok()) << c.what;
    EXPECT_NE(status.message().find(c.error), std::string::npos)
        << c.what << ": " << status.message();
    EXPECT_FALSE(fs::exists(out)) << c.what;
  }
  EXPECT_TRUE(fs::is_empty(dir / "victim"));
  EXPECT_FALSE(UnpackBundle(dir / "no-such.tar.gz", dir / "outx").ok());
  EXPECT_FALSE(fs::exists(dir / "outx"));
}

}  // namespace
}  // namespace ferry::fleet
