// ferry.flow.Node: the dataflow node API from Python, in the style of dora's
// Node. Events are dicts; their values are pyarrow objects imported through
// the Arrow PyCapsule protocol from the shared memory itself (no copy), with
// plain arrays unwrapped by the array convention (node.h). send_output takes
// anything Arrow-shaped; loans let Python fill shared memory in place.
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "ferry/exchange/bridge.h"
#include "ferry/flow/node.h"
#include "objects.h"

namespace ferry::python {
namespace {

using std::chrono::duration_cast;
using std::chrono::nanoseconds;

// Next waits in slices this long so that Ctrl-C (a Python signal handler)
// gets through.
constexpr auto kSignalSlice = std::chrono::milliseconds(100);

struct PyNode {
  std::shared_ptr<flow::Node> node;
  std::shared_ptr<std::mutex> next_mutex = std::make_shared<std::mutex>();
  // A reference that keeps the node alive while a call runs without the GIL.
  std::shared_ptr<flow::Node> hold() const {
    if (!node) throw py::value_error("the node is closed");
    return node;
  }
};

// Shared memory lent by one of a node's outputs: writable through the buffer
// protocol, then sent (send_output, send_loans) without a copy.
struct PyNodeLoan {
  BufferPtr buffer;
  TypePtr type;
  int64_t length = 0;
  std::string output;
};

nanoseconds Seconds(double seconds) {
  if (!(seconds >= 0)) throw py::value_error("timeouts must be >= 0 seconds");
  if (seconds > 1e9) return nanoseconds::max();
  return duration_cast<nanoseconds>(std::chrono::duration<double>(seconds));
}

ArrayDataPtr LoanArray(const PyNodeLoan& loan) {
  auto column = std::make_shared<ArrayData>();
  column->type = loan.type;
  column->length = loan.length;
  column->buffers = {nullptr, loan.buffer};
  return column;
}

// ---- Metadata ------------------------------------------------------------------

// Text from another process may be any bytes: never fail on it.
py::str Text(const std::string& text) {
  PyObject* decoded =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

py::object ValueToPython(const flow::MetadataValue& value) {
  switch (value.index()) {
    case 0:
      return Text(std::get<std::string>(value));
    case 1:
      return py::int_(std::get<int64_t>(value));
    case 2:
      return py::float_(std::get<double>(value));
    case 3:
      return py::bool_(std::get<bool>(value));
    case 4: {
      py::list out;
      for (const flow::MetadataValue& item : std::get<flow::MetadataList>(value)) {
        out.append(ValueToPython(item));
      }
      return std::move(out);
    }
    default: {
      py::dict out;
      for (const auto& [key, item] : std::get<flow::MetadataMap>(value)) {
        out[Text(key)] = ValueToPython(item);
      }
      return std::move(out);
    }
  }
}

py::dict MetadataDict(const Metadata& metadata) {
  py::dict out;
  for (const auto& [key, value] : flow::DecodeTypedMetadata(metadata)) {
    out[Text(key)] = ValueToPython(value);
  }
  return out;
}

std::string TypeName(py::handle value) {
  return py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>();
}

std::string Utf8(py::handle text, const std::string& what) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    throw py::value_error(what + " is not valid Unicode (a lone surrogate?)");
  }
  return std::string(data, static_cast<size_t>(size));
}

flow::MetadataValue ValueFromPython(py::handle value, const std::string& path, int depth) {
  if (py::isinstance<py::bool_>(value)) {  // before int: bool is an int in Python
    return flow::MetadataValue(value.cast<bool>());
  }
  if (py::isinstance<py::int_>(value)) {
    int overflow = 0;
    const long long number = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow != 0) {
      throw py::value_error("metadata value of '" + path +
                            "' exceeds 64 bits (integers are 64-bit signed)");
    }
    if (number == -1 && PyErr_Occurred()) throw py::error_already_set();
    return flow::MetadataValue(static_cast<int64_t>(number));
  }
  if (py::isinstance<py::float_>(value)) return flow::MetadataValue(value.cast<double>());
  if (py::isinstance<py::str>(value)) {
    return flow::MetadataValue(Utf8(value, "metadata value of '" + path + "'"));
  }
  const bool list = py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value);
  const bool dict = py::isinstance<py::dict>(value);
  if ((list || dict) && depth + 1 > flow::kMaxMetadataDepth) {
    throw py::value_error("metadata value of '" + path + "' nests deeper than " +
                          std::to_string(flow::kMaxMetadataDepth) + " levels");
  }
  if (list) {
    flow::MetadataList items;
    size_t index = 0;
    for (py::handle item : py::reinterpret_borrow<py::iterable>(value)) {
      items.push_back(ValueFromPython(item, path + "[" + std::to_string(index++) + "]", depth + 1));
    }
    return flow::MetadataValue(std::move(items));
  }
  if (dict) {
    flow::MetadataMap entries;
    for (const auto& item : py::reinterpret_borrow<py::dict>(value)) {
      if (!py::isinstance<py::str>(item.first)) {
        throw py::type_error("metadata keys must be str, not " + TypeName(item.first) + " (in '" +
                             path + "')");
      }
      std::string key = Utf8(item.first, "a metadata key in '" + path + "'");
      flow::MetadataValue converted = ValueFromPython(item.second, path + "." + key, depth + 1);
      entries.emplace_back(std::move(key), std::move(converted));
    }
    return flow::MetadataValue(std::move(entries));
  }
  throw py::type_error("metadata value of '" + path +
                       "' must be str, int, float, bool, list or dict, not " + TypeName(value));
}

// ---- Values: to pyarrow through capsules ---------------------------------------

void DestroySchemaCapsule(PyObject* capsule) {
  auto* schema = static_cast<ArrowSchema*>(PyCapsule_GetPointer(capsule, "arrow_schema"));
  if (schema == nullptr) return;
  if (schema->release != nullptr) schema->release(schema);
  delete schema;
}

void DestroyArrayCapsule(PyObject* capsule) {
  auto* array = static_cast<ArrowArray*>(PyCapsule_GetPointer(capsule, "arrow_array"));
  if (array == nullptr) return;
  if (array->release != nullptr) array->release(array);
  delete array;
}

// pyarrow's type (for arrays) or schema (for batches) of the last few Ferry
// types seen: a stream's events share one, and importing it into pyarrow on
// every event costs more than the rest of the import. Used with the GIL held.
class PyArrowTypeCache {
 public:
  static constexpr size_t kEntries = 8;

  py::object Find(const DataType* type, const Schema* schema) const {
    for (const Entry& entry : entries_) {
      if (type != nullptr && entry.type != nullptr && entry.type->Equals(*type)) {
        return entry.pyarrow;
      }
      if (schema != nullptr && entry.schema != nullptr && entry.schema->Equals(*schema)) {
        return entry.pyarrow;
      }
    }
    return py::object();
  }
  void Add(TypePtr type, SchemaPtr schema, py::object pyarrow) {
    if (entries_.size() == kEntries) entries_.erase(entries_.begin());
    entries_.push_back({std::move(type), std::move(schema), std::move(pyarrow)});
  }

 private:
  struct Entry {
    TypePtr type;
    SchemaPtr schema;
    py::object pyarrow;
  };
  std::vector<Entry> entries_;
};

PyArrowTypeCache& TypeCache() {
  // Leaked on purpose: its Python objects must not be released after the
  // interpreter is gone.
  static auto* cache = new PyArrowTypeCache();
  return *cache;
}

// pyarrow.Array or pyarrow.RecordBatch over the same buffers: exported by
// Ferry, imported by pyarrow, nothing copied. The first event of a type goes
// through the PyCapsule protocol; later ones hand pyarrow the array with its
// cached type.
py::object ToPyArrow(const RecordBatchPtr& batch, const ArrayDataPtr& array) {
  auto schema = std::make_unique<ArrowSchema>();
  auto c_array = std::make_unique<ArrowArray>();
  Check(array != nullptr ? ExportArray(array, c_array.get(), schema.get())
                         : ExportRecordBatch(*batch, c_array.get(), schema.get()));
  py::module_ pyarrow = py::module_::import("pyarrow");
  py::object kind = pyarrow.attr(array != nullptr ? "Array" : "RecordBatch");
  py::object cached = array != nullptr ? TypeCache().Find(array->type.get(), nullptr)
                                       : TypeCache().Find(nullptr, batch->schema().get());
  if (cached) {
    schema->release(schema.get());
    py::object imported;
    try {
      imported = kind.attr("_import_from_c")(reinterpret_cast<uintptr_t>(c_array.get()), cached);
    } catch (...) {
      if (c_array->release != nullptr) c_array->release(c_array.get());
      throw;
    }
    if (c_array->release != nullptr) c_array->release(c_array.get());  // not moved: ours to free
    return imported;
  }
  py::object schema_capsule = py::reinterpret_steal<py::object>(
      PyCapsule_New(schema.get(), "arrow_schema", DestroySchemaCapsule));
  if (!schema_capsule) {
    schema->release(schema.get());
    c_array->release(c_array.get());
    throw py::error_already_set();
  }
  schema.release();
  py::object array_capsule = py::reinterpret_steal<py::object>(
      PyCapsule_New(c_array.get(), "arrow_array", DestroyArrayCapsule));
  if (!array_capsule) {
    c_array->release(c_array.get());
    throw py::error_already_set();
  }
  c_array.release();
  py::object imported = kind.attr("_import_from_c_capsule")(schema_capsule, array_capsule);
  if (array != nullptr) {
    TypeCache().Add(array->type, nullptr, imported.attr("type"));
  } else {
    TypeCache().Add(nullptr, batch->schema(), imported.attr("schema"));
  }
  return imported;
}

py::dict EventDict(flow::Event event) {
  py::dict out;
  out["type"] = flow::EventTypeName(event.type);
  out["id"] = Text(event.id);
  if (event.type == flow::EventType::kInput) {
    ArrayDataPtr array = flow::ArrayOfMessage(*event.value, event.metadata);
    out["value"] = ToPyArrow(event.value, array);
    out["metadata"] = MetadataDict(event.metadata);
    out["sequence"] = event.sequence;
  } else if (event.type == flow::EventType::kError) {
    out["error"] = Text(event.error);
  }
  return out;
}

// ---- Values: from Python ---------------------------------------------------------

// The class `name` of an already imported module, or None: modules the user
// never imported cannot have made `data`.
py::object LoadedClass(const char* module, const char* name) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains(module)) return py::none();
  return py::getattr(modules[module], name, py::none());
}

bool IsInstance(const py::handle& data, const char* module, const char* name) {
  py::object type = LoadedClass(module, name);
  return !type.is_none() && py::isinstance(data, type);
}

struct Outgoing {
  RecordBatchPtr batch;
  bool is_array = false;
};

// One array-shaped object (anything import_arrow takes) as a host batch: a
// struct array is a batch unless the caller said it is an array.
Outgoing FromArrow(const py::object& data, bool array_like) {
  py::object imported = ImportArrow(data);
  if (py::isinstance<PyRecordBatch>(imported)) return {HostBatchFrom(imported), false};
  if (!py::isinstance<PyArray>(imported)) {
    throw py::type_error(
        "send_output needs an array or a record batch (pyarrow, polars, "
        "ferry or anything with __arrow_c_array__)");
  }
  const PyArray& array = imported.cast<const PyArray&>();
  if (!array_like && array.data->type->id == TypeId::kStruct) {
    return {HostBatchFrom(imported), false};
  }
  RecordBatchPtr wrapped = Unwrap(flow::ArrayAsBatch(array.data, array.field.nullable));
  return {HostBatchFrom(py::cast(PyRecordBatch{wrapped, array.placement})), true};
}

// A host batch from whatever `data` is: batches (ferry, pyarrow, polars
// DataFrame, pyarrow Table) travel as they are, arrays (pyarrow, polars
// Series, ...) by the array convention. Streams of several chunks are
// combined by pyarrow first.
Outgoing ToOutgoing(const py::object& data) {
  if (py::isinstance<PyNodeLoan>(data)) {
    return {Unwrap(flow::ArrayAsBatch(LoanArray(data.cast<const PyNodeLoan&>()))), true};
  }
  const bool array_like = py::isinstance<PyArray>(data) || IsInstance(data, "pyarrow", "Array") ||
                          IsInstance(data, "pyarrow", "ChunkedArray") ||
                          IsInstance(data, "polars", "Series");
  if (py::hasattr(data, "__arrow_c_array__") || py::hasattr(data, "__arrow_c_device_array__") ||
      !py::hasattr(data, "__arrow_c_stream__")) {
    return FromArrow(data, array_like);
  }
  // Tables, polars frames and series, chunked arrays: one array, via pyarrow.
  py::module_ pyarrow = py::module_::import("pyarrow");
  py::object chunked = pyarrow.attr("chunked_array")(data);
  py::list chunks = chunked.attr("chunks");
  if (chunks.size() == 1) return FromArrow(chunks[0], array_like);
  if (chunks.empty()) {
    return FromArrow(pyarrow.attr("array")(py::list(), py::arg("type") = chunked.attr("type")),
                     array_like);
  }
  return FromArrow(pyarrow.attr("concat_arrays")(chunks), array_like);
}

void Send(PyNode& self, const std::string& output, const RecordBatch& batch, Metadata metadata,
          bool is_array) {
  if (is_array) metadata.emplace_back(std::string(flow::kArrayMetadataKey), "1");
  std::shared_ptr<flow::Node> node = self.hold();
  Status status;
  {
    py::gil_scoped_release unlocked;
    status = node->SendOutput(output, batch, metadata);
  }
  Check(status);
}

// Next, waiting in slices so that signals reach Python. None at the end of
// the stream; TimeoutError after `timeout`.
py::object NextEvent(PyNode& self, const std::optional<double>& timeout) {
  std::shared_ptr<flow::Node> node = self.hold();
  std::shared_ptr<std::mutex> next_mutex = self.next_mutex;
  const bool bounded = timeout.has_value() && *timeout <= 1e9;
  const auto deadline = bounded ? std::chrono::steady_clock::now() + Seconds(*timeout)
                                : std::chrono::steady_clock::time_point::max();
  for (;;) {
    Result<std::optional<flow::Event>> next = Status::UnknownError("no event");
    bool timed_out_slice = false;
    {
      py::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> lock(*next_mutex);
      const auto now = std::chrono::steady_clock::now();
      const nanoseconds left = deadline == std::chrono::steady_clock::time_point::max()
                                   ? nanoseconds::max()
                                   : std::max(nanoseconds(0), deadline - now);
      const nanoseconds slice = std::min<nanoseconds>(left, kSignalSlice);
      next = node->Next(slice);
      timed_out_slice = !next.ok() && next.status().code() == StatusCode::kTimedOut && slice < left;
    }
    if (timed_out_slice) {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      continue;
    }
    std::optional<flow::Event> event = Unwrap(std::move(next));
    if (!event.has_value()) return py::none();
    return EventDict(std::move(*event));
  }
}

std::unique_ptr<flow::Node> MakeNode(const std::optional<std::string>& node_id,
                                     const std::optional<std::string>& config_json,
                                     double startup_timeout, bool busy_poll) {
  flow::NodeOptions options;
  options.startup_timeout = Seconds(startup_timeout);
  options.busy_poll = busy_poll;
  Result<flow::NodeConfig> config = Status::UnknownError("no config");
  if (config_json.has_value()) {
    config = flow::NodeConfig::FromJson(*config_json);
  } else {
    const char* text = std::getenv("FERRY_NODE_CONFIG");
    if (text == nullptr || *text == '\0') {
      throw py::value_error(
          "FERRY_NODE_CONFIG is not set: this program is a Ferry node: start it with `ferry run "
          "dataflow.yml` (or pass config_json=... to run it standalone)");
    }
    config = flow::NodeConfig::FromJson(text);
  }
  flow::NodeConfig checked = Unwrap(std::move(config));
  if (node_id.has_value() && *node_id != checked.node) {
    throw py::value_error("this process was started as node '" + checked.node + "', not '" +
                          *node_id + "'");
  }
  Result<std::unique_ptr<flow::Node>> node = Status::UnknownError("not started");
  {
    py::gil_scoped_release unlocked;
    node = flow::Node::FromConfig(std::move(checked), options);
  }
  return Unwrap(std::move(node));
}

}  // namespace

Metadata TypedMetadataFrom(const py::object& metadata, bool allow_bytes) {
  if (metadata.is_none()) return {};
  if (!py::isinstance<py::dict>(metadata)) {
    throw py::type_error("metadata must be a dict of str keys, not " + TypeName(metadata));
  }
  flow::TypedMetadata values;
  for (const auto& item : metadata.cast<py::dict>()) {
    if (!py::isinstance<py::str>(item.first)) {
      throw py::type_error("metadata keys must be str, not " + TypeName(item.first));
    }
    std::string key = Utf8(item.first, "a metadata key");
    if (allow_bytes && py::isinstance<py::bytes>(item.second)) {
      // Sent as its bytes; receivers see a str.
      values.emplace_back(std::move(key), flow::MetadataValue(item.second.cast<std::string>()));
      continue;
    }
    flow::MetadataValue value = ValueFromPython(item.second, key, 0);
    values.emplace_back(std::move(key), std::move(value));
  }
  return Unwrap(flow::EncodeTypedMetadata(values));
}

py::dict TypedMetadataDict(const Metadata& metadata) { return MetadataDict(metadata); }

void BindNode(py::module_& flow) {
  py::class_<PyNodeLoan>(flow, "NodeLoan", py::buffer_protocol(),
                         "Shared memory lent by a node output; fill it, then send it.")
      .def_buffer([](PyNodeLoan& loan) {
        const auto width = static_cast<py::ssize_t>(loan.type->fixed_width());
        return py::buffer_info(loan.buffer->mutable_data(), width, BufferFormat(loan.type->id), 1,
                               {static_cast<py::ssize_t>(loan.length)}, {width},
                               /*readonly=*/false);
      })
      .def("__len__", [](const PyNodeLoan& loan) { return loan.length; })
      .def_property_readonly(
          "address",
          [](const PyNodeLoan& loan) { return reinterpret_cast<uintptr_t>(loan.buffer->data()); })
      .def_property_readonly("type", [](const PyNodeLoan& loan) { return loan.type->ToString(); })
      .def_property_readonly("output", [](const PyNodeLoan& loan) { return loan.output; });

  py::class_<PyNode>(flow, "Node",
                     "A dataflow node: iterate over its events, send batches on its outputs.")
      .def(py::init([](const std::optional<std::string>& node_id,
                       const std::optional<std::string>& config_json, double startup_timeout,
                       bool busy_poll) {
             PyNode node;
             node.node = MakeNode(node_id, config_json, startup_timeout, busy_poll);
             return node;
           }),
           py::arg("node_id") = py::none(), py::kw_only(), py::arg("config_json") = py::none(),
           py::arg("startup_timeout") = 60.0, py::arg("busy_poll") = false,
           "Starts the node from FERRY_NODE_CONFIG (set by `ferry run`), or from config_json "
           "(standalone, tests). node_id, when given, must match the configured id.")
      .def_property_readonly("id", [](const PyNode& self) { return self.hold()->id(); })
      .def_property_readonly(
          "config",
          [](const PyNode& self) {
            return py::module_::import("json").attr("loads")(self.hold()->config().ToJson());
          })
      .def("next", &NextEvent, py::arg("timeout") = py::none(),
           "The next event as a dict (type, id, value, metadata, sequence); None once the "
           "stream has ended; TimeoutError after `timeout` seconds.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](PyNode& self) {
             py::object event = NextEvent(self, std::nullopt);
             if (event.is_none()) throw py::stop_iteration();
             return event;
           })
      .def(
          "send_output",
          [](PyNode& self, const std::string& output, const py::object& data,
             const py::object& metadata) {
            Metadata meta = TypedMetadataFrom(metadata);
            Outgoing outgoing = ToOutgoing(data);
            Send(self, output, *outgoing.batch, std::move(meta), outgoing.is_array);
          },
          py::arg("output"), py::arg("data"), py::arg("metadata") = py::none(),
          "Sends an array or a record batch (pyarrow, polars, ferry, a NodeLoan, anything with "
          "__arrow_c_array__). Buffers lent by this output travel without a copy; others are "
          "copied into shared memory once (counted).")
      .def(
          "loan",
          [](PyNode& self, const std::string& output, int64_t length, const std::string& type) {
            if (length < 0) throw py::value_error("loan length must be >= 0");
            TypePtr loan_type = LoanType(type);
            std::shared_ptr<flow::Node> node = self.hold();
            MemoryPool* pool = node->OutputPool(output);
            if (pool == nullptr) {
              throw py::value_error("node '" + node->id() + "' has no open output '" + output +
                                    "'");
            }
            Result<BufferPtr> buffer = Status::UnknownError("not allocated");
            {
              py::gil_scoped_release unlocked;  // may wait for memory to come back
              buffer = Buffer::Allocate(length * loan_type->fixed_width(), pool);
            }
            return PyNodeLoan{Unwrap(std::move(buffer)), loan_type, length, output};
          },
          py::arg("output"), py::arg("length"), py::arg("type") = "uint8",
          "Lends `length` values of `type` in `output`'s shared memory (write them, then "
          "send_output or send_loans). Do not write to a loan after sending it.")
      .def(
          "send_loans",
          [](PyNode& self, const std::string& output, const py::dict& columns,
             const py::object& metadata) {
            auto schema = std::make_shared<Schema>();
            std::vector<ArrayDataPtr> arrays;
            int64_t rows = -1;
            for (const auto& item : columns) {
              const auto& loan = item.second.cast<const PyNodeLoan&>();
              if (rows >= 0 && loan.length != rows) {
                throw py::value_error("every loaned column must have the same length");
              }
              rows = loan.length;
              schema->fields.push_back(field(py::str(item.first), loan.type, false));
              arrays.push_back(LoanArray(loan));
            }
            if (rows < 0) throw py::value_error("send_loans needs at least one column");
            auto batch = Unwrap(RecordBatch::Make(schema, rows, std::move(arrays)));
            Send(self, output, *batch, TypedMetadataFrom(metadata), false);
          },
          py::arg("output"), py::arg("columns"), py::arg("metadata") = py::none(),
          "Sends loaned columns as one record batch: nothing is copied.")
      .def(
          "close_output",
          [](PyNode& self, const std::string& output) { Check(self.hold()->CloseOutput(output)); },
          py::arg("output"))
      .def(
          "wait_for_subscribers",
          [](PyNode& self, const std::string& output, int count, double timeout) {
            std::shared_ptr<flow::Node> node = self.hold();
            Status status;
            {
              py::gil_scoped_release unlocked;
              status = node->WaitForSubscribers(output, count, Seconds(timeout));
            }
            Check(status);
          },
          py::arg("output"), py::arg("count") = 1, py::arg("timeout") = 10.0,
          "Waits until `output` has `count` consumers (needed only without a daemon).")
      .def("stats",
           [](const PyNode& self) {
             return py::module_::import("json").attr("loads")(self.hold()->StatsJson());
           })
      .def(
          "close",
          [](PyNode& self) {
            std::shared_ptr<flow::Node> node = std::move(self.node);
            py::gil_scoped_release unlocked;
            node.reset();  // reports statistics, closes the outputs
          },
          "Reports the statistics to the daemon and closes the outputs (also on exit).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyNode& self, py::args) {
             std::shared_ptr<flow::Node> node = std::move(self.node);
             py::gil_scoped_release unlocked;
             node.reset();
           })
      .def("__repr__", [](const PyNode& self) {
        return self.node ? "ferry.flow.Node('" + self.node->id() + "')"
                         : std::string("ferry.flow.Node(closed)");
      });
}

}  // namespace ferry::python
