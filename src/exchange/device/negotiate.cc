#include "ferry/device/negotiate.h"

#include <algorithm>
#include <string>

namespace ferry::device {
namespace {

using telemetry::FallbackReason;

// A device the data could be copied to.
struct Target {
  DeviceType type;
  int64_t id;
};

// The consumer's capabilities with the defaults filled in, and the questions
// the rules ask of them.
class ConsumerView {
 public:
  explicit ConsumerView(const ConsumerCapabilities& caps) : caps_(caps) {
    if (caps_.device_types.empty()) caps_.device_types = {DeviceType::kCpu};
  }

  const ConsumerCapabilities& caps() const { return caps_; }
  bool ReadsType(DeviceType type) const { return Contains(caps_.device_types, type); }
  // Devices without ids (-1) match any list.
  bool ReadsId(int64_t id) const {
    return caps_.device_ids.empty() || id == -1 || Contains(caps_.device_ids, id);
  }
  bool WaitsOnDevice(EventKind kind) const { return Contains(caps_.event_kinds, kind); }
  // The id a copy to `type` lands on when nothing ties it to the producer.
  int64_t DefaultIdFor(DeviceType type) const {
    if (type == DeviceType::kCpu) return -1;
    return caps_.device_ids.empty() ? 0 : caps_.device_ids.front();
  }
  std::string TypeList() const {
    std::string out;
    for (DeviceType type : caps_.device_types) {
      if (!out.empty()) out += ", ";
      out += DeviceTypeName(type);
    }
    return out;
  }

 private:
  template <typename T>
  static bool Contains(const std::vector<T>& values, const T& value) {
    return std::find(values.begin(), values.end(), value) != values.end();
  }

  ConsumerCapabilities caps_;
};

std::string DeviceLabel(DeviceType type, int64_t id) {
  std::string label = DeviceTypeName(type);
  if (id != -1) label += " device " + std::to_string(id);
  return label;
}

CopyDirection DirectionOf(DeviceType source, const Target& target) {
  const bool source_host = IsHostAccessible(source);
  const bool target_host = IsHostAccessible(target.type);
  if (source_host && target_host) return CopyDirection::kHostToHost;
  if (source_host) return CopyDirection::kHostToDevice;
  if (target_host) return CopyDirection::kDeviceToHost;
  return CopyDirection::kDeviceToDevice;
}

const char* DirectionLabel(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kHostToDevice:
      return "H2D";
    case CopyDirection::kDeviceToHost:
      return "D2H";
    case CopyDirection::kDeviceToDevice:
      return "D2D";
    case CopyDirection::kHostToHost:
      return "host-to-host";
  }
  return "unknown";
}

// The first target the consumer reads that has a backend here, in the order
// the header documents; nullopt when there is none.
std::optional<Target> ChooseCopyTarget(const ProducerInfo& producer, const ConsumerView& consumer,
                                       const BackendPresence& has_backend) {
  std::vector<Target> candidates;
  if (producer.crosses_process) {
    candidates.push_back({DeviceType::kCpu, -1});
  } else {
    if (consumer.ReadsType(producer.device_type) && consumer.ReadsId(producer.device_id)) {
      candidates.push_back({producer.device_type, producer.device_id});
    }
    if (consumer.ReadsType(producer.device_type)) {
      for (int64_t id : consumer.caps().device_ids) {
        candidates.push_back({producer.device_type, id});
      }
    }
    for (DeviceType type : consumer.caps().device_types) {
      candidates.push_back({type, consumer.DefaultIdFor(type)});
    }
  }
  for (const Target& target : candidates) {
    if (has_backend(target.type, target.id)) return target;
  }
  return std::nullopt;
}

// Why zero-copy is impossible, phrased to follow "the consumer ...".
struct Obstacle {
  FallbackReason reason;
  std::string why;
};

ExchangePlan PlanCopy(const ProducerInfo& producer, const ConsumerView& consumer,
                      const BackendPresence& has_backend, const Obstacle& obstacle) {
  ExchangePlan plan;
  plan.reason = obstacle.reason;
  const std::string reason_tag =
      std::string(" (") + telemetry::FallbackReasonName(obstacle.reason) + ")";
  const std::string source = DeviceLabel(producer.device_type, producer.device_id);
  if (!has_backend(producer.device_type, producer.device_id)) {
    plan.mode = ExchangeMode::kRefused;
    plan.explanation = "refused: " + obstacle.why + ", and no backend for " + source +
                       " exists in this process to copy from" + reason_tag;
    return plan;
  }
  std::optional<Target> target = ChooseCopyTarget(producer, consumer, has_backend);
  if (!target) {
    plan.mode = ExchangeMode::kRefused;
    plan.explanation = "refused: " + obstacle.why + ", and none of the consumer's device types (" +
                       consumer.TypeList() + ") has a backend here to copy to" + reason_tag;
    return plan;
  }
  plan.target_type = target->type;
  plan.target_id = target->id;
  plan.direction = DirectionOf(producer.device_type, *target);
  const std::string direction = DirectionLabel(plan.direction);
  const std::string route = "from " + source + " to " + DeviceLabel(target->type, target->id);
  if (!consumer.caps().allow_copy) {
    plan.mode = ExchangeMode::kRefused;
    plan.explanation = "refused: " + obstacle.why + ", and the consumer does not allow the " +
                       direction + " copy " + route + " that would fix it" + reason_tag;
    return plan;
  }
  plan.mode = ExchangeMode::kCopy;
  plan.explanation = "copy " + direction + " " + route + ": " + obstacle.why + reason_tag;
  return plan;
}

}  // namespace

const char* ExchangeModeName(ExchangeMode mode) {
  switch (mode) {
    case ExchangeMode::kZeroCopy:
      return "zero_copy";
    case ExchangeMode::kZeroCopyDeviceWait:
      return "zero_copy_device_wait";
    case ExchangeMode::kCopy:
      return "copy";
    case ExchangeMode::kRefused:
      return "refused";
  }
  return "unknown";
}

ExchangePlan Negotiate(const ProducerInfo& producer, const ConsumerCapabilities& consumer) {
  return Negotiate(producer, consumer, [](DeviceType type, int64_t id) {
    return DeviceRegistry::Global().Get(type, id).ok();
  });
}

ExchangePlan Negotiate(const ProducerInfo& producer, const ConsumerCapabilities& capabilities,
                       const BackendPresence& has_backend) {
  const ConsumerView consumer(capabilities);
  const DeviceType type = producer.device_type;
  const std::string source = DeviceLabel(type, producer.device_id);
  auto copy = [&](FallbackReason reason, std::string why) {
    return PlanCopy(producer, consumer, has_backend, Obstacle{reason, std::move(why)});
  };

  if (producer.crosses_process) {
    return copy(FallbackReason::kCrossesProcess,
                "the consumer is in another process and " + source +
                    " memory has no handle that crosses processes");
  }

  // Where the consumer could read the memory in place.
  const bool reads_type = consumer.ReadsType(type);
  const bool reads_id = consumer.ReadsId(producer.device_id);
  const bool context_differs = type != DeviceType::kCpu && capabilities.context != 0 &&
                               producer.context != 0 && capabilities.context != producer.context;
  const bool reads_in_place = reads_type && reads_id && !context_differs;
  const bool reads_through_host = type != DeviceType::kCpu && IsHostAccessible(type) &&
                                  consumer.ReadsType(DeviceType::kCpu) &&
                                  capabilities.accepts_host_accessible;
  if (!reads_in_place && !reads_through_host) {
    if (!reads_type) {
      std::string why =
          "the consumer reads " + consumer.TypeList() + ", not " + DeviceTypeName(type);
      if (IsHostAccessible(type) && consumer.ReadsType(DeviceType::kCpu)) {
        why += " (host-accessible memory not accepted)";
      }
      return copy(FallbackReason::kUnsupportedDeviceType, std::move(why));
    }
    if (!reads_id) {
      return copy(FallbackReason::kDifferentDeviceId,
                  "the consumer reads other " + std::string(DeviceTypeName(type)) +
                      " devices than id " + std::to_string(producer.device_id));
    }
    return copy(FallbackReason::kDifferentContext,
                "the consumer uses another context on " + source);
  }
  const std::string where = reads_in_place
                                ? "the consumer reads " + source + " in place"
                                : "the consumer reads host-accessible " + source + " memory as cpu";

  if (!producer.lifetime_provable) {
    return copy(FallbackReason::kLifetimeNotProvable,
                "nothing proves the " + source + " buffers outlive the exchange");
  }
  if (capabilities.needs_write && !capabilities.exclusive_lease) {
    return copy(FallbackReason::kConsumerNeedsWrite,
                "the consumer writes into the buffers and holds no exclusive lease");
  }

  ExchangePlan plan;
  if (producer.event_kind == EventKind::kNone) {
    plan.mode = ExchangeMode::kZeroCopy;
    plan.explanation = "zero-copy: " + where + ", no event to wait on";
    return plan;
  }
  const std::string event = std::string(EventKindName(producer.event_kind)) + " event";
  if (consumer.WaitsOnDevice(producer.event_kind)) {
    plan.mode = ExchangeMode::kZeroCopyDeviceWait;
    plan.explanation =
        "zero-copy with a device-side wait: " + where + " and enqueues a wait on the " + event;
    return plan;
  }
  // A host wait goes through the producer device's HostWait, so it needs a
  // consumer that reads the CPU and a backend here for the producer's device.
  if (consumer.ReadsType(DeviceType::kCpu) && has_backend(type, producer.device_id)) {
    plan.mode = ExchangeMode::kZeroCopy;
    plan.explanation = "zero-copy: " + where + " after waiting on the " + event + " on the host";
    return plan;
  }
  return copy(FallbackReason::kEventKindNotImportable,
              "the consumer can wait neither on the device nor on the host for the " + event);
}

void RecordPlan(const ExchangePlan& plan) {
  if (plan.mode != ExchangeMode::kCopy && plan.mode != ExchangeMode::kRefused) return;
  if (plan.reason) telemetry::AddFallback(*plan.reason);
}

}  // namespace ferry::device
