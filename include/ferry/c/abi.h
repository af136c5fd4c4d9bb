/* The Arrow C Data, C Stream, C Device, C Device Stream and C Async Device
 * Stream interfaces, declared exactly as the Apache Arrow specification lays
 * them out. Each block sits under the specification's own guard macro, so this
 * header can be included together with Arrow C++'s or nanoarrow's copies of
 * the same declarations. Nothing here belongs to Ferry: these are the ABI. */
#ifndef FERRY_C_ABI_H
#define FERRY_C_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  /* Array type description */
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;

  /* Release callback */
  void (*release)(struct ArrowSchema*);
  /* Opaque producer-specific data */
  void* private_data;
};

struct ArrowArray {
  /* Array data description */
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;

  /* Release callback */
  void (*release)(struct ArrowArray*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_DEVICE_DATA_INTERFACE
#define ARROW_C_DEVICE_DATA_INTERFACE

/* Spec: "DLDeviceType" values, kept identical to DLPack's. */
typedef int32_t ArrowDeviceType;

#define ARROW_DEVICE_CPU 1
#define ARROW_DEVICE_CUDA 2
#define ARROW_DEVICE_CUDA_HOST 3
#define ARROW_DEVICE_OPENCL 4
#define ARROW_DEVICE_VULKAN 7
#define ARROW_DEVICE_METAL 8
#define ARROW_DEVICE_VPI 9
#define ARROW_DEVICE_ROCM 10
#define ARROW_DEVICE_ROCM_HOST 11
#define ARROW_DEVICE_EXT_DEV 12
#define ARROW_DEVICE_CUDA_MANAGED 13
#define ARROW_DEVICE_ONEAPI 14
#define ARROW_DEVICE_WEBGPU 15
#define ARROW_DEVICE_HEXAGON 16

struct ArrowDeviceArray {
  /* the Allocated Array: the buffers in the array (along with the buffers of
   * any children) are what is allocated on the device */
  struct ArrowArray array;
  /* The device id to identify a specific device */
  int64_t device_id;
  /* The type of device which can access this memory */
  ArrowDeviceType device_type;
  /* An event-like object to synchronize on if needed */
  void* sync_event;
  /* Reserved bytes for future expansion; producers zero them */
  int64_t reserved[3];
};

#endif /* ARROW_C_DEVICE_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  /* Callbacks return 0 on success or an errno-compatible error code.
   * get_schema: the stream's schema, called once or more. */
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  /* get_next: the next chunk; out->release == NULL marks the end. */
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  /* get_last_error: a description of the last error, valid until the next
   * call on this stream; may return NULL. */
  const char* (*get_last_error)(struct ArrowArrayStream*);

  /* Release callback */
  void (*release)(struct ArrowArrayStream*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

#ifndef ARROW_C_DEVICE_STREAM_INTERFACE
#define ARROW_C_DEVICE_STREAM_INTERFACE

struct ArrowDeviceArrayStream {
  /* The device that every array of this stream lives on */
  ArrowDeviceType device_type;

  int (*get_schema)(struct ArrowDeviceArrayStream* self, struct ArrowSchema* out);
  int (*get_next)(struct ArrowDeviceArrayStream* self, struct ArrowDeviceArray* out);
  const char* (*get_last_error)(struct ArrowDeviceArrayStream* self);

  /* Release callback */
  void (*release)(struct ArrowDeviceArrayStream* self);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_DEVICE_STREAM_INTERFACE */

#ifndef ARROW_C_ASYNC_STREAM_INTERFACE
#define ARROW_C_ASYNC_STREAM_INTERFACE

struct ArrowAsyncTask {
  /* Extracts the data of this task into `out`; returns 0 or an errno code. */
  int (*extract_data)(struct ArrowAsyncTask* self, struct ArrowDeviceArray* out);

  void* private_data;
};

struct ArrowAsyncProducer {
  /* The device type that every produced array lives on */
  ArrowDeviceType device_type;

  /* Asks for up to n more calls of on_next_task */
  void (*request)(struct ArrowAsyncProducer* self, int64_t n);
  /* Asks the producer to stop; on_error/on_next_task(NULL) follow */
  void (*cancel)(struct ArrowAsyncProducer* self);

  /* Additional metadata on the stream, may be NULL */
  const char* additional_metadata;
  void* private_data;
};

struct ArrowAsyncDeviceStreamHandler {
  /* Called once, first, with the stream's schema and the producer */
  int (*on_schema)(struct ArrowAsyncDeviceStreamHandler* self, struct ArrowSchema* stream_schema);
  /* Called for each requested chunk; task == NULL marks the end */
  int (*on_next_task)(struct ArrowAsyncDeviceStreamHandler* self, struct ArrowAsyncTask* task,
                      const char* metadata);
  /* Called once on an error; nothing follows but release */
  void (*on_error)(struct ArrowAsyncDeviceStreamHandler* self, int code, const char* message,
                   const char* metadata);

  /* Release callback */
  void (*release)(struct ArrowAsyncDeviceStreamHandler* self);

  /* Set by the producer before on_schema is called */
  struct ArrowAsyncProducer* producer;

  /* Opaque handler-specific data */
  void* private_data;
};

#endif /* ARROW_C_ASYNC_STREAM_INTERFACE */

#ifdef __cplusplus
}
#endif

#endif /* FERRY_C_ABI_H */
