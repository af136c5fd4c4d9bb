// InputStager: held assignments, shared staging per attempt, reports, the
// cache report the agent sends for locality scoring, and clean-up once the
// attempt's tasks are gone. Sources are files under an allowed root.
#include "fleet/agent/input_stager.h"

#include <gtest/gtest.h>

#include <thread>

#include "ferry/base/hash.h"
#include "testing/test_util.h"

namespace ferry::fleet::agent_internal {
namespace {

using testing::ScratchDir;

class InputStagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    std::filesystem::create_directories(dir_ / "shared");
    std::filesystem::create_directories(dir_ / "work");
    dir_.Write("storage.yaml", "file_roots: [" + (dir_ / "shared") + "]\n");
    InputStager::Options options;
    options.work_dir = dir_ / "work";
    options.storage_config = dir_ / "storage.yaml";
    options.stage.attempts = 1;
    auto stager = InputStager::Open(options);
    ASSERT_TRUE(stager.ok()) << stager.status().ToString();
    stager_ = std::move(*stager);
  }

  TaskAssignment Assignment(int64_t job, int task, const std::string& content,
                            const std::string& digest = "sha256:d1") {
    TaskAssignment a;
    a.ref = {job, task, 1};
    a.tenant = "acme";
    const std::string name = "shared/obj-" + Sha256Hex(content).substr(0, 8);
    // Written once: a staging in flight may be reading it.
    const std::string src =
        std::filesystem::exists(dir_ / name) ? dir_ / name : dir_.Write(name, content);
    StagedInput input;
    input.name = "train";
    input.digest = digest;
    input.objects.push_back(
        {"part.bin", "file://" + src, static_cast<int64_t>(content.size()), Sha256Hex(content)});
    a.inputs.push_back(input);
    return a;
  }

  // Polls until `count` tasks are ready (or 10 s passed).
  std::vector<InputStager::Ready> WaitReady(size_t count) {
    std::vector<InputStager::Ready> ready;
    for (int i = 0; i < 500 && ready.size() < count; ++i) {
      stager_->Poll(&ready);
      if (ready.size() < count) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return ready;
  }

  std::vector<std::string> Kinds() {
    std::vector<std::string> out;
    for (const TaskReport& r : stager_->TakeReports()) {
      out.push_back(std::to_string(r.ref.task) + ":" +
                    (r.kind == TaskReport::Kind::kStaging  ? "staging"
                     : r.kind == TaskReport::Kind::kStaged ? "staged"
                                                           : "failed"));
    }
    return out;
  }

  ScratchDir dir_{"ferry-input-stager"};
  std::unique_ptr<InputStager> stager_;
};

TEST_F(InputStagerTest, AJobWithoutInputsIsReadyAtOnce) {
  TaskAssignment plain;
  plain.ref = {1, 0, 1};
  std::vector<InputStager::Ready> ready;
  stager_->Offer(plain, &ready);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].inputs_dir.empty());
  EXPECT_TRUE(stager_->TakeReports().empty());
  EXPECT_TRUE(stager_->Held().empty());
}

TEST_F(InputStagerTest, TasksOfOneAttemptShareOneStaging) {
  std::vector<InputStager::Ready> ready;
  stager_->Offer(Assignment(7, 0, "weights"), &ready);
  stager_->Offer(Assignment(7, 1, "weights"), &ready);
  stager_->Offer(Assignment(7, 0, "weights"), &ready);  // a repeat from the server
  EXPECT_TRUE(ready.empty());
  EXPECT_EQ(stager_->Held().size(), 2u);
  ready = WaitReady(2);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].inputs_dir, ready[1].inputs_dir);
  EXPECT_EQ(testing::ReadFile(ready[0].inputs_dir + "/train/part.bin"), "weights");
  EXPECT_EQ(Kinds(), (std::vector<std::string>{"0:staging", "1:staging", "0:staged", "1:staged"}));
  EXPECT_EQ(stager_->Stats().misses, 1);
  EXPECT_TRUE(stager_->Held().empty());

  // The cache report names the input's digest with its bytes present.
  auto report = stager_->CacheReport(false);
  ASSERT_TRUE(report.has_value());
  ASSERT_EQ((*report)["inputs"].size(), 1u);
  EXPECT_EQ((*report)["inputs"][0]["tenant"], "acme");
  EXPECT_EQ((*report)["inputs"][0]["digest"], "sha256:d1");
  EXPECT_EQ((*report)["inputs"][0]["bytes"], 7);
  EXPECT_EQ((*report)["inputs"][0]["total_bytes"], 7);
  EXPECT_EQ((*report)["bytes"], 7);
  // Unchanged: nothing to send, unless forced.
  EXPECT_FALSE(stager_->CacheReport(false).has_value());
  EXPECT_TRUE(stager_->CacheReport(true).has_value());

  // While a task runs the tree stays; once none does it goes.
  stager_->Sweep({ready[0].assignment.ref});
  EXPECT_TRUE(std::filesystem::exists(ready[0].inputs_dir));
  EXPECT_EQ(stager_->Stats().bytes_pinned, 7);
  stager_->Sweep({});
  EXPECT_FALSE(std::filesystem::exists(ready[0].inputs_dir));
  EXPECT_EQ(stager_->Stats().bytes_pinned, 0);
  EXPECT_EQ(stager_->Stats().entries, 1);  // still cached
}

TEST_F(InputStagerTest, AFailedStagingIsReportedForEveryWaitingTask) {
  TaskAssignment bad = Assignment(9, 0, "content");
  bad.inputs[0].objects[0].sha256 = Sha256Hex("something else");
  TaskAssignment bad1 = bad;
  bad1.ref.task = 1;
  std::vector<InputStager::Ready> ready;
  stager_->Offer(bad, &ready);
  stager_->Offer(bad1, &ready);
  for (int i = 0; i < 500 && stager_->Held().size() == 2; ++i) {
    stager_->Poll(&ready);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ready.empty());
  const std::vector<TaskReport> reports = stager_->TakeReports();
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports[2].kind, TaskReport::Kind::kStagingFailed);
  EXPECT_EQ(reports[3].kind, TaskReport::Kind::kStagingFailed);
  EXPECT_NE(reports[2].message.find("refused: its sha256 is"), std::string::npos);
  // A repeat of the assignment gets the same answer, not a second download.
  stager_->Offer(bad, &ready);
  auto again = stager_->TakeReports();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind, TaskReport::Kind::kStagingFailed);
  EXPECT_EQ(stager_->Stats().corrupt, 1);
}

TEST_F(InputStagerTest, StoppingTheLastWaitingTaskCancelsTheStaging) {
  std::vector<InputStager::Ready> ready;
  stager_->Offer(Assignment(11, 0, "data"), &ready);
  stager_->Stop({11, 0, 1});
  EXPECT_TRUE(stager_->Held().empty());
  for (int i = 0; i < 100; ++i) {
    stager_->Poll(&ready);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ready.empty());  // nothing launched for a stopped task
}

TEST_F(InputStagerTest, PrefetchFetchesAheadPinsUntilTheOrderGoesAndStagingFindsIt) {
  const std::string content(200'000, 'p');
  TaskAssignment a = Assignment(7, 0, content);
  InputStager::PrefetchOrder order{7, 1, "acme", a.inputs};
  auto started = stager_->Prefetch({order});
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0], std::make_pair(int64_t{7}, 1));
  // Listing it again starts nothing new.
  EXPECT_TRUE(stager_->Prefetch({order}).empty());
  std::vector<nlohmann::json> reports;
  for (int i = 0; i < 500 && reports.empty(); ++i) {
    reports = stager_->TakePrefetchReports();
    if (reports.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0]["job_id"], 7);
  EXPECT_EQ(reports[0]["attempt"], 1);
  const std::string message = reports[0]["message"];
  EXPECT_NE(message.find("1 input, 1 object"), std::string::npos) << message;
  EXPECT_NE(message.find("195.3 KiB fetched"), std::string::npos) << message;
  EXPECT_EQ(stager_->PrefetchesInFlight(), 0u);
  // Pinned while the server still lists the order.
  EXPECT_EQ(stager_->Stats().bytes_pinned, static_cast<int64_t>(content.size()));
  EXPECT_TRUE(stager_->Prefetch({order}).empty());
  EXPECT_EQ(stager_->Stats().bytes_pinned, static_cast<int64_t>(content.size()));
  // The job is admitted here: the order goes, the staging finds everything cached.
  stager_->Prefetch({});
  EXPECT_EQ(stager_->Stats().bytes_pinned, 0);
  std::vector<InputStager::Ready> ready;
  stager_->Offer(a, &ready);
  ready = WaitReady(1);
  ASSERT_EQ(ready.size(), 1u);
  bool staged = false;
  for (const TaskReport& r : stager_->TakeReports()) {
    if (r.kind != TaskReport::Kind::kStaged) continue;
    staged = true;
    EXPECT_NE(r.message.find("0 B fetched"), std::string::npos) << r.message;
  }
  EXPECT_TRUE(staged);
  EXPECT_EQ(stager_->Stats().bytes_fetched, static_cast<int64_t>(content.size()));
  EXPECT_TRUE(stager_->TakePrefetchReports().empty());
}

TEST_F(InputStagerTest, AFailedPrefetchIsReportedAndLeavesNothingPinned) {
  TaskAssignment a = Assignment(8, 0, "real bytes");
  a.inputs[0].objects[0].sha256 = std::string(64, '0');  // what the source does not hold
  stager_->Prefetch({{8, 2, "acme", a.inputs}});
  std::vector<nlohmann::json> reports;
  for (int i = 0; i < 500 && reports.empty(); ++i) {
    reports = stager_->TakePrefetchReports();
    if (reports.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(reports.size(), 1u);
  const std::string message = reports[0]["message"];
  EXPECT_NE(message.find("failed (staging tries again when the job starts)"), std::string::npos)
      << message;
  EXPECT_EQ(stager_->Stats().bytes_pinned, 0);
  // Not tried again while the order stands; gone with it.
  EXPECT_TRUE(stager_->Prefetch({{8, 2, "acme", a.inputs}}).empty());
  stager_->Prefetch({});
  EXPECT_EQ(stager_->PrefetchesInFlight(), 0u);
}

}  // namespace
}  // namespace ferry::fleet::agent_internal
