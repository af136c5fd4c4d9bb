// Export + import of a record batch through the Arrow C Data Interface, Ferry
// against Arrow C++, in one binary, on batches with the same schema and data.
//
// One round trip = export the batch (ArrowArray + ArrowSchema), import it back
// into a batch, release the schema, drop the imported batch (which releases
// the array). The counter `per_column` is CPU time per round trip divided by
// the number of columns; the claim under test is that it does not grow with
// the number of rows (no buffer is copied or scanned) and stays flat as
// columns grow (the round trip is O(columns)).
//
// Benchmarks are named <kind>/<path>/<mix>/columns:<n>/rows:<n>:
//   roundtrip/ferry   Ferry export, Ferry import
//   roundtrip/arrow   Arrow C++ export, Arrow C++ import (only with FERRY_BENCH_ARROW)
//   interop/ferry_to_arrow, interop/arrow_to_ferry   one side each
//   floor/...         the least work one column's round trip could cost
// scripts/bench runs them and docs/benchmarks.md reports the medians.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

// Ferry's ABI header first: Arrow's copy below then sees the specification's
// guard macros already defined and declares nothing twice. That both headers
// compile in one translation unit is part of the contract in DESIGN.md.
#include "ferry/c/abi.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/sample.h"
#include "ferry/exchange/type.h"

#ifdef FERRY_BENCH_ARROW
#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/config.h>
#include <arrow/device.h>
#include <arrow/record_batch.h>
#endif

// The layout the specification fixes for 64-bit targets; one struct
// definition serves both libraries, so this pins it for both.
static_assert(sizeof(void*) != 8 || sizeof(ArrowSchema) == 72, "ArrowSchema layout");
static_assert(sizeof(void*) != 8 || sizeof(ArrowArray) == 80, "ArrowArray layout");
static_assert(offsetof(ArrowArray, release) == 8 * sizeof(int64_t), "ArrowArray.release");
static_assert(offsetof(ArrowSchema, release) == 7 * sizeof(void*), "ArrowSchema.release");
static_assert(sizeof(void*) != 8 || sizeof(ArrowDeviceArray) == 128, "ArrowDeviceArray layout");

namespace ferry::bench {
namespace {

enum class Mix { kInt64, kMixed };

struct Shape {
  Mix mix = Mix::kInt64;
  int columns = 0;
  int64_t rows = 0;

  bool operator==(const Shape&) const = default;
};

std::string ShapeName(const Shape& shape) {
  return std::string(shape.mix == Mix::kInt64 ? "int64" : "mixed") +
         "/columns:" + std::to_string(shape.columns) + "/rows:" + std::to_string(shape.rows);
}

// The sample batch's four columns (int64, utf8 with nulls, float64,
// list<utf8>) repeated until there are `columns` of them. Repeated columns
// share buffers, which neither library's export or import can exploit.
Result<RecordBatchPtr> MakeMixedBatch(int columns, int64_t rows) {
  FERRY_ASSIGN_OR_RAISE(auto sample, MakeSampleBatch(rows));
  auto schema = std::make_shared<Schema>();
  std::vector<ArrayDataPtr> arrays;
  for (int column_index = 0; column_index < columns; ++column_index) {
    const int source = column_index % sample->num_columns();
    const Field& source_field = sample->schema()->fields[static_cast<size_t>(source)];
    schema->fields.push_back(field(source_field.name + "_" + std::to_string(column_index),
                                   source_field.type, source_field.nullable));
    arrays.push_back(sample->column(source));
  }
  return RecordBatch::Make(schema, rows, std::move(arrays));
}

Result<RecordBatchPtr> MakeFerryBatch(const Shape& shape) {
  return shape.mix == Mix::kInt64 ? MakeWideBatch(shape.columns, shape.rows)
                                  : MakeMixedBatch(shape.columns, shape.rows);
}

#ifdef FERRY_BENCH_ARROW
// Arrow's own copy of a Ferry batch: imported through the C interface, then
// copied into memory Arrow allocated, so Arrow exports a batch it owns.
arrow::Result<std::shared_ptr<arrow::RecordBatch>> MakeArrowTwin(const RecordBatch& batch) {
  ArrowArray array;
  ArrowSchema schema;
  Status status = ExportRecordBatch(batch, &array, &schema);
  if (!status.ok()) return arrow::Status::Invalid("Ferry export: ", status.ToString());
  ARROW_ASSIGN_OR_RAISE(auto view, arrow::ImportRecordBatch(&array, &schema));
  ARROW_ASSIGN_OR_RAISE(auto twin, view->CopyTo(arrow::default_cpu_memory_manager()));
  if (!twin->Equals(*view))
    return arrow::Status::Invalid("Arrow's copy differs from Ferry's batch");
  return twin;
}
#endif

// Holds the batches of one shape at a time: the largest ones take hundreds of
// MiB, and benchmarks of one shape run one after another.
class BatchCache {
 public:
  // Sets `error` and returns false when a batch cannot be built.
  bool Prepare(const Shape& shape, std::string* error) {
    if (ready_ && shape == shape_) return true;
    ferry_batch_.reset();
#ifdef FERRY_BENCH_ARROW
    arrow_batch_.reset();
#endif
    ready_ = false;
    auto ferry_batch = MakeFerryBatch(shape);
    if (!ferry_batch.ok()) {
      *error = "building the Ferry batch: " + ferry_batch.status().ToString();
      return false;
    }
    ferry_batch_ = ferry_batch.MoveValueUnsafe();
#ifdef FERRY_BENCH_ARROW
    auto arrow_batch = MakeArrowTwin(*ferry_batch_);
    if (!arrow_batch.ok()) {
      *error = "building the Arrow batch: " + arrow_batch.status().ToString();
      return false;
    }
    arrow_batch_ = arrow_batch.MoveValueUnsafe();
#endif
    shape_ = shape;
    ready_ = true;
    return true;
  }

  const RecordBatch& ferry_batch() const { return *ferry_batch_; }
#ifdef FERRY_BENCH_ARROW
  const arrow::RecordBatch& arrow_batch() const { return *arrow_batch_; }
#endif

 private:
  bool ready_ = false;
  Shape shape_;
  RecordBatchPtr ferry_batch_;
#ifdef FERRY_BENCH_ARROW
  std::shared_ptr<arrow::RecordBatch> arrow_batch_;
#endif
};

BatchCache& Cache() {
  static BatchCache cache;
  return cache;
}

void SetPerColumnCounter(benchmark::State& state, int columns) {
  // CPU seconds per round trip, divided by the number of columns.
  state.counters["per_column"] = benchmark::Counter(
      columns, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["columns"] = columns;
}

// Runs `round_trip` (returns an error message, empty on success) per
// iteration; the first failure stops the benchmark with that message.
template <typename RoundTrip>
void RunRoundTrip(benchmark::State& state, const Shape& shape, RoundTrip round_trip) {
  std::string error;
  if (!Cache().Prepare(shape, &error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  for (auto _ : state) {
    error = round_trip();
    if (!error.empty()) {
      state.SkipWithError(error.c_str());
      break;
    }
  }
  SetPerColumnCounter(state, shape.columns);
}

std::string FerryRoundTrip() {
  const RecordBatch& batch = Cache().ferry_batch();
  ArrowArray array;
  ArrowSchema schema;
  Status exported = ExportRecordBatch(batch, &array, &schema);
  if (!exported.ok()) return "Ferry export: " + exported.ToString();
  auto imported = ImportRecordBatch(&array, &schema);
  schema.release(&schema);  // Ferry's import borrows the schema
  if (!imported.ok()) return "Ferry import: " + imported.status().ToString();
  benchmark::DoNotOptimize(imported->get());
  return {};
}

#ifdef FERRY_BENCH_ARROW
std::string ArrowRoundTrip() {
  const arrow::RecordBatch& batch = Cache().arrow_batch();
  ArrowArray array;
  ArrowSchema schema;
  arrow::Status exported = arrow::ExportRecordBatch(batch, &array, &schema);
  if (!exported.ok()) return "Arrow export: " + exported.ToString();
  auto imported = arrow::ImportRecordBatch(&array, &schema);  // consumes the schema
  if (!imported.ok()) return "Arrow import: " + imported.status().ToString();
  benchmark::DoNotOptimize(imported->get());
  return {};
}

std::string FerryToArrow() {
  ArrowArray array;
  ArrowSchema schema;
  Status exported = ExportRecordBatch(Cache().ferry_batch(), &array, &schema);
  if (!exported.ok()) return "Ferry export: " + exported.ToString();
  auto imported = arrow::ImportRecordBatch(&array, &schema);
  if (!imported.ok()) return "Arrow import: " + imported.status().ToString();
  benchmark::DoNotOptimize(imported->get());
  return {};
}

std::string ArrowToFerry() {
  ArrowArray array;
  ArrowSchema schema;
  arrow::Status exported = arrow::ExportRecordBatch(Cache().arrow_batch(), &array, &schema);
  if (!exported.ok()) return "Arrow export: " + exported.ToString();
  auto imported = ImportRecordBatch(&array, &schema);
  schema.release(&schema);
  if (!imported.ok()) return "Ferry import: " + imported.status().ToString();
  benchmark::DoNotOptimize(imported->get());
  return {};
}
#endif

// Checks once per shape, outside the timed loops, that every path gives back
// the batch it was handed: a fast wrong answer must not enter the table.
bool CheckRoundTrips(const Shape& shape, std::string* error) {
  if (!Cache().Prepare(shape, error)) return false;
  const RecordBatch& batch = Cache().ferry_batch();
  ArrowArray array;
  ArrowSchema schema;
  if (Status status = ExportRecordBatch(batch, &array, &schema); !status.ok()) {
    *error = status.ToString();
    return false;
  }
  auto imported = ImportRecordBatch(&array, &schema);
  schema.release(&schema);
  if (!imported.ok() || !(*imported)->Equals(batch)) {
    *error = "Ferry's round trip changed the batch " + ShapeName(shape);
    return false;
  }
#ifdef FERRY_BENCH_ARROW
  const arrow::RecordBatch& arrow_batch = Cache().arrow_batch();
  if (!arrow::ExportRecordBatch(arrow_batch, &array, &schema).ok()) {
    *error = "Arrow export failed";
    return false;
  }
  auto arrow_imported = arrow::ImportRecordBatch(&array, &schema);
  if (!arrow_imported.ok() || !(*arrow_imported)->Equals(arrow_batch)) {
    *error = "Arrow's round trip changed the batch " + ShapeName(shape);
    return false;
  }
  if (!arrow::ExportRecordBatch(arrow_batch, &array, &schema).ok()) {
    *error = "Arrow export failed";
    return false;
  }
  auto from_arrow = ImportRecordBatch(&array, &schema);
  schema.release(&schema);
  if (!from_arrow.ok() || !(*from_arrow)->Equals(batch)) {
    *error = "Arrow -> Ferry changed the batch " + ShapeName(shape) +
             (from_arrow.ok() ? "" : ": " + from_arrow.status().ToString());
    return false;
  }
#endif
  return true;
}

// ---- Floor: the least work per column any round trip has to do ------------
// Export writes one ArrowArray and one ArrowSchema per column (152 bytes) and
// import reads them; the producer allocates private data to find its buffers
// again in `release`; keeping a buffer alive is at least one atomic
// increment and decrement of a reference count.

void FloorDescriptorCopy(benchmark::State& state) {
  constexpr int kColumns = 1000;
  struct Descriptors {
    ArrowArray array;
    ArrowSchema schema;
  };
  std::vector<Descriptors> source(kColumns), target(kColumns);
  std::memset(source.data(), 1, sizeof(Descriptors) * kColumns);
  for (auto _ : state) {
    for (int column_index = 0; column_index < kColumns; ++column_index) {
      std::memcpy(&target[column_index], &source[column_index], sizeof(Descriptors));
    }
    benchmark::DoNotOptimize(target.data());
    benchmark::ClobberMemory();
  }
  SetPerColumnCounter(state, kColumns);
}

void FloorMallocFree(benchmark::State& state) {
  constexpr int kColumns = 1000;
  std::vector<void*> blocks(kColumns);
  for (auto _ : state) {
    for (auto& block : blocks) {
      block = std::malloc(64);
      benchmark::DoNotOptimize(block);
    }
    for (void* block : blocks) std::free(block);
  }
  SetPerColumnCounter(state, kColumns);
}

void FloorSharedPtrPin(benchmark::State& state) {
  constexpr int kColumns = 1000;
  auto buffer = std::make_shared<int64_t>(0);
  std::vector<std::shared_ptr<int64_t>> pins(kColumns);
  for (auto _ : state) {
    for (auto& pin : pins) pin = buffer;
    benchmark::DoNotOptimize(pins.data());
    for (auto& pin : pins) pin.reset();
  }
  SetPerColumnCounter(state, kColumns);
}

// ---- Registration ----------------------------------------------------------

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (int columns : {1, 10, 100, 1000}) {
    for (int64_t rows : {int64_t{1}, int64_t{65536}, int64_t{1000000}}) {
      if (rows == 1000000 && columns > 100) continue;  // 8 GB per path: not worth the memory
      shapes.push_back({Mix::kInt64, columns, rows});
    }
  }
  for (int columns : {10, 100, 1000}) {
    for (int64_t rows : {int64_t{1}, int64_t{65536}})
      shapes.push_back({Mix::kMixed, columns, rows});
  }
  return shapes;
}

// Options of this program, after Google Benchmark's own flags.
struct Options {
  // Fixed iterations per benchmark (0: let the harness decide). Used to count
  // instructions under callgrind, where a fixed count makes them comparable.
  int64_t iterations = 0;
  bool skip_checks = false;
};

void Register(const std::string& name, const Shape& shape, std::string (*round_trip)(),
              const Options& options) {
  auto* benchmark = benchmark::RegisterBenchmark(
      name.c_str(),
      [shape, round_trip](benchmark::State& state) { RunRoundTrip(state, shape, round_trip); });
  if (options.iterations > 0) benchmark->Iterations(options.iterations);
}

void RegisterAll(const Options& options) {
  // Ferry and Arrow of one shape run back to back, so that both see the same
  // machine noise and the cache builds each batch once.
  for (const Shape& shape : Shapes()) {
    Register("roundtrip/ferry/" + ShapeName(shape), shape, &FerryRoundTrip, options);
#ifdef FERRY_BENCH_ARROW
    Register("roundtrip/arrow/" + ShapeName(shape), shape, &ArrowRoundTrip, options);
    if (shape.mix == Mix::kInt64 && shape.rows == 65536) {
      Register("interop/ferry_to_arrow/" + ShapeName(shape), shape, &FerryToArrow, options);
      Register("interop/arrow_to_ferry/" + ShapeName(shape), shape, &ArrowToFerry, options);
    }
#endif
  }
  benchmark::RegisterBenchmark("floor/descriptor_copy_152B", FloorDescriptorCopy);
  benchmark::RegisterBenchmark("floor/malloc_free_64B", FloorMallocFree);
  benchmark::RegisterBenchmark("floor/shared_ptr_pin", FloorSharedPtrPin);
}

}  // namespace
}  // namespace ferry::bench

// Takes this program's own flags out of argv:
//   --ferry_iterations=N   run every round-trip benchmark exactly N times
//   --ferry_skip_checks    skip the correctness checks before timing
bool ParseOptions(int* argc, char** argv, ferry::bench::Options* options) {
  int kept = 1;
  for (int index = 1; index < *argc; ++index) {
    const std::string argument = argv[index];
    if (argument.rfind("--ferry_iterations=", 0) == 0) {
      options->iterations = std::atoll(argument.c_str() + std::strlen("--ferry_iterations="));
      if (options->iterations <= 0) {
        std::fprintf(stderr, "exchange_bench: --ferry_iterations needs a positive count\n");
        return false;
      }
    } else if (argument == "--ferry_skip_checks") {
      options->skip_checks = true;
    } else {
      argv[kept++] = argv[index];
    }
  }
  *argc = kept;
  return true;
}

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  ferry::bench::Options options;
  if (!ParseOptions(&argc, argv, &options)) return 1;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // A benchmark that measures a wrong result is worse than none.
  for (const auto& shape : ferry::bench::Shapes()) {
    // The smaller shapes already run every code path the larger ones do.
    if (options.skip_checks || shape.rows > 65536 || shape.columns > 100) continue;
    std::string error;
    if (!ferry::bench::CheckRoundTrips(shape, &error)) {
      std::fprintf(stderr, "exchange_bench: %s\n", error.c_str());
      return 1;
    }
  }
#ifdef FERRY_BENCH_ARROW
  benchmark::AddCustomContext("arrow_cpp", arrow::GetBuildInfo().version_string);
#else
  benchmark::AddCustomContext("arrow_cpp", "not compared (FERRY_BENCH_ARROW=OFF)");
#endif
#ifdef NDEBUG
  benchmark::AddCustomContext("ferry_build", "with NDEBUG");
#else
  benchmark::AddCustomContext("ferry_build", "without NDEBUG (assertions on)");
#endif
  ferry::bench::RegisterAll(options);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
