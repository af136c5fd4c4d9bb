// The `ferry._ferry` extension: Ferry's arrays, record batches and streams
// for Python, speaking the Arrow PyCapsule protocol in both directions
// without copying buffers. The pure-Python package (python/ferry) re-exports
// these names.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ferry/c/abi.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/cast.h"
#include "ferry/exchange/sample.h"
#include "ferry/exchange/stream.h"
#include "ferry/exchange/type.h"
#include "ferry/exchange/validate.h"
#include "ferry/telemetry/telemetry.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

constexpr const char* kSchemaCapsule = "arrow_schema";
constexpr const char* kArrayCapsule = "arrow_array";
constexpr const char* kStreamCapsule = "arrow_array_stream";

// Raises the Status as a Python exception: ValueError for invalid data,
// TypeError, IndexError, MemoryError, NotImplementedError, else RuntimeError.
[[noreturn]] void Raise(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalid: throw py::value_error(status.message());
    case StatusCode::kTypeError: throw py::type_error(status.message());
    case StatusCode::kIndexError: throw py::index_error(status.message());
    case StatusCode::kOutOfMemory: throw std::bad_alloc();
    case StatusCode::kNotImplemented:
      PyErr_SetString(PyExc_NotImplementedError, status.message().c_str());
      throw py::error_already_set();
    default: throw std::runtime_error(status.ToString());
  }
}

void Check(const Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) Raise(result.status());
  return result.MoveValueUnsafe();
}

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

struct PySchema {
  Field field;
};

struct PyArray {
  Field field;
  ArrayDataPtr data;
};

struct PyRecordBatch {
  RecordBatchPtr batch;
};

struct PyArrayStream {
  std::shared_ptr<RecordBatchReader> reader;  // null once consumed or exported
};

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

std::shared_ptr<RecordBatchReader> ReaderFromCapsule(const py::handle& capsule) {
  auto* stream = CapsulePointer<ArrowArrayStream>(capsule, kStreamCapsule);
  if (stream->release == nullptr) throw py::value_error("the ArrowArrayStream was already released");
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

// Imports anything that speaks the PyCapsule protocol.
py::object ImportArrow(const py::object& obj) {
  if (py::isinstance<PyArray>(obj) || py::isinstance<PyRecordBatch>(obj) ||
      py::isinstance<PySchema>(obj) || py::isinstance<PyArrayStream>(obj)) {
    return obj;
  }
  if (py::hasattr(obj, "__arrow_c_array__")) {
    py::tuple capsules = obj.attr("__arrow_c_array__")();
    if (capsules.size() != 2) throw py::type_error("__arrow_c_array__ must return a 2-tuple");
    return py::cast(ArrayFromCapsules(capsules[0], capsules[1]));
  }
  if (py::hasattr(obj, "__arrow_c_stream__")) {
    return py::cast(PyArrayStream{ReaderFromCapsule(obj.attr("__arrow_c_stream__")())});
  }
  if (py::hasattr(obj, "__arrow_c_schema__")) {
    return py::cast(PySchema{FieldFromCapsule(obj.attr("__arrow_c_schema__")())});
  }
  throw py::type_error(std::string("object of type '") +
                       py::str(obj.get_type().attr("__name__")).cast<std::string>() +
                       "' does not implement the Arrow PyCapsule protocol");
}

RecordBatchPtr BatchFromArray(const PyArray& array) {
  Metadata metadata = array.field.metadata;
  return Unwrap(RecordBatch::FromStructArray(array.data, metadata));
}

}  // namespace

PYBIND11_MODULE(_ferry, m) {
  m.doc() = "Ferry: zero-copy Arrow exchange (native module)";

  py::class_<PySchema>(m, "Schema", "An Arrow type with its field name, nullability and metadata.")
      .def_property_readonly("name", [](const PySchema& s) { return s.field.name; })
      .def_property_readonly("format", [](const PySchema& s) { return FormatString(*s.field.type); })
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
      .def("__repr__", [](const PySchema& s) { return "ferry.Schema(" + s.field.ToString() + ")"; });

  py::class_<PyArray>(m, "Array", "An immutable Arrow array whose buffers may belong to another runtime.")
      .def("__len__", [](const PyArray& a) { return a.data->length; })
      .def_property_readonly("length", [](const PyArray& a) { return a.data->length; })
      .def_property_readonly("offset", [](const PyArray& a) { return a.data->offset; })
      .def_property_readonly("null_count", [](const PyArray& a) { return a.data->GetNullCount(); })
      .def_property_readonly("type", [](const PyArray& a) { return a.data->type->ToString(); })
      .def_property_readonly("format", [](const PyArray& a) { return FormatString(*a.data->type); })
      .def_property_readonly("schema", [](const PyArray& a) { return PySchema{a.field}; })
      .def("buffers", [](const PyArray& a) { return BufferInfo(*a.data); },
           "(address, size) of each buffer of this array (None where absent).")
      .def_property_readonly("children",
                             [](const PyArray& a) {
                               std::vector<PyArray> out;
                               const auto& fields = a.data->type->children;
                               for (size_t i = 0; i < a.data->children.size(); ++i) {
                                 Field child_field = i < fields.size() ? fields[i] : field("", a.data->children[i]->type);
                                 out.push_back(PyArray{child_field, a.data->children[i]});
                               }
                               return out;
                             })
      .def_property_readonly("dictionary",
                             [](const PyArray& a) -> py::object {
                               if (!a.data->dictionary) return py::none();
                               return py::cast(PyArray{field("dictionary", a.data->dictionary->type), a.data->dictionary});
                             })
      .def("slice",
           [](const PyArray& a, int64_t offset, std::optional<int64_t> length) {
             if (offset < 0 || offset > a.data->length) throw py::index_error("slice offset out of range");
             int64_t n = length.value_or(a.data->length - offset);
             if (n < 0) throw py::index_error("slice length must be >= 0");
             return PyArray{a.field, Slice(a.data, offset, n)};
           },
           py::arg("offset"), py::arg("length") = py::none())
      .def("validate",
           [](const PyArray& a, bool full) {
             Check(full ? ValidateFull(*a.data) : ValidateStructural(*a.data));
           },
           py::arg("full") = true)
      .def("equals", [](const PyArray& a, const PyArray& b) { return ArrayEquals(*a.data, *b.data); })
      .def("__arrow_c_schema__", [](const PyArray& a) { return SchemaCapsule(a.field); })
      .def("__arrow_c_array__",
           [](const PyArray& a, py::object requested_schema) {
             auto [out_field, out_data] = ApplyRequestedSchema(a.field, a.data, requested_schema);
             return py::make_tuple(SchemaCapsule(out_field), ArrayCapsule(out_data));
           },
           py::arg("requested_schema") = py::none())
      .def("to_string", [](const PyArray& a, int64_t max_values) { return ArrayToString(*a.data, max_values); },
           py::arg("max_values") = 20)
      .def("__str__", [](const PyArray& a) { return ArrayToString(*a.data); })
      .def("__repr__", [](const PyArray& a) {
        return "ferry.Array<" + a.data->type->ToString() + ">[" + std::to_string(a.data->length) + "]";
      });

  py::class_<PyRecordBatch>(m, "RecordBatch", "A schema and columns of equal length; immutable.")
      .def_static("from_arrow",
                  [](const py::object& obj) {
                    py::object imported = ImportArrow(obj);
                    if (py::isinstance<PyRecordBatch>(imported)) return imported.cast<PyRecordBatch>();
                    if (py::isinstance<PyArray>(imported)) {
                      return PyRecordBatch{BatchFromArray(imported.cast<PyArray>())};
                    }
                    throw py::type_error("expected an object exporting a struct array (__arrow_c_array__)");
                  },
                  py::arg("obj"))
      .def_property_readonly("num_rows", [](const PyRecordBatch& b) { return b.batch->num_rows(); })
      .def_property_readonly("num_columns", [](const PyRecordBatch& b) { return b.batch->num_columns(); })
      .def("__len__", [](const PyRecordBatch& b) { return b.batch->num_rows(); })
      .def_property_readonly("column_names",
                             [](const PyRecordBatch& b) {
                               std::vector<std::string> names;
                               for (const auto& f : b.batch->schema()->fields) names.push_back(f.name);
                               return names;
                             })
      .def_property_readonly("schema", [](const PyRecordBatch& b) { return PySchema{SchemaAsField(*b.batch->schema())}; })
      .def("column",
           [](const PyRecordBatch& b, py::object key) {
             int index;
             if (py::isinstance<py::str>(key)) {
               index = b.batch->schema()->GetFieldIndex(key.cast<std::string>());
               if (index < 0) throw py::key_error(key.cast<std::string>());
             } else {
               index = key.cast<int>();
               if (index < 0) index += b.batch->num_columns();
               if (index < 0 || index >= b.batch->num_columns()) throw py::index_error("column index out of range");
             }
             return PyArray{b.batch->schema()->fields[static_cast<size_t>(index)], b.batch->column(index)};
           })
      .def("slice",
           [](const PyRecordBatch& b, int64_t offset, std::optional<int64_t> length) {
             if (offset < 0 || offset > b.batch->num_rows()) throw py::index_error("slice offset out of range");
             return PyRecordBatch{b.batch->Slice(offset, length.value_or(b.batch->num_rows() - offset))};
           },
           py::arg("offset"), py::arg("length") = py::none())
      .def("validate",
           [](const PyRecordBatch& b, bool full) { Check(full ? ValidateFull(*b.batch) : ValidateStructural(*b.batch)); },
           py::arg("full") = true)
      .def("equals", [](const PyRecordBatch& a, const PyRecordBatch& b) { return a.batch->Equals(*b.batch); })
      .def("__arrow_c_schema__", [](const PyRecordBatch& b) { return SchemaCapsule(SchemaAsField(*b.batch->schema())); })
      .def("__arrow_c_array__",
           [](const PyRecordBatch& b, py::object requested_schema) {
             auto [out_field, out_data] = ApplyRequestedSchema(SchemaAsField(*b.batch->schema()),
                                                               b.batch->ToStructArray(), requested_schema);
             return py::make_tuple(SchemaCapsule(out_field), ArrayCapsule(out_data));
           },
           py::arg("requested_schema") = py::none())
      .def("__arrow_c_stream__",
           [](const PyRecordBatch& b, py::object requested_schema) {
             RecordBatchPtr batch = b.batch;
             if (!requested_schema.is_none()) {
               auto [out_field, out_data] = ApplyRequestedSchema(SchemaAsField(*b.batch->schema()),
                                                                 b.batch->ToStructArray(), requested_schema);
               batch = Unwrap(RecordBatch::FromStructArray(out_data, out_field.metadata));
             }
             return ExportReader(Unwrap(RecordBatchReader::FromBatches(batch->schema(), {batch})));
           },
           py::arg("requested_schema") = py::none())
      .def("__str__", [](const PyRecordBatch& b) { return b.batch->ToString(); })
      .def("__repr__", [](const PyRecordBatch& b) {
        return "ferry.RecordBatch(" + std::to_string(b.batch->num_rows()) + " rows, " +
               std::to_string(b.batch->num_columns()) + " columns)";
      });

  py::class_<PyArrayStream>(m, "ArrayStream", "A one-shot stream of record batches.")
      .def_property_readonly("schema",
                             [](const PyArrayStream& s) {
                               if (!s.reader) throw py::value_error("the stream was already consumed");
                               return PySchema{SchemaAsField(*s.reader->schema())};
                             })
      .def("read_next",
           [](PyArrayStream& s) -> py::object {
             if (!s.reader) throw py::value_error("the stream was already consumed");
             RecordBatchPtr batch;
             {
               py::gil_scoped_release unlocked;
               auto next = s.reader->Next();
               if (!next.ok()) {
                 py::gil_scoped_acquire locked;
                 Raise(next.status());
               }
               batch = next.MoveValueUnsafe();
             }
             if (!batch) return py::none();
             return py::cast(PyRecordBatch{batch});
           },
           "The next batch, or None at the end of the stream.")
      .def("read_all",
           [](PyArrayStream& s) {
             if (!s.reader) throw py::value_error("the stream was already consumed");
             std::vector<PyRecordBatch> out;
             for (auto& batch : Unwrap(s.reader->ReadAll())) out.push_back(PyRecordBatch{batch});
             return out;
           })
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](PyArrayStream& s) {
             if (!s.reader) throw py::stop_iteration();
             auto batch = Unwrap(s.reader->Next());
             if (!batch) throw py::stop_iteration();
             return PyRecordBatch{batch};
           })
      .def("__arrow_c_schema__",
           [](const PyArrayStream& s) {
             if (!s.reader) throw py::value_error("the stream was already consumed");
             return SchemaCapsule(SchemaAsField(*s.reader->schema()));
           })
      .def("__arrow_c_stream__",
           [](PyArrayStream& s, py::object requested_schema) {
             if (!s.reader) throw py::value_error("the stream was already consumed");
             if (!requested_schema.is_none()) {
               Field requested = FieldFromCapsule(requested_schema);
               Field ours = SchemaAsField(*s.reader->schema());
               if (!requested.type->Equals(*ours.type) && SameLayout(*ours.type, *requested.type)) {
                 // Relabel every batch lazily as it is pulled.
                 auto source = s.reader;
                 auto schema = std::make_shared<Schema>(Schema{requested.type->children, requested.metadata});
                 auto target = requested.type;
                 s.reader = RecordBatchReader::FromFunction(schema, [source, target, schema]() -> Result<RecordBatchPtr> {
                   FERRY_ASSIGN_OR_RAISE(auto batch, source->Next());
                   if (!batch) return RecordBatchPtr();
                   FERRY_ASSIGN_OR_RAISE(auto viewed, ViewAs(batch->ToStructArray(), target));
                   return RecordBatch::FromStructArray(viewed, schema->metadata);
                 });
               }
             }
             auto reader = std::move(s.reader);
             s.reader.reset();
             return ExportReader(std::move(reader));
           },
           py::arg("requested_schema") = py::none())
      .def("__repr__", [](const PyArrayStream& s) {
        return std::string("ferry.ArrayStream(") + (s.reader ? "open" : "consumed") + ")";
      });

  m.def("import_arrow", &ImportArrow, py::arg("obj"),
        "Imports any object implementing the Arrow PyCapsule protocol without copying: "
        "arrays and record batches become ferry.Array, streams ferry.ArrayStream, schemas "
        "ferry.Schema.");
  m.def("record_batch",
        [](const py::object& obj) {
          py::object imported = ImportArrow(obj);
          if (py::isinstance<PyRecordBatch>(imported)) return imported.cast<PyRecordBatch>();
          if (!py::isinstance<PyArray>(imported)) throw py::type_error("expected an array-like object");
          return PyRecordBatch{BatchFromArray(imported.cast<PyArray>())};
        },
        py::arg("obj"), "Imports a struct array / record batch as ferry.RecordBatch.");
  m.def("validate",
        [](const py::object& obj, bool full) {
          py::object imported = ImportArrow(obj);
          if (py::isinstance<PyArray>(imported)) {
            const auto& a = imported.cast<const PyArray&>();
            Check(full ? ValidateFull(*a.data) : ValidateStructural(*a.data));
          } else if (py::isinstance<PyRecordBatch>(imported)) {
            const auto& b = imported.cast<const PyRecordBatch&>();
            Check(full ? ValidateFull(*b.batch) : ValidateStructural(*b.batch));
          } else if (py::isinstance<PyArrayStream>(imported)) {
            auto& s = imported.cast<PyArrayStream&>();
            if (!s.reader) throw py::value_error("the stream was already consumed");
            while (true) {
              auto batch = Unwrap(s.reader->Next());
              if (!batch) break;
              Check(full ? ValidateFull(*batch) : ValidateStructural(*batch));
            }
          } else {
            Check(ValidateType(*imported.cast<const PySchema&>().field.type));
          }
        },
        py::arg("obj"), py::arg("full") = true,
        "Validates an Arrow object; raises ValueError naming the column and rule that failed.");
  m.def("sample_batch", [](int64_t rows) { return PyRecordBatch{Unwrap(MakeSampleBatch(rows))}; },
        py::arg("num_rows") = 10, "A record batch built by Ferry's C++ producer.");
  m.def("wide_batch",
        [](int columns, int64_t rows) { return PyRecordBatch{Unwrap(MakeWideBatch(columns, rows))}; },
        py::arg("num_columns"), py::arg("num_rows"));
  m.def("stream_of", [](const std::vector<PyRecordBatch>& batches) {
          if (batches.empty()) throw py::value_error("stream_of needs at least one batch");
          std::vector<RecordBatchPtr> items;
          for (const auto& b : batches) items.push_back(b.batch);
          return PyArrayStream{Unwrap(RecordBatchReader::FromBatches(items.front()->schema(), items))};
        },
        "A stream over the given batches (they must share one schema).");
  m.def("telemetry",
        [] {
          py::dict out;
          for (const auto& [name, value] : telemetry::Snapshot()) out[py::str(name)] = value;
          return out;
        },
        "Process-wide counters: bytes copied per direction, zero-copy exports/imports, releases, ...");
  m.def("telemetry_prometheus", [] { return telemetry::ToPrometheus(); });
  m.def("reset_telemetry", [] { telemetry::Reset(); });
  // Export a batch through the raw C interface and import it back, N times:
  // the C++ side of the benchmark, without Python overhead per round.
  m.def("_bench_roundtrip",
        [](const PyRecordBatch& b, int64_t iterations) {
          for (int64_t i = 0; i < iterations; ++i) {
            ArrowArray array;
            ArrowSchema schema;
            Check(ExportRecordBatch(*b.batch, &array, &schema));
            auto imported = ImportRecordBatch(&array, &schema);
            schema.release(&schema);
            if (!imported.ok()) Raise(imported.status());
          }
        });
}

}  // namespace ferry::python
