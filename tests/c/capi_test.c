/* Exercises Ferry's C API (ferry/c/ferry.h) from plain C: arrays and schemas
 * built by hand with their own release callbacks, valid and hostile. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/c/ferry.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    ++checks;                                                                  \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_CONTAINS(text, part)                                                                \
  do {                                                                                            \
    ++checks;                                                                                     \
    if (strstr((text), (part)) == NULL) {                                                         \
      ++failures;                                                                                 \
      fprintf(stderr, "%s:%d: '%s' does not contain '%s'\n", __FILE__, __LINE__, (text), (part)); \
    }                                                                                             \
  } while (0)

/* ---- A hand-made producer ------------------------------------------------- */

static int array_releases = 0;
static int schema_releases = 0;

struct Int32Column {
  int32_t values[8];
  const void* buffers[2];
};

static void release_int32_array(struct ArrowArray* array) {
  free(array->private_data);
  array->release = NULL;
  ++array_releases;
}

static void release_static_schema(struct ArrowSchema* schema) {
  schema->release = NULL;
  ++schema_releases;
}

static void make_schema(struct ArrowSchema* schema, const char* format) {
  memset(schema, 0, sizeof(*schema));
  schema->format = format;
  schema->name = "col";
  schema->flags = ARROW_FLAG_NULLABLE;
  schema->release = release_static_schema;
}

static void make_int32_array(struct ArrowArray* array, int64_t length) {
  struct Int32Column* column = calloc(1, sizeof(struct Int32Column));
  for (int i = 0; i < 8; ++i) column->values[i] = i * 10;
  column->buffers[0] = NULL;
  column->buffers[1] = column->values;
  memset(array, 0, sizeof(*array));
  array->length = length;
  array->null_count = 0;
  array->n_buffers = 2;
  array->buffers = column->buffers;
  array->private_data = column;
  array->release = release_int32_array;
}

/* A utf8 column whose bytes or offsets the test can corrupt. */
struct Utf8Column {
  int32_t offsets[4];
  char data[16];
  const void* buffers[3];
};

static void release_utf8_array(struct ArrowArray* array) {
  free(array->private_data);
  array->release = NULL;
  ++array_releases;
}

static struct Utf8Column* make_utf8_array(struct ArrowArray* array) {
  struct Utf8Column* column = calloc(1, sizeof(struct Utf8Column));
  memcpy(column->data, "abcdefgh", 8);
  column->offsets[0] = 0;
  column->offsets[1] = 3;
  column->offsets[2] = 5;
  column->offsets[3] = 8;
  column->buffers[0] = NULL;
  column->buffers[1] = column->offsets;
  column->buffers[2] = column->data;
  memset(array, 0, sizeof(*array));
  array->length = 3;
  array->n_buffers = 3;
  array->buffers = column->buffers;
  array->private_data = column;
  array->release = release_utf8_array;
  return column;
}

/* ---- Tests ---------------------------------------------------------------- */

static void test_version_and_telemetry(void) {
  CHECK(strlen(ferry_version()) > 0);
  int count = ferry_telemetry_count();
  CHECK(count > 10);
  int found_imports = 0;
  for (int i = 0; i < count; ++i) {
    const char* name = ferry_telemetry_name(i);
    CHECK(name != NULL);
    if (name != NULL && strcmp(name, "zero_copy_imports") == 0) found_imports = 1;
  }
  CHECK(found_imports);
  CHECK(ferry_telemetry_name(count) == NULL);
  CHECK(ferry_telemetry_name(-1) == NULL);

  struct FerryError error;
  int64_t value = -1;
  CHECK(ferry_telemetry_get("bytes_copied_host", &value, &error) == 0);
  CHECK(value >= 0);
  CHECK(ferry_telemetry_get("no_such_counter", &value, &error) == ENOENT);
  CHECK_CONTAINS(error.message, "no_such_counter");

  size_t length = 0;
  char small[8];
  CHECK(ferry_telemetry_prometheus(small, sizeof(small), &length, &error) == 0);
  CHECK(length > sizeof(small));
  CHECK(strlen(small) == sizeof(small) - 1);
  char* text = malloc(length + 1);
  CHECK(ferry_telemetry_prometheus(text, length + 1, NULL, &error) == 0);
  CHECK_CONTAINS(text, "ferry_zero_copy_imports_total");
  free(text);
}

static void test_validate_and_describe(void) {
  struct FerryError error;
  struct ArrowSchema schema;
  struct ArrowArray array;
  make_schema(&schema, "i");
  make_int32_array(&array, 8);

  CHECK(ferry_schema_validate(&schema, &error) == 0);
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_FULL, &error) == 0);
  CHECK(array.release != NULL); /* borrowed: still the caller's */

  char text[256];
  size_t length = 0;
  CHECK(ferry_array_describe(&array, &schema, text, sizeof(text), &length, &error) == 0);
  CHECK_CONTAINS(text, "70");
  CHECK(ferry_schema_describe(&schema, text, sizeof(text), &length, &error) == 0);
  CHECK_CONTAINS(text, "int32");

  CHECK(ferry_array_validate(&array, &schema, 7, &error) == EINVAL);
  CHECK_CONTAINS(error.message, "validation level");

  /* A length larger than the buffers can hold is caught structurally only if
   * sizes are known; for a foreign array Ferry trusts the declared length but
   * rejects negative lengths and offsets. */
  array.length = -3;
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_STRUCTURAL, &error) == EINVAL);
  CHECK_CONTAINS(error.message, "length");
  array.length = 8;
  array.offset = -1;
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_STRUCTURAL, &error) == EINVAL);
  CHECK_CONTAINS(error.message, "offset");
  array.offset = 0;
  array.n_buffers = 1;
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_STRUCTURAL, &error) == EINVAL);
  CHECK_CONTAINS(error.message, "buffers");
  array.n_buffers = 2;

  array.release(&array);
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_FULL, &error) == EINVAL);
  CHECK_CONTAINS(error.message, "released");
  schema.release(&schema);
  CHECK(ferry_schema_validate(&schema, &error) == EINVAL);
  CHECK(ferry_schema_validate(NULL, &error) == EINVAL);
  CHECK(ferry_array_validate(NULL, NULL, FERRY_VALIDATE_FULL, NULL) == EINVAL);
}

static void test_malformed_formats(void) {
  const char* bad_formats[] = {"", "Q", "w:", "w:-4", "d:10", "tsx:", "+w:0x", "ii"};
  for (size_t i = 0; i < sizeof(bad_formats) / sizeof(bad_formats[0]); ++i) {
    struct FerryError error;
    struct ArrowSchema schema;
    make_schema(&schema, bad_formats[i]);
    CHECK(ferry_schema_validate(&schema, &error) == EINVAL);
    if (bad_formats[i][0] != '\0') CHECK_CONTAINS(error.message, bad_formats[i]);
    schema.release(&schema);
  }
}

static void test_full_validation_of_utf8(void) {
  struct FerryError error;
  struct ArrowSchema schema;
  struct ArrowArray array;
  make_schema(&schema, "u");
  struct Utf8Column* column = make_utf8_array(&array);
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_FULL, &error) == 0);

  column->data[1] = (char)0xC3; /* a lead byte followed by ASCII: invalid */
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_FULL, &error) == EINVAL);
  CHECK_CONTAINS(error.message, "UTF-8");
  column->data[1] = 'b';

  column->offsets[2] = 2; /* decreasing offsets */
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_FULL, &error) == EINVAL);
  CHECK_CONTAINS(error.message, "offset");
  column->offsets[2] = 5;

  array.release(&array);
  schema.release(&schema);
}

static void test_import_export_zero_copy(void) {
  struct FerryError error;
  struct ArrowSchema schema;
  struct ArrowArray array;
  make_schema(&schema, "i");
  make_int32_array(&array, 8);
  const void* values = array.buffers[1];
  int releases_before = array_releases;

  int64_t imports_before = 0;
  CHECK(ferry_telemetry_get("zero_copy_imports", &imports_before, &error) == 0);

  struct FerryArray* handle = NULL;
  CHECK(ferry_array_import(&array, &schema, &handle, &error) == 0);
  CHECK(array.release == NULL); /* moved into Ferry */
  CHECK(handle != NULL);
  CHECK(ferry_array_length(handle) == 8);
  CHECK(ferry_array_null_count(handle) == 0);
  CHECK(ferry_array_buffer(handle, 1) == values);
  CHECK(ferry_array_buffer(handle, 9) == NULL);
  CHECK(strcmp(ferry_array_format(handle), "i") == 0);

  int64_t imports_after = 0;
  CHECK(ferry_telemetry_get("zero_copy_imports", &imports_after, &error) == 0);
  CHECK(imports_after == imports_before + 1);

  struct FerryArray* slice = NULL;
  CHECK(ferry_array_slice(handle, 2, 3, &slice, &error) == 0);
  CHECK(ferry_array_length(slice) == 3);
  CHECK(ferry_array_slice(handle, 9, 1, &slice, &error) == EINVAL);

  struct ArrowArray exported;
  struct ArrowSchema exported_schema;
  CHECK(ferry_array_export(handle, &exported, &exported_schema, &error) == 0);
  CHECK(exported.buffers[1] == values);
  CHECK(strcmp(exported_schema.format, "i") == 0);

  /* The producer's release runs only after every user is gone. */
  ferry_array_free(handle);
  CHECK(array_releases == releases_before);
  exported.release(&exported);
  exported_schema.release(&exported_schema);
  CHECK(array_releases == releases_before);
  ferry_array_free(slice);
  CHECK(array_releases == releases_before + 1);

  ferry_array_free(NULL);
  schema.release(&schema);
}

static void test_import_rejects_and_releases(void) {
  struct FerryError error;
  struct ArrowSchema schema;
  struct ArrowArray array;
  make_schema(&schema, "i");
  make_int32_array(&array, 8);
  array.buffers = NULL; /* hostile: no buffer table at all */
  int releases_before = array_releases;
  struct FerryArray* handle = (struct FerryArray*)0x1;
  CHECK(ferry_array_import(&array, &schema, &handle, &error) == EINVAL);
  CHECK(handle == NULL);
  CHECK(array.release == NULL);                 /* taken and released */
  CHECK(array_releases == releases_before + 1); /* exactly once */
  schema.release(&schema);
}

static void test_sample_batch_and_stream(void) {
  struct FerryError error;
  struct ArrowArray array;
  struct ArrowSchema schema;
  CHECK(ferry_make_sample_batch(10, &array, &schema, &error) == 0);
  CHECK(array.length == 10);
  CHECK(strcmp(schema.format, "+s") == 0);
  CHECK(schema.n_children == 4);
  CHECK(ferry_array_validate(&array, &schema, FERRY_VALIDATE_FULL, &error) == 0);
  char text[4096];
  CHECK(ferry_array_describe(&array, &schema, text, sizeof(text), NULL, &error) == 0);
  CHECK_CONTAINS(text, "row-3");
  array.release(&array);
  schema.release(&schema);
  CHECK(ferry_make_sample_batch(-1, &array, &schema, &error) == EINVAL);
}

/* A C stream producer: `total` batches of an int32 column, then end, or an
 * EIO error at batch `fail_at`. */
struct CountingStream {
  int next;
  int total;
  int fail_at;
};

static int stream_get_schema(struct ArrowArrayStream* stream, struct ArrowSchema* out) {
  (void)stream;
  memset(out, 0, sizeof(*out));
  out->format = "+s";
  out->name = "";
  static struct ArrowSchema child;
  static struct ArrowSchema* children[1];
  make_schema(&child, "i");
  children[0] = &child;
  out->n_children = 1;
  out->children = children;
  out->release = release_static_schema;
  return 0;
}

struct StructBatch {
  struct ArrowArray child;
  struct ArrowArray* children[1];
  const void* buffers[1];
};

static void release_struct_batch(struct ArrowArray* array) {
  struct StructBatch* batch = array->private_data;
  if (batch->child.release != NULL) batch->child.release(&batch->child);
  free(batch);
  array->release = NULL;
}

static int stream_get_next(struct ArrowArrayStream* stream, struct ArrowArray* out) {
  struct CountingStream* state = stream->private_data;
  if (state->next == state->fail_at) return EIO;
  if (state->next == state->total) {
    memset(out, 0, sizeof(*out)); /* end of stream: release == NULL */
    return 0;
  }
  ++state->next;
  struct StructBatch* batch = calloc(1, sizeof(struct StructBatch));
  make_int32_array(&batch->child, 8);
  batch->children[0] = &batch->child;
  batch->buffers[0] = NULL;
  memset(out, 0, sizeof(*out));
  out->length = 8;
  out->n_buffers = 1;
  out->buffers = batch->buffers;
  out->n_children = 1;
  out->children = batch->children;
  out->private_data = batch;
  out->release = release_struct_batch;
  return 0;
}

static const char* stream_get_last_error(struct ArrowArrayStream* stream) {
  (void)stream;
  return "disk on fire";
}

static int stream_releases = 0;
static void stream_release(struct ArrowArrayStream* stream) {
  free(stream->private_data);
  stream->release = NULL;
  ++stream_releases;
}

static void make_stream(struct ArrowArrayStream* stream, int total, int fail_at) {
  struct CountingStream* state = calloc(1, sizeof(struct CountingStream));
  state->total = total;
  state->fail_at = fail_at;
  stream->get_schema = stream_get_schema;
  stream->get_next = stream_get_next;
  stream->get_last_error = stream_get_last_error;
  stream->release = stream_release;
  stream->private_data = state;
}

static void test_streams(void) {
  struct FerryError error;
  struct ArrowArrayStream stream;
  int64_t batches = 0, rows = 0;
  int releases_before = stream_releases;
  make_stream(&stream, 3, -1);
  CHECK(ferry_stream_drain(&stream, &batches, &rows, &error) == 0);
  CHECK(batches == 3);
  CHECK(rows == 24);
  CHECK(stream_releases == releases_before + 1);

  make_stream(&stream, 3, 1);
  CHECK(ferry_stream_drain(&stream, &batches, &rows, &error) == EIO);
  CHECK_CONTAINS(error.message, "disk on fire");
  CHECK(stream_releases == releases_before + 2);
}

int main(void) {
  test_version_and_telemetry();
  test_validate_and_describe();
  test_malformed_formats();
  test_full_validation_of_utf8();
  test_import_export_zero_copy();
  test_import_rejects_and_releases();
  test_sample_batch_and_stream();
  test_streams();
  printf("capi_test: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
