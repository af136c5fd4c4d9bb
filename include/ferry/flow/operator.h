// Writing an operator in C++: derive from ferry::flow::Operator, override
// OnInput (and whichever other events matter), and export the class with
// FERRY_EXPORT_OPERATOR. The macro defines the C entry points of
// ferry/c/ferry_operator.h and turns every error and exception into the
// ABI's error code and message, so nothing is thrown across the boundary.
//
//   class Double : public ferry::flow::Operator {
//    public:
//     ferry::Result<ferry::flow::OperatorStatus> OnInput(
//         const std::string& id, const ferry::device::DeviceBatch& input,
//         const ferry::Metadata& metadata) override {
//       FERRY_ASSIGN_OR_RAISE(auto host, ToHost(input));  // no copy for CPU data
//       ...                                                // build `doubled`
//       FERRY_RETURN_NOT_OK(SendOutput("out", *doubled));
//       return ferry::flow::OperatorStatus::kContinue;
//     }
//   };
//   FERRY_EXPORT_OPERATOR(Double)
//
// Build it as a shared library linking `ferry_operator` (CMake:
// ferry_add_operator, see docs/operators.md).
//
// Inputs arrive as a DeviceBatch: a record batch whose buffers are where the
// producer left them (CPU, OpenCL, CUDA), never copied. By default a device
// batch has already been waited for on GetQueue(batch.device) (a device-side
// wait: work this operator enqueues there runs after the producer's), and
// batch.event is the producer's event; set_input_wait(InputWait::kHost) makes
// the helper wait on the host instead. Outputs are exported as they are: a
// device batch goes to the next operator with its event, without a copy.
//
// Devices. GetDevice returns the runtime's own devices (one OpenCL context,
// one CUDA context for the whole runtime), so events and memory of every
// operator are valid in every other. This needs the operator to be built
// with the same compiler and Ferry version as the runtime (checked at init
// through FERRY_OPERATOR_CXX_TAG); an operator written against the C ABI
// alone has no such constraint.
//
// Thread safety: the runtime calls an operator from one thread at a time;
// SendOutput, GetDevice and GetQueue are for use inside the event methods.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "ferry/base/status.h"
#include "ferry/c/ferry_operator.h"
#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/type.h"

// Identifies the C++ build of Ferry that a runtime and an operator were
// compiled with; C++ objects (devices) are shared only when both agree.
#define FERRY_OPERATOR_CXX_TAG "ferry-0.1 cxx-operator-1 " __VERSION__

namespace ferry::flow {

// What an event method asks of the runtime.
enum class OperatorStatus : int {
  kContinue = FERRY_OPERATOR_CONTINUE,  // keep sending events
  kStop = FERRY_OPERATOR_STOP,          // this operator is done: its outputs close
};

namespace internal {
class OperatorAdapter;
}  // namespace internal

class Operator {
 public:
  Operator() = default;
  virtual ~Operator() = default;
  Operator(const Operator&) = delete;
  Operator& operator=(const Operator&) = delete;

  // Once, before any event, with the operator's `config:` mapping as JSON
  // ("{}" when absent). An error fails the operator's start.
  virtual Status Init(const std::string& config_json) { return Status::OK(); }
  // A batch on input `id`. The batch is shared read-only with other
  // consumers: never write into its buffers.
  virtual Result<OperatorStatus> OnInput(const std::string& id, const device::DeviceBatch& batch,
                                         const Metadata& metadata) = 0;
  // Input `id` will not receive anything more (its producer finished).
  virtual Result<OperatorStatus> OnInputClosed(const std::string& id) {
    return OperatorStatus::kContinue;
  }
  // The runtime stops (the reason says why: "ctrl-c", "all inputs closed",
  // ...). Outputs sent here still reach the operators downstream.
  virtual Status OnStop(const std::string& reason) { return Status::OK(); }
  // A problem the runtime carried on after (a malformed message on an input).
  virtual Result<OperatorStatus> OnError(const std::string& message) {
    return OperatorStatus::kContinue;
  }

  enum class InputWait : uint8_t {
    kDevice,  // enqueue the wait on GetQueue(device) (default)
    kHost,    // wait on the host before OnInput; batch.event is then null
  };

 protected:
  // Sends `batch` on `output` without copying it (a device batch travels with
  // its event). Invalid for an output the descriptor does not list.
  Status SendOutput(const std::string& output, const device::DeviceBatch& batch,
                    const Metadata& metadata = {});
  // A batch in CPU memory.
  Status SendOutput(const std::string& output, const RecordBatch& batch,
                    const Metadata& metadata = {});

  // The runtime's device (type, id); the CPU for kCpu whatever the id.
  Result<device::Device*> GetDevice(device::DeviceType type, int64_t id = 0);
  // This operator's queue on `device` (created on first use, kept until drop).
  Result<device::Queue*> GetQueue(device::Device* device);
  // The batch readable on the host: itself for host-accessible memory (after
  // a host wait on its event), else a copy (counted D2H, reason
  // unsupported_device_type).
  Result<RecordBatchPtr> ToHost(const device::DeviceBatch& batch);

  void set_input_wait(InputWait wait) { input_wait_ = wait; }
  InputWait input_wait() const { return input_wait_; }
  // The operator's id in the descriptor.
  const std::string& id() const;
  // The producer's message number of the input being handled (from 1).
  uint64_t sequence() const { return sequence_; }

 private:
  friend class internal::OperatorAdapter;
  internal::OperatorAdapter* adapter_ = nullptr;
  InputWait input_wait_ = InputWait::kDevice;
  uint64_t sequence_ = 0;
};

namespace internal {

using OperatorFactory = std::unique_ptr<Operator> (*)();

// The bodies of the C entry points (src/flow/operator/operator.cc). They
// catch every exception themselves; the macro catches again at the boundary.
int OperatorInit(OperatorFactory make, const FerryOperatorHost* host, const char* config_json,
                 void** state, char* error, size_t error_size);
int OperatorOnEvent(void* state, const FerryOperatorEvent* event, char* error, size_t error_size);
void OperatorDrop(void* state);
// Copies `message` into error[0, size) with a terminating NUL (truncating).
void WriteError(char* error, size_t size, const char* message) noexcept;
// The message of an exception caught at the boundary.
void WriteException(char* error, size_t size, std::exception_ptr exception) noexcept;

}  // namespace internal
}  // namespace ferry::flow

// Defines the four C entry points of an operator library for `ClassName`
// (default-constructible, derived from ferry::flow::Operator). Use it once,
// at namespace scope, in one source file of the library.
#define FERRY_EXPORT_OPERATOR(ClassName)                                                          \
  extern "C" FERRY_OPERATOR_EXPORT int32_t ferry_operator_abi_version(void) {                     \
    return FERRY_OPERATOR_ABI_VERSION;                                                            \
  }                                                                                               \
  extern "C" FERRY_OPERATOR_EXPORT int ferry_operator_init(const FerryOperatorHost* host,         \
                                                           const char* config_json, void** state, \
                                                           char* error, size_t error_size) {      \
    try {                                                                                         \
      return ::ferry::flow::internal::OperatorInit(                                               \
          []() -> std::unique_ptr<::ferry::flow::Operator> {                                      \
            return std::unique_ptr<::ferry::flow::Operator>(new ClassName());                     \
          },                                                                                      \
          host, config_json, state, error, error_size);                                           \
    } catch (...) {                                                                               \
      ::ferry::flow::internal::WriteException(error, error_size, std::current_exception());       \
      return FERRY_OPERATOR_ERROR;                                                                \
    }                                                                                             \
  }                                                                                               \
  extern "C" FERRY_OPERATOR_EXPORT int ferry_operator_on_event(                                   \
      void* state, const FerryOperatorEvent* event, const FerryOperatorHost* host, char* error,   \
      size_t error_size) {                                                                        \
    (void)host;                                                                                   \
    try {                                                                                         \
      return ::ferry::flow::internal::OperatorOnEvent(state, event, error, error_size);           \
    } catch (...) {                                                                               \
      ::ferry::flow::internal::WriteException(error, error_size, std::current_exception());       \
      return FERRY_OPERATOR_ERROR;                                                                \
    }                                                                                             \
  }                                                                                               \
  extern "C" FERRY_OPERATOR_EXPORT void ferry_operator_drop(void* state) {                        \
    try {                                                                                         \
      ::ferry::flow::internal::OperatorDrop(state);                                               \
    } catch (...) {                                                                               \
    }                                                                                             \
  }
