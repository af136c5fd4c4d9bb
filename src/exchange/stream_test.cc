#include "ferry/exchange/stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/exchange/bridge.h"
#include "testing/test_util.h"

namespace ferry {
namespace {

using telemetry::Counter;
using ::testing::HasSubstr;

// ---- Batches ---------------------------------------------------------------------

template <typename T>
BufferPtr ValuesBuffer(const std::vector<T>& values) {
  auto buffer = Buffer::Allocate(static_cast<int64_t>(values.size() * sizeof(T)));
  EXPECT_TRUE(buffer.ok());
  if (!values.empty())
    std::memcpy((*buffer)->mutable_data(), values.data(), values.size() * sizeof(T));
  return *buffer;
}

ArrayDataPtr Int32s(const std::vector<int32_t>& values) {
  auto data = std::make_shared<ArrayData>();
  data->type = int32();
  data->length = static_cast<int64_t>(values.size());
  data->buffers = {nullptr, ValuesBuffer(values)};
  return data;
}

ArrayDataPtr Utf8s(const std::vector<std::string>& values) {
  std::vector<int32_t> offsets{0};
  std::string bytes;
  for (const auto& value : values) {
    bytes += value;
    offsets.push_back(static_cast<int32_t>(bytes.size()));
  }
  auto data = std::make_shared<ArrayData>();
  data->type = utf8();
  data->length = static_cast<int64_t>(values.size());
  data->buffers = {nullptr, ValuesBuffer(offsets),
                   ValuesBuffer(std::vector<char>(bytes.begin(), bytes.end()))};
  return data;
}

SchemaPtr TestSchema() {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("id", int32()), field("name", utf8())};
  schema->metadata = {{"source", "stream_test"}};
  return schema;
}

RecordBatchPtr MakeBatch(std::vector<int32_t> ids, std::vector<std::string> names) {
  const auto rows = static_cast<int64_t>(ids.size());
  auto batch = RecordBatch::Make(TestSchema(), rows, {Int32s(ids), Utf8s(names)});
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return *batch;
}

RecordBatchPtr OtherSchemaBatch() {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("id", int32())};
  auto batch = RecordBatch::Make(schema, 1, {Int32s({7})});
  EXPECT_TRUE(batch.ok());
  return *batch;
}

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override { telemetry::Reset(); }
};

// ---- Readers ---------------------------------------------------------------------

TEST_F(StreamTest, FromBatchesReadsEveryBatchThenEnds) {
  auto reader = RecordBatchReader::FromBatches(
      TestSchema(), {MakeBatch({1, 2}, {"a", "b"}), MakeBatch({3}, {"c"})});
  ASSERT_OK(reader.status());
  EXPECT_TRUE((*reader)->schema()->Equals(*TestSchema()));
  auto batches = (*reader)->ReadAll();
  ASSERT_OK(batches.status());
  ASSERT_EQ(batches->size(), 2u);
  EXPECT_TRUE((*batches)[1]->Equals(*MakeBatch({3}, {"c"})));
  auto after_end = (*reader)->Next();
  ASSERT_OK(after_end.status());
  EXPECT_EQ(*after_end, nullptr);
}

TEST_F(StreamTest, FromBatchesChecksSchemas) {
  auto mismatch =
      RecordBatchReader::FromBatches(TestSchema(), {MakeBatch({1}, {"a"}), OtherSchemaBatch()});
  EXPECT_THAT(mismatch.status().message(), HasSubstr("batch 1 does not match"));
  auto null_batch = RecordBatchReader::FromBatches(TestSchema(), {nullptr});
  EXPECT_THAT(null_batch.status().message(), HasSubstr("batch 0 is null"));
  auto no_schema = RecordBatchReader::FromBatches(nullptr, {});
  EXPECT_THAT(no_schema.status().message(), HasSubstr("schema is null"));
  // Schema metadata does not take part in the check.
  auto plain = std::make_shared<Schema>(*TestSchema());
  plain->metadata.clear();
  ASSERT_OK(RecordBatchReader::FromBatches(plain, {MakeBatch({1}, {"a"})}).status());
}

TEST_F(StreamTest, FromFunctionAndReadAllStopsAtTheFirstError) {
  int calls = 0;
  auto reader = RecordBatchReader::FromFunction(TestSchema(), [&]() -> Result<RecordBatchPtr> {
    ++calls;
    if (calls <= 2) return MakeBatch({calls}, {"x"});
    if (calls == 3) return Status::IOError("disk gone");
    return RecordBatchPtr();
  });
  auto all = reader->ReadAll();
  EXPECT_EQ(all.status().code(), StatusCode::kIOError);
  EXPECT_THAT(all.status().message(), HasSubstr("disk gone"));
  auto rest = reader->ReadAll();
  ASSERT_OK(rest.status());
  EXPECT_TRUE(rest->empty());
}

// ---- Export ----------------------------------------------------------------------

TEST_F(StreamTest, ExportedGetSchemaCanBeCalledRepeatedly) {
  auto reader = RecordBatchReader::FromBatches(TestSchema(), {});
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(*reader, &stream));
  for (int call = 0; call < 3; ++call) {
    ArrowSchema c_schema;
    ASSERT_EQ(stream.get_schema(&stream, &c_schema), 0);
    auto schema = ImportSchema(&c_schema);
    ASSERT_OK(schema.status());
    EXPECT_TRUE((*schema)->Equals(*TestSchema()));
    c_schema.release(&c_schema);
  }
  EXPECT_EQ(telemetry::Get(Counter::kSchemaExports), 3);
  stream.release(&stream);
  EXPECT_EQ(stream.release, nullptr);
}

TEST_F(StreamTest, ExportedGetNextGivesBatchesThenEnd) {
  auto first = MakeBatch({1, 2}, {"a", "bb"});
  auto reader = RecordBatchReader::FromBatches(TestSchema(), {first, MakeBatch({3}, {"c"})});
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(*reader, &stream));
  reader = Status::Cancelled("the stream keeps the reader alive");

  ArrowArray c_array;
  ASSERT_EQ(stream.get_next(&stream, &c_array), 0);
  ASSERT_NE(c_array.release, nullptr);
  EXPECT_EQ(c_array.length, 2);
  EXPECT_EQ(c_array.children[1]->buffers[2], first->column(1)->buffers[2]->data());
  auto imported = ImportRecordBatch(&c_array, TestSchema());
  ASSERT_OK(imported.status());
  EXPECT_TRUE((*imported)->Equals(*first));

  ASSERT_EQ(stream.get_next(&stream, &c_array), 0);
  ASSERT_NE(c_array.release, nullptr);
  c_array.release(&c_array);

  for (int call = 0; call < 2; ++call) {
    c_array.release =
        reinterpret_cast<void (*)(ArrowArray*)>(1);  // garbage the producer overwrites
    ASSERT_EQ(stream.get_next(&stream, &c_array), 0);
    EXPECT_EQ(c_array.release, nullptr) << "end of stream";
  }
  EXPECT_EQ(telemetry::Get(Counter::kStreamBatchesExported), 2);
  stream.release(&stream);
}

TEST_F(StreamTest, ExportedStreamReportsReaderErrorsAndStaysUsable) {
  int calls = 0;
  auto reader = RecordBatchReader::FromFunction(TestSchema(), [&]() -> Result<RecordBatchPtr> {
    switch (++calls) {
      case 1:
        return MakeBatch({1}, {"a"});
      case 2:
        return Status::IOError("disk gone");
      case 3:
        return Status::Invalid("bad row 7");
      case 4:
        return Status::NotImplemented("no decimals yet");
      case 5:
        return MakeBatch({2}, {"b"});
      default:
        return RecordBatchPtr();
    }
  });
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(reader, &stream));
  ArrowArray c_array;

  ASSERT_EQ(stream.get_next(&stream, &c_array), 0);
  c_array.release(&c_array);
  EXPECT_EQ(stream.get_last_error(&stream), nullptr);

  EXPECT_EQ(stream.get_next(&stream, &c_array), EIO);
  EXPECT_EQ(c_array.release, nullptr);
  ASSERT_NE(stream.get_last_error(&stream), nullptr);
  EXPECT_STREQ(stream.get_last_error(&stream), "disk gone");

  EXPECT_EQ(stream.get_next(&stream, &c_array), EINVAL);
  EXPECT_STREQ(stream.get_last_error(&stream), "bad row 7");
  EXPECT_EQ(stream.get_next(&stream, &c_array), ENOSYS);

  // The stream is still consistent: the next batch comes, then the end.
  ASSERT_EQ(stream.get_next(&stream, &c_array), 0);
  ASSERT_NE(c_array.release, nullptr);
  EXPECT_EQ(stream.get_last_error(&stream), nullptr);
  c_array.release(&c_array);
  ASSERT_EQ(stream.get_next(&stream, &c_array), 0);
  EXPECT_EQ(c_array.release, nullptr);
  EXPECT_EQ(telemetry::Get(Counter::kStreamBatchesExported), 2);
  stream.release(&stream);
}

TEST_F(StreamTest, ExportedStreamRejectsBatchOfAnotherSchema) {
  auto reader = RecordBatchReader::FromFunction(
      TestSchema(), [calls = 0]() mutable -> Result<RecordBatchPtr> {
        return ++calls == 1 ? OtherSchemaBatch() : RecordBatchPtr();
      });
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(reader, &stream));
  ArrowArray c_array;
  EXPECT_EQ(stream.get_next(&stream, &c_array), EINVAL);
  EXPECT_THAT(stream.get_last_error(&stream), HasSubstr("does not match the stream's schema"));
  EXPECT_EQ(c_array.release, nullptr);
  EXPECT_EQ(telemetry::Get(Counter::kStreamBatchesExported), 0);
  stream.release(&stream);
}

TEST_F(StreamTest, ExceptionsFromTheReaderDoNotCrossTheAbi) {
  auto reader = RecordBatchReader::FromFunction(TestSchema(), []() -> Result<RecordBatchPtr> {
    throw std::runtime_error("generator exploded");
  });
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(reader, &stream));
  ArrowArray c_array;
  EXPECT_EQ(stream.get_next(&stream, &c_array), EIO);
  EXPECT_THAT(stream.get_last_error(&stream), HasSubstr("generator exploded"));
  stream.release(&stream);
}

TEST_F(StreamTest, ReaderWithoutSchemaFailsGetSchema) {
  auto reader = RecordBatchReader::FromFunction(
      nullptr, [] { return Result<RecordBatchPtr>(RecordBatchPtr()); });
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(reader, &stream));
  ArrowSchema c_schema;
  EXPECT_EQ(stream.get_schema(&stream, &c_schema), EINVAL);
  EXPECT_THAT(stream.get_last_error(&stream), HasSubstr("no schema"));
  stream.release(&stream);

  EXPECT_FALSE(ExportRecordBatchReader(nullptr, &stream).ok());
}

TEST_F(StreamTest, ReleasedStreamIsDetected) {
  auto reader = RecordBatchReader::FromBatches(TestSchema(), {});
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(*reader, &stream));
  auto release = stream.release;
  auto get_next = stream.get_next;
  release(&stream);
  EXPECT_EQ(stream.release, nullptr);
  EXPECT_EQ(telemetry::Get(Counter::kReleases), 1);
  release(&stream);
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 1);
  ArrowArray c_array;
  EXPECT_EQ(get_next(&stream, &c_array), EINVAL);
}

// ---- Round trip through the C stream -----------------------------------------------

TEST_F(StreamTest, RoundTripKeepsBatchesAndAddresses) {
  std::vector<RecordBatchPtr> originals{MakeBatch({1, 2}, {"a", "bb"}), MakeBatch({3}, {"ccc"})};
  auto reader = RecordBatchReader::FromBatches(TestSchema(), originals);
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(*reader, &stream));
  auto imported = ImportRecordBatchReader(&stream);
  ASSERT_OK(imported.status());
  EXPECT_EQ(stream.release, nullptr) << "the stream was moved into the reader";
  EXPECT_TRUE((*imported)->schema()->Equals(*TestSchema()));

  auto batches = (*imported)->ReadAll();
  ASSERT_OK(batches.status());
  ASSERT_EQ(batches->size(), 2u);
  for (size_t i = 0; i < originals.size(); ++i) {
    EXPECT_TRUE((*batches)[i]->Equals(*originals[i])) << (*batches)[i]->ToString();
    EXPECT_EQ((*batches)[i]->column(1)->buffers[2]->data(),
              originals[i]->column(1)->buffers[2]->data());
  }
  EXPECT_EQ(telemetry::Get(Counter::kStreamBatchesExported), 2);
  EXPECT_EQ(telemetry::Get(Counter::kStreamBatchesImported), 2);
  EXPECT_EQ(telemetry::Get(Counter::kBytesCopiedHost), 0);

  // Batches outlive the reader and the stream.
  const int64_t foreign_before = telemetry::Get(Counter::kForeignReleases);
  imported = Status::Cancelled("reader dropped");
  EXPECT_EQ(telemetry::Get(Counter::kForeignReleases), foreign_before + 1);
  originals.clear();
  reader = Status::Cancelled("dropped");
  EXPECT_EQ((*batches)[1]->column(1)->buffers[2]->view(), "ccc");
}

TEST_F(StreamTest, ProducerErrorBecomesStatusAndStaysSticky) {
  int calls = 0;
  auto reader = RecordBatchReader::FromFunction(TestSchema(), [&]() -> Result<RecordBatchPtr> {
    return ++calls == 1 ? Result<RecordBatchPtr>(MakeBatch({1}, {"a"}))
                        : Result<RecordBatchPtr>(Status::IOError("disk gone"));
  });
  ArrowArrayStream stream;
  ASSERT_OK(ExportRecordBatchReader(reader, &stream));
  auto imported = ImportRecordBatchReader(&stream);
  ASSERT_OK(imported.status());
  ASSERT_OK((*imported)->Next().status());
  auto failed = (*imported)->Next();
  EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
  EXPECT_THAT(failed.status().message(), HasSubstr("disk gone"));
  EXPECT_THAT(failed.status().message(), HasSubstr("get_next"));
  auto again = (*imported)->Next();
  EXPECT_EQ(again.status(), failed.status());
  EXPECT_EQ(calls, 2) << "a failed stream is not called again";
}

// ---- Foreign streams ---------------------------------------------------------------
// A hand-written C producer: its schema, its per-call return codes and its
// error text are scripted by the test.

struct FakeStream {
  int get_schema_code = 0;
  std::vector<int> next_codes;  // code for call i; 0 (or past the end) yields a batch or the end
  std::vector<RecordBatchPtr> batches;
  size_t next_batch = 0;
  const char* last_error = nullptr;
  int get_next_calls = 0;
  int* releases = nullptr;
};

int FakeGetSchema(ArrowArrayStream* stream, ArrowSchema* out) {
  auto* fake = static_cast<FakeStream*>(stream->private_data);
  if (fake->get_schema_code != 0) return fake->get_schema_code;
  return ExportSchema(*TestSchema(), out).ToErrno();
}

int FakeGetNext(ArrowArrayStream* stream, ArrowArray* out) {
  auto* fake = static_cast<FakeStream*>(stream->private_data);
  const size_t call = static_cast<size_t>(fake->get_next_calls++);
  if (call < fake->next_codes.size() && fake->next_codes[call] != 0) return fake->next_codes[call];
  if (fake->next_batch < fake->batches.size()) {
    return ExportRecordBatch(*fake->batches[fake->next_batch++], out).ToErrno();
  }
  out->release = nullptr;
  return 0;
}

const char* FakeGetLastError(ArrowArrayStream* stream) {
  return static_cast<FakeStream*>(stream->private_data)->last_error;
}

void FakeRelease(ArrowArrayStream* stream) {
  auto* fake = static_cast<FakeStream*>(stream->private_data);
  ++*fake->releases;
  stream->release = nullptr;
}

ArrowArrayStream MakeFakeStream(FakeStream* fake) {
  ArrowArrayStream stream{};
  stream.get_schema = &FakeGetSchema;
  stream.get_next = &FakeGetNext;
  stream.get_last_error = &FakeGetLastError;
  stream.release = &FakeRelease;
  stream.private_data = fake;
  return stream;
}

TEST_F(StreamTest, ForeignStreamReturningEioBecomesIoError) {
  int releases = 0;
  FakeStream fake;
  fake.next_codes = {0, EIO};
  fake.batches = {MakeBatch({1}, {"a"})};
  fake.last_error = "device lost";
  fake.releases = &releases;
  ArrowArrayStream stream = MakeFakeStream(&fake);
  {
    auto reader = ImportRecordBatchReader(&stream);
    ASSERT_OK(reader.status());
    auto first = (*reader)->Next();
    ASSERT_OK(first.status());
    ASSERT_NE(*first, nullptr);
    auto failed = (*reader)->Next();
    EXPECT_EQ(failed.status().code(), StatusCode::kIOError);
    EXPECT_THAT(failed.status().message(), HasSubstr("device lost"));
    EXPECT_EQ(releases, 0);
  }
  EXPECT_EQ(releases, 1) << "the foreign stream is released exactly once, with the reader";
  EXPECT_EQ(telemetry::Get(Counter::kStreamBatchesImported), 1);
}

TEST_F(StreamTest, ForeignUnknownCodeAndMissingErrorText) {
  int releases = 0;
  FakeStream fake;
  fake.next_codes = {EPIPE};
  fake.releases = &releases;
  ArrowArrayStream stream = MakeFakeStream(&fake);
  auto reader = ImportRecordBatchReader(&stream);
  ASSERT_OK(reader.status());
  auto failed = (*reader)->Next();
  EXPECT_EQ(failed.status().code(), StatusCode::kUnknownError);
  EXPECT_THAT(failed.status().message(), HasSubstr(std::strerror(EPIPE)));
}

TEST_F(StreamTest, ForeignGetSchemaFailure) {
  int releases = 0;
  FakeStream fake;
  fake.get_schema_code = ENOMEM;
  fake.last_error = "schema arena exhausted";
  fake.releases = &releases;
  ArrowArrayStream stream = MakeFakeStream(&fake);
  auto reader = ImportRecordBatchReader(&stream);
  EXPECT_EQ(reader.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(reader.status().message(), HasSubstr("schema arena exhausted"));
  EXPECT_EQ(releases, 1);
  EXPECT_EQ(stream.release, nullptr);
}

TEST_F(StreamTest, ForeignEndOfStreamIsFinal) {
  int releases = 0;
  FakeStream fake;
  fake.batches = {MakeBatch({1}, {"a"}), MakeBatch({2}, {"b"})};
  fake.releases = &releases;
  ArrowArrayStream stream = MakeFakeStream(&fake);
  auto reader = ImportRecordBatchReader(&stream);
  ASSERT_OK(reader.status());
  auto all = (*reader)->ReadAll();
  ASSERT_OK(all.status());
  EXPECT_EQ(all->size(), 2u);
  auto after = (*reader)->Next();
  ASSERT_OK(after.status());
  EXPECT_EQ(*after, nullptr);
  EXPECT_EQ(fake.get_next_calls, 3) << "the producer is not asked again after the end";
}

TEST_F(StreamTest, ForeignBatchNotMatchingTheStreamSchema) {
  int releases = 0;
  FakeStream fake;
  fake.batches = {OtherSchemaBatch()};
  fake.releases = &releases;
  ArrowArrayStream stream = MakeFakeStream(&fake);
  auto reader = ImportRecordBatchReader(&stream);
  ASSERT_OK(reader.status());
  auto failed = (*reader)->Next();
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalid);
  EXPECT_THAT(failed.status().message(), HasSubstr("batch 0 of the foreign stream"));
  EXPECT_THAT(failed.status().message(), HasSubstr("n_children is 1"));
  EXPECT_EQ(telemetry::Get(Counter::kValidationErrors), 1);
  EXPECT_EQ(telemetry::Get(Counter::kStreamBatchesImported), 0);
}

TEST_F(StreamTest, ImportRejectsReleasedOrNullStreams) {
  ArrowArrayStream stream{};
  auto reader = ImportRecordBatchReader(&stream);
  EXPECT_THAT(reader.status().message(), HasSubstr("already released"));
  EXPECT_EQ(telemetry::Get(Counter::kReleaseErrors), 1);
  EXPECT_THAT(ImportRecordBatchReader(nullptr).status().message(), HasSubstr("NULL"));
}

}  // namespace
}  // namespace ferry
