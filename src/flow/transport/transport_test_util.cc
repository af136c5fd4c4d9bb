#include "flow/transport/transport_test_util.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <filesystem>
#include <fstream>

namespace ferry::flow::testing {

std::unique_ptr<Publisher> MakePublisher(const std::string& name, PublisherOptions options) {
  auto publisher = Publisher::Create(name, options);
  EXPECT_TRUE(publisher.ok()) << publisher.status().ToString();
  return publisher.ok() ? std::move(*publisher) : nullptr;
}

std::unique_ptr<Subscriber> ConnectHere(Publisher& publisher, int expected_subscribers,
                                        SubscriberOptions options) {
  Result<std::unique_ptr<Subscriber>> connected = Status::UnknownError("not connected");
  std::thread connector([&] { connected = Subscriber::Connect(publisher.name(), options); });
  Status waited = publisher.WaitForSubscribers(expected_subscribers, std::chrono::seconds(10));
  connector.join();
  EXPECT_TRUE(waited.ok()) << waited.ToString();
  EXPECT_TRUE(connected.ok()) << connected.status().ToString();
  return connected.ok() ? std::move(*connected) : nullptr;
}

bool Pipe::Await(std::chrono::milliseconds timeout) const {
  pollfd waiting{read_fd, POLLIN, 0};
  if (::poll(&waiting, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char value;
  return ::read(read_fd, &value, 1) == 1;
}

std::string Pipe::ReadAll(std::chrono::milliseconds timeout) const {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return text;
    pollfd waiting{read_fd, POLLIN, 0};
    if (::poll(&waiting, 1, static_cast<int>(left.count())) <= 0) return text;
    char chunk[4096];
    const ssize_t got = ::read(read_fd, chunk, sizeof(chunk));
    if (got <= 0) return text;
    text.append(chunk, static_cast<size_t>(got));
  }
}

Result<RecordBatchPtr> MakeBatch(MemoryPool* pool, int64_t rows, int64_t seed) {
  Int64Builder ids(pool);
  Utf8Builder texts(pool);
  for (int64_t row = 0; row < rows; ++row) {
    FERRY_RETURN_NOT_OK(ids.Append(seed + row));
    FERRY_RETURN_NOT_OK(texts.Append("v" + std::to_string(seed + row)));
  }
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr id_column, ids.Finish());
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr text_column, texts.Finish());
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("id", int64(), false), field("text", utf8())};
  return RecordBatch::Make(std::move(schema), rows, {id_column, text_column});
}

Result<RecordBatchPtr> MakeOtherBatch(MemoryPool* pool, int64_t rows, int64_t seed) {
  Int64Builder values(pool);
  for (int64_t row = 0; row < rows; ++row) FERRY_RETURN_NOT_OK(values.Append(seed * 1000 + row));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr column, values.Finish());
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("other", int64())};
  return RecordBatch::Make(std::move(schema), rows, {column});
}

Result<RecordBatchPtr> MakeBlobBatch(MemoryPool* pool, int64_t bytes, int64_t seed) {
  BinaryBuilder blobs(pool);
  std::string value(static_cast<size_t>(bytes), '\0');
  uint64_t state = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 1;
  for (char& each : value) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    each = static_cast<char>(state);
  }
  FERRY_RETURN_NOT_OK(blobs.Append(value));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr column, blobs.Finish());
  auto schema = std::make_shared<Schema>();
  schema->fields = {field("blob", binary())};
  return RecordBatch::Make(std::move(schema), 1, {column});
}

int ReceiveSequence(Subscriber& subscriber, int64_t count, int64_t rows,
                    std::chrono::nanoseconds timeout) {
  for (int64_t sequence = 1; sequence <= count; ++sequence) {
    auto message = subscriber.Receive(timeout);
    CHILD_CHECK(message.ok(), 3);
    CHILD_CHECK(message->sequence == static_cast<uint64_t>(sequence), 4);
    CHILD_CHECK(BatchMatches(*message->batch, rows, sequence), 5);
  }
  return 0;
}

bool BatchMatches(const RecordBatch& batch, int64_t rows, int64_t seed) {
  if (batch.num_rows() != rows || batch.num_columns() != 2) return false;
  const ArrayData& ids = *batch.column(0);
  const ArrayData& texts = *batch.column(1);
  if (ids.type->id != TypeId::kInt64 || texts.type->id != TypeId::kUtf8) return false;
  const int64_t* id_values = ids.GetValues<int64_t>(1);
  const int32_t* offsets = texts.GetValues<int32_t>(1);
  const char* data = texts.buffers[2] ? texts.buffers[2]->data_as<char>() : "";
  for (int64_t row = 0; row < rows; ++row) {
    if (id_values[row] != seed + row) return false;
    const std::string expected = "v" + std::to_string(seed + row);
    if (std::string_view(data + offsets[row],
                         static_cast<size_t>(offsets[row + 1] - offsets[row])) != expected) {
      return false;
    }
  }
  return true;
}

namespace {
void ChecksumArray(const ArrayData& data, uint64_t* hash) {
  for (const BufferPtr& buffer : data.buffers) {
    if (buffer == nullptr) continue;
    for (int64_t index = 0; index < buffer->size(); ++index) {
      *hash = (*hash ^ buffer->data()[index]) * 0x100000001B3ull;
    }
  }
  for (const ArrayDataPtr& child : data.children) ChecksumArray(*child, hash);
  if (data.dictionary) ChecksumArray(*data.dictionary, hash);
}
void SumArray(const ArrayData& data, int64_t* bytes) {
  for (const BufferPtr& buffer : data.buffers) {
    if (buffer != nullptr) *bytes += buffer->size();
  }
  for (const ArrayDataPtr& child : data.children) SumArray(*child, bytes);
  if (data.dictionary) SumArray(*data.dictionary, bytes);
}
}  // namespace

uint64_t Checksum(const RecordBatch& batch) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (const ArrayDataPtr& column : batch.columns()) ChecksumArray(*column, &hash);
  return hash;
}

int64_t BufferBytes(const RecordBatch& batch) {
  int64_t bytes = 0;
  for (const ArrayDataPtr& column : batch.columns()) SumArray(*column, &bytes);
  return bytes;
}

int CountOpenFds() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

std::optional<MappingInfo> FindMapping(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // start-end perms offset dev inode path
    unsigned long start = 0, end = 0, offset = 0;
    char permissions[8] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*s %n", &start, &end, permissions, &offset,
                    &path_at) < 4) {
      continue;
    }
    if (target < start || target >= end) continue;
    MappingInfo info;
    info.permissions = permissions;
    info.file = path_at > 0 ? line.substr(static_cast<size_t>(path_at)) : "";
    info.file_offset = static_cast<int64_t>(offset + (target - start));
    return info;
  }
  return std::nullopt;
}

int CountFerryMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:ferry:") != std::string::npos) ++count;
  }
  return count;
}

}  // namespace ferry::flow::testing
