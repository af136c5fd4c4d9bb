/* The C node API from a real C translation unit: a node whose input is its
 * own output (so one process exercises both ends), loaned and copied sends,
 * typed metadata (nested values and the ferry_metadata_* accessors), timers,
 * closing, and errors on bad input. With --echo-node it is a node for
 * `ferry run` (tests/python/test_metadata.py). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry/c/ferry.h"
#include "ferry/c/ferry_node.h"

#define CHECK(condition)                                                                \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
              #condition, ferry_node_last_error());                                     \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static const int64_t kSecond = 1000000000;

static int64_t CopiedBytes(void) {
  int64_t value = 0;
  CHECK(ferry_telemetry_get("bytes_copied_host", &value, NULL) == 0);
  return value;
}

/* True when `address` lies in a read-only mapping of a Ferry memfd. */
static int InSharedMemory(const void* address) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[1024];
  int found = 0;
  if (maps == NULL) return 0;
  while (fgets(line, sizeof(line), maps) != NULL) {
    unsigned long start = 0, end = 0;
    char permissions[8] = {0};
    if (sscanf(line, "%lx-%lx %7s", &start, &end, permissions) != 3) continue;
    if ((uintptr_t)address < start || (uintptr_t)address >= end) continue;
    found = strstr(line, "/memfd:ferry:") != NULL && strcmp(permissions, "r--s") == 0;
    break;
  }
  fclose(maps);
  return found;
}

static void ReleaseStaticSchema(struct ArrowSchema* schema) {
  for (int64_t i = 0; i < schema->n_children; ++i) {
    if (schema->children[i]->release != NULL) schema->children[i]->release(schema->children[i]);
  }
  schema->release = NULL;
}

static void Int64Schema(struct ArrowSchema* schema) {
  memset(schema, 0, sizeof(*schema));
  schema->format = "l";
  schema->name = "";
  schema->flags = ARROW_FLAG_NULLABLE;
  schema->release = ReleaseStaticSchema;
}

/* ---- An int64 array over a loan: its release gives the loan back. */

struct LoanedArray {
  struct FerryNodeLoan loan;
  const void* buffers[2];
};

static void ReleaseLoanedArray(struct ArrowArray* array) {
  struct LoanedArray* owner = (struct LoanedArray*)array->private_data;
  ferry_node_loan_release(&owner->loan);
  free(owner);
  array->release = NULL;
}

static void LoanedInt64Array(struct FerryNode* node, int64_t length, struct ArrowArray* out) {
  struct LoanedArray* owner = (struct LoanedArray*)calloc(1, sizeof(*owner));
  CHECK(owner != NULL);
  CHECK(ferry_node_loan(node, "out", length * 8, &owner->loan) == 0);
  int64_t* values = (int64_t*)owner->loan.data;
  for (int64_t i = 0; i < length; ++i) values[i] = i * i;
  owner->buffers[0] = NULL;
  owner->buffers[1] = values;
  memset(out, 0, sizeof(*out));
  out->length = length;
  out->n_buffers = 2;
  out->buffers = owner->buffers;
  out->private_data = owner;
  out->release = ReleaseLoanedArray;
}

/* ---- A record batch {x: int32} in malloc'd memory (not shared). */

struct HeapBatch {
  struct ArrowArray child;
  struct ArrowArray* children[1];
  const void* buffers[1];
  const void* child_buffers[2];
};

static void ReleaseHeapColumn(struct ArrowArray* array) {
  free(array->private_data);
  array->release = NULL;
}

static void ReleaseHeapBatch(struct ArrowArray* array) {
  struct HeapBatch* owner = (struct HeapBatch*)array->private_data;
  if (owner->child.release != NULL) owner->child.release(&owner->child);
  free(owner);
  array->release = NULL;
}

static struct ArrowSchema batch_child_schema;
static struct ArrowSchema* batch_schema_children[1] = {&batch_child_schema};

static void HeapBatch(struct ArrowArray* out, struct ArrowSchema* schema) {
  struct HeapBatch* owner = (struct HeapBatch*)calloc(1, sizeof(*owner));
  int32_t* values = (int32_t*)malloc(3 * sizeof(int32_t));
  CHECK(owner != NULL && values != NULL);
  values[0] = 10;
  values[1] = 20;
  values[2] = 30;
  owner->child_buffers[1] = values;
  owner->child.length = 3;
  owner->child.n_buffers = 2;
  owner->child.buffers = owner->child_buffers;
  owner->child.private_data = values;
  owner->child.release = ReleaseHeapColumn;
  owner->children[0] = &owner->child;
  memset(out, 0, sizeof(*out));
  out->length = 3;
  out->n_buffers = 1;
  out->buffers = owner->buffers;
  out->n_children = 1;
  out->children = owner->children;
  out->private_data = owner;
  out->release = ReleaseHeapBatch;

  memset(&batch_child_schema, 0, sizeof(batch_child_schema));
  batch_child_schema.format = "i";
  batch_child_schema.name = "x";
  batch_child_schema.release = ReleaseStaticSchema;
  memset(schema, 0, sizeof(*schema));
  schema->format = "+s";
  schema->name = "";
  schema->n_children = 1;
  schema->children = batch_schema_children;
  schema->release = ReleaseStaticSchema;
}

/* The next event that is not a timer tick. */
static void NextNonTick(struct FerryNode* node, struct FerryNodeEvent* event) {
  for (int attempts = 0; attempts < 10000; ++attempts) {
    CHECK(ferry_node_next(node, 10 * kSecond, event) == 0);
    if (!(event->type == FERRY_NODE_EVENT_INPUT && strcmp(event->id, "tick") == 0)) return;
    CHECK(event->is_batch == 0 && strcmp(event->schema.format, "n") == 0);
    ferry_node_event_release(event);
  }
  CHECK(!"only ticks");
}

static void TestBadInput(void) {
  struct FerryNode* node = (struct FerryNode*)1;
  CHECK(ferry_node_from_config("{\"node\": 3}", 0, &node) == EINVAL);
  CHECK(node == NULL);
  CHECK(strstr(ferry_node_last_error(), "node: expected a string") != NULL);
  CHECK(ferry_node_from_config("not json", 0, &node) == EINVAL);
  CHECK(ferry_node_from_config(NULL, 0, &node) == EINVAL);
  CHECK(ferry_node_from_config("{\"node\": \"n\"}", 0, NULL) == EINVAL);
  CHECK(ferry_node_next(NULL, 0, NULL) == EINVAL);
  struct FerryNodeEvent event;
  CHECK(ferry_node_next(NULL, 0, &event) == EINVAL);
  ferry_node_event_release(&event); /* a cleared event releases nothing */
  ferry_node_free(NULL);
  ferry_node_loan_release(NULL);
  unsetenv("FERRY_NODE_CONFIG");
  CHECK(ferry_node_from_env(0, &node) == EINVAL);
  CHECK(strstr(ferry_node_last_error(), "ferry run") != NULL);
}

static void TestTimeout(void) {
  struct FerryNode* node = NULL;
  const char* config =
      "{\"node\": \"slow\", \"inputs\": [{\"id\": \"hourly\", \"timer_ns\": 3600000000000}]}";
  CHECK(ferry_node_from_config(config, 0, &node) == 0);
  struct FerryNodeEvent event;
  CHECK(ferry_node_next(node, 1000000, &event) == ETIMEDOUT);
  CHECK(event.array.release == NULL);
  ferry_node_free(node);
}

static void TestSelfLoop(void) {
  char channel[128];
  char config[512];
  snprintf(channel, sizeof(channel), "ctest/%d/loop", (int)getpid());
  snprintf(config, sizeof(config),
           "{\"node\": \"c-node\", \"outputs\": [{\"id\": \"out\", \"channel\": \"%s\"}],"
           " \"inputs\": [{\"id\": \"in\", \"channel\": \"%s\"},"
           " {\"id\": \"tick\", \"timer_ns\": 10000000}]}",
           channel, channel);
  struct FerryNode* node = NULL;
  CHECK(ferry_node_from_config(config, 20 * kSecond, &node) == 0);
  CHECK(strcmp(ferry_node_id(node), "c-node") == 0);

  /* Loaned: nothing is copied. */
  struct ArrowArray array;
  struct ArrowSchema schema;
  LoanedInt64Array(node, 8, &array);
  Int64Schema(&schema);
  const int64_t before = CopiedBytes();
  CHECK(ferry_node_send_output(
            node, "out", &array, &schema,
            "{\"frame\": 7, \"gain\": 0.5, \"ok\": true, \"camera\": \"left\"}") == 0);
  CHECK(array.release == NULL && schema.release == NULL);
  CHECK(CopiedBytes() == before);

  /* Not loaned: one counted copy. */
  HeapBatch(&array, &schema);
  CHECK(ferry_node_send_output(node, "out", &array, &schema, NULL) == 0);
  CHECK(array.release == NULL && schema.release == NULL);
  CHECK(CopiedBytes() == before + 3 * 4);

  struct FerryNodeEvent event;
  NextNonTick(node, &event);
  CHECK(event.type == FERRY_NODE_EVENT_INPUT && strcmp(event.id, "in") == 0);
  CHECK(event.sequence == 1);
  CHECK(event.is_batch == 0 && strcmp(event.schema.format, "l") == 0);
  CHECK(event.array.length == 8 && event.array.n_buffers == 2);
  const int64_t* squares = (const int64_t*)event.array.buffers[1];
  CHECK(squares[3] == 9 && squares[7] == 49);
  CHECK(InSharedMemory(squares));
  CHECK(strstr(event.metadata_json, "\"frame\":7") != NULL);
  CHECK(strstr(event.metadata_json, "\"gain\":0.5") != NULL);
  CHECK(strstr(event.metadata_json, "\"ok\":true") != NULL);
  CHECK(strstr(event.metadata_json, "\"camera\":\"left\"") != NULL);
  CHECK(strstr(event.metadata_json, "ferry.") == NULL);
  ferry_node_event_release(&event);

  NextNonTick(node, &event);
  CHECK(event.type == FERRY_NODE_EVENT_INPUT && event.sequence == 2);
  CHECK(event.is_batch == 1 && strcmp(event.schema.format, "+s") == 0);
  CHECK(event.schema.n_children == 1 && strcmp(event.schema.children[0]->name, "x") == 0);
  /* Move the array out, release the event, and the data is still there. */
  struct ArrowArray kept = event.array;
  event.array.release = NULL;
  ferry_node_event_release(&event);
  const int32_t* tens = (const int32_t*)kept.children[0]->buffers[1];
  CHECK(tens[0] == 10 && tens[2] == 30);
  CHECK(InSharedMemory(tens));
  kept.release(&kept);

  /* Bad sends still take ownership. */
  LoanedInt64Array(node, 2, &array);
  Int64Schema(&schema);
  CHECK(ferry_node_send_output(node, "elsewhere", &array, &schema, NULL) == EINVAL);
  CHECK(strstr(ferry_node_last_error(), "no output 'elsewhere'") != NULL);
  CHECK(array.release == NULL && schema.release == NULL);
  LoanedInt64Array(node, 2, &array);
  Int64Schema(&schema);
  /* Metadata that cannot travel: refused, and the array is still taken. */
  CHECK(ferry_node_send_output(node, "out", &array, &schema, "{\"big\": 99999999999999999999}") ==
        EINVAL);
  CHECK(strstr(ferry_node_last_error(), "does not fit in 64 bits") != NULL);
  CHECK(array.release == NULL && schema.release == NULL);
  const char* refused[] = {"[1]",          "{\"ferry.x\": 1}",    "{\"a\": 1, \"a\": 2}",
                           "{\"a\": nul}", "{\"a\": [1,]}",       "{1: 2}",
                           "{\"a\": 01}",  "{\"s\": \"\\ud800\"}"};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); ++i) {
    LoanedInt64Array(node, 2, &array);
    Int64Schema(&schema);
    CHECK(ferry_node_send_output(node, "out", &array, &schema, refused[i]) == EINVAL);
    CHECK(array.release == NULL && schema.release == NULL);
  }
  char deep[128] = "{\"d\": ";
  for (int level = 0; level < 17; ++level) strcat(deep, "[");
  for (int level = 0; level < 17; ++level) strcat(deep, "]");
  strcat(deep, "}");
  LoanedInt64Array(node, 2, &array);
  Int64Schema(&schema);
  CHECK(ferry_node_send_output(node, "out", &array, &schema, deep) == EINVAL);
  CHECK(strstr(ferry_node_last_error(), "values nest deeper than 16 levels") != NULL);
  struct FerryNodeLoan loan;
  CHECK(ferry_node_loan(node, "elsewhere", 8, &loan) == EINVAL);
  CHECK(ferry_node_loan(node, "out", -1, &loan) == EINVAL);

  char stats[4096];
  size_t length = 0;
  CHECK(ferry_node_stats_json(node, stats, sizeof(stats), &length) == 0);
  CHECK(length == strlen(stats));
  CHECK(strstr(stats, "\"loaned_sends\":1") != NULL);
  CHECK(strstr(stats, "\"copied_sends\":1") != NULL);
  CHECK(strstr(stats, "\"bytes_copied\":12") != NULL);
  char tiny[8];
  CHECK(ferry_node_stats_json(node, tiny, sizeof(tiny), &length) == 0);
  CHECK(strlen(tiny) == 7 && length > 7);

  /* Closing the output closes our own input. */
  CHECK(ferry_node_close_output(node, "out") == 0);
  NextNonTick(node, &event);
  CHECK(event.type == FERRY_NODE_EVENT_INPUT_CLOSED && strcmp(event.id, "in") == 0);
  ferry_node_event_release(&event);
  CHECK(ferry_node_wait_for_subscribers(node, "out", 1, 0) == EINVAL); /* closed */
  ferry_node_free(node);
}

/* Typed metadata from C to C: nested values, edge cases, and the accessors. */
static void TestTypedMetadata(void) {
  char channel[128];
  char config[512];
  snprintf(channel, sizeof(channel), "ctest/%d/meta", (int)getpid());
  snprintf(config, sizeof(config),
           "{\"node\": \"c-meta\", \"outputs\": [{\"id\": \"out\", \"channel\": \"%s\"}],"
           " \"inputs\": [{\"id\": \"in\", \"channel\": \"%s\"}]}",
           channel, channel);
  struct FerryNode* node = NULL;
  CHECK(ferry_node_from_config(config, 20 * kSecond, &node) == 0);
  struct ArrowArray array;
  struct ArrowSchema schema;
  LoanedInt64Array(node, 1, &array);
  Int64Schema(&schema);
  const char* sent =
      "{\"max\": 9223372036854775807, \"min\": -9223372036854775808, \"whole\": 2.0,"
      " \"tenth\": 0.1, \"nan\": NaN, \"inf\": -Infinity, \"no\": false,"
      " \"text\": \"gr\\u00fc\\u00df \\\"q\\\"\", \"a/b\": 1,"
      " \"box\": [1, 2.5, \"x\", [true, {}]], \"pose\": {\"x\": 0.25, \"tags\": []}}";
  CHECK(ferry_node_send_output(node, "out", &array, &schema, sent) == 0);
  struct FerryNodeEvent event;
  NextNonTick(node, &event);
  CHECK(event.type == FERRY_NODE_EVENT_INPUT);
  const char* got = event.metadata_json;
  /* Floats stay floats, integers stay exact, non-finite floats as bare words. */
  CHECK(strstr(got, "\"whole\":2.0") != NULL);
  CHECK(strstr(got, "\"max\":9223372036854775807") != NULL);
  CHECK(strstr(got, "\"nan\":NaN") != NULL);
  CHECK(strstr(got, "\"inf\":-Infinity") != NULL);
  CHECK(strstr(got, "\"box\":[1,2.5,\"x\",[true,{}]]") != NULL);

  int64_t integer = 0;
  double number = 0;
  int flag = -1;
  char text[64];
  size_t length = 0;
  CHECK(ferry_metadata_type(got, "max") == FERRY_METADATA_INT);
  CHECK(ferry_metadata_get_int(got, "max", &integer) == 0 && integer == INT64_MAX);
  CHECK(ferry_metadata_get_int(got, "min", &integer) == 0 && integer == INT64_MIN);
  CHECK(ferry_metadata_type(got, "whole") == FERRY_METADATA_FLOAT);
  CHECK(ferry_metadata_get_float(got, "tenth", &number) == 0 && number == 0.1);
  CHECK(ferry_metadata_get_float(got, "nan", &number) == 0 && number != number);
  CHECK(ferry_metadata_get_float(got, "box/0", &number) == 0 && number == 1.0);
  CHECK(ferry_metadata_get_bool(got, "no", &flag) == 0 && flag == 0);
  CHECK(ferry_metadata_get_bool(got, "box/3/0", &flag) == 0 && flag == 1);
  CHECK(ferry_metadata_get_string(got, "text", text, sizeof(text), &length) == 0);
  CHECK(strcmp(text, "gr\xc3\xbc\xc3\x9f \"q\"") == 0 && length == strlen(text));
  CHECK(ferry_metadata_get_string(got, "box/2", text, 2, &length) == 0);
  CHECK(strcmp(text, "x") == 0 && length == 1);
  CHECK(ferry_metadata_get_int(got, "a~1b", &integer) == 0 && integer == 1);
  CHECK(ferry_metadata_type(got, "box") == FERRY_METADATA_LIST);
  CHECK(ferry_metadata_length(got, "box", &integer) == 0 && integer == 4);
  CHECK(ferry_metadata_type(got, "pose") == FERRY_METADATA_MAP);
  CHECK(ferry_metadata_length(got, "pose", &integer) == 0 && integer == 2);
  CHECK(ferry_metadata_key(got, "pose", 1, text, sizeof(text), &length) == 0);
  CHECK(strcmp(text, "tags") == 0);
  CHECK(ferry_metadata_get_float(got, "pose/x", &number) == 0 && number == 0.25);
  CHECK(ferry_metadata_length(got, "", &integer) == 0 && integer == 11);
  /* Missing values, other types, bad text. */
  CHECK(ferry_metadata_get_int(got, "pose/y", &integer) == ENOENT);
  CHECK(ferry_metadata_get_int(got, "box/9", &integer) == ENOENT);
  CHECK(ferry_metadata_type(got, "box/x") == FERRY_METADATA_NONE);
  CHECK(ferry_metadata_get_int(got, "tenth", &integer) == EINVAL);
  CHECK(strstr(ferry_node_last_error(), "is a float, not an integer") != NULL);
  CHECK(ferry_metadata_get_int("{not json", "a", &integer) == EINVAL);
  CHECK(ferry_metadata_get_int(got, NULL, &integer) == EINVAL);
  CHECK(ferry_metadata_key(got, "pose", 2, text, sizeof(text), NULL) == EINVAL);
  ferry_node_event_release(&event);
  ferry_node_free(node);
}

/* `ferry_node_c_test --echo-node`: a node under `ferry run` that reads each
 * input's typed metadata with the accessors, prints what it read, and sends
 * the value on "out" with the metadata it received plus values made in C. */
static int EchoNode(void) {
  struct FerryNode* node = NULL;
  if (ferry_node_from_env(0, &node) != 0) {
    fprintf(stderr, "echo node: %s\n", ferry_node_last_error());
    return 1;
  }
  for (;;) {
    struct FerryNodeEvent event;
    if (ferry_node_next(node, -1, &event) != 0) {
      fprintf(stderr, "echo node: %s\n", ferry_node_last_error());
      return 1;
    }
    if (event.type == FERRY_NODE_EVENT_END) break;
    if (event.type == FERRY_NODE_EVENT_INPUT) {
      const char* got = event.metadata_json;
      int64_t max = 0, items = 0;
      double f = 0;
      char word[64] = "";
      ferry_metadata_get_int(got, "max", &max);
      ferry_metadata_get_float(got, "f", &f);
      ferry_metadata_get_string(got, "nested/k/1", word, sizeof(word), NULL);
      ferry_metadata_length(got, "l", &items);
      printf("C read max=%lld f=%.17g word=%s list=%lld types=%d%d%d\n", (long long)max, f, word,
             (long long)items, ferry_metadata_type(got, "max"), ferry_metadata_type(got, "f"),
             ferry_metadata_type(got, "nested"));
      fflush(stdout);
      /* The received object, with two keys of our own added. */
      size_t size = strlen(got);
      char* out = malloc(size + 128);
      CHECK(out != NULL && size >= 2);
      memcpy(out, got, size - 1); /* without the closing brace */
      snprintf(out + size - 1, 128,
               "%s\"c_values\": [-1, 0.5, NaN, {\"deep\": [[[]]]}],"
               " \"c_text\": \"\\u00e9t\\u00e9\"}",
               size > 2 ? ", " : "");
      struct ArrowArray array = event.array;
      struct ArrowSchema schema = event.schema;
      event.array.release = NULL;
      event.schema.release = NULL;
      if (ferry_node_send_output(node, "out", &array, &schema, out) != 0) {
        fprintf(stderr, "echo node: send: %s\n", ferry_node_last_error());
      }
      free(out);
    }
    ferry_node_event_release(&event);
  }
  ferry_node_free(node);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--echo-node") == 0) return EchoNode();
  TestBadInput();
  TestTimeout();
  TestSelfLoop();
  TestTypedMetadata();
  printf("node C API: all checks passed\n");
  return 0;
}
