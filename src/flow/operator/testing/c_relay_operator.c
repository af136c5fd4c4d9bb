/* A test operator written against the C ABI alone (no Ferry code): it moves
 * every input batch to its output "out" untouched, and adds to the message
 * metadata what it saw, keyed by its operator id: "<id>.private" (the
 * struct's private_data) and "<id>.values" (the address of the first
 * column's values). A chain of these shows whether the host moved the very
 * struct along or handed over another one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/c/ferry_operator.h"

typedef struct {
  char id[64];
  long events;
} RelayState;

FERRY_OPERATOR_EXPORT int32_t ferry_operator_abi_version(void) {
  return FERRY_OPERATOR_ABI_VERSION;
}

FERRY_OPERATOR_EXPORT int ferry_operator_init(const FerryOperatorHost* host,
                                              const char* config_json, void** state, char* error,
                                              size_t error_size) {
  FerryOperatorDevice cpu;
  (void)config_json;
  if (host->get_device(host->context, ARROW_DEVICE_CPU, -1, &cpu) != 0 ||
      cpu.device_type != ARROW_DEVICE_CPU) {
    snprintf(error, error_size, "the host has no CPU device: %s", host->last_error(host->context));
    return FERRY_OPERATOR_ERROR;
  }
  RelayState* relay = (RelayState*)calloc(1, sizeof(RelayState));
  if (relay == NULL) {
    snprintf(error, error_size, "out of memory");
    return FERRY_OPERATOR_ERROR;
  }
  snprintf(relay->id, sizeof(relay->id), "%s", host->operator_id);
  *state = relay;
  return 0;
}

FERRY_OPERATOR_EXPORT int ferry_operator_on_event(void* state, const FerryOperatorEvent* event,
                                                  const FerryOperatorHost* host, char* error,
                                                  size_t error_size) {
  RelayState* relay = (RelayState*)state;
  ++relay->events;
  if (event->type == FERRY_EVENT_STOP) return FERRY_OPERATOR_STOP;
  if (event->type != FERRY_EVENT_INPUT) return FERRY_OPERATOR_CONTINUE;

  const struct ArrowArray* root = &event->array->array;
  const void* values = NULL;
  if (root->n_children > 0 && root->children[0]->n_buffers > 1) {
    values = root->children[0]->buffers[1];
  }
  /* The incoming metadata with two more keys. */
  const char* incoming = event->metadata_json ? event->metadata_json : "{}";
  size_t length = strlen(incoming);
  char* metadata = (char*)malloc(length + 256);
  if (metadata == NULL || length < 2) {
    free(metadata);
    snprintf(error, error_size, "bad metadata");
    return FERRY_OPERATOR_ERROR;
  }
  memcpy(metadata, incoming, length - 1); /* without the closing brace */
  snprintf(metadata + length - 1, 256, "%s\"%s.private\":\"%p\",\"%s.values\":\"%p\"}",
           length > 2 ? "," : "", relay->id, root->private_data, relay->id, values);

  int code = host->send_output(host->context, "out", event->array, event->schema, metadata);
  free(metadata);
  if (code != 0) {
    snprintf(error, error_size, "send_output failed (%d): %s", code,
             host->last_error(host->context));
    return FERRY_OPERATOR_ERROR;
  }
  return FERRY_OPERATOR_CONTINUE;
}

FERRY_OPERATOR_EXPORT void ferry_operator_drop(void* state) { free(state); }
