// Device exchange, side by side in one run, on every device present: a batch
// of 16 int64 columns filled on the device by the test kernel FillSequence
// (event recorded after the last write) is handed over
//   (a) zero-copy: ExportDeviceArray + ImportDeviceArray, the consumer waiting
//       on the host, or device-side on its own queue;
//   (b) through the explicit-copy fallback: ExportDeviceArrayFor with a
//       consumer that reads CPU memory only (D2H; on the CPU itself a
//       consumer that needs to write, which gets an owned host copy), and for
//       devices other than the CPU the reverse, a CPU batch for a consumer
//       that reads only that device (H2D);
//   (c) as a plain CPU batch through the ordinary C Data export/import;
// next to the references the fallback is judged against, measured in the
// same run on the same sizes: memcpy on the host, and a raw Queue::Copy of
// the same bytes on the device's own queue (into a destination allocated
// and touched beforehand, and into a fresh one, which is what a fallback
// has to use; on CUDA also from and to pinned host memory, the bus's real
// bandwidth).
//
// One exchange = export (ArrowDeviceArray + ArrowSchema), import, release
// of the schema, drop of the imported array (which releases the exported
// one). Bytes per direction, event waits and wait time come from Ferry's
// telemetry counters, averaged over the timed exchanges. Times are medians
// over repetitions; each repetition repeats its exchange until it has run
// for --min-time seconds (at least once), after one untimed warm-up. The
// cases of a group (the zero-copy paths; a fallback with its references)
// take turns repetition by repetition, so that their ratios survive a
// change in the machine's load. Memory at most: the batch, its copy and
// three more buffers of its size (a 1 GiB batch: about 5 GiB).
//
// Output: a markdown report on stdout (docs/benchmarks.md explains it),
// and with --json=PATH every figure as JSON. scripts/bench and
// scripts/gpu-check run it. A plain program on purpose: the ratios need each
// fallback and its references measured taking turns, in the same process.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "exchange/device/testing/kernels.h"
#include "ferry/base/telemetry.h"
#include "ferry/c/abi.h"
#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/device/negotiate.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/type.h"

namespace ferry::device::bench {
namespace {

using telemetry::Counter;
using Clock = std::chrono::steady_clock;

constexpr int kColumns = 16;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// ---- Options --------------------------------------------------------------------------

struct Options {
  std::vector<int64_t> sizes{kMiB, 64 * kMiB, kGiB};
  int repetitions = 5;
  double min_seconds = 0.05;
  std::vector<DeviceType> device_types{DeviceType::kCpu, DeviceType::kOpenCL, DeviceType::kCuda};
  std::string json_path;
  std::string floor_path;
};

constexpr const char* kUsage = R"(usage: ferry_device_bench [options]
  --sizes=LIST        batch sizes, e.g. 1M,64M,1G (default); K, M, G are binary units
  --repetitions=N     timed repetitions per case, median reported (default 5)
  --min-time=SECONDS  least time one repetition runs its case for (default 0.05)
  --devices=LIST      device types to measure: cpu,opencl,cuda (default all present)
  --quick             1M,64M, 3 repetitions, 0.01 s: a smoke run, figures not for reporting
  --floor=PATH        key=value output of floor.c; its memcpy_gbps gives extra ratios
  --json=PATH         also write every figure as JSON to PATH
  --help              this text
Prints a markdown report on stdout.
)";

Result<int64_t> ParseSize(std::string_view text) {
  if (text.empty()) return Status::Invalid("empty size");
  int64_t unit = 1;
  switch (text.back()) {
    case 'K':
    case 'k':
      unit = 1024;
      break;
    case 'M':
    case 'm':
      unit = kMiB;
      break;
    case 'G':
    case 'g':
      unit = kGiB;
      break;
    default:
      break;
  }
  if (unit != 1) text.remove_suffix(1);
  char* end = nullptr;
  const std::string digits(text);
  const long long value = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || value <= 0) {
    return Status::Invalid("not a size: '" + digits + "'");
  }
  const int64_t bytes = value * unit;
  // Each column holds whole int64 values.
  if (bytes % (kColumns * 8) != 0) {
    return Status::Invalid("size " + std::to_string(bytes) + " is not a multiple of " +
                           std::to_string(kColumns * 8) + " bytes (16 int64 columns)");
  }
  return bytes;
}

std::vector<std::string> SplitCommas(std::string_view text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t stop = comma == std::string_view::npos ? text.size() : comma;
    if (stop > start) parts.emplace_back(text.substr(start, stop - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return parts;
}

Result<Options> ParseOptions(int argc, char** argv) {
  Options options;
  for (int index = 1; index < argc; ++index) {
    const std::string_view argument = argv[index];
    const size_t equals = argument.find('=');
    const std::string_view name = argument.substr(0, equals);
    const std::string_view value =
        equals == std::string_view::npos ? std::string_view() : argument.substr(equals + 1);
    if (name == "--help" || name == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (name == "--quick") {
      options.sizes = {kMiB, 64 * kMiB};
      options.repetitions = 3;
      options.min_seconds = 0.01;
    } else if (name == "--sizes") {
      options.sizes.clear();
      for (const auto& part : SplitCommas(value)) {
        FERRY_ASSIGN_OR_RAISE(int64_t size, ParseSize(part));
        options.sizes.push_back(size);
      }
      if (options.sizes.empty()) return Status::Invalid("--sizes needs at least one size");
    } else if (name == "--repetitions") {
      options.repetitions = std::atoi(std::string(value).c_str());
      if (options.repetitions < 1) return Status::Invalid("--repetitions must be at least 1");
    } else if (name == "--min-time") {
      options.min_seconds = std::atof(std::string(value).c_str());
      if (!(options.min_seconds >= 0)) return Status::Invalid("--min-time must be >= 0");
    } else if (name == "--devices") {
      options.device_types.clear();
      for (const auto& part : SplitCommas(value)) {
        FERRY_ASSIGN_OR_RAISE(DeviceType type, DeviceTypeFromName(part));
        options.device_types.push_back(type);
      }
    } else if (name == "--json") {
      options.json_path = std::string(value);
    } else if (name == "--floor") {
      options.floor_path = std::string(value);
    } else {
      return Status::Invalid("unknown argument '" + std::string(argument) + "' (see --help)");
    }
  }
  return options;
}

// ---- Measuring ----------------------------------------------------------------------------

// The telemetry counters an exchange moves, read before and after a case.
struct CounterValues {
  int64_t h2d = 0, d2h = 0, d2d = 0, host = 0, waits = 0, wait_nanos = 0;

  static CounterValues Read() {
    return {telemetry::Get(Counter::kBytesCopiedH2D), telemetry::Get(Counter::kBytesCopiedD2H),
            telemetry::Get(Counter::kBytesCopiedD2D), telemetry::Get(Counter::kBytesCopiedHost),
            telemetry::Get(Counter::kEventWaits),     telemetry::Get(Counter::kEventWaitNanos)};
  }
  CounterValues Minus(const CounterValues& earlier) const {
    return {h2d - earlier.h2d,   d2h - earlier.d2h,     d2d - earlier.d2d,
            host - earlier.host, waits - earlier.waits, wait_nanos - earlier.wait_nanos};
  }
};

// One measured case.
struct Row {
  std::string device;       // "cpu", "opencl:0", "cuda:0", "host"
  std::string device_name;  // the backend's name for it
  std::string kind;         // "zero-copy", "fallback", "c-data", "reference"
  std::string path;         // what was done, in a few words
  std::string direction;    // "d2h", "h2d", "host" or "" (nothing copied)
  int64_t batch_bytes = 0;
  int64_t iterations = 0;  // timed exchanges over all repetitions
  double seconds = 0;      // median time of one exchange
  double cv = 0;           // coefficient of variation of the repetitions' times
  // Per exchange, from the counters (averages over the timed exchanges).
  double h2d = 0, d2h = 0, d2d = 0, host = 0, waits = 0, wait_nanos = 0;
  // Bytes one exchange copies: the counters' sum; for memcpy (uncounted)
  // the batch size.
  double copied_bytes = 0;
  double gbps = 0;                            // copied_bytes / seconds, 1e9 bytes per second
  std::optional<double> of_device_bandwidth;  // gbps / the device's copy bandwidth
  std::optional<double> of_raw_copy;          // gbps / raw Queue::Copy, same direction, touched
  std::optional<double> of_fresh_copy;        // gbps / raw Queue::Copy into fresh memory
  std::optional<double> of_floor;             // gbps / floor.c memcpy_gbps
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

double CoefficientOfVariation(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  double mean = 0;
  for (double value : values) mean += value;
  mean /= static_cast<double>(values.size());
  double variance = 0;
  for (double value : values) variance += (value - mean) * (value - mean);
  variance /= static_cast<double>(values.size() - 1);
  return mean > 0 ? std::sqrt(variance) / mean : 0;
}

using Body = std::function<Status()>;

// One case of an interleaved measurement: what to run and where its figures go.
struct Case {
  Row row;
  Body body;
  std::vector<double> per_exchange;  // one entry per repetition
  CounterValues moved;
  int64_t total = 0;
};

// Measures `cases` together: each runs once untimed (first-use costs such as
// kernel compilation or a pool's first allocation stay out), then the cases
// take turns, repetition by repetition, each repeating its body until it has
// run for min_seconds (at least once). Taking turns means a change in the
// machine's load touches every case of a group alike, so the ratios between
// them hold even on a shared machine.
Status MeasureTogether(const Options& options, std::vector<Case>* cases) {
  for (Case& one : *cases) FERRY_RETURN_NOT_OK(one.body().WithPrefix(one.row.path + ": "));
  for (int repetition = 0; repetition < options.repetitions; ++repetition) {
    for (Case& one : *cases) {
      const CounterValues before = CounterValues::Read();
      int64_t count = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        FERRY_RETURN_NOT_OK(one.body().WithPrefix(one.row.path + ": "));
        ++count;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (elapsed < options.min_seconds);
      const CounterValues moved = CounterValues::Read().Minus(before);
      one.per_exchange.push_back(elapsed / static_cast<double>(count));
      one.total += count;
      one.moved = {one.moved.h2d + moved.h2d,     one.moved.d2h + moved.d2h,
                   one.moved.d2d + moved.d2d,     one.moved.host + moved.host,
                   one.moved.waits + moved.waits, one.moved.wait_nanos + moved.wait_nanos};
    }
  }
  for (Case& one : *cases) {
    Row& row = one.row;
    const auto per = [&one](int64_t value) {
      return static_cast<double>(value) / static_cast<double>(one.total);
    };
    row.iterations = one.total;
    row.seconds = Median(one.per_exchange);
    row.cv = CoefficientOfVariation(one.per_exchange);
    row.h2d = per(one.moved.h2d);
    row.d2h = per(one.moved.d2h);
    row.d2d = per(one.moved.d2d);
    row.host = per(one.moved.host);
    row.waits = per(one.moved.waits);
    row.wait_nanos = per(one.moved.wait_nanos);
    row.copied_bytes = row.h2d + row.d2h + row.d2d + row.host;
    if (row.copied_bytes > 0) row.gbps = row.copied_bytes / row.seconds / 1e9;
  }
  return Status::OK();
}

// ---- Batches -------------------------------------------------------------------------------

std::string DeviceLabel(const Device& device) {
  std::string label = DeviceTypeName(device.type());
  if (device.id() >= 0) label += ":" + std::to_string(device.id());
  return label;
}

SchemaPtr Int64Schema() {
  auto schema = std::make_shared<Schema>();
  for (int column = 0; column < kColumns; ++column) {
    schema->fields.push_back(field("c" + std::to_string(column), int64(), false));
  }
  return schema;
}

// 16 int64 columns of `bytes / 128` rows on `device`, written by the
// device's FillSequence kernel on `queue`; the event is recorded after the
// last write (null on the CPU, where the kernel has run when it returns).
Result<DeviceArray> ProduceBatch(Device* device, testing::Kernels* kernels, Queue* queue,
                                 int64_t bytes) {
  const int64_t rows = bytes / (kColumns * 8);
  std::vector<ArrayDataPtr> columns;
  for (int column = 0; column < kColumns; ++column) {
    FERRY_ASSIGN_OR_RAISE(BufferPtr values, device->Allocate(rows * 8));
    FERRY_RETURN_NOT_OK(
        kernels->FillSequence(queue, values->mutable_data(), rows, int64_t{column} * rows));
    auto data = std::make_shared<ArrayData>();
    data->type = int64();
    data->length = rows;
    data->buffers = {nullptr, std::move(values)};
    columns.push_back(std::move(data));
  }
  EventPtr event;
  if (device->event_kind() != EventKind::kNone) {
    FERRY_ASSIGN_OR_RAISE(event, queue->RecordEvent());
  }
  FERRY_ASSIGN_OR_RAISE(auto batch, RecordBatch::Make(Int64Schema(), rows, std::move(columns)));
  return DeviceArray{batch->ToStructArray(), device, std::move(event)};
}

// Host memory written once, so that page faults stay out of what is timed.
Result<BufferPtr> TouchedHostBuffer(int64_t bytes) {
  FERRY_ASSIGN_OR_RAISE(BufferPtr buffer, Buffer::Allocate(bytes));
  std::memset(buffer->mutable_data(), 1, static_cast<size_t>(bytes));
  return buffer;
}

// ---- Exchanges --------------------------------------------------------------------------------

// Drops what an export left behind after a failure, so a failing case leaks nothing.
void ReleaseIfSet(ArrowDeviceArray* array, ArrowSchema* schema) {
  if (array->array.release != nullptr) array->array.release(&array->array);
  if (schema->release != nullptr) schema->release(schema);
}

// Import, release of the schema and of the imported array: the consumer's half.
Status ImportAndDrop(ArrowDeviceArray* exported, ArrowSchema* schema,
                     const ImportOptions& import_options) {
  Result<DeviceArray> imported = ImportDeviceArray(exported, schema, import_options);
  schema->release(schema);
  return imported.status();  // the imported array is dropped here: release
}

Status ZeroCopyExchange(const DeviceArray& batch, const ImportOptions& import_options) {
  ArrowDeviceArray exported{};
  ArrowSchema schema{};
  Status status = ExportDeviceArray(batch, &exported, &schema);
  if (!status.ok()) {
    ReleaseIfSet(&exported, &schema);
    return status;
  }
  return ImportAndDrop(&exported, &schema, import_options);
}

Status FallbackExchange(const DeviceArray& batch, const ConsumerCapabilities& consumer,
                        ExchangeMode expected) {
  ArrowDeviceArray exported{};
  ArrowSchema schema{};
  Result<ExchangePlan> plan = ExportDeviceArrayFor(batch, consumer, &exported, &schema);
  if (!plan.ok()) {
    ReleaseIfSet(&exported, &schema);
    return plan.status();
  }
  if (plan->mode != expected) {
    ReleaseIfSet(&exported, &schema);
    return Status::Invalid("expected the plan '" + std::string(ExchangeModeName(expected)) +
                           "', negotiation chose: " + plan->explanation);
  }
  return ImportAndDrop(&exported, &schema, ImportOptions{});
}

Status CDataExchange(const RecordBatch& batch) {
  ArrowArray exported{};
  ArrowSchema schema{};
  FERRY_RETURN_NOT_OK(ExportRecordBatch(batch, &exported, &schema));
  Result<RecordBatchPtr> imported = ImportRecordBatch(&exported, &schema);
  schema.release(&schema);
  return imported.status();
}

std::string SizeName(int64_t bytes) {
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " B";
}

std::string TimeName(double seconds) {
  char text[32];
  if (seconds < 1e-6) {
    std::snprintf(text, sizeof(text), "%.0f ns", seconds * 1e9);
  } else if (seconds < 1e-3) {
    std::snprintf(text, sizeof(text), "%.2f µs", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(text, sizeof(text), "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.3f s", seconds);
  }
  return text;
}

// ---- The run --------------------------------------------------------------------------------

// What a case is in its group, so that ratios can be taken inside the group.
enum class Role { kExchange, kMemcpy, kRawTouched, kRawPinned, kRawFresh, kFallback };

class Run {
 public:
  explicit Run(Options options) : options_(std::move(options)) {}

  Status Go() {
    FERRY_RETURN_NOT_OK(ReadFloor());
    auto& registry = DeviceRegistry::Global();
    cpu_ = registry.cpu();
    FERRY_ASSIGN_OR_RAISE(host_kernels_, testing::KernelsFor(cpu_));
    for (DeviceType type : options_.device_types) {
      bool any = false;
      for (Device* device : registry.Present()) {
        if (device->type() != type) continue;
        any = true;
        FERRY_RETURN_NOT_OK(MeasureDevice(device).WithPrefix(DeviceLabel(*device) + ": "));
      }
      if (!any) {
        Result<Device*> absent = registry.Get(type);
        absent_.push_back(std::string(DeviceTypeName(type)) + ": " +
                          (absent.ok() ? "no device" : absent.status().message()));
      }
    }
    notes_.push_back(
        "cpu: no device-side wait row (CPU arrays carry no event) and no H2D rows (a CPU batch "
        "for a CPU consumer is exchanged zero-copy); the copy fallback on the CPU is the owned "
        "copy a consumer that needs to write gets.");
    notes_.push_back(
        "host memcpy: one memcpy of the whole size between two host buffers written before "
        "timing, measured in each copy group. raw Queue::Copy: the same 16 buffers copied on "
        "the device's own queue, one synchronisation; 'touched': into memory allocated and "
        "written before timing; 'fresh': into new buffers per copy (host memory for D2H, device "
        "memory for H2D), as a fallback must (allocation and first-touch page faults included); "
        "'pinned' (CUDA): to or from CUDA_HOST memory.");
    notes_.push_back(
        "of device bw: GB/s over the device's copy bandwidth, measured in the same group: the "
        "host memcpy for the CPU and OpenCL/PoCL, whose memory is host memory; the pinned raw "
        "copy for CUDA. of raw copy, touched / fresh: over the raw Queue::Copy of the same "
        "group into touched / fresh memory.");
    return Status::OK();
  }

  const std::vector<Row>& rows() const { return rows_; }
  const std::vector<std::string>& absent() const { return absent_; }
  const std::vector<std::string>& notes() const { return notes_; }
  std::optional<double> floor_gbps() const { return floor_gbps_; }
  const Options& options() const { return options_; }

 private:
  // A case of one group; the group is measured together (MeasureTogether).
  struct GroupCase {
    Role role;
    Case measured;
  };
  using Group = std::vector<GroupCase>;

  Status ReadFloor() {
    if (options_.floor_path.empty()) return Status::OK();
    std::ifstream file(options_.floor_path);
    if (!file) return Status::IOError("cannot read --floor file " + options_.floor_path);
    std::string line;
    while (std::getline(file, line)) {
      if (line.rfind("memcpy_gbps=", 0) == 0) floor_gbps_ = std::atof(line.c_str() + 12);
    }
    if (!floor_gbps_ || *floor_gbps_ <= 0) {
      return Status::Invalid("no memcpy_gbps=... line in " + options_.floor_path);
    }
    return Status::OK();
  }

  static void AddCase(Group* group, Role role, const Device& device, const char* kind,
                      std::string path, std::string direction, int64_t size, Body body) {
    GroupCase entry{role, Case{}};
    Row& row = entry.measured.row;
    row.device = DeviceLabel(device);
    row.device_name = device.name();
    row.kind = kind;
    row.path = std::move(path);
    row.direction = std::move(direction);
    row.batch_bytes = size;
    entry.measured.body = std::move(body);
    group->push_back(std::move(entry));
  }

  // Measures the group, takes the ratios of its fallbacks to its references,
  // and keeps the rows.
  Status MeasureGroup(Device* device, Group* group) {
    std::vector<Case> cases;
    for (auto& entry : *group) cases.push_back(std::move(entry.measured));
    FERRY_RETURN_NOT_OK(MeasureTogether(options_, &cases));
    for (size_t index = 0; index < group->size(); ++index) {
      (*group)[index].measured = std::move(cases[index]);
    }
    const auto bandwidth_of = [group](Role role) -> std::optional<double> {
      for (const auto& entry : *group) {
        if (entry.role == role && entry.measured.row.gbps > 0) return entry.measured.row.gbps;
      }
      return std::nullopt;
    };
    // memcpy moves bytes the counters do not see: it copies the whole batch.
    for (auto& entry : *group) {
      Row& row = entry.measured.row;
      if (entry.role == Role::kMemcpy) {
        row.copied_bytes = static_cast<double>(row.batch_bytes);
        row.gbps = row.copied_bytes / row.seconds / 1e9;
      }
    }
    const std::optional<double> device_bandwidth =
        bandwidth_of(device->type() == DeviceType::kCuda ? Role::kRawPinned : Role::kMemcpy);
    const std::optional<double> touched = bandwidth_of(Role::kRawTouched);
    const std::optional<double> fresh = bandwidth_of(Role::kRawFresh);
    for (auto& entry : *group) {
      Row& row = entry.measured.row;
      if (row.gbps > 0 && entry.role != Role::kExchange) {
        if (device_bandwidth) row.of_device_bandwidth = row.gbps / *device_bandwidth;
        if (touched && entry.role != Role::kRawTouched) row.of_raw_copy = row.gbps / *touched;
        if (fresh && entry.role == Role::kFallback) row.of_fresh_copy = row.gbps / *fresh;
      }
      if (floor_gbps_ && row.gbps > 0) row.of_floor = row.gbps / *floor_gbps_;
      std::fprintf(stderr, "device_bench: %-9s %-52s %6s  %s\n", row.device.c_str(),
                   row.path.c_str(), SizeName(row.batch_bytes).c_str(),
                   TimeName(row.seconds).c_str());
      rows_.push_back(row);
    }
    return Status::OK();
  }

  Status MeasureDevice(Device* device) {
    Result<std::unique_ptr<testing::Kernels>> made = testing::KernelsFor(device);
    if (!made.ok()) {
      // Without a producer kernel there is no batch to exchange: say so, go on.
      absent_.push_back(DeviceLabel(*device) + " (" + device->name() +
                        "): no test kernels: " + made.status().message());
      return Status::OK();
    }
    std::unique_ptr<testing::Kernels> kernels = made.MoveValueUnsafe();
    FERRY_ASSIGN_OR_RAISE(QueuePtr producer_queue, device->CreateQueue());
    FERRY_ASSIGN_OR_RAISE(QueuePtr consumer_queue, device->CreateQueue());
    Device* pinned = nullptr;  // CUDA_HOST memory of the same GPU
    if (device->type() == DeviceType::kCuda) {
      Result<Device*> host = DeviceRegistry::Global().Get(DeviceType::kCudaHost, device->id());
      if (host.ok()) pinned = *host;
    }
    for (int64_t size : options_.sizes) {
      {
        FERRY_ASSIGN_OR_RAISE(DeviceArray batch,
                              ProduceBatch(device, kernels.get(), producer_queue.get(), size));
        // The fills are done before any clock starts: import's host wait then
        // times the exchange, not the kernel.
        if (batch.event) FERRY_RETURN_NOT_OK(batch.event->Wait(std::chrono::seconds(60)));
        FERRY_RETURN_NOT_OK(MeasureZeroCopy(device, batch, consumer_queue.get(), size));
        FERRY_RETURN_NOT_OK(MeasureFromDevice(device, batch, pinned, size));
      }
      if (device->type() != DeviceType::kCpu) {
        FERRY_RETURN_NOT_OK(MeasureToDevice(device, pinned, size));
      }
    }
    return Status::OK();
  }

  Status MeasureZeroCopy(Device* device, const DeviceArray& batch, Queue* consumer_queue,
                         int64_t size) {
    const bool is_cpu = device->type() == DeviceType::kCpu;
    Group group;
    AddCase(&group, Role::kExchange, *device, "zero-copy",
            is_cpu ? "zero-copy (no event on the CPU)" : "zero-copy, host wait", "", size,
            [&batch] { return ZeroCopyExchange(batch, ImportOptions{}); });
    ImportOptions device_wait;
    device_wait.queue = consumer_queue;
    if (!is_cpu) {
      AddCase(&group, Role::kExchange, *device, "zero-copy", "zero-copy, device-side wait", "",
              size, [&batch, &device_wait] { return ZeroCopyExchange(batch, device_wait); });
    }
    RecordBatchPtr record_batch;
    if (is_cpu) {
      FERRY_ASSIGN_OR_RAISE(record_batch, RecordBatch::FromStructArray(batch.data));
      AddCase(&group, Role::kExchange, *device, "c-data",
              "C Data: ExportRecordBatch + ImportRecordBatch", "", size,
              [&record_batch] { return CDataExchange(*record_batch); });
    }
    FERRY_RETURN_NOT_OK(MeasureGroup(device, &group));
    // The waits queued on the consumer's queue are the consumer's, not the exchange's.
    return consumer_queue->Synchronize();
  }

  // A memcpy between two touched host buffers of `size` bytes: the host's copy
  // bandwidth, measured in every copy group. `destination` is also the raw
  // copies' touched destination.
  void AddMemcpy(Group* group, const Device& device, const std::string& direction, int64_t size,
                 const BufferPtr& source, const BufferPtr& destination) {
    AddCase(group, Role::kMemcpy, device, "reference",
            "host memcpy, one call, touched (" + direction + " group)", direction, size,
            [source, destination, size] {
              std::memcpy(destination->mutable_data(), source->data(), static_cast<size_t>(size));
              return Status::OK();
            });
  }

  // The D2H fallback (an owned host copy on the CPU) and its references; every
  // buffer is freed on return.
  Status MeasureFromDevice(Device* device, const DeviceArray& batch, Device* pinned, int64_t size) {
    const bool is_cpu = device->type() == DeviceType::kCpu;
    const std::string direction = is_cpu ? "host" : "d2h";
    const CopyDirection copy_direction =
        is_cpu ? CopyDirection::kHostToHost : CopyDirection::kDeviceToHost;
    const int64_t column_bytes = size / kColumns;
    const auto column_values = [&batch](int column) {
      return batch.data->children[static_cast<size_t>(column)]->buffers[1]->data();
    };
    // The same 16 buffers on the device's own queue, one synchronisation at
    // the end, as the fallback copies them.
    const auto copy_columns = [device, copy_direction, column_bytes,
                               column_values](uint8_t* destination) -> Status {
      Queue* queue = device->default_queue();
      for (int column = 0; column < kColumns; ++column) {
        FERRY_RETURN_NOT_OK(queue->Copy(copy_direction, column_values(column),
                                        destination + column * column_bytes, column_bytes));
      }
      return queue->Synchronize();
    };

    FERRY_ASSIGN_OR_RAISE(BufferPtr host_source, TouchedHostBuffer(size));
    FERRY_ASSIGN_OR_RAISE(BufferPtr host_destination, TouchedHostBuffer(size));
    BufferPtr pinned_destination;
    if (pinned != nullptr) {
      FERRY_ASSIGN_OR_RAISE(pinned_destination, pinned->Allocate(size));
      std::memset(pinned_destination->mutable_data(), 1, static_cast<size_t>(size));
    }

    Group group;
    AddMemcpy(&group, *device, direction, size, host_source, host_destination);
    AddCase(&group, Role::kRawTouched, *device, "reference",
            "raw Queue::Copy " + direction + ", touched", direction, size,
            [&] { return copy_columns(host_destination->mutable_data()); });
    if (pinned_destination) {
      AddCase(&group, Role::kRawPinned, *device, "reference",
              "raw Queue::Copy " + direction + ", pinned", direction, size,
              [&] { return copy_columns(pinned_destination->mutable_data()); });
    }
    AddCase(&group, Role::kRawFresh, *device, "reference",
            "raw Queue::Copy " + direction + ", fresh", direction, size, [&]() -> Status {
              std::vector<BufferPtr> destinations;
              Queue* queue = device->default_queue();
              for (int column = 0; column < kColumns; ++column) {
                FERRY_ASSIGN_OR_RAISE(BufferPtr destination, Buffer::Allocate(column_bytes));
                FERRY_RETURN_NOT_OK(queue->Copy(copy_direction, column_values(column),
                                                destination->mutable_data(), column_bytes));
                destinations.push_back(std::move(destination));
              }
              return queue->Synchronize();
            });
    ConsumerCapabilities consumer;  // reads CPU memory only
    std::string path = "fallback: ExportDeviceArrayFor, CPU-only consumer (D2H)";
    if (is_cpu) {
      // CPU memory is what a CPU consumer reads: only writing forces a copy.
      consumer.needs_write = true;
      path = "fallback: ExportDeviceArrayFor, consumer needs write (host copy)";
    }
    AddCase(&group, Role::kFallback, *device, "fallback", path, direction, size,
            [&batch, &consumer] { return FallbackExchange(batch, consumer, ExchangeMode::kCopy); });
    return MeasureGroup(device, &group);
  }

  // A CPU batch for a consumer that reads only `device`: the H2D fallback and
  // its references; every buffer is freed on return.
  Status MeasureToDevice(Device* device, Device* pinned, int64_t size) {
    FERRY_ASSIGN_OR_RAISE(DeviceArray host_batch,
                          ProduceBatch(cpu_, host_kernels_.get(), cpu_->default_queue(), size));
    const int64_t column_bytes = size / kColumns;
    const auto batch_column = [&host_batch](int column) {
      return host_batch.data->children[static_cast<size_t>(column)]->buffers[1]->data();
    };
    const auto copy_columns = [device, column_bytes](const auto& source_of,
                                                     uint8_t* destination) -> Status {
      Queue* queue = device->default_queue();
      for (int column = 0; column < kColumns; ++column) {
        FERRY_RETURN_NOT_OK(queue->Copy(CopyDirection::kHostToDevice, source_of(column),
                                        destination + column * column_bytes, column_bytes));
      }
      return queue->Synchronize();
    };

    FERRY_ASSIGN_OR_RAISE(BufferPtr host_source, TouchedHostBuffer(size));
    FERRY_ASSIGN_OR_RAISE(BufferPtr host_destination, TouchedHostBuffer(size));
    FERRY_ASSIGN_OR_RAISE(BufferPtr device_destination, device->Allocate(size));
    // First use of device memory may map pages: touch it before timing.
    FERRY_RETURN_NOT_OK(copy_columns(batch_column, device_destination->mutable_data()));
    BufferPtr pinned_source;
    if (pinned != nullptr) {
      FERRY_ASSIGN_OR_RAISE(pinned_source, pinned->Allocate(size));
      std::memset(pinned_source->mutable_data(), 1, static_cast<size_t>(size));
    }

    Group group;
    AddMemcpy(&group, *device, "h2d", size, host_source, host_destination);
    AddCase(&group, Role::kRawTouched, *device, "reference", "raw Queue::Copy h2d, touched", "h2d",
            size, [&] { return copy_columns(batch_column, device_destination->mutable_data()); });
    if (pinned_source) {
      const auto pinned_column = [&pinned_source, column_bytes](int column) {
        return pinned_source->data() + column * column_bytes;
      };
      AddCase(&group, Role::kRawPinned, *device, "reference", "raw Queue::Copy h2d, pinned", "h2d",
              size, [copy_columns, pinned_column, &device_destination] {
                return copy_columns(pinned_column, device_destination->mutable_data());
              });
    }
    AddCase(&group, Role::kRawFresh, *device, "reference", "raw Queue::Copy h2d, fresh", "h2d",
            size, [&]() -> Status {
              // What the H2D fallback must do: fresh device memory per exchange.
              std::vector<BufferPtr> destinations;
              Queue* queue = device->default_queue();
              for (int column = 0; column < kColumns; ++column) {
                FERRY_ASSIGN_OR_RAISE(BufferPtr destination, device->Allocate(column_bytes));
                FERRY_RETURN_NOT_OK(queue->Copy(CopyDirection::kHostToDevice, batch_column(column),
                                                destination->mutable_data(), column_bytes));
                destinations.push_back(std::move(destination));
              }
              return queue->Synchronize();
            });
    ConsumerCapabilities consumer;
    consumer.device_types = {device->type()};
    consumer.device_ids = {device->id()};
    consumer.event_kinds = {device->event_kind()};
    AddCase(&group, Role::kFallback, *device, "fallback",
            "fallback: ExportDeviceArrayFor CPU batch, device-only consumer (H2D)", "h2d", size,
            [&host_batch, &consumer] {
              return FallbackExchange(host_batch, consumer, ExchangeMode::kCopy);
            });
    return MeasureGroup(device, &group);
  }

  Options options_;
  Device* cpu_ = nullptr;
  std::unique_ptr<testing::Kernels> host_kernels_;
  std::optional<double> floor_gbps_;
  std::vector<Row> rows_;
  std::vector<std::string> absent_;
  std::vector<std::string> notes_;
};

// ---- Reporting
// -----------------------------------------------------------------------------------

std::string Bytes(double value) {
  if (value == 0) return "0";
  char text[48];
  if (std::fabs(value - std::round(value)) < 1e-6) {
    // Whole bytes, with thousands separators.
    std::string digits = std::to_string(static_cast<int64_t>(std::llround(value)));
    std::string out;
    for (size_t index = 0; index < digits.size(); ++index) {
      if (index > 0 && (digits.size() - index) % 3 == 0) out += ',';
      out += digits[index];
    }
    return out;
  }
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

std::string Fixed(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string Percent(const std::optional<double>& ratio) {
  return ratio ? Fixed(*ratio * 100, 0) + "%" : "–";
}

void PrintReport(const Run& run, const std::string& machine) {
  const auto& rows = run.rows();
  std::printf("## Device exchange: 16 int64 columns, zero-copy vs explicit copy vs C Data\n\n");
  std::printf("%s\n\n", machine.c_str());
  std::printf(
      "Median of %d repetitions (each at least %.3g s, after one warm-up). Bytes, "
      "event waits and wait time are per exchange, from Ferry's telemetry counters. "
      "GB/s = 10^9 bytes/s of the bytes the counters saw copied.\n\n",
      run.options().repetitions, run.options().min_seconds);
  std::printf("Devices measured:");
  std::vector<std::string> seen;
  for (const Row& row : rows) {
    if (row.device == "host") continue;
    if (std::find(seen.begin(), seen.end(), row.device) != seen.end()) continue;
    seen.push_back(row.device);
    std::printf(" %s (%s);", row.device.c_str(), row.device_name.c_str());
  }
  std::printf("\n\n");
  for (const auto& absent : run.absent()) {
    std::printf("- not measured: %s\n", absent.c_str());
  }
  if (!run.absent().empty()) std::printf("\n");

  std::vector<int64_t> sizes = run.options().sizes;
  for (int64_t size : sizes) {
    std::printf("### %s batch (16 × %s rows)\n\n", SizeName(size).c_str(),
                Bytes(static_cast<double>(size / (kColumns * 8))).c_str());
    std::printf("Exchanges (bytes, waits and wait time per exchange):\n\n");
    std::printf(
        "| device | path | time / exchange | CV | H2D bytes | D2H bytes | D2D bytes | "
        "host bytes | event waits | wait time |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& row : rows) {
      if (row.batch_bytes != size || row.kind == "reference") continue;
      std::printf("| %s | %s | %s | %s%% | %s | %s | %s | %s | %s | %s |\n", row.device.c_str(),
                  row.path.c_str(), TimeName(row.seconds).c_str(), Fixed(row.cv * 100, 0).c_str(),
                  Bytes(row.h2d).c_str(), Bytes(row.d2h).c_str(), Bytes(row.d2d).c_str(),
                  Bytes(row.host).c_str(), Fixed(row.waits, 2).c_str(),
                  row.waits > 0 ? TimeName(row.wait_nanos / 1e9).c_str() : "–");
    }
    std::printf("\nCopy bandwidth (the fallbacks next to their references):\n\n");
    std::printf(
        "| device | path | time | CV | GB/s | of device bw | of raw copy, touched | "
        "of raw copy, fresh |%s\n",
        run.floor_gbps() ? " of floor memcpy |" : "");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|%s\n", run.floor_gbps() ? "---:|" : "");
    for (const Row& row : rows) {
      if (row.batch_bytes != size || row.gbps <= 0) continue;
      std::printf("| %s | %s | %s | %s%% | %s | %s | %s | %s |", row.device.c_str(),
                  row.path.c_str(), TimeName(row.seconds).c_str(), Fixed(row.cv * 100, 0).c_str(),
                  Fixed(row.gbps, 2).c_str(), Percent(row.of_device_bandwidth).c_str(),
                  Percent(row.of_raw_copy).c_str(), Percent(row.of_fresh_copy).c_str());
      if (run.floor_gbps()) std::printf(" %s |", Percent(row.of_floor).c_str());
      std::printf("\n");
    }
    std::printf("\n");
  }

  // Zero-copy against the batch's size: the claim is that it does not grow.
  std::printf("### Zero-copy and C Data exchange time by batch size\n\n| device | path |");
  for (int64_t size : sizes) std::printf(" %s |", SizeName(size).c_str());
  std::printf(" largest / smallest | bytes copied |\n|---|---|");
  for (size_t index = 0; index < sizes.size(); ++index) std::printf("---:|");
  std::printf("---:|---:|\n");
  std::vector<std::pair<std::string, std::string>> keys;
  for (const Row& row : rows) {
    if (row.kind != "zero-copy" && row.kind != "c-data") continue;
    const auto key = std::make_pair(row.device, row.path);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  for (const auto& [device, path] : keys) {
    std::printf("| %s | %s |", device.c_str(), path.c_str());
    double first = 0, last = 0, copied = 0;
    for (int64_t size : sizes) {
      const Row* found = nullptr;
      for (const Row& row : rows) {
        if (row.device == device && row.path == path && row.batch_bytes == size) found = &row;
      }
      std::printf(" %s |", found ? TimeName(found->seconds).c_str() : "–");
      if (found) {
        if (first == 0) first = found->seconds;
        last = found->seconds;
        copied += found->copied_bytes;
      }
    }
    std::printf(" %s | %s |\n", first > 0 ? Fixed(last / first, 2).c_str() : "–",
                Bytes(copied).c_str());
  }
  std::printf("\n");
  for (const auto& note : run.notes()) std::printf("- %s\n", note.c_str());
  if (run.floor_gbps()) {
    std::printf("- floor memcpy: %.2f GB/s, memcpy_gbps of %s\n", *run.floor_gbps(),
                run.options().floor_path.c_str());
  }
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\u%04x", c);
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonNumber(double value) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

std::string JsonOptional(const std::optional<double>& value) {
  return value ? JsonNumber(*value) : "null";
}

Status WriteJson(const Run& run, const std::string& machine, const std::string& path) {
  std::ofstream file(path);
  if (!file) return Status::IOError("cannot write " + path);
  file << "{\n  \"machine\": " << JsonString(machine)
       << ",\n  \"repetitions\": " << run.options().repetitions
       << ",\n  \"min_seconds\": " << run.options().min_seconds
       << ",\n  \"floor_memcpy_gbps\": " << JsonOptional(run.floor_gbps()) << ",\n  \"absent\": [";
  for (size_t index = 0; index < run.absent().size(); ++index) {
    file << (index ? ", " : "") << JsonString(run.absent()[index]);
  }
  file << "],\n  \"measurements\": [\n";
  const auto& rows = run.rows();
  for (size_t index = 0; index < rows.size(); ++index) {
    const Row& row = rows[index];
    file << "    {\"device\": " << JsonString(row.device)
         << ", \"device_name\": " << JsonString(row.device_name)
         << ", \"kind\": " << JsonString(row.kind) << ", \"path\": " << JsonString(row.path)
         << ", \"direction\": " << JsonString(row.direction)
         << ", \"batch_bytes\": " << row.batch_bytes << ", \"iterations\": " << row.iterations
         << ", \"seconds\": " << JsonNumber(row.seconds) << ", \"cv\": " << JsonNumber(row.cv)
         << ", \"bytes_h2d\": " << JsonNumber(row.h2d) << ", \"bytes_d2h\": " << JsonNumber(row.d2h)
         << ", \"bytes_d2d\": " << JsonNumber(row.d2d)
         << ", \"bytes_host\": " << JsonNumber(row.host)
         << ", \"event_waits\": " << JsonNumber(row.waits)
         << ", \"event_wait_nanos\": " << JsonNumber(row.wait_nanos)
         << ", \"gbps\": " << JsonNumber(row.gbps)
         << ", \"of_device_bandwidth\": " << JsonOptional(row.of_device_bandwidth)
         << ", \"of_raw_copy\": " << JsonOptional(row.of_raw_copy)
         << ", \"of_fresh_copy\": " << JsonOptional(row.of_fresh_copy)
         << ", \"of_floor\": " << JsonOptional(row.of_floor) << "}"
         << (index + 1 < rows.size() ? "," : "") << "\n";
  }
  file << "  ]\n}\n";
  return file ? Status::OK() : Status::IOError("writing " + path + " failed");
}

std::string DescribeMachine() {
  std::string cpu = "unknown CPU";
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) cpu = line.substr(colon + 2);
      break;
    }
  }
  std::ostringstream text;
  text << "Machine: " << cpu << ", " << std::thread::hardware_concurrency() << " hardware threads";
  return text.str();
}

}  // namespace
}  // namespace ferry::device::bench

int main(int argc, char** argv) {
  using namespace ferry::device::bench;
  auto options = ParseOptions(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "device_bench: %s\n", options.status().ToString().c_str());
    return 2;
  }
  const std::string json_path = options->json_path;
  Run run(std::move(*options));
  ferry::Status status = run.Go();
  const std::string machine = DescribeMachine();
  PrintReport(run, machine);
  if (!json_path.empty()) {
    ferry::Status written = WriteJson(run, machine, json_path);
    if (!written.ok()) std::fprintf(stderr, "device_bench: %s\n", written.ToString().c_str());
  }
  if (!status.ok()) {
    std::fprintf(stderr, "device_bench: failed: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
