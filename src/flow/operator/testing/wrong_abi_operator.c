/* A broken operator library for the host's tests: built for ABI version 99. */
#include "ferry/c/ferry_operator.h"

FERRY_OPERATOR_EXPORT int32_t ferry_operator_abi_version(void) { return 99; }

FERRY_OPERATOR_EXPORT int ferry_operator_init(const FerryOperatorHost* host,
                                              const char* config_json, void** state, char* error,
                                              size_t error_size) {
  (void)host, (void)config_json, (void)error, (void)error_size;
  *state = 0;
  return 0;
}

FERRY_OPERATOR_EXPORT int ferry_operator_on_event(void* state, const FerryOperatorEvent* event,
                                                  const FerryOperatorHost* host, char* error,
                                                  size_t error_size) {
  (void)state, (void)event, (void)host, (void)error, (void)error_size;
  return FERRY_OPERATOR_CONTINUE;
}

FERRY_OPERATOR_EXPORT void ferry_operator_drop(void* state) { (void)state; }
