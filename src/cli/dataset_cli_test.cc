#include "cli/dataset_cli.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli/fleet_cli.h"
#include "ferry/base/hash.h"
#include "testing/test_util.h"

namespace ferry::cli {
namespace {

using nlohmann::json;

TEST(InputFlag, DatasetsWithAndWithoutVersion) {
  ASSERT_OK_AND_ASSIGN(json latest, ParseInputFlag("train=imagenet"));
  EXPECT_EQ(latest, json::parse(R"({"name": "train", "dataset": "imagenet"})"));
  ASSERT_OK_AND_ASSIGN(json pinned, ParseInputFlag("train=imagenet@3"));
  EXPECT_EQ(pinned, json::parse(R"({"name": "train", "dataset": "imagenet", "version": 3})"));
}

TEST(InputFlag, UrisNeedTheirDigest) {
  const std::string hex(64, 'a');
  ASSERT_OK_AND_ASSIGN(json uri, ParseInputFlag("vocab=https://h/v.txt#sha256=" + hex));
  EXPECT_EQ(uri, (json{{"name", "vocab"}, {"uri", "https://h/v.txt"}, {"sha256", hex}}));
  auto missing = ParseInputFlag("vocab=https://h/v.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("sha256"), std::string::npos);
}

TEST(InputFlag, RefusesMalformedFlags) {
  for (const char* bad : {"", "train", "=imagenet", "train=", "train=imagenet@", "train=x@0",
                          "train=x@-1", "train=x@v2", "train=@3"}) {
    EXPECT_FALSE(ParseInputFlag(bad).ok()) << bad;
  }
}

TEST(DatasetRef, NameAndVersion) {
  ASSERT_OK_AND_ASSIGN(auto plain, ParseDatasetRef("imagenet"));
  EXPECT_EQ(plain, std::make_pair(std::string("imagenet"), int64_t{0}));
  ASSERT_OK_AND_ASSIGN(auto pinned, ParseDatasetRef("imagenet@12"));
  EXPECT_EQ(pinned, std::make_pair(std::string("imagenet"), int64_t{12}));
  EXPECT_FALSE(ParseDatasetRef("").ok());
  EXPECT_FALSE(ParseDatasetRef("imagenet@").ok());
  EXPECT_FALSE(ParseDatasetRef("imagenet@0").ok());
}

TEST(ManifestFile, ObjectOrBareArray) {
  const json objects = json::parse(R"([{"path": "a", "size": 1, "sha256": "x"}])");
  ASSERT_OK_AND_ASSIGN(json from_object,
                       ManifestObjectsFromJson(json{{"objects", objects}}.dump(), "m.json"));
  EXPECT_EQ(from_object, objects);
  ASSERT_OK_AND_ASSIGN(json from_array, ManifestObjectsFromJson(objects.dump(), "m.json"));
  EXPECT_EQ(from_array, objects);
  auto broken = ManifestObjectsFromJson("{\"objects\": [", "m.json");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message().rfind("m.json:", 0), 0u);
  EXPECT_FALSE(ManifestObjectsFromJson("{\"files\": []}", "m.json").ok());
  EXPECT_FALSE(ManifestObjectsFromJson("3", "m.json").ok());
}

TEST(ManifestDir, HashesRegularFilesInPathOrder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ferry-dataset-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "b" / "c");
  std::ofstream(dir / "b" / "c" / "deep.bin") << "deep";
  std::ofstream(dir / "a.txt") << "hello";
  { std::ofstream empty(dir / "empty"); }           // an empty file
  fs::create_symlink(dir / "a.txt", dir / "link");  // not followed, not listed
  ASSERT_OK_AND_ASSIGN(json objects, ManifestObjectsFromDir(dir.string()));
  ASSERT_EQ(objects.size(), 3u) << objects.dump();
  EXPECT_EQ(objects[0], (json{{"path", "a.txt"}, {"size", 5}, {"sha256", Sha256Hex("hello")}}));
  EXPECT_EQ(objects[1],
            (json{{"path", "b/c/deep.bin"}, {"size", 4}, {"sha256", Sha256Hex("deep")}}));
  EXPECT_EQ(objects[2], (json{{"path", "empty"}, {"size", 0}, {"sha256", Sha256Hex("")}}));

  fs::create_directories(dir / "nothing");
  EXPECT_FALSE(ManifestObjectsFromDir((dir / "nothing").string()).ok());
  EXPECT_FALSE(ManifestObjectsFromDir((dir / "a.txt").string()).ok());
  EXPECT_FALSE(ManifestObjectsFromDir((dir / "missing").string()).ok());
  fs::remove_all(dir);
}

TEST(JobFile, InputsKeepTheirStringFields) {
  ASSERT_OK_AND_ASSIGN(json body, JobFileToJson(R"(
name: train
command: [python, train.py]
inputs:
  - name: 2024
    dataset: 42
    version: 3
  - name: vocab
    uri: https://h/vocab.txt
    sha256: 1111111111111111111111111111111111111111111111111111111111111111
    size: 12
)",
                                                "job.yaml"));
  EXPECT_EQ(body["inputs"], json::parse(R"([
    {"name": "2024", "dataset": "42", "version": 3},
    {"name": "vocab", "uri": "https://h/vocab.txt",
     "sha256": "1111111111111111111111111111111111111111111111111111111111111111", "size": 12}])"));
}

}  // namespace
}  // namespace ferry::cli
