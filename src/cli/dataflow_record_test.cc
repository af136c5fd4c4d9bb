// `ferry record`: the recorded row of a message and the IPC file's framing
// (pyarrow reads the files back in tests/python/test_flow_tools.py).
#include "cli/dataflow_record.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/dataflow_ipc.h"
#include "ferry/flow/node.h"
#include "testing/sample_arrays.h"
#include "testing/test_util.h"

namespace ferry::cli {
namespace {

using ::testing::HasSubstr;

TEST(DataflowRecord, OneRowPerMessage) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, testing::BuildSamples(int32(), 5));
  ASSERT_OK_AND_ASSIGN(RecordBatchPtr batch, flow::ArrayAsBatch(values));
  ASSERT_OK_AND_ASSIGN(auto row, RecordedRow(*batch, /*plain_array=*/true,
                                             {{"ferry.array", "1"}, {"frame", "7"}}, 42, 1000));
  ASSERT_EQ(row.size(), 4u);
  EXPECT_EQ(row[0]->type->ToString(), "timestamp[us, tz=UTC]");
  EXPECT_EQ(row[0]->GetValues<int64_t>(1)[0], 1000);
  EXPECT_EQ(row[1]->GetValues<uint64_t>(1)[0], 42u);
  const auto* offsets = row[2]->GetValues<int32_t>(1);
  const std::string metadata(row[2]->buffers[2]->data_as<char>() + offsets[0],
                             static_cast<size_t>(offsets[1] - offsets[0]));
  EXPECT_EQ(metadata, R"({"frame":"7"})");
  EXPECT_EQ(row[3]->type->ToString(), "list<item: int32>");
  EXPECT_EQ(row[3]->length, 1);
  EXPECT_EQ(row[3]->children.at(0).get(), values.get());  // the message itself, not a copy

  // A record batch becomes a list of its rows.
  ASSERT_OK_AND_ASSIGN(auto batch_row, RecordedRow(*batch, false, {}, 1, 0));
  EXPECT_THAT(batch_row[3]->type->ToString(), HasSubstr("list<item: struct<"));
}

class IpcFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("ferry_ipc_test_" + std::to_string(::getpid()) + ".arrow"))
                .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string Read() {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string path_;
};

TEST_F(IpcFile, FramingAndFooter) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, testing::BuildSamples(utf8(), 3));
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("text", utf8())};
  ASSERT_OK_AND_ASSIGN(auto writer, IpcFileWriter::Open(path_, schema));
  ASSERT_OK(writer->WriteBatch(3, {values}));
  ASSERT_OK(writer->WriteBatch(3, {values}));
  EXPECT_EQ(writer->batches(), 2);
  ASSERT_OK(writer->Close());
  const std::string file = Read();
  ASSERT_GT(file.size(), 64u);
  EXPECT_EQ(file.substr(0, 8), std::string("ARROW1\0\0", 8));
  EXPECT_EQ(file.substr(file.size() - 6), "ARROW1");
  int32_t footer = 0;
  std::memcpy(&footer, file.data() + file.size() - 10, 4);
  EXPECT_GT(footer, 0);
  EXPECT_EQ(footer % 8, 0);
  // The schema message follows the magic: a continuation marker and its length.
  uint32_t continuation = 0;
  std::memcpy(&continuation, file.data() + 8, 4);
  EXPECT_EQ(continuation, 0xFFFFFFFFu);
  EXPECT_THAT(file, HasSubstr("text"));
}

TEST_F(IpcFile, RefusesWhatItCannotWrite) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("d", decimal(128, 38, 10))};
  auto refused = IpcFileWriter::Open(path_, schema);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("cannot be recorded yet"));
  EXPECT_FALSE(std::filesystem::exists(path_));
  auto nowhere = IpcFileWriter::Open("/nonexistent-dir/x.arrow", std::make_shared<Schema>());
  ASSERT_FALSE(nowhere.ok());
  EXPECT_THAT(nowhere.status().message(), HasSubstr("cannot create /nonexistent-dir/x.arrow"));
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, testing::BuildSamples(int64(), 4));
  ASSERT_OK_AND_ASSIGN(auto sliced_batch, flow::ArrayAsBatch(Slice(values, 1, 2)));
  EXPECT_FALSE(RecordedRow(*sliced_batch, true, {}, 1, 0).ok());
}

// Every type the writer takes, with nulls and nested, reads back equal.
TEST_F(IpcFile, RoundTripOfEveryWritableType) {
  auto schema = std::make_shared<Schema>();
  std::vector<ArrayDataPtr> columns;
  int written = 0;
  for (const TypePtr& type : testing::EveryType()) {
    if (!CheckIpcType(*type).ok()) continue;
    ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, testing::BuildSamples(type, 7));
    schema->fields.push_back(field("c" + std::to_string(written++), type));
    columns.push_back(values);
  }
  ASSERT_GT(written, 20);
  {
    ASSERT_OK_AND_ASSIGN(auto writer, IpcFileWriter::Open(path_, schema));
    ASSERT_OK(writer->WriteBatch(7, columns));
    ASSERT_OK(writer->WriteBatch(7, columns));
    ASSERT_OK(writer->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto reader, IpcFileReader::Open(path_));
  ASSERT_EQ(reader->num_batches(), 2);
  ASSERT_TRUE(reader->schema()->Equals(*schema)) << reader->schema()->ToString();
  for (int64_t b = 0; b < 2; ++b) {
    ASSERT_OK_AND_ASSIGN(auto batch, reader->ReadBatch(b));
    EXPECT_EQ(batch.first, 7);
    ASSERT_EQ(batch.second.size(), columns.size());
    for (size_t c = 0; c < columns.size(); ++c) {
      EXPECT_TRUE(ArrayEquals(*batch.second[c], *columns[c]))
          << schema->fields[c].type->ToString() << "\n"
          << ArrayToString(*batch.second[c]) << "\n"
          << ArrayToString(*columns[c]);
    }
  }
  EXPECT_FALSE(reader->ReadBatch(2).ok());
}

TEST_F(IpcFile, DamagedFilesAreRefused) {
  ASSERT_OK_AND_ASSIGN(ArrayDataPtr values, testing::BuildSamples(utf8(), 3));
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("text", utf8())};
  {
    ASSERT_OK_AND_ASSIGN(auto writer, IpcFileWriter::Open(path_, schema));
    ASSERT_OK(writer->WriteBatch(3, {values}));
    ASSERT_OK(writer->Close());
  }
  const std::string good = Read();
  auto write = [&](const std::string& bytes) { std::ofstream(path_, std::ios::binary) << bytes; };
  write("not an arrow file at all, long enough to be read");
  auto foreign = IpcFileReader::Open(path_);
  ASSERT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.status().message(), HasSubstr("is not an Arrow IPC file"));
  write(good.substr(0, good.size() / 2) + "ARROW1");
  EXPECT_FALSE(IpcFileReader::Open(path_).ok());
  // Every single flipped byte: an error or a readable file, never a crash.
  for (size_t at = 0; at < good.size(); ++at) {
    std::string damaged = good;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x5A);
    write(damaged);
    auto reader = IpcFileReader::Open(path_);
    if (!reader.ok()) continue;
    for (int64_t b = 0; b < (*reader)->num_batches(); ++b) (void)(*reader)->ReadBatch(b);
  }
  EXPECT_FALSE(IpcFileReader::Open("/nonexistent-dir/x.arrow").ok());
}

}  // namespace
}  // namespace ferry::cli
