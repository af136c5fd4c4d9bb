// `ferry replay`: which recordings feed which outputs, and refusals.
#include "cli/dataflow_replay.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/dataflow_ipc.h"
#include "testing/test_util.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ReplayFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ferry_replay_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // An (empty) recording of `output` in `file`.
  void Recording(const std::string& file, const std::string& output) {
    auto schema = std::make_shared<Schema>();
    schema->fields = {field("time", timestamp(TimeUnit::kMicro, "UTC"), false)};
    schema->metadata = {{"ferry.output", output}, {"ferry.kind", "array"}};
    ASSERT_OK_AND_ASSIGN(auto writer, IpcFileWriter::Open((dir_ / file).string(), schema));
    ASSERT_OK(writer->Close());
  }
  std::string Path(const std::string& file) { return (dir_ / file).string(); }
  fs::path dir_;
};

TEST_F(ReplayFiles, OutputsFindTheirRecordings) {
  Recording("camera__image.arrow", "camera/image");
  Recording("camera__image.2.arrow", "camera/image");
  Recording("camera__image.10.arrow", "camera/image");
  Recording("lidar__points.arrow", "lidar/points");
  Recording("a__out.arrow", "a/out");
  Recording("b__out.arrow", "b/out");
  std::ofstream(Path("junk.arrow")) << "not a recording";
  ReplayOptions options;
  options.directory = dir_.string();
  // By the node's own id, parts in order; by a unique output name otherwise.
  ASSERT_OK_AND_ASSIGN(auto found, FindRecordings(options, "camera", {"image", "points"}));
  EXPECT_THAT(found[0], ElementsAre(Path("camera__image.arrow"), Path("camera__image.2.arrow"),
                                    Path("camera__image.10.arrow")));
  EXPECT_THAT(found[1], ElementsAre(Path("lidar__points.arrow")));
  // Two recordings of an output named out: --source decides.
  auto ambiguous = FindRecordings(options, "replayer", {"out"});
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_THAT(ambiguous.status().message(), HasSubstr("several match: give --source NODE"));
  options.source = "b";
  ASSERT_OK_AND_ASSIGN(auto chosen, FindRecordings(options, "replayer", {"out"}));
  EXPECT_THAT(chosen[0], ElementsAre(Path("b__out.arrow")));
  auto missing = FindRecordings(options, "replayer", {"nothing"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("(recordings: a/out, b/out, camera/image, lidar/points)"));
  options.directory = Path("nowhere");
  EXPECT_THAT(FindRecordings(options, "x", {"y"}).status().message(),
              HasSubstr("no recording directory"));
}

TEST(Replay, RefusesToRunOutsideADataflow) {
  ::unsetenv("FERRY_NODE_CONFIG");
  std::ostringstream out, err;
  EXPECT_EQ(RunReplay({}, out, err), 1);
  EXPECT_THAT(err.str(), HasSubstr("runs as a node of a dataflow"));
}

}  // namespace
}  // namespace ferry::cli
