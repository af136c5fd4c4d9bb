/* The C ABI of Ferry operators: plugins (shared libraries) that a runtime
 * node loads and drives. Events and outputs are Arrow C Device Data
 * Interface structs, so batches pass between operators of one runtime, and
 * from and to the node's shared-memory inputs and outputs, without a copy,
 * on any device (an OpenCL operator feeding another waits on the sync event
 * instead of copying).
 *
 * A shared library exports three functions:
 *
 *   int  ferry_operator_init(const FerryOperatorHost* host, const char* config_json,
 *                            void** state, char* error, size_t error_size);
 *   int  ferry_operator_on_event(void* state, const FerryOperatorEvent* event,
 *                                const FerryOperatorHost* host, char* error, size_t error_size);
 *   void ferry_operator_drop(void* state);
 *
 * init receives the `config:` mapping of the operator in the descriptor as
 * JSON and stores what it needs in *state. on_event returns
 * FERRY_OPERATOR_CONTINUE, FERRY_OPERATOR_STOP (this operator is done: its
 * outputs close) or FERRY_OPERATOR_ERROR with a NUL-terminated message in
 * error (truncated to error_size). drop runs once, after the last event.
 * No C++ exception may leave these functions.
 *
 * Ownership. For a FERRY_EVENT_INPUT event, event->array is the host's:
 * the operator may move it (copy the struct and set event->array->array.release
 * to NULL) to keep it past the call; otherwise the host releases it after
 * on_event returns. event->schema is borrowed for the duration of the call.
 * send_output moves `array` (its release is NULL afterwards, even on error)
 * and borrows `schema`; the array must be a struct array (a record batch)
 * whose buffers are not written again (they are shared read-only with every
 * consumer).
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

enum FerryEventType {
  FERRY_EVENT_INPUT = 0,
  FERRY_EVENT_INPUT_CLOSED = 1,
  FERRY_EVENT_STOP = 2,
  FERRY_EVENT_ERROR = 3
};

typedef struct FerryOperatorEvent {
  int32_t type;              /* enum FerryEventType */
  const char* id;            /* input id (INPUT, INPUT_CLOSED); stop reason (STOP) */
  struct ArrowDeviceArray* array;   /* INPUT: the batch (see Ownership); else NULL */
  const struct ArrowSchema* schema; /* INPUT: its schema; else NULL */
  const char* metadata_json; /* INPUT: the message metadata as a JSON object; else NULL */
  const char* error;         /* ERROR: what went wrong; else NULL */
  uint64_t sequence;         /* INPUT: the producer's message number */
} FerryOperatorEvent;

typedef struct FerryOperatorHost {
  int32_t abi_version; /* FERRY_OPERATOR_ABI_VERSION */
  void* context;       /* the host's, pass it back */
  /* Sends a batch on one of the operator's outputs. Returns 0, or an errno
   * style code with a message retrievable by last_error. */
  int (*send_output)(void* context, const char* output_id, struct ArrowDeviceArray* array,
                     const struct ArrowSchema* schema, const char* metadata_json);
  const char* (*last_error)(void* context);
} FerryOperatorHost;

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
