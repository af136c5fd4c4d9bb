// The `ferry._ferry` extension: Ferry's arrays, record batches and streams
// for Python, speaking the Arrow PyCapsule protocol in both directions
// without copying buffers. The pure-Python package (python/ferry) re-exports
// these names.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/telemetry.h"
#include "ferry/c/abi.h"
#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/cast.h"
#include "ferry/exchange/sample.h"
#include "ferry/exchange/stream.h"
#include "ferry/exchange/type.h"
#include "ferry/exchange/validate.h"
#include "objects.h"

namespace py = pybind11;

namespace ferry::python {

[[noreturn]] void Raise(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalid:
      throw py::value_error(status.message());
    case StatusCode::kTypeError:
      throw py::type_error(status.message());
    case StatusCode::kIndexError:
      throw py::index_error(status.message());
    case StatusCode::kOutOfMemory:
      throw std::bad_alloc();
    case StatusCode::kNotImplemented:
      PyErr_SetString(PyExc_NotImplementedError, status.message().c_str());
      throw py::error_already_set();
    case StatusCode::kTimedOut:
      PyErr_SetString(PyExc_TimeoutError, status.message().c_str());
      throw py::error_already_set();
    case StatusCode::kCancelled:
      // A stream or channel whose other side is gone (e.g. "publisher gone").
      PyErr_SetString(PyExc_EOFError, status.message().c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(status.ToString());
  }
}

namespace {

constexpr const char* kSchemaCapsule = "arrow_schema";
constexpr const char* kArrayCapsule = "arrow_array";
constexpr const char* kStreamCapsule = "arrow_array_stream";
constexpr const char* kDeviceArrayCapsule = "arrow_device_array";
constexpr const char* kDeviceStreamCapsule = "arrow_device_array_stream";

// ---- Capsules -----------------------------------------------------------

// Capsule destructors: release the struct if nobody moved it out, then free
// it. Exactly what the PyCapsule protocol asks of producers.
void DestroySchemaCapsule(PyObject* capsule) {
  auto* schema = static_cast<ArrowSchema*>(PyCapsule_GetPointer(capsule, kSchemaCapsule));
  if (schema == nullptr) {
    PyErr_Clear();
    return;
  }
  if (schema->release != nullptr) schema->release(schema);
  std::free(schema);
}

void DestroyArrayCapsule(PyObject* capsule) {
  auto* array = static_cast<ArrowArray*>(PyCapsule_GetPointer(capsule, kArrayCapsule));
  if (array == nullptr) {
    PyErr_Clear();
    return;
  }
  if (array->release != nullptr) array->release(array);
  std::free(array);
}

void DestroyStreamCapsule(PyObject* capsule) {
  auto* stream = static_cast<ArrowArrayStream*>(PyCapsule_GetPointer(capsule, kStreamCapsule));
  if (stream == nullptr) {
    PyErr_Clear();
    return;
  }
  if (stream->release != nullptr) stream->release(stream);
  std::free(stream);
}

void DestroyDeviceArrayCapsule(PyObject* capsule) {
  auto* array = static_cast<ArrowDeviceArray*>(PyCapsule_GetPointer(capsule, kDeviceArrayCapsule));
  if (array == nullptr) {
    PyErr_Clear();
    return;
  }
  if (array->array.release != nullptr) array->array.release(&array->array);
  std::free(array);
}

void DestroyDeviceStreamCapsule(PyObject* capsule) {
  auto* stream =
      static_cast<ArrowDeviceArrayStream*>(PyCapsule_GetPointer(capsule, kDeviceStreamCapsule));
  if (stream == nullptr) {
    PyErr_Clear();
    return;
  }
  if (stream->release != nullptr) stream->release(stream);
  std::free(stream);
}

template <typename Struct>
Struct* AllocateStruct() {
  auto* out = static_cast<Struct*>(std::calloc(1, sizeof(Struct)));
  if (out == nullptr) throw std::bad_alloc();
  return out;
}

py::object WrapCapsule(void* pointer, const char* name, PyCapsule_Destructor destructor) {
  PyObject* capsule = PyCapsule_New(pointer, name, destructor);
  if (capsule == nullptr) {
    destructor(nullptr);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

py::object SchemaCapsule(const Field& field) {
  auto* schema = AllocateStruct<ArrowSchema>();
  Status status = ExportField(field, schema);
  if (!status.ok()) {
    std::free(schema);
    Raise(status);
  }
  return WrapCapsule(schema, kSchemaCapsule, DestroySchemaCapsule);
}

py::object ArrayCapsule(const ArrayDataPtr& data) {
  auto* array = AllocateStruct<ArrowArray>();
  Status status = ExportArray(data, array);
  if (!status.ok()) {
    std::free(array);
    Raise(status);
  }
  return WrapCapsule(array, kArrayCapsule, DestroyArrayCapsule);
}

template <typename Struct>
Struct* CapsulePointer(const py::handle& capsule, const char* name) {
  if (!PyCapsule_IsValid(capsule.ptr(), name)) {
    throw py::type_error(std::string("expected a PyCapsule named '") + name + "'");
  }
  return static_cast<Struct*>(PyCapsule_GetPointer(capsule.ptr(), name));
}

// A record batch's schema and struct array as capsules, exported straight
// from the batch (no struct type or struct ArrayData is built for them).
py::object BatchSchemaCapsule(const RecordBatch& batch) {
  auto* schema = AllocateStruct<ArrowSchema>();
  Status status = ExportSchema(*batch.schema(), schema);
  if (!status.ok()) {
    std::free(schema);
    Raise(status);
  }
  return WrapCapsule(schema, kSchemaCapsule, DestroySchemaCapsule);
}

py::object BatchArrayCapsule(const RecordBatch& batch) {
  auto* array = AllocateStruct<ArrowArray>();
  Status status = ExportRecordBatch(batch, array);
  if (!status.ok()) {
    std::free(array);
    Raise(status);
  }
  return WrapCapsule(array, kArrayCapsule, DestroyArrayCapsule);
}

// A Python string interned once and kept for the life of the process, for
// attribute names looked up on every call.
PyObject* InternedName(const char* text) {
  PyObject* name = PyUnicode_InternFromString(text);
  if (name == nullptr) throw py::error_already_set();
  return name;
}

// obj.<name>, or a null object when obj has no such attribute. Unlike
// hasattr, an absent attribute costs no AttributeError on the way.
py::object OptionalAttr(const py::handle& obj, PyObject* name) {
  PyObject* result = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  const int found = PyObject_GetOptionalAttr(obj.ptr(), name, &result);
#else
  const int found = _PyObject_LookupAttr(obj.ptr(), name, &result);
#endif
  if (found < 0) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

Field FieldFromCapsule(const py::handle& capsule) {
  auto* schema = CapsulePointer<ArrowSchema>(capsule, kSchemaCapsule);
  if (schema->release == nullptr) throw py::value_error("the ArrowSchema was already released");
  return Unwrap(ImportField(schema));
}

// Applies a consumer's requested schema when Ferry can do so without
// copying (same physical layout); otherwise the data keeps its own schema,
// as the protocol allows ("best effort").
std::pair<Field, ArrayDataPtr> ApplyRequestedSchema(const Field& field, const ArrayDataPtr& data,
                                                    const py::object& requested_schema) {
  if (requested_schema.is_none()) return {field, data};
  Field requested = FieldFromCapsule(requested_schema);
  if (requested.type->Equals(*field.type)) return {requested, data};
  auto viewed = ViewAs(data, requested.type);
  if (!viewed.ok()) return {field, data};
  return {requested, viewed.MoveValueUnsafe()};
}

// ---- Python-facing classes ----------------------------------------------

device::Device* DeviceOf(const Placement& placement) {
  return placement.device != nullptr ? placement.device : device::DeviceRegistry::Global().cpu();
}

bool OnHost(const Placement& placement) { return DeviceOf(placement)->host_accessible(); }

// The PyCapsule protocol reserves **kwargs for future use: reject what we do not know.
void RejectUnknownKwargs(const py::kwargs& kwargs) {
  for (const auto& item : kwargs) {
    PyErr_SetString(
        PyExc_NotImplementedError,
        ("unsupported keyword argument '" + py::str(item.first).cast<std::string>() + "'").c_str());
    throw py::error_already_set();
  }
}

// Data for __arrow_c_array__ and friends, which promise CPU memory: device
// data is copied to the host (counted, with its fallback reason).
ArrayDataPtr HostData(const ArrayDataPtr& data, const Placement& placement) {
  if (OnHost(placement)) {
    if (placement.event) Check(placement.event->Wait(std::chrono::seconds(30)));
    return data;
  }
  device::Device* device = DeviceOf(placement);
  device::ProducerInfo producer;
  producer.device_type = device->type();
  producer.device_id = device->id();
  producer.event_kind = placement.event ? placement.event->kind() : device::EventKind::kNone;
  device::ConsumerCapabilities cpu_only;
  device::RecordPlan(device::Negotiate(producer, cpu_only));
  auto copied = Unwrap(device::CopyArrayTo(device::DeviceArray{data, device, placement.event},
                                           device::DeviceRegistry::Global().cpu()));
  return copied.data;
}

py::object DeviceArrayCapsule(const ArrayDataPtr& data, const Placement& placement) {
  auto* array = AllocateStruct<ArrowDeviceArray>();
  Status status = device::ExportDeviceArray(
      device::DeviceArray{data, DeviceOf(placement), placement.event}, array);
  if (!status.ok()) {
    std::free(array);
    Raise(status);
  }
  return WrapCapsule(array, kDeviceArrayCapsule, DestroyDeviceArrayCapsule);
}

// Serves a host RecordBatchReader as a CPU device stream.
class HostDeviceReader final : public device::DeviceBatchReader {
 public:
  explicit HostDeviceReader(std::shared_ptr<RecordBatchReader> source)
      : source_(std::move(source)) {}
  SchemaPtr schema() const override { return source_->schema(); }
  device::DeviceType device_type() const override { return device::DeviceType::kCpu; }
  Result<device::DeviceBatch> Next() override {
    FERRY_ASSIGN_OR_RAISE(auto batch, source_->Next());
    return device::DeviceBatch{batch, device::DeviceRegistry::Global().cpu(), nullptr};
  }

 private:
  std::shared_ptr<RecordBatchReader> source_;
};

py::object ExportDeviceReader(std::shared_ptr<device::DeviceBatchReader> reader) {
  auto* stream = AllocateStruct<ArrowDeviceArrayStream>();
  Status status = device::ExportDeviceBatchReader(std::move(reader), stream);
  if (!status.ok()) {
    std::free(stream);
    Raise(status);
  }
  return WrapCapsule(stream, kDeviceStreamCapsule, DestroyDeviceStreamCapsule);
}

Field SchemaAsField(const Schema& schema) {
  Field root = field("", struct_(schema.fields), false, schema.metadata);
  return root;
}

py::list BufferInfo(const ArrayData& data) {
  py::list out;
  for (const auto& buffer : data.buffers) {
    if (buffer) {
      out.append(py::make_tuple(reinterpret_cast<uintptr_t>(buffer->data()), buffer->size()));
    } else {
      out.append(py::none());
    }
  }
  return out;
}

PyArray ArrayFromCapsules(const py::handle& schema_capsule, const py::handle& array_capsule) {
  Field imported_field = FieldFromCapsule(schema_capsule);
  auto* array = CapsulePointer<ArrowArray>(array_capsule, kArrayCapsule);
  if (array->release == nullptr) throw py::value_error("the ArrowArray was already released");
  // ImportArray moves the struct out of the capsule; the capsule's destructor
  // then only frees the empty shell.
  ArrayDataPtr data = Unwrap(ImportArray(array, imported_field.type));
  return PyArray{imported_field, data};
}

PyArray ArrayFromDeviceCapsules(const py::handle& schema_capsule, const py::handle& array_capsule) {
  Field imported_field = FieldFromCapsule(schema_capsule);
  auto* array = CapsulePointer<ArrowDeviceArray>(array_capsule, kDeviceArrayCapsule);
  if (array->array.release == nullptr) {
    throw py::value_error("the ArrowDeviceArray was already released");
  }
  auto imported = Unwrap(device::ImportDeviceArray(array, imported_field.type));
  Placement placement{imported.device, imported.event};
  if (imported.device != nullptr && imported.device->type() == device::DeviceType::kCpu) {
    placement.device = nullptr;
  }
  return PyArray{imported_field, imported.data, placement};
}

std::shared_ptr<device::DeviceBatchReader> DeviceReaderFromCapsule(const py::handle& capsule) {
  auto* stream = CapsulePointer<ArrowDeviceArrayStream>(capsule, kDeviceStreamCapsule);
  if (stream->release == nullptr) {
    throw py::value_error("the ArrowDeviceArrayStream was already released");
  }
  return Unwrap(device::ImportDeviceBatchReader(stream));
}

std::shared_ptr<RecordBatchReader> ReaderFromCapsule(const py::handle& capsule) {
  auto* stream = CapsulePointer<ArrowArrayStream>(capsule, kStreamCapsule);
  if (stream->release == nullptr)
    throw py::value_error("the ArrowArrayStream was already released");
  return Unwrap(ImportRecordBatchReader(stream));
}

py::object ExportReader(std::shared_ptr<RecordBatchReader> reader) {
  auto* stream = AllocateStruct<ArrowArrayStream>();
  Status status = ExportRecordBatchReader(std::move(reader), stream);
  if (!status.ok()) {
    std::free(stream);
    Raise(status);
  }
  return WrapCapsule(stream, kStreamCapsule, DestroyStreamCapsule);
}

}  // namespace

// Imports anything that speaks the PyCapsule protocol.
py::object ImportArrow(const py::object& obj) {
  if (py::isinstance<PyArray>(obj) || py::isinstance<PyRecordBatch>(obj) ||
      py::isinstance<PySchema>(obj) || py::isinstance<PyArrayStream>(obj)) {
    return obj;
  }
  // Device-aware producers are asked for device data first: Ferry keeps it
  // where it is.
  if (py::hasattr(obj, "__arrow_c_device_array__")) {
    py::tuple capsules = obj.attr("__arrow_c_device_array__")();
    if (capsules.size() != 2)
      throw py::type_error("__arrow_c_device_array__ must return a 2-tuple");
    return py::cast(ArrayFromDeviceCapsules(capsules[0], capsules[1]));
  }
  if (py::hasattr(obj, "__arrow_c_device_stream__") && !py::hasattr(obj, "__arrow_c_array__")) {
    PyArrayStream stream;
    stream.device_reader = DeviceReaderFromCapsule(obj.attr("__arrow_c_device_stream__")());
    return py::cast(stream);
  }
  if (py::hasattr(obj, "__arrow_c_array__")) {
    py::tuple capsules = obj.attr("__arrow_c_array__")();
    if (capsules.size() != 2) throw py::type_error("__arrow_c_array__ must return a 2-tuple");
    return py::cast(ArrayFromCapsules(capsules[0], capsules[1]));
  }
  if (py::hasattr(obj, "__arrow_c_stream__")) {
    return py::cast(PyArrayStream{ReaderFromCapsule(obj.attr("__arrow_c_stream__")()), nullptr});
  }
  if (py::hasattr(obj, "__arrow_c_schema__")) {
    return py::cast(PySchema{FieldFromCapsule(obj.attr("__arrow_c_schema__")())});
  }
  throw py::type_error(std::string("object of type '") +
                       py::str(obj.get_type().attr("__name__")).cast<std::string>() +
                       "' does not implement the Arrow PyCapsule protocol");
}

namespace {

RecordBatchPtr BatchFromArray(const PyArray& array) {
  Metadata metadata = array.field.metadata;
  return Unwrap(RecordBatch::FromStructArray(array.data, metadata));
}

PyRecordBatch BatchOf(const PyArray& array) {
  return PyRecordBatch{BatchFromArray(array), array.placement};
}

// ferry.record_batch(obj) for a producer of host data (`__arrow_c_array__`
// and no `__arrow_c_device_array__`, which import_arrow would ask first)
// whose schema is a struct: the array is imported straight into a batch,
// without a struct ArrayData in between. Nothing is returned (and the
// capsules are left as they are) for anything else, which takes the general
// path.
std::optional<PyRecordBatch> ImportHostBatch(const py::object& obj) {
  static PyObject* const kDeviceArrayMethod = InternedName("__arrow_c_device_array__");
  static PyObject* const kArrayMethod = InternedName("__arrow_c_array__");
  if (OptionalAttr(obj, kDeviceArrayMethod)) return std::nullopt;
  py::object method = OptionalAttr(obj, kArrayMethod);
  if (!method) return std::nullopt;
  py::object result = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(method.ptr()));
  if (!result) throw py::error_already_set();
  if (!PyTuple_Check(result.ptr()) || PyTuple_GET_SIZE(result.ptr()) != 2) {
    throw py::type_error("__arrow_c_array__ must return a 2-tuple");
  }
  py::handle schema_capsule = PyTuple_GET_ITEM(result.ptr(), 0);
  py::handle array_capsule = PyTuple_GET_ITEM(result.ptr(), 1);
  auto* schema = CapsulePointer<ArrowSchema>(schema_capsule, kSchemaCapsule);
  if (schema->release == nullptr) throw py::value_error("the ArrowSchema was already released");
  auto* array = CapsulePointer<ArrowArray>(array_capsule, kArrayCapsule);
  if (array->release == nullptr) throw py::value_error("the ArrowArray was already released");
  if (schema->format == nullptr || std::string_view(schema->format) != "+s") {
    // Not a struct: import it as an array, and let BatchOf say why it is no batch.
    return BatchOf(ArrayFromCapsules(schema_capsule, array_capsule));
  }
  // ImportRecordBatch moves the array out of its capsule and borrows the
  // schema; each capsule's destructor frees what is left.
  return PyRecordBatch{Unwrap(ImportRecordBatch(array, schema)), {}};
}

// One batch as a device stream on its own device.
class SingleBatchDeviceReader final : public device::DeviceBatchReader {
 public:
  explicit SingleBatchDeviceReader(device::DeviceBatch batch) : batch_(std::move(batch)) {}
  SchemaPtr schema() const override { return batch_.batch->schema(); }
  device::DeviceType device_type() const override { return batch_.device->type(); }
  Result<device::DeviceBatch> Next() override {
    device::DeviceBatch out = batch_;
    if (done_) out.batch = nullptr;
    done_ = true;
    return out;
  }

 private:
  device::DeviceBatch batch_;
  bool done_ = false;
};

// A host reader over a device reader: each batch is waited for and, when it
// is not host-accessible, copied to the CPU (counted).
std::shared_ptr<RecordBatchReader> HostReaderOf(std::shared_ptr<device::DeviceBatchReader> source) {
  return RecordBatchReader::FromFunction(source->schema(), [source]() -> Result<RecordBatchPtr> {
    FERRY_ASSIGN_OR_RAISE(auto next, source->Next());
    if (!next.batch) return RecordBatchPtr();
    if (next.device == nullptr || next.device->host_accessible()) {
      if (next.event) FERRY_RETURN_NOT_OK(next.event->Wait(std::chrono::seconds(30)));
      return next.batch;
    }
    FERRY_ASSIGN_OR_RAISE(
        auto copied, device::CopyArrayTo(
                         device::DeviceArray{next.batch->ToStructArray(), next.device, next.event},
                         device::DeviceRegistry::Global().cpu()));
    return RecordBatch::FromStructArray(copied.data, next.batch->schema()->metadata);
  });
}

// Pulls the next batch of either kind of reader, with the GIL released.
py::object NextBatch(PyArrayStream& s) {
  if (!s.open()) throw py::value_error("the stream was already consumed");
  PyRecordBatch out;
  Status status;
  {
    py::gil_scoped_release unlocked;
    if (s.device_reader) {
      auto next = s.device_reader->Next();
      if (next.ok()) {
        out.batch = next->batch;
        out.placement = Placement{next->device, next->event};
        if (next->device != nullptr && next->device->type() == device::DeviceType::kCpu) {
          out.placement.device = nullptr;
        }
      } else {
        status = next.status();
      }
    } else {
      auto next = s.reader->Next();
      if (next.ok()) {
        out.batch = next.MoveValueUnsafe();
      } else {
        status = next.status();
      }
    }
  }
  Check(status);
  if (!out.batch) return py::none();
  return py::cast(out);
}

std::shared_ptr<RecordBatchReader> TakeHostReader(PyArrayStream& s) {
  if (!s.open()) throw py::value_error("the stream was already consumed");
  std::shared_ptr<RecordBatchReader> reader =
      s.reader ? std::move(s.reader) : HostReaderOf(std::move(s.device_reader));
  s.reader.reset();
  s.device_reader.reset();
  return reader;
}

SchemaPtr StreamSchema(const PyArrayStream& s) {
  if (!s.open()) throw py::value_error("the stream was already consumed");
  return s.reader ? s.reader->schema() : s.device_reader->schema();
}

Status ValidateData(const ArrayDataPtr& data, const Placement& placement, bool full) {
  if (!full) return ValidateStructural(*data);
  return ValidateFull(*HostData(data, placement));
}

}  // namespace

RecordBatchPtr HostBatchFrom(const py::object& obj) {
  py::object imported = ImportArrow(obj);
  if (py::isinstance<PyArrayStream>(imported)) {
    throw py::type_error("expected a record batch, got a stream: send its batches one by one");
  }
  PyRecordBatch batch =
      py::isinstance<PyRecordBatch>(imported)
          ? imported.cast<PyRecordBatch>()
          : (py::isinstance<PyArray>(imported) ? BatchOf(imported.cast<PyArray>())
                                               : throw py::type_error("expected a record batch"));
  if (OnHost(batch.placement)) return batch.batch;
  auto host = HostData(batch.batch->ToStructArray(), batch.placement);
  return Unwrap(RecordBatch::FromStructArray(host, batch.batch->schema()->metadata));
}

PYBIND11_MODULE(_ferry, m) {
  m.doc() = "Ferry: zero-copy Arrow exchange (native module)";

  py::class_<PySchema>(m, "Schema", "An Arrow type with its field name, nullability and metadata.")
      .def_property_readonly("name", [](const PySchema& s) { return s.field.name; })
      .def_property_readonly("format",
                             [](const PySchema& s) { return FormatString(*s.field.type); })
      .def_property_readonly("nullable", [](const PySchema& s) { return s.field.nullable; })
      .def_property_readonly("metadata",
                             [](const PySchema& s) {
                               py::dict out;
                               for (const auto& [k, v] : s.field.metadata) {
                                 out[py::bytes(k)] = py::bytes(v);
                               }
                               return out;
                             })
      .def_property_readonly("field_names",
                             [](const PySchema& s) {
                               std::vector<std::string> names;
                               for (const auto& child : s.field.type->children) {
                                 names.push_back(child.name);
                               }
                               return names;
                             })
      .def("equals", [](const PySchema& a, const PySchema& b) { return a.field.Equals(b.field); })
      .def("__arrow_c_schema__", [](const PySchema& s) { return SchemaCapsule(s.field); })
      .def("__str__", [](const PySchema& s) { return s.field.ToString(); })
      .def("__repr__",
           [](const PySchema& s) { return "ferry.Schema(" + s.field.ToString() + ")"; });

  py::class_<PyArray>(m, "Array",
                      "An immutable Arrow array whose buffers may belong to another runtime or "
                      "live on a device.")
      .def("__len__", [](const PyArray& a) { return a.data->length; })
      .def_property_readonly("length", [](const PyArray& a) { return a.data->length; })
      .def_property_readonly("offset", [](const PyArray& a) { return a.data->offset; })
      .def_property_readonly("null_count",
                             [](const PyArray& a) {
                               return OnHost(a.placement)
                                          ? a.data->GetNullCount()
                                          : HostData(a.data, a.placement)->GetNullCount();
                             })
      .def_property_readonly("type", [](const PyArray& a) { return a.data->type->ToString(); })
      .def_property_readonly("format", [](const PyArray& a) { return FormatString(*a.data->type); })
      .def_property_readonly("schema", [](const PyArray& a) { return PySchema{a.field}; })
      .def_property_readonly(
          "device_type",
          [](const PyArray& a) { return device::DeviceTypeName(DeviceOf(a.placement)->type()); })
      .def_property_readonly("device_id",
                             [](const PyArray& a) { return DeviceOf(a.placement)->id(); })
      .def(
          "buffers", [](const PyArray& a) { return BufferInfo(*a.data); },
          "(address, size) of each buffer of this array (None where absent); device addresses "
          "for device arrays.")
      .def_property_readonly(
          "children",
          [](const PyArray& a) {
            std::vector<PyArray> out;
            const auto& fields = a.data->type->children;
            for (size_t i = 0; i < a.data->children.size(); ++i) {
              Field child_field =
                  i < fields.size() ? fields[i] : field("", a.data->children[i]->type);
              out.push_back(PyArray{child_field, a.data->children[i], a.placement});
            }
            return out;
          })
      .def_property_readonly(
          "dictionary",
          [](const PyArray& a) -> py::object {
            if (!a.data->dictionary) return py::none();
            return py::cast(PyArray{field("dictionary", a.data->dictionary->type),
                                    a.data->dictionary, a.placement});
          })
      .def(
          "slice",
          [](const PyArray& a, int64_t offset, std::optional<int64_t> length) {
            if (offset < 0 || offset > a.data->length)
              throw py::index_error("slice offset out of range");
            int64_t n = length.value_or(a.data->length - offset);
            if (n < 0) throw py::index_error("slice length must be >= 0");
            return PyArray{a.field, Slice(a.data, offset, n), a.placement};
          },
          py::arg("offset"), py::arg("length") = py::none())
      .def(
          "validate",
          [](const PyArray& a, bool full) { Check(ValidateData(a.data, a.placement, full)); },
          py::arg("full") = true)
      .def("equals",
           [](const PyArray& a, const PyArray& b) {
             return ArrayEquals(*HostData(a.data, a.placement), *HostData(b.data, b.placement));
           })
      .def("__arrow_c_schema__", [](const PyArray& a) { return SchemaCapsule(a.field); })
      .def(
          "__arrow_c_array__",
          [](const PyArray& a, py::object requested_schema) {
            auto [out_field, out_data] =
                ApplyRequestedSchema(a.field, HostData(a.data, a.placement), requested_schema);
            return py::make_tuple(SchemaCapsule(out_field), ArrayCapsule(out_data));
          },
          py::arg("requested_schema") = py::none())
      .def(
          "__arrow_c_device_array__",
          [](const PyArray& a, py::object requested_schema, const py::kwargs& kwargs) {
            RejectUnknownKwargs(kwargs);
            auto [out_field, out_data] = ApplyRequestedSchema(a.field, a.data, requested_schema);
            return py::make_tuple(SchemaCapsule(out_field),
                                  DeviceArrayCapsule(out_data, a.placement));
          },
          py::arg("requested_schema") = py::none())
      .def(
          "to_string",
          [](const PyArray& a, int64_t max_values) {
            return ArrayToString(*HostData(a.data, a.placement), max_values);
          },
          py::arg("max_values") = 20)
      .def("__str__",
           [](const PyArray& a) { return ArrayToString(*HostData(a.data, a.placement)); })
      .def("__repr__", [](const PyArray& a) {
        std::string where =
            OnHost(a.placement)
                ? ""
                : std::string(" on ") + device::DeviceTypeName(DeviceOf(a.placement)->type());
        return "ferry.Array<" + a.data->type->ToString() + ">[" + std::to_string(a.data->length) +
               "]" + where;
      });

  py::class_<PyRecordBatch>(m, "RecordBatch", "A schema and columns of equal length; immutable.")
      .def_static(
          "from_arrow",
          [](const py::object& obj) {
            py::object imported = ImportArrow(obj);
            if (py::isinstance<PyRecordBatch>(imported)) return imported.cast<PyRecordBatch>();
            if (py::isinstance<PyArray>(imported)) return BatchOf(imported.cast<PyArray>());
            throw py::type_error("expected an object exporting a struct array (__arrow_c_array__)");
          },
          py::arg("obj"))
      .def_property_readonly("num_rows", [](const PyRecordBatch& b) { return b.batch->num_rows(); })
      .def_property_readonly("num_columns",
                             [](const PyRecordBatch& b) { return b.batch->num_columns(); })
      .def("__len__", [](const PyRecordBatch& b) { return b.batch->num_rows(); })
      .def_property_readonly("device_type",
                             [](const PyRecordBatch& b) {
                               return device::DeviceTypeName(DeviceOf(b.placement)->type());
                             })
      .def_property_readonly("device_id",
                             [](const PyRecordBatch& b) { return DeviceOf(b.placement)->id(); })
      .def_property_readonly("column_names",
                             [](const PyRecordBatch& b) {
                               std::vector<std::string> names;
                               for (const auto& f : b.batch->schema()->fields)
                                 names.push_back(f.name);
                               return names;
                             })
      .def_property_readonly(
          "schema",
          [](const PyRecordBatch& b) { return PySchema{SchemaAsField(*b.batch->schema())}; })
      .def("column",
           [](const PyRecordBatch& b, py::object key) {
             int index;
             if (py::isinstance<py::str>(key)) {
               index = b.batch->schema()->GetFieldIndex(key.cast<std::string>());
               if (index < 0) throw py::key_error(key.cast<std::string>());
             } else {
               index = key.cast<int>();
               if (index < 0) index += b.batch->num_columns();
               if (index < 0 || index >= b.batch->num_columns())
                 throw py::index_error("column index out of range");
             }
             return PyArray{b.batch->schema()->fields[static_cast<size_t>(index)],
                            b.batch->column(index), b.placement};
           })
      .def(
          "slice",
          [](const PyRecordBatch& b, int64_t offset, std::optional<int64_t> length) {
            if (offset < 0 || offset > b.batch->num_rows())
              throw py::index_error("slice offset out of range");
            return PyRecordBatch{
                b.batch->Slice(offset, length.value_or(b.batch->num_rows() - offset)), b.placement};
          },
          py::arg("offset"), py::arg("length") = py::none())
      .def(
          "validate",
          [](const PyRecordBatch& b, bool full) {
            Check(ValidateData(b.batch->ToStructArray(), b.placement, full));
          },
          py::arg("full") = true)
      .def("equals",
           [](const PyRecordBatch& a, const PyRecordBatch& b) {
             return ArrayEquals(*HostData(a.batch->ToStructArray(), a.placement),
                                *HostData(b.batch->ToStructArray(), b.placement));
           })
      .def("__arrow_c_schema__",
           [](const PyRecordBatch& b) { return SchemaCapsule(SchemaAsField(*b.batch->schema())); })
      .def(
          "__arrow_c_array__",
          [](const PyRecordBatch& b, py::object requested_schema) {
            // CPU data as it is: exported straight from the batch.
            if (requested_schema.is_none() && b.placement.device == nullptr &&
                b.placement.event == nullptr) {
              return py::make_tuple(BatchSchemaCapsule(*b.batch), BatchArrayCapsule(*b.batch));
            }
            auto [out_field, out_data] = ApplyRequestedSchema(
                SchemaAsField(*b.batch->schema()), HostData(b.batch->ToStructArray(), b.placement),
                requested_schema);
            return py::make_tuple(SchemaCapsule(out_field), ArrayCapsule(out_data));
          },
          py::arg("requested_schema") = py::none())
      .def(
          "__arrow_c_device_array__",
          [](const PyRecordBatch& b, py::object requested_schema, const py::kwargs& kwargs) {
            RejectUnknownKwargs(kwargs);
            auto [out_field, out_data] = ApplyRequestedSchema(
                SchemaAsField(*b.batch->schema()), b.batch->ToStructArray(), requested_schema);
            return py::make_tuple(SchemaCapsule(out_field),
                                  DeviceArrayCapsule(out_data, b.placement));
          },
          py::arg("requested_schema") = py::none())
      .def(
          "__arrow_c_stream__",
          [](const PyRecordBatch& b, py::object requested_schema) {
            auto [out_field, out_data] = ApplyRequestedSchema(
                SchemaAsField(*b.batch->schema()), HostData(b.batch->ToStructArray(), b.placement),
                requested_schema);
            RecordBatchPtr batch =
                Unwrap(RecordBatch::FromStructArray(out_data, out_field.metadata));
            return ExportReader(Unwrap(RecordBatchReader::FromBatches(batch->schema(), {batch})));
          },
          py::arg("requested_schema") = py::none())
      .def(
          "__arrow_c_device_stream__",
          [](const PyRecordBatch& b, py::object requested_schema, const py::kwargs& kwargs) {
            RejectUnknownKwargs(kwargs);
            auto [out_field, out_data] = ApplyRequestedSchema(
                SchemaAsField(*b.batch->schema()), b.batch->ToStructArray(), requested_schema);
            RecordBatchPtr batch =
                Unwrap(RecordBatch::FromStructArray(out_data, out_field.metadata));
            return ExportDeviceReader(std::make_shared<SingleBatchDeviceReader>(
                device::DeviceBatch{batch, DeviceOf(b.placement), b.placement.event}));
          },
          py::arg("requested_schema") = py::none())
      .def("__str__",
           [](const PyRecordBatch& b) {
             auto host = HostData(b.batch->ToStructArray(), b.placement);
             return Unwrap(RecordBatch::FromStructArray(host, b.batch->schema()->metadata))
                 ->ToString();
           })
      .def("__repr__", [](const PyRecordBatch& b) {
        std::string where =
            OnHost(b.placement)
                ? ""
                : std::string(" on ") + device::DeviceTypeName(DeviceOf(b.placement)->type());
        return "ferry.RecordBatch(" + std::to_string(b.batch->num_rows()) + " rows, " +
               std::to_string(b.batch->num_columns()) + " columns" + where + ")";
      });

  py::class_<PyArrayStream>(m, "ArrayStream", "A one-shot stream of record batches.")
      .def_property_readonly(
          "schema",
          [](const PyArrayStream& s) { return PySchema{SchemaAsField(*StreamSchema(s))}; })
      .def("read_next", &NextBatch, "The next batch, or None at the end of the stream.")
      .def("read_all",
           [](PyArrayStream& s) {
             std::vector<py::object> out;
             while (true) {
               py::object batch = NextBatch(s);
               if (batch.is_none()) break;
               out.push_back(batch);
             }
             return out;
           })
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](PyArrayStream& s) {
             if (!s.open()) throw py::stop_iteration();
             py::object batch = NextBatch(s);
             if (batch.is_none()) throw py::stop_iteration();
             return batch;
           })
      .def("__arrow_c_schema__",
           [](const PyArrayStream& s) { return SchemaCapsule(SchemaAsField(*StreamSchema(s))); })
      .def(
          "__arrow_c_stream__",
          [](PyArrayStream& s, py::object requested_schema) {
            auto reader = TakeHostReader(s);
            if (!requested_schema.is_none()) {
              Field requested = FieldFromCapsule(requested_schema);
              Field ours = SchemaAsField(*reader->schema());
              if (!requested.type->Equals(*ours.type) && SameLayout(*ours.type, *requested.type)) {
                // Relabel every batch lazily as it is pulled.
                auto schema =
                    std::make_shared<Schema>(Schema{requested.type->children, requested.metadata});
                auto target = requested.type;
                reader = RecordBatchReader::FromFunction(
                    schema, [source = reader, target, schema]() -> Result<RecordBatchPtr> {
                      FERRY_ASSIGN_OR_RAISE(auto batch, source->Next());
                      if (!batch) return RecordBatchPtr();
                      FERRY_ASSIGN_OR_RAISE(auto viewed, ViewAs(batch->ToStructArray(), target));
                      return RecordBatch::FromStructArray(viewed, schema->metadata);
                    });
              }
            }
            return ExportReader(std::move(reader));
          },
          py::arg("requested_schema") = py::none())
      .def(
          "__arrow_c_device_stream__",
          [](PyArrayStream& s, py::object requested_schema, const py::kwargs& kwargs) {
            RejectUnknownKwargs(kwargs);
            if (!s.open()) throw py::value_error("the stream was already consumed");
            std::shared_ptr<device::DeviceBatchReader> reader =
                s.device_reader ? std::move(s.device_reader)
                                : std::make_shared<HostDeviceReader>(std::move(s.reader));
            s.reader.reset();
            s.device_reader.reset();
            return ExportDeviceReader(std::move(reader));
          },
          py::arg("requested_schema") = py::none())
      .def("__repr__", [](const PyArrayStream& s) {
        return std::string("ferry.ArrayStream(") + (s.open() ? "open" : "consumed") + ")";
      });

  m.def("import_arrow", &ImportArrow, py::arg("obj"),
        "Imports any object implementing the Arrow PyCapsule protocol without copying: "
        "arrays and record batches become ferry.Array, streams ferry.ArrayStream, schemas "
        "ferry.Schema. Device-aware producers are asked for device data first.");
  m.def(
      "record_batch",
      [](const py::object& obj) {
        if (py::isinstance<PyRecordBatch>(obj)) return obj.cast<PyRecordBatch>();
        if (!py::isinstance<PyArray>(obj)) {
          if (std::optional<PyRecordBatch> batch = ImportHostBatch(obj)) return *std::move(batch);
        }
        py::object imported = ImportArrow(obj);
        if (py::isinstance<PyRecordBatch>(imported)) return imported.cast<PyRecordBatch>();
        if (!py::isinstance<PyArray>(imported))
          throw py::type_error("expected an array-like object");
        return BatchOf(imported.cast<PyArray>());
      },
      py::arg("obj"), "Imports a struct array / record batch as ferry.RecordBatch.");
  m.def(
      "validate",
      [](const py::object& obj, bool full) {
        py::object imported = ImportArrow(obj);
        if (py::isinstance<PyArray>(imported)) {
          const auto& a = imported.cast<const PyArray&>();
          Check(ValidateData(a.data, a.placement, full));
        } else if (py::isinstance<PyRecordBatch>(imported)) {
          const auto& b = imported.cast<const PyRecordBatch&>();
          Check(ValidateData(b.batch->ToStructArray(), b.placement, full));
        } else if (py::isinstance<PyArrayStream>(imported)) {
          auto& s = imported.cast<PyArrayStream&>();
          auto reader = TakeHostReader(s);
          while (true) {
            auto batch = Unwrap(reader->Next());
            if (!batch) break;
            Check(full ? ValidateFull(*batch) : ValidateStructural(*batch));
          }
        } else {
          Check(ValidateType(*imported.cast<const PySchema&>().field.type));
        }
      },
      py::arg("obj"), py::arg("full") = true,
      "Validates an Arrow object; raises ValueError naming the column and rule that failed.");
  m.def(
      "sample_batch",
      [](int64_t rows) {
        return PyRecordBatch{Unwrap(MakeSampleBatch(rows)), {}};
      },
      py::arg("num_rows") = 10, "A record batch built by Ferry's C++ producer.");
  m.def(
      "wide_batch",
      [](int columns, int64_t rows) {
        return PyRecordBatch{Unwrap(MakeWideBatch(columns, rows)), {}};
      },
      py::arg("num_columns"), py::arg("num_rows"));
  m.def(
      "stream_of",
      [](const std::vector<PyRecordBatch>& batches) {
        if (batches.empty()) throw py::value_error("stream_of needs at least one batch");
        std::vector<RecordBatchPtr> items;
        for (const auto& b : batches) {
          if (OnHost(b.placement)) {
            items.push_back(b.batch);
            continue;
          }
          auto host = HostData(b.batch->ToStructArray(), b.placement);
          items.push_back(Unwrap(RecordBatch::FromStructArray(host, b.batch->schema()->metadata)));
        }
        PyArrayStream out;
        out.reader = Unwrap(RecordBatchReader::FromBatches(items.front()->schema(), items));
        return out;
      },
      "A stream over the given batches (they must share one schema).");
  m.def(
      "to_device",
      [](const PyRecordBatch& b, const std::string& device_type, int64_t device_id) {
        auto type = Unwrap(device::DeviceTypeFromName(device_type));
        device::Device* target = Unwrap(device::DeviceRegistry::Global().Get(type, device_id));
        auto copied = Unwrap(device::CopyArrayTo(
            device::DeviceArray{b.batch->ToStructArray(), DeviceOf(b.placement), b.placement.event},
            target));
        Placement placement{target->type() == device::DeviceType::kCpu ? nullptr : target,
                            copied.event};
        return PyRecordBatch{
            Unwrap(RecordBatch::FromStructArray(copied.data, b.batch->schema()->metadata)),
            placement};
      },
      py::arg("batch"), py::arg("device_type"), py::arg("device_id") = 0,
      "Copies a batch to a device (counted in telemetry), e.g. to_device(b, 'opencl', 0).");
  m.def(
      "_devices",
      [] {
        py::list out;
        for (const auto& entry : device::DeviceRegistry::Global().List()) {
          py::dict row;
          row["type"] = std::string(device::DeviceTypeName(entry.type));
          row["id"] = entry.id;
          row["name"] = entry.name;
          row["present"] = entry.present;
          row["reason"] = entry.reason;
          out.append(row);
        }
        return out;
      },
      "One dict per present device and one per device type without any (ferry.devices() wraps "
      "it).");
  m.def(
      "telemetry",
      [] {
        py::dict out;
        for (const auto& [name, value] : telemetry::Snapshot()) out[py::str(name)] = value;
        return out;
      },
      "Process-wide counters: bytes copied per direction, zero-copy exports/imports, releases, "
      "...");
  m.def("telemetry_prometheus", [] { return telemetry::ToPrometheus(); });
  m.def("reset_telemetry", [] { telemetry::Reset(); });
  // Export a batch through the raw C interface and import it back, N times:
  // the C++ side of the benchmark, without Python overhead per round.
  m.def("_bench_roundtrip", [](const PyRecordBatch& b, int64_t iterations) {
    for (int64_t i = 0; i < iterations; ++i) {
      ArrowArray array;
      ArrowSchema schema;
      Check(ExportRecordBatch(*b.batch, &array, &schema));
      auto imported = ImportRecordBatch(&array, &schema);
      schema.release(&schema);
      if (!imported.ok()) Raise(imported.status());
    }
  });

  BindFlow(m);
  {
    py::module_ flow = m.attr("flow").cast<py::module_>();
    BindNode(flow);
    BindOperators(flow);
  }
}

}  // namespace ferry::python
