/* The node API for C and other languages with a C FFI: the same node as
 * include/ferry/flow/node.h (read its comment for the lifecycle and the event
 * model), with Arrow C Data Interface structs for the data.
 *
 * Conventions:
 * - Functions return 0 on success or an errno-compatible code (EINVAL for
 *   invalid input, ETIMEDOUT, ENOMEM, EIO, ECANCELED, ...). On failure
 *   ferry_node_last_error() describes what went wrong; like errno it is kept
 *   per thread and is valid until the next failing call in that thread.
 * - No exception or abort crosses this boundary for bad input.
 * - A node is used by one thread at a time, except that
 *   ferry_node_send_output, ferry_node_loan, ferry_node_close_output and
 *   ferry_node_stats_json may be called from another thread while one thread
 *   waits in ferry_node_next.
 *
 * Arrays and batches. A struct array (format "+s") is a record batch; any
 * other array is a plain array and travels as a one-column batch "value"
 * marked "ferry.array" (node.h). Received plain arrays are handed out
 * unwrapped, with is_batch == 0.
 *
 * Metadata is a JSON object whose values are strings, 64-bit integers,
 * floats, booleans, lists and objects (string keys), nested at most 16
 * levels, at most 1 MiB of text, e.g.
 *   {"frame": 7, "gain": 0.5, "camera": "left", "box": [1, 2, 30, 40],
 *    "pose": {"x": 0.25, "ok": true}}
 * Events hand it back with the same types (NULL or "" means none): a float
 * always carries a '.' or an exponent ("1.0"), so it stays apart from an
 * integer; NaN and infinities are written as the bare words NaN, Infinity and
 * -Infinity (as Python's json module does), and accepted so. Keys starting
 * with "ferry." are reserved, repeated keys and integers outside 64 bits are
 * refused (EINVAL). The ferry_metadata_* functions read single values out of
 * it without a JSON parser. */
#ifndef FERRY_C_FERRY_NODE_H
#define FERRY_C_FERRY_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/c/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque node. */
struct FerryNode;

#define FERRY_NODE_EVENT_INPUT 0
#define FERRY_NODE_EVENT_INPUT_CLOSED 1
#define FERRY_NODE_EVENT_STOP 2
#define FERRY_NODE_EVENT_ERROR 3
/* The event stream has ended: the node should finish. */
#define FERRY_NODE_EVENT_END 4

/* Filled by ferry_node_next; release it with ferry_node_event_release. */
struct FerryNodeEvent {
  int32_t type;     /* FERRY_NODE_EVENT_* */
  int32_t is_batch; /* INPUT: 1 for a record batch (struct array), 0 for a plain array */
  const char* id;   /* INPUT, INPUT_CLOSED: the input id; STOP: the reason; else "" */
  /* INPUT: the value, in the producer's shared memory (no copy). The caller
   * owns both structs: it may move them out (copy the struct, set release to
   * NULL in the event) and release them whenever it likes, from any thread.
   * For other events both are released (release == NULL). */
  struct ArrowArray array;
  struct ArrowSchema schema;
  const char* metadata_json; /* INPUT: the metadata (see above); else "{}" */
  const char* error;         /* ERROR: what went wrong; else "" */
  uint64_t sequence;         /* INPUT: the producer's message number (timers: tick count) */
  void* private_data;        /* Ferry's: owns the strings above */
};

/* Memory lent from an output's shared memory (see ferry_node_loan). */
struct FerryNodeLoan {
  void* data;   /* writable, 64-byte aligned */
  int64_t size; /* bytes */
  void* private_data;
};

/* The message of the last failure in this thread ("" if none). */
const char* ferry_node_last_error(void);

/* Creates the node from the FERRY_NODE_CONFIG environment variable (set by
 * `ferry run`), or from a config in its JSON form (tests, standalone
 * programs). Registers with the daemon, creates the outputs, connects the
 * inputs and waits for the daemon's start, at most `startup_timeout_ns`
 * nanoseconds (<= 0: 60 s). On success *out receives a node that the caller
 * frees with ferry_node_free. */
int ferry_node_from_env(int64_t startup_timeout_ns, struct FerryNode** out);
int ferry_node_from_config(const char* config_json, int64_t startup_timeout_ns,
                           struct FerryNode** out);

/* Reports the node's statistics to the daemon, closes its outputs and frees
 * it. Received arrays and loans stay valid. NULL is allowed. */
void ferry_node_free(struct FerryNode* node);

/* The node's id (valid while the node lives). */
const char* ferry_node_id(const struct FerryNode* node);

/* Waits at most `timeout_ns` nanoseconds (< 0: without limit) for the next
 * event and fills `out` (caller-allocated, any previous content is
 * overwritten, not released). Returns 0 with out->type ==
 * FERRY_NODE_EVENT_END once the stream has ended, ETIMEDOUT when nothing came
 * in time (out is then released and empty). */
int ferry_node_next(struct FerryNode* node, int64_t timeout_ns, struct FerryNodeEvent* out);

/* Releases what the event still owns: its strings, and the array and schema
 * unless they were moved out. Safe on a released or zeroed event. */
void ferry_node_event_release(struct FerryNodeEvent* event);

/* Sends `array` (with its type `schema`) on `output`. Takes ownership of
 * both: on success and on failure alike their release is NULL afterwards
 * (the producer's release callbacks run once no consumer needs the data).
 * Buffers lent by ferry_node_loan for this output travel without a copy;
 * other buffers are copied into shared memory once (counted in telemetry).
 * `metadata_json` is borrowed; NULL or "" for none. */
int ferry_node_send_output(struct FerryNode* node, const char* output, struct ArrowArray* array,
                           struct ArrowSchema* schema, const char* metadata_json);

/* Lends `size` bytes of `output`'s shared memory: write the values into
 * out->data, point an ArrowArray's buffers at it, and make that array's
 * release callback call ferry_node_loan_release; ferry_node_send_output then
 * copies nothing. Fails with ENOMEM when the output's memory is exhausted
 * for longer than its send timeout. */
int ferry_node_loan(struct FerryNode* node, const char* output, int64_t size,
                    struct FerryNodeLoan* out);
/* Gives a loan back (the memory is reused once no consumer holds it). Safe
 * from any thread, also after the node was freed; a released loan is
 * zeroed, and releasing it again does nothing. */
void ferry_node_loan_release(struct FerryNodeLoan* loan);

/* Closes one output: its consumers see INPUT_CLOSED once they drained it. */
int ferry_node_close_output(struct FerryNode* node, const char* output);

/* Waits until `output` has at least `count` consumers (ETIMEDOUT after
 * `timeout_ns`). Only needed without a daemon, where nothing orders start-up. */
int ferry_node_wait_for_subscribers(struct FerryNode* node, const char* output, int count,
                                    int64_t timeout_ns);

/* The node's statistics as JSON (see node.h StatsJson), written into `out`
 * (capacity `out_size`, always NUL-terminated when out_size > 0); the full
 * length (without NUL) goes to *out_length when non-NULL. */
int ferry_node_stats_json(const struct FerryNode* node, char* out, size_t out_size,
                          size_t* out_length);

/* ---- Typed metadata values ------------------------------------------------
 * Reading one value of a metadata JSON object (an event's metadata_json).
 * `path` names it: keys and list indexes separated by '/', e.g. "frame",
 * "box/2", "pose/x"; "" is the whole object; in a key, "~1" stands for '/'
 * and "~0" for '~' (as in JSON Pointer). Each call parses the text again.
 * Return 0, ENOENT when there is no value at `path`, EINVAL for text that is
 * not valid metadata or a value of another type (ferry_node_last_error says
 * which). */
#define FERRY_METADATA_NONE 0
#define FERRY_METADATA_STRING 1
#define FERRY_METADATA_INT 2
#define FERRY_METADATA_FLOAT 3
#define FERRY_METADATA_BOOL 4
#define FERRY_METADATA_LIST 5
#define FERRY_METADATA_MAP 6

/* The FERRY_METADATA_* type of the value at `path`; FERRY_METADATA_NONE when
 * there is none or the text is not valid metadata. */
int ferry_metadata_type(const char* metadata_json, const char* path);
int ferry_metadata_get_int(const char* metadata_json, const char* path, int64_t* out);
/* An integer is converted to double too. */
int ferry_metadata_get_float(const char* metadata_json, const char* path, double* out);
/* *out is 1 or 0. */
int ferry_metadata_get_bool(const char* metadata_json, const char* path, int* out);
/* Copies the string into `out` (capacity `out_size`, always NUL-terminated
 * when out_size > 0); its full length (without NUL) goes to *out_length when
 * non-NULL. Strings may hold NUL bytes: trust *out_length. */
int ferry_metadata_get_string(const char* metadata_json, const char* path, char* out,
                              size_t out_size, size_t* out_length);
/* The number of items of a list or entries of a map. */
int ferry_metadata_length(const char* metadata_json, const char* path, int64_t* out);
/* The key of entry `index` (from 0, in the sender's order) of the map at
 * `path`, copied as ferry_metadata_get_string copies. */
int ferry_metadata_key(const char* metadata_json, const char* path, int64_t index, char* out,
                       size_t out_size, size_t* out_length);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_C_FERRY_NODE_H */
