// The Python-facing objects of the `ferry._ferry` module, shared by its
// translation units (module.cc: exchange and devices; flow_bindings.cc: the
// cross-process transport). Internal to the extension.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "ferry/base/status.h"
#include "ferry/device/device.h"
#include "ferry/device/device_bridge.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/stream.h"
#include "ferry/exchange/type.h"

namespace ferry::python {

namespace py = pybind11;

// Where an object's buffers live. CPU data has no event.
struct Placement {
  device::Device* device = nullptr;  // nullptr = the CPU
  device::EventPtr event;
};

struct PySchema {
  Field field;
};

struct PyArray {
  Field field;
  ArrayDataPtr data;
  Placement placement;
};

struct PyRecordBatch {
  RecordBatchPtr batch;
  Placement placement;
};

// Exactly one of the readers is set until the stream is consumed or exported.
struct PyArrayStream {
  std::shared_ptr<RecordBatchReader> reader;
  std::shared_ptr<device::DeviceBatchReader> device_reader;
  bool open() const { return reader != nullptr || device_reader != nullptr; }
};

// Raises the Status as a Python exception: ValueError for invalid data,
// TypeError, IndexError, MemoryError, NotImplementedError, TimeoutError,
// else RuntimeError.
[[noreturn]] void Raise(const Status& status);
inline void Check(const Status& status) {
  if (!status.ok()) Raise(status);
}
template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) Raise(result.status());
  return result.MoveValueUnsafe();
}

// Imports anything that speaks the Arrow PyCapsule protocol (see import_arrow).
py::object ImportArrow(const py::object& obj);
// A record batch from any batch-like object (ferry, pyarrow, polars, ...),
// with host-resident buffers (device batches are copied, counted).
RecordBatchPtr HostBatchFrom(const py::object& obj);

// Fixed-width numeric types a loan can hold, by name ("uint8" ... "float64");
// ValueError for any other name (flow_bindings.cc).
TypePtr LoanType(const std::string& name);
// The buffer-protocol format of one of LoanType's types (flow_bindings.cc).
std::string BufferFormat(TypeId id);
// A dict of str keys to str, int, float, bool, list (or tuple) and dict
// values as typed metadata (node.h: the values travel as text and come back
// typed); None gives none. With `allow_bytes`, a bytes value travels as its
// bytes (read back as str). TypeError or ValueError, naming the value, for
// anything else: other types, non-str keys, integers beyond 64 bits, nesting
// deeper than flow::kMaxMetadataDepth, more than flow::kMaxMetadataBytes
// (node_bindings.cc).
Metadata TypedMetadataFrom(const py::object& metadata, bool allow_bytes = false);
// The inverse: the typed values of received metadata as a dict ("ferry.*"
// keys left out; text that is not UTF-8 decoded with replacement characters).
py::dict TypedMetadataDict(const Metadata& metadata);

// Registers ferry._ferry.flow (the transport).
void BindFlow(py::module_& m);
// ferry._ferry.flow.Node (node_bindings.cc), given the flow submodule.
void BindNode(py::module_& flow);
// Operator hosting for `python -m ferry.runtime` (operator_bindings.cc).
void BindOperators(py::module_& flow);

}  // namespace ferry::python
