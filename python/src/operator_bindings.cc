// Operators in Python: ferry._ferry.flow.OperatorHost runs Python operators
// and shared-library operators side by side in this process (`python -m
// ferry.runtime`, python/ferry/runtime.py). A Python operator is a callable
// on_event(event, send_output) -> CONTINUE | STOP (None counts as CONTINUE);
// the host calls it with the GIL held and runs everything else without it.
//
// Batches reach Python as ferry.RecordBatch objects over the sender's own
// buffers (a device batch stays on its device, already waited for); what
// Python sends (ferry, pyarrow, polars, ... batches) is exported as it is.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/c/ferry_operator.h"
#include "ferry/device/device_bridge.h"
#include "ferry/exchange/bridge.h"
#include "ferry/flow/node.h"
#include "flow/operator/metadata_json.h"
#include "flow/operator/operator_host.h"
#include "flow/operator/operator_list.h"
#include "flow/operator/runtime_main.h"
#include "flow/operator/scripted_node.h"
#include "objects.h"

namespace ferry::python {
namespace {

using flow::OperatorDefinition;
using flow::OperatorHost;

const char* EventTypeText(int32_t type) {
  switch (type) {
    case FERRY_EVENT_INPUT:
      return "INPUT";
    case FERRY_EVENT_INPUT_CLOSED:
      return "INPUT_CLOSED";
    case FERRY_EVENT_STOP:
      return "STOP";
    case FERRY_EVENT_ERROR:
      return "ERROR";
    default:
      return "UNKNOWN";
  }
}

py::dict MetadataToDict(const Metadata& metadata) { return TypedMetadataDict(metadata); }

bool IsInstance(const py::handle& data, const char* module, const char* name) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains(module)) return false;
  py::object type = py::getattr(modules[module], name, py::none());
  return !type.is_none() && py::isinstance(data, type);
}

// What Python sends: a batch left where it is (a device batch stays on its
// device), or an array sent by the array convention (node.h).
struct Outgoing {
  PyRecordBatch batch;
  bool is_array = false;
};

Outgoing OutgoingFrom(const py::object& data) {
  const bool array_like = py::isinstance<PyArray>(data) || IsInstance(data, "pyarrow", "Array");
  py::object imported = ImportArrow(data);
  if (py::isinstance<PyRecordBatch>(imported)) return {imported.cast<PyRecordBatch>(), false};
  if (!py::isinstance<PyArray>(imported)) {
    throw py::type_error(
        "send_output needs a record batch or an array (ferry, pyarrow, polars "
        "or anything with __arrow_c_array__); send a table's batches one by one");
  }
  const auto& array = imported.cast<const PyArray&>();
  if (!array_like && array.data->type->id == TypeId::kStruct) {
    return {PyRecordBatch{Unwrap(RecordBatch::FromStructArray(array.data, array.field.metadata)),
                          array.placement},
            false};
  }
  return {
      PyRecordBatch{Unwrap(flow::ArrayAsBatch(array.data, array.field.nullable)), array.placement},
      true};
}

// Sends `data` through the C ABI, as a library operator would.
void SendThroughHost(const FerryOperatorHost* host, const std::string& output,
                     const py::object& data, const py::object& metadata) {
  Outgoing outgoing = OutgoingFrom(data);
  const PyRecordBatch& batch = outgoing.batch;
  Metadata typed = TypedMetadataFrom(metadata);
  if (outgoing.is_array) typed.emplace_back(std::string(flow::kArrayMetadataKey), "1");
  const std::string metadata_json = flow::internal::MetadataToJson(typed);
  device::Device* where =
      batch.placement.device ? batch.placement.device : device::DeviceRegistry::Global().cpu();
  ArrowDeviceArray c_array;
  Check(device::ExportDeviceArray(
      device::DeviceArray{batch.batch->ToStructArray(), where, batch.placement.event}, &c_array));
  ArrowSchema c_schema;
  Status exported = ExportSchema(*batch.batch->schema(), &c_schema);
  if (!exported.ok()) {
    c_array.array.release(&c_array.array);
    Raise(exported);
  }
  int code = 0;
  std::string error;
  {
    // Publishing may wait for the node's subscribers.
    py::gil_scoped_release unlocked;
    code = host->send_output(host->context, output.c_str(), &c_array, &c_schema,
                             metadata_json.c_str());
    if (code != 0) error = host->last_error(host->context);
    c_schema.release(&c_schema);
    if (c_array.array.release != nullptr) c_array.array.release(&c_array.array);
  }
  if (code != 0) Raise(Status::FromErrno(code, error));
}

// A Python operator as the host drives it.
class PythonOperator final : public flow::OperatorInstance {
 public:
  explicit PythonOperator(py::object on_event) : on_event_(std::move(on_event)) {}

  ~PythonOperator() override {
    py::gil_scoped_acquire gil;
    on_event_ = py::object();
  }

  int Init(const FerryOperatorHost*, const std::string&, std::string*) override { return 0; }

  int OnEvent(const FerryOperatorEvent& event, const FerryOperatorHost* host,
              std::string* error) override {
    py::gil_scoped_acquire gil;
    try {
      py::dict python_event;
      python_event["type"] = EventTypeText(event.type);
      python_event["id"] = event.id ? event.id : "";
      if (event.type == FERRY_EVENT_INPUT) {
        Status imported = ImportInput(event, &python_event);
        if (!imported.ok()) {
          *error = "the input could not be imported: " + imported.message();
          return FERRY_OPERATOR_ERROR;
        }
      }
      if (event.type == FERRY_EVENT_ERROR) python_event["error"] = event.error ? event.error : "";
      py::cpp_function send_output(
          [host](const std::string& output, py::object data, py::object metadata) {
            SendThroughHost(host, output, data, metadata);
          },
          py::arg("output_id"), py::arg("data"), py::arg("metadata") = py::none());
      py::object result = on_event_(python_event, send_output);
      if (result.is_none()) return FERRY_OPERATOR_CONTINUE;
      if (py::isinstance<py::int_>(result)) {
        const int code = result.cast<int>();
        if (code == FERRY_OPERATOR_CONTINUE || code == FERRY_OPERATOR_STOP) return code;
      }
      *error = "on_event returned " + py::repr(result).cast<std::string>() +
               " (expected ferry.flow.CONTINUE or ferry.flow.STOP)";
      return FERRY_OPERATOR_ERROR;
    } catch (py::error_already_set& raised) {
      *error = std::string("Python exception: ") + raised.what();
      return FERRY_OPERATOR_ERROR;
    } catch (const std::exception& raised) {
      *error = raised.what();
      return FERRY_OPERATOR_ERROR;
    }
  }

  void Drop() override {
    py::gil_scoped_acquire gil;
    on_event_ = py::object();
  }

 private:
  // The batch as a ferry.RecordBatch: buffers where the sender left them,
  // waited for on the host.
  static Status ImportInput(const FerryOperatorEvent& event, py::dict* out) {
    if (event.array == nullptr || event.schema == nullptr) {
      return Status::Invalid("an INPUT event without a batch");
    }
    FERRY_ASSIGN_OR_RAISE(SchemaPtr schema, ImportSchema(event.schema));
    device::DeviceArray array;
    {
      py::gil_scoped_release unlocked;
      FERRY_ASSIGN_OR_RAISE(array, device::ImportDeviceArray(event.array, struct_(schema->fields)));
    }
    FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch,
                          RecordBatch::FromStructArray(array.data, schema->metadata));
    FERRY_ASSIGN_OR_RAISE(Metadata metadata, flow::internal::MetadataFromJson(event.metadata_json));
    // An array sent by the array convention is handed over as the array.
    ArrayDataPtr unwrapped = flow::ArrayOfMessage(*batch, metadata);
    const bool on_host = array.device == nullptr || array.device->host_accessible();
    if (on_host) {
      // pyarrow objects over the same buffers, as the Python node API gives.
      py::module_ pyarrow = py::module_::import("pyarrow");
      (*out)["value"] =
          unwrapped
              ? pyarrow.attr("array")(py::cast(PyArray{batch->schema()->fields[0], unwrapped, {}}))
              : pyarrow.attr("record_batch")(py::cast(PyRecordBatch{batch, {}}));
    } else {
      // Device memory: ferry objects, which keep the data on its device.
      Placement placement{array.device, array.event};
      (*out)["value"] = unwrapped
                            ? py::cast(PyArray{batch->schema()->fields[0], unwrapped, placement})
                            : py::cast(PyRecordBatch{std::move(batch), placement});
    }
    (*out)["metadata"] = MetadataToDict(metadata);
    (*out)["sequence"] = event.sequence;
    return Status::OK();
  }

  py::object on_event_;
};

OperatorDefinition DefinitionFromJson(const std::string& json) {
  auto parsed = Unwrap(flow::ParseOperatorList("[" + json + "]"));
  if (parsed.size() != 1) throw py::value_error("expected one operator definition");
  return parsed[0];
}

py::object JsonLoads(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}

}  // namespace

void BindOperators(py::module_& flow_module) {
  flow_module.attr("CONTINUE") = FERRY_OPERATOR_CONTINUE;
  flow_module.attr("STOP") = FERRY_OPERATOR_STOP;

  flow_module.def(
      "parse_operators",
      [](const std::string& text) {
        return JsonLoads(flow::OperatorListToJson(Unwrap(flow::ParseOperatorList(text))));
      },
      py::arg("text"),
      "Checks a FERRY_OPERATORS list and returns it with every default filled in.");

  py::class_<OperatorHost>(flow_module, "OperatorHost",
                           "Runs the operators of one runtime node in this process.")
      .def(py::init([](bool log_errors) {
             flow::OperatorHostOptions options;
             options.log_errors = log_errors;
             return std::make_unique<OperatorHost>(options);
           }),
           py::arg("log_errors") = true)
      .def(
          "add",
          [](OperatorHost& host, const std::string& definition_json, py::object on_event) {
            OperatorDefinition definition = DefinitionFromJson(definition_json);
            if (definition.kind == flow::OperatorSpec::Kind::kPython) {
              if (on_event.is_none() || !PyCallable_Check(on_event.ptr())) {
                throw py::type_error("operator '" + definition.id +
                                     "' is a Python operator: pass its on_event callable");
              }
              Check(host.Add(definition, std::make_unique<PythonOperator>(std::move(on_event))));
              return;
            }
            py::gil_scoped_release unlocked;  // init may compile kernels
            Check(host.Add(definition));
          },
          py::arg("definition"), py::arg("on_event") = py::none(),
          "Adds an operator from its FERRY_OPERATORS entry (JSON text); a Python operator "
          "also needs its on_event(event, send_output) callable.")
      .def(
          "run_node",
          [](OperatorHost& host) {
            py::gil_scoped_release unlocked;
            return flow::RunHostOnNode(host);
          },
          "Runs as the node of FERRY_NODE_CONFIG until the operators finish; returns the "
          "process exit status.")
      .def(
          "run_scripted",
          [](OperatorHost& host, const std::vector<std::string>& inputs,
             const std::vector<std::string>& outputs, const py::list& events) {
            flow::NodeConfig config;
            config.dataflow = "scripted";
            config.node = "runtime";
            for (const auto& id : inputs) config.inputs.push_back({id, "scripted/" + id});
            for (const auto& id : outputs) config.outputs.push_back({id, "scripted/runtime/" + id});
            flow::ScriptedNode node(std::move(config));
            for (const auto& item : events) {
              auto event = item.cast<py::tuple>();
              const auto kind = event[0].cast<std::string>();
              if (kind == "input") {
                node.PushInput(event[1].cast<std::string>(),
                               HostBatchFrom(py::reinterpret_borrow<py::object>(event[2])),
                               event.size() > 3 ? TypedMetadataFrom(event[3]) : Metadata{});
              } else if (kind == "closed") {
                node.PushInputClosed(event[1].cast<std::string>());
              } else if (kind == "stop") {
                node.PushStop(event[1].cast<std::string>());
              } else if (kind == "error") {
                node.PushError(event[1].cast<std::string>());
              } else {
                throw py::value_error(
                    "events are ('input', id, batch[, metadata]), "
                    "('closed', id), ('stop', reason) or ('error', message)");
              }
            }
            Status ran;
            {
              py::gil_scoped_release unlocked;
              ran = host.Run(&node);
            }
            Check(ran);
            py::list sent;
            for (const auto& message : node.sent()) {
              sent.append(py::make_tuple(message.output, PyRecordBatch{message.batch, {}},
                                         MetadataToDict(message.metadata)));
            }
            return py::make_tuple(sent, node.closed_outputs());
          },
          py::arg("inputs"), py::arg("outputs"), py::arg("events"),
          "Runs against a scripted node (no daemon): `inputs` and `outputs` are the node's "
          "port ids ('<operator>/<port>'), `events` its input events in order. Returns "
          "(sent, closed): (output, batch, metadata) per published batch, and the outputs "
          "closed, in order.")
      .def("errors",
           [](const OperatorHost& host) {
             py::list out;
             for (const auto& error : host.errors()) {
               out.append(py::make_tuple(error.operator_id, error.message));
             }
             return out;
           })
      .def("stats", [](const OperatorHost& host) { return JsonLoads(host.StatsJson()); });
}

}  // namespace ferry::python
