// ferry.flow: the cross-process transport from Python. Received batches are
// ferry.RecordBatch objects whose buffers are the shared memory itself;
// sending accepts anything with the PyCapsule protocol, and loans let Python
// code write a payload straight into shared memory so that nothing is copied.
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <string>

#include "ferry/exchange/builder.h"
#include "ferry/flow/transport.h"
#include "objects.h"

namespace ferry::python {
namespace {

using std::chrono::duration_cast;
using std::chrono::nanoseconds;

nanoseconds Seconds(double seconds) {
  if (!(seconds >= 0)) throw py::value_error("timeouts must be >= 0 seconds");
  return duration_cast<nanoseconds>(std::chrono::duration<double>(seconds));
}

flow::WaitStrategy Strategy(bool busy_poll, double spin_us) {
  flow::WaitStrategy wait;
  wait.busy_poll = busy_poll;
  wait.spin = duration_cast<nanoseconds>(std::chrono::duration<double, std::micro>(spin_us));
  return wait;
}

py::dict StatsDict(const flow::ChannelStats& stats) {
  py::dict out;
  out["sent"] = stats.sent;
  out["delivered"] = stats.delivered;
  out["received"] = stats.received;
  out["dropped_oldest"] = stats.dropped_oldest;
  out["dropped_newest"] = stats.dropped_newest;
  out["bytes_sent"] = stats.bytes_sent;
  out["bytes_copied"] = stats.bytes_copied;
  out["subscribers"] = stats.subscribers;
  out["subscribers_lost"] = stats.subscribers_lost;
  out["segments"] = stats.segments;
  out["memory_in_use"] = stats.memory_in_use;
  return out;
}

// The same typed metadata as a node's (node.h); bytes values travel as
// their bytes.
Metadata MetadataFrom(const py::object& metadata) {
  return TypedMetadataFrom(metadata, /*allow_bytes=*/true);
}

// Memory lent by a publisher: writable through the buffer protocol (numpy,
// memoryview, pyarrow.py_buffer), then sent as a column without a copy.
struct PyLoan {
  BufferPtr buffer;
  TypePtr type;
  int64_t length = 0;
};

struct PyPublisher {
  std::unique_ptr<flow::Publisher> publisher;
  flow::Publisher& get() {
    if (!publisher) throw py::value_error("the publisher is closed");
    return *publisher;
  }
};

struct PySubscriber {
  std::unique_ptr<flow::Subscriber> subscriber;
  flow::Subscriber& get() {
    if (!subscriber) throw py::value_error("the subscriber is closed");
    return *subscriber;
  }
};

struct PyMessage {
  PyRecordBatch batch;
  Metadata metadata;
  uint64_t sequence = 0;
};

// A device batch (CUDA memory opened from the publisher's IPC handles) keeps
// its device and event, so __arrow_c_device_array__ hands it on as it is.
PyMessage ToPython(flow::Message message) {
  PyRecordBatch batch{std::move(message.batch), {}};
  if (message.device_batch.has_value()) {
    batch.batch = std::move(message.device_batch->batch);
    batch.placement.device = message.device_batch->device;
    batch.placement.event = std::move(message.device_batch->event);
  }
  return PyMessage{std::move(batch), std::move(message.metadata), message.sequence};
}

}  // namespace

TypePtr LoanType(const std::string& name) {
  if (name == "uint8") return uint8();
  if (name == "int8") return int8();
  if (name == "uint16") return uint16();
  if (name == "int16") return int16();
  if (name == "uint32") return uint32();
  if (name == "int32") return int32();
  if (name == "uint64") return uint64();
  if (name == "int64") return int64();
  if (name == "float32") return float32();
  if (name == "float64") return float64();
  throw py::value_error("loans hold fixed-width numbers (uint8 ... float64), not '" + name + "'");
}

std::string BufferFormat(TypeId id) {
  switch (id) {
    case TypeId::kUInt8:
      return py::format_descriptor<uint8_t>::format();
    case TypeId::kInt8:
      return py::format_descriptor<int8_t>::format();
    case TypeId::kUInt16:
      return py::format_descriptor<uint16_t>::format();
    case TypeId::kInt16:
      return py::format_descriptor<int16_t>::format();
    case TypeId::kUInt32:
      return py::format_descriptor<uint32_t>::format();
    case TypeId::kInt32:
      return py::format_descriptor<int32_t>::format();
    case TypeId::kUInt64:
      return py::format_descriptor<uint64_t>::format();
    case TypeId::kInt64:
      return py::format_descriptor<int64_t>::format();
    case TypeId::kFloat:
      return py::format_descriptor<float>::format();
    default:
      return py::format_descriptor<double>::format();
  }
}

void BindFlow(py::module_& m) {
  py::module_ flow = m.def_submodule("flow", "Zero-copy publish/subscribe between processes.");

  py::class_<PyLoan>(flow, "Loan", py::buffer_protocol(),
                     "Shared memory lent by a Publisher; write into it, then send it.")
      .def_buffer([](PyLoan& loan) {
        const auto width = static_cast<py::ssize_t>(loan.type->fixed_width());
        return py::buffer_info(loan.buffer->mutable_data(), width, BufferFormat(loan.type->id), 1,
                               {static_cast<py::ssize_t>(loan.length)}, {width},
                               /*readonly=*/false);
      })
      .def("__len__", [](const PyLoan& loan) { return loan.length; })
      .def_property_readonly(
          "address",
          [](const PyLoan& loan) { return reinterpret_cast<uintptr_t>(loan.buffer->data()); })
      .def_property_readonly("type", [](const PyLoan& loan) { return loan.type->ToString(); });

  py::class_<PyMessage>(flow, "Message", "A received batch (in shared memory) and its metadata.")
      .def_property_readonly("batch", [](const PyMessage& m) { return m.batch; })
      .def_property_readonly(
          "metadata", [](const PyMessage& m) { return TypedMetadataDict(m.metadata); },
          "The sender's metadata with its types (str, int, float, bool, list, dict).")
      .def_property_readonly("sequence", [](const PyMessage& m) { return m.sequence; })
      .def("__repr__", [](const PyMessage& m) {
        return "ferry.flow.Message(seq=" + std::to_string(m.sequence) + ", " +
               std::to_string(m.batch.batch->num_rows()) + " rows)";
      });

  py::class_<PyPublisher>(flow, "Publisher", "Owns a channel and sends record batches on it.")
      .def(py::init([](const std::string& name, uint32_t queue_capacity,
                       const std::string& overflow, uint32_t history, int64_t segment_size,
                       int64_t max_memory, double send_timeout, bool busy_poll, double spin_us) {
             flow::PublisherOptions options;
             options.queue_capacity = queue_capacity;
             options.overflow = Unwrap(flow::OverflowPolicyFromName(overflow));
             options.history = history;
             options.segment_size = segment_size;
             options.max_memory = max_memory;
             options.send_timeout = Seconds(send_timeout);
             options.wait = Strategy(busy_poll, spin_us);
             return PyPublisher{Unwrap(flow::Publisher::Create(name, options))};
           }),
           py::arg("name"), py::kw_only(), py::arg("queue_capacity") = 64,
           py::arg("overflow") = "block", py::arg("history") = 0,
           py::arg("segment_size") = int64_t{64} << 20, py::arg("max_memory") = int64_t{4} << 30,
           py::arg("send_timeout") = 10.0, py::arg("busy_poll") = false, py::arg("spin_us") = 0.0)
      .def_property_readonly("name", [](PyPublisher& p) { return p.get().name(); })
      .def(
          "loan",
          [](PyPublisher& p, int64_t length, const std::string& type) {
            if (length < 0) throw py::value_error("loan length must be >= 0");
            TypePtr loan_type = LoanType(type);
            auto buffer =
                Unwrap(Buffer::Allocate(length * loan_type->fixed_width(), p.get().LoanPool()));
            return PyLoan{buffer, loan_type, length};
          },
          py::arg("length"), py::arg("type") = "uint8",
          "Lends `length` values of `type` in shared memory (write them, then send_loans).")
      .def(
          "send_loans",
          [](PyPublisher& p, const py::dict& columns, const py::object& metadata) {
            auto schema = std::make_shared<Schema>();
            std::vector<ArrayDataPtr> arrays;
            int64_t rows = -1;
            for (const auto& item : columns) {
              auto& loan = item.second.cast<PyLoan&>();
              if (rows >= 0 && loan.length != rows) {
                throw py::value_error("every loaned column must have the same length");
              }
              rows = loan.length;
              schema->fields.push_back(field(py::str(item.first), loan.type, false));
              auto column = std::make_shared<ArrayData>();
              column->type = loan.type;
              column->length = loan.length;
              column->buffers = {nullptr, loan.buffer};
              arrays.push_back(column);
            }
            if (rows < 0) throw py::value_error("send_loans needs at least one column");
            auto batch = Unwrap(RecordBatch::Make(schema, rows, std::move(arrays)));
            Metadata meta = MetadataFrom(metadata);
            Status status;
            {
              py::gil_scoped_release unlocked;
              status = p.get().Send(*batch, meta);
            }
            Check(status);
          },
          py::arg("columns"), py::arg("metadata") = py::none(),
          "Sends loaned columns as one record batch: nothing is copied.")
      .def(
          "send",
          [](PyPublisher& p, const py::object& data, const py::object& metadata) {
            RecordBatchPtr batch = HostBatchFrom(data);
            Metadata meta = MetadataFrom(metadata);
            Status status;
            {
              py::gil_scoped_release unlocked;
              status = p.get().SendCopy(*batch, meta);
            }
            Check(status);
          },
          py::arg("data"), py::arg("metadata") = py::none(),
          "Sends any record batch (pyarrow, polars, ferry, ...): buffers already in this "
          "channel's shared memory travel as they are, others are copied (counted).")
      .def("poll", [](PyPublisher& p) { Check(p.get().Poll()); })
      .def(
          "wait_for_subscribers",
          [](PyPublisher& p, int count, double timeout) {
            Status status;
            {
              py::gil_scoped_release unlocked;
              status = p.get().WaitForSubscribers(count, Seconds(timeout));
            }
            Check(status);
          },
          py::arg("count") = 1, py::arg("timeout") = 10.0)
      .def("stats", [](PyPublisher& p) { return StatsDict(p.get().stats()); })
      .def(
          "fileno", [](PyPublisher& p) { return p.get().wait_fd(); },
          "A descriptor for select/poll/selectors: readable when poll() has work (a "
          "subscriber connecting or leaving, drop tokens to reclaim). Do not read or close it.")
      .def("close", [](PyPublisher& p) { p.publisher.reset(); })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyPublisher& p, py::args) { p.publisher.reset(); });

  py::class_<PySubscriber>(flow, "Subscriber", "Receives the record batches of a channel.")
      .def(py::init([](const std::string& name, double connect_timeout, bool busy_poll,
                       double spin_us, uint32_t queue_capacity, const py::object& overflow) {
             flow::SubscriberOptions options;
             options.connect_timeout = Seconds(connect_timeout);
             options.wait = Strategy(busy_poll, spin_us);
             options.queue_capacity = queue_capacity;
             if (!overflow.is_none()) {
               if (!py::isinstance<py::str>(overflow)) {
                 throw py::type_error(
                     "overflow must be 'block', 'drop_oldest', 'drop_newest' or None");
               }
               options.overflow =
                   Unwrap(flow::OverflowPolicyFromName(overflow.cast<std::string>()));
             }
             std::unique_ptr<flow::Subscriber> subscriber;
             Status status;
             {
               py::gil_scoped_release unlocked;
               auto connected = flow::Subscriber::Connect(name, options);
               if (connected.ok()) {
                 subscriber = connected.MoveValueUnsafe();
               } else {
                 status = connected.status();
               }
             }
             Check(status);
             return PySubscriber{std::move(subscriber)};
           }),
           py::arg("name"), py::kw_only(), py::arg("connect_timeout") = 10.0,
           py::arg("busy_poll") = false, py::arg("spin_us") = 0.0, py::arg("queue_capacity") = 0,
           py::arg("overflow") = py::none(),
           "Connects to channel `name`. `queue_capacity` (0: the publisher's) and `overflow` "
           "('block', 'drop_oldest', 'drop_newest'; None: the publisher's) set this "
           "subscriber's own queue.")
      .def_property_readonly("name", [](PySubscriber& s) { return s.get().name(); })
      .def(
          "receive",
          [](PySubscriber& s, double timeout) {
            Result<flow::Message> message = Status::UnknownError("not received");
            {
              py::gil_scoped_release unlocked;
              message = s.get().Receive(Seconds(timeout));
            }
            return ToPython(Unwrap(std::move(message)));
          },
          py::arg("timeout") = 10.0,
          "The next message; TimeoutError after `timeout` seconds; EOFError once the "
          "publisher is gone and everything it sent was received.")
      .def("try_receive",
           [](PySubscriber& s) -> py::object {
             auto message = Unwrap(s.get().TryReceive());
             if (!message) return py::none();
             return py::cast(ToPython(std::move(*message)));
           })
      .def_property_readonly("publisher_gone",
                             [](PySubscriber& s) { return s.get().publisher_gone(); })
      .def("stats", [](PySubscriber& s) { return StatsDict(s.get().stats()); })
      .def("fileno", [](PySubscriber& s) { return s.get().wait_fd(); })
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](PySubscriber& s) {
             Result<flow::Message> message = Status::UnknownError("not received");
             {
               py::gil_scoped_release unlocked;
               message = s.get().Receive(std::chrono::hours(24 * 365));
             }
             if (!message.ok() && message.status().code() == StatusCode::kCancelled) {
               throw py::stop_iteration();
             }
             return ToPython(Unwrap(std::move(message)));
           })
      .def("close", [](PySubscriber& s) { s.subscriber.reset(); })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySubscriber& s, py::args) { s.subscriber.reset(); });
}

}  // namespace ferry::python
