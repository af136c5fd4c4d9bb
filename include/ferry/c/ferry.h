/* Ferry's own C API: a small, stable surface over the exchange library for
 * programs written in C or other languages with a C FFI.
 *
 * Conventions (as in nanoarrow and the Arrow C stream interface):
 * - Functions return 0 on success or an errno-compatible code (EINVAL for
 *   invalid input, ENOMEM, ENOSYS, EIO, ...). No exception or abort crosses
 *   this boundary for bad input.
 * - The last parameter is an optional `struct FerryError*`; when non-NULL it
 *   receives a NUL-terminated message on failure (and is left untouched on
 *   success).
 * - Every function is thread-safe for distinct arguments.
 * - Ownership is stated per function; "borrows" means the caller keeps
 *   ownership and the function neither releases nor retains the argument. */
#ifndef FERRY_C_FERRY_H
#define FERRY_C_FERRY_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_ERROR_MESSAGE_SIZE 1024

struct FerryError {
  char message[FERRY_ERROR_MESSAGE_SIZE];
};

/* Ferry's version string, e.g. "0.1.0". Static storage. */
const char* ferry_version(void);

/* ---- Validation and description ---------------------------------------- */

#define FERRY_VALIDATE_STRUCTURAL 0
#define FERRY_VALIDATE_FULL 1

/* Checks `schema` (borrowed) for a well-formed tree of format strings,
 * children, dictionaries and metadata. */
int ferry_schema_validate(const struct ArrowSchema* schema, struct FerryError* error);

/* Checks `array` against `schema` (both borrowed; neither is released) at
 * FERRY_VALIDATE_STRUCTURAL or FERRY_VALIDATE_FULL level. Messages name the
 * column path and the rule that failed. */
int ferry_array_validate(const struct ArrowArray* array, const struct ArrowSchema* schema,
                         int level, struct FerryError* error);

/* Writes a readable description of the schema (borrowed) into `out`
 * (capacity `out_size`, always NUL-terminated when out_size > 0) and stores
 * the full length (without NUL) in *out_length when non-NULL, so a caller can
 * retry with a larger buffer. */
int ferry_schema_describe(const struct ArrowSchema* schema, char* out, size_t out_size,
                          size_t* out_length, struct FerryError* error);

/* As ferry_schema_describe, for the values of `array` (both borrowed). The
 * array is validated structurally first. */
int ferry_array_describe(const struct ArrowArray* array, const struct ArrowSchema* schema,
                         char* out, size_t out_size, size_t* out_length, struct FerryError* error);

/* ---- Import and export ---------------------------------------------------- */

/* An imported array: an opaque, immutable handle. Thread-safe to read. */
struct FerryArray;

/* Imports `array` with the type described by `schema` (borrowed) without
 * copying any buffer. Takes ownership of `array`: on success and on failure
 * alike, array->release is NULL afterwards and the producer's release runs
 * exactly once, when the last handle or export referring to the data is gone.
 * On success *out receives a handle the caller frees with ferry_array_free. */
int ferry_array_import(struct ArrowArray* array, const struct ArrowSchema* schema,
                       struct FerryArray** out, struct FerryError* error);

/* Exports the handle's data (no copy) into caller-allocated `out_array` and,
 * if non-NULL, `out_schema`. The caller releases them; the handle stays valid
 * and may be freed before or after they are released. */
int ferry_array_export(const struct FerryArray* handle, struct ArrowArray* out_array,
                       struct ArrowSchema* out_schema, struct FerryError* error);

/* A zero-copy slice of the handle; free the result with ferry_array_free. */
int ferry_array_slice(const struct FerryArray* handle, int64_t offset, int64_t length,
                      struct FerryArray** out, struct FerryError* error);

/* Frees a handle; NULL is allowed. */
void ferry_array_free(struct FerryArray* handle);

int64_t ferry_array_length(const struct FerryArray* handle);
int64_t ferry_array_null_count(const struct FerryArray* handle);
int64_t ferry_array_num_children(const struct FerryArray* handle);
/* The address of buffer `index` of the top-level array as laid out in the C
 * Data Interface (NULL if absent or index out of range): lets callers prove
 * that no copy was made. */
const void* ferry_array_buffer(const struct FerryArray* handle, int64_t index);
/* The C Data Interface format string of the top-level type. Valid while the
 * handle lives. */
const char* ferry_array_format(const struct FerryArray* handle);

/* Makes a sample record batch (id: int64, name: utf8 with nulls, score:
 * float64, tags: list<utf8>) of `num_rows` rows, built by Ferry in C++, and
 * exports it into `out_array` / `out_schema` (caller releases both). */
int ferry_make_sample_batch(int64_t num_rows, struct ArrowArray* out_array,
                            struct ArrowSchema* out_schema, struct FerryError* error);

/* ---- Streams ---------------------------------------------------------------- */

/* Reads every batch of `stream` (ownership taken; released before return,
 * also on failure), validating each structurally; stores the number of
 * batches and rows. A stream error is reported with its get_last_error text. */
int ferry_stream_drain(struct ArrowArrayStream* stream, int64_t* out_batches, int64_t* out_rows,
                       struct FerryError* error);

/* ---- Telemetry ------------------------------------------------------------- */

/* Number of counters, and the name of counter `index` (static storage; NULL
 * when out of range). */
int ferry_telemetry_count(void);
const char* ferry_telemetry_name(int index);
/* The value of the counter named `name`; ENOENT if no such counter. */
int ferry_telemetry_get(const char* name, int64_t* out_value, struct FerryError* error);
/* The counters in Prometheus text format, written like ferry_schema_describe. */
int ferry_telemetry_prometheus(char* out, size_t out_size, size_t* out_length,
                               struct FerryError* error);
/* Zeroes every counter (tests and benchmarks). */
void ferry_telemetry_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_C_FERRY_H */
