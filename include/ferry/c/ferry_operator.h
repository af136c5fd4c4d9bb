/* The C ABI of Ferry operators: plugins (shared libraries) that a runtime
 * node loads and drives. Events and outputs are Arrow C Device Data
 * Interface structs, so batches pass between operators of one runtime, and
 * from and to the node's shared-memory inputs and outputs, without a copy,
 * on any device (an OpenCL operator feeding another waits on the sync event
 * instead of copying).
 *
 * A shared library exports four functions:
 *
 *   int32_t ferry_operator_abi_version(void);   returns FERRY_OPERATOR_ABI_VERSION
 *   int  ferry_operator_init(const FerryOperatorHost* host, const char* config_json,
 *                            void** state, char* error, size_t error_size);
 *   int  ferry_operator_on_event(void* state, const FerryOperatorEvent* event,
 *                                const FerryOperatorHost* host, char* error, size_t error_size);
 *   void ferry_operator_drop(void* state);
 *
 * The host refuses a library that lacks one of them or whose version is not
 * the host's, naming the symbol or both versions. init receives the
 * `config:` mapping of the operator in the descriptor as JSON and stores what
 * it needs in *state; it returns 0, or FERRY_OPERATOR_ERROR with a message
 * (then drop is not called). on_event returns FERRY_OPERATOR_CONTINUE,
 * FERRY_OPERATOR_STOP (this operator is done: its outputs close) or
 * FERRY_OPERATOR_ERROR with a NUL-terminated message in error (truncated to
 * error_size); after an error the operator gets no further events. drop runs
 * once, after the last event. No C++ exception may leave these functions
 * (FERRY_EXPORT_OPERATOR in ferry/flow/operator.h catches them for C++).
 *
 * Threads. The host calls init, on_event and drop of one operator from one
 * thread at a time, and the host's callbacks only from inside those calls
 * (send_output also from inside init is refused: outputs start with events).
 *
 * Ownership. For a FERRY_EVENT_INPUT event, event->array is the host's:
 * the operator may move it (copy the struct and set event->array->array.release
 * to NULL) to keep it past the call; otherwise the host releases it after
 * on_event returns. event->schema is borrowed for the duration of the call;
 * the host may lend one struct to every consumer of an output and to every
 * event until the producer's schema changes, so never release or modify it
 * (import or copy what must outlive the call).
 * send_output moves `array` (its release is NULL afterwards, even on error)
 * and borrows `schema`; the array must be a struct array (a record batch)
 * whose buffers are not written again (they are shared read-only with every
 * consumer). Within a runtime the host hands the very struct an operator sent
 * to the consumer (moved, never copied; one consumer) or a struct tree per
 * consumer over the same buffers (several consumers); the producer's release
 * runs once, after the last consumer released. A batch the operator sent
 * may therefore be released after drop: the host never unloads a library.
 *
 * Devices. A sync_event is valid only in its own device context (an OpenCL
 * event cannot be waited on in another cl_context), so every operator of a
 * runtime uses the host's devices: get_device gives the native handles of
 * one and a queue of this operator on it.
 *
 * Compatibility. Fields are only ever appended to the structs below; a host
 * fills every field of its abi_version.
 */
#ifndef FERRY_C_FERRY_OPERATOR_H_
#define FERRY_C_FERRY_OPERATOR_H_

#include <stddef.h>
#include <stdint.h>

#include "ferry/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_OPERATOR_ABI_VERSION 1

#define FERRY_OPERATOR_CONTINUE 0
#define FERRY_OPERATOR_STOP 1
#define FERRY_OPERATOR_ERROR (-1)

/* Marks the entry points of an operator library as exported (libraries are
 * best built with hidden visibility, so that nothing else is). */
#if defined(__GNUC__) || defined(__clang__)
#define FERRY_OPERATOR_EXPORT __attribute__((visibility("default")))
#else
#define FERRY_OPERATOR_EXPORT
#endif

enum FerryEventType {
  FERRY_EVENT_INPUT = 0,
  FERRY_EVENT_INPUT_CLOSED = 1,
  FERRY_EVENT_STOP = 2,
  FERRY_EVENT_ERROR = 3
};

typedef struct FerryOperatorEvent {
  int32_t type;                     /* enum FerryEventType */
  const char* id;                   /* input id (INPUT, INPUT_CLOSED); stop reason (STOP) */
  struct ArrowDeviceArray* array;   /* INPUT: the batch (see Ownership); else NULL */
  const struct ArrowSchema* schema; /* INPUT: its schema; else NULL */
  const char* metadata_json;        /* INPUT: the message metadata as a JSON object of string
                                       values, compact ({"k":"v",...}); else NULL */
  const char* error;                /* ERROR: what went wrong; else NULL */
  uint64_t sequence;                /* INPUT: the producer's message number (from 1) */
} FerryOperatorEvent;

/* One device of the host, as get_device describes it. */
typedef struct FerryOperatorDevice {
  int32_t device_type; /* ARROW_DEVICE_* */
  int64_t device_id;   /* -1 for the CPU */
  /* Native handles: OpenCL: cl_context, cl_device_id and a cl_command_queue
   * (in order) of this operator; CUDA: NULL (the device's primary context is
   * the host's), NULL and a CUstream of this operator; CPU: all NULL. The
   * handles live as long as the host; the queue is used by this operator only. */
  void* native_context;
  void* native_device;
  void* native_queue;
  /* The host's ferry::device::Device*, for operators built with Ferry's C++
   * helper (ferry/flow/operator.h) when cxx_tag matches theirs; else NULL. */
  void* cxx_device;
} FerryOperatorDevice;

typedef struct FerryOperatorHost {
  int32_t abi_version; /* FERRY_OPERATOR_ABI_VERSION */
  void* context;       /* the host's, pass it back */
  /* Sends a batch on one of the operator's outputs. Returns 0, or an errno
   * style code with a message retrievable by last_error. */
  int (*send_output)(void* context, const char* output_id, struct ArrowDeviceArray* array,
                     const struct ArrowSchema* schema, const char* metadata_json);
  /* The message of the last failed callback; valid until the next callback. */
  const char* (*last_error)(void* context);
  /* This operator's id in the descriptor. */
  const char* operator_id;
  /* Describes the host's device (device_type, device_id) in *out. Returns 0,
   * or an errno style code (ENODEV: absent, with the reason in last_error). */
  int (*get_device)(void* context, int32_t device_type, int64_t device_id,
                    FerryOperatorDevice* out);
  /* Adds `value` to the host's telemetry counter `counter` (a name of
   * ferry/base/telemetry.h, e.g. "bytes_copied_d2h" or
   * "fallback_crosses_process"), so that copies an operator makes are
   * counted with the host's. Unknown names are ignored. */
  void (*add_telemetry)(void* context, const char* counter, int64_t value);
  /* The host's build of Ferry's C++ helper (FERRY_OPERATOR_CXX_TAG). */
  const char* cxx_tag;
} FerryOperatorHost;

typedef int32_t (*FerryOperatorAbiVersionFn)(void);
typedef int (*FerryOperatorInitFn)(const FerryOperatorHost* host, const char* config_json,
                                   void** state, char* error, size_t error_size);
typedef int (*FerryOperatorOnEventFn)(void* state, const FerryOperatorEvent* event,
                                      const FerryOperatorHost* host, char* error,
                                      size_t error_size);
typedef void (*FerryOperatorDropFn)(void* state);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_C_FERRY_OPERATOR_H_ */
