#include "ferry/device/negotiate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ferry/base/telemetry.h"

namespace ferry::device {
namespace {

using telemetry::FallbackReason;
using ::testing::HasSubstr;
using ::testing::Not;
using Type = DeviceType;

// The machine the table is written for: CPU, OpenCL device 0, CUDA devices 0
// and 1 (with CUDA_HOST / CUDA_MANAGED 0); every other type has no backend.
bool TablePresence(DeviceType type, int64_t id) {
  switch (type) {
    case Type::kCpu:
      return true;
    case Type::kOpenCL:
      return id == 0;
    case Type::kCuda:
      return id == 0 || id == 1;
    case Type::kCudaHost:
    case Type::kCudaManaged:
      return id == 0;
    default:
      return false;
  }
}

ProducerInfo Producer(DeviceType type, int64_t id = -1, EventKind event = EventKind::kNone) {
  ProducerInfo producer;
  producer.device_type = type;
  producer.device_id = id;
  producer.event_kind = event;
  return producer;
}

ConsumerCapabilities Reads(std::vector<DeviceType> types, std::vector<EventKind> events = {}) {
  ConsumerCapabilities consumer;
  consumer.device_types = std::move(types);
  consumer.event_kinds = std::move(events);
  return consumer;
}

struct Expected {
  ExchangeMode mode;
  std::optional<FallbackReason> reason;
  // For kCopy.
  DeviceType target_type = Type::kCpu;
  int64_t target_id = -1;
  CopyDirection direction = CopyDirection::kHostToHost;
  // A phrase the explanation must contain.
  std::string explains;
};

struct Scenario {
  std::string name;
  ProducerInfo producer;
  ConsumerCapabilities consumer;
  Expected expected;
};

Expected ZeroCopy(std::string explains = "zero-copy") {
  return {ExchangeMode::kZeroCopy,    std::nullopt,       Type::kCpu, -1,
          CopyDirection::kHostToHost, std::move(explains)};
}
Expected DeviceWait(std::string explains = "device-side wait") {
  return {ExchangeMode::kZeroCopyDeviceWait, std::nullopt,       Type::kCpu, -1,
          CopyDirection::kHostToHost,        std::move(explains)};
}
Expected Copy(FallbackReason reason, DeviceType target, int64_t target_id, CopyDirection direction,
              std::string explains = "") {
  return {ExchangeMode::kCopy, reason, target, target_id, direction, std::move(explains)};
}
Expected Refused(FallbackReason reason, std::string explains = "") {
  return {ExchangeMode::kRefused, reason, Type::kCpu, -1, CopyDirection::kHostToHost,
          std::move(explains)};
}

template <typename Edit>
ProducerInfo With(ProducerInfo producer, Edit edit) {
  edit(producer);
  return producer;
}
template <typename Edit>
ConsumerCapabilities With(ConsumerCapabilities consumer, Edit edit) {
  edit(consumer);
  return consumer;
}

constexpr auto kD2H = CopyDirection::kDeviceToHost;
constexpr auto kH2D = CopyDirection::kHostToDevice;
constexpr auto kD2D = CopyDirection::kDeviceToDevice;
constexpr auto kHost = CopyDirection::kHostToHost;
constexpr auto kCl = EventKind::kOpenCL;
constexpr auto kCu = EventKind::kCuda;

std::vector<Scenario> Scenarios() {
  using R = FallbackReason;
  auto not_provable = [](ProducerInfo& p) { p.lifetime_provable = false; };
  auto remote = [](ProducerInfo& p) { p.crosses_process = true; };
  auto writes = [](ConsumerCapabilities& c) { c.needs_write = true; };
  auto no_copies = [](ConsumerCapabilities& c) { c.allow_copy = false; };
  auto context = [](uintptr_t value) { return [value](auto& side) { side.context = value; }; };
  auto ids = [](std::vector<int64_t> list) {
    return [list](ConsumerCapabilities& c) { c.device_ids = list; };
  };
  return {
      // ---- Zero-copy ------------------------------------------------------
      {"CpuToCpu", Producer(Type::kCpu), Reads({Type::kCpu}), ZeroCopy("no event")},
      {"EmptyTypeListMeansCpu", Producer(Type::kCpu), Reads({}), ZeroCopy()},
      {"OpenCLWithoutEvent", Producer(Type::kOpenCL, 0), Reads({Type::kOpenCL}),
       ZeroCopy("reads opencl device 0 in place")},
      {"OpenCLDeviceWait", Producer(Type::kOpenCL, 0, kCl), Reads({Type::kOpenCL}, {kCl}),
       DeviceWait("wait on the opencl event")},
      {"OpenCLHostWaitForCpuReader", Producer(Type::kOpenCL, 0, kCl),
       Reads({Type::kOpenCL, Type::kCpu}), ZeroCopy("on the host")},
      {"DeviceWaitPreferredOverHostWait", Producer(Type::kCuda, 0, kCu),
       Reads({Type::kCuda, Type::kCpu}, {kCu}), DeviceWait()},
      {"CudaDeviceWait", Producer(Type::kCuda, 0, kCu), Reads({Type::kCuda}, {kCu}),
       DeviceWait("cuda event")},
      {"CudaListedId", Producer(Type::kCuda, 1), With(Reads({Type::kCuda}), ids({0, 1})),
       ZeroCopy()},
      {"CudaHostReadAsCpuWithHostWait", Producer(Type::kCudaHost, 0, kCu), Reads({Type::kCpu}),
       ZeroCopy("host-accessible cuda_host device 0 memory as cpu")},
      {"CudaManagedReadAsCpu", Producer(Type::kCudaManaged, 0), Reads({Type::kCpu}), ZeroCopy()},
      {"RocmHostReadAsCpuWithoutBackend", Producer(Type::kRocmHost, 0), Reads({Type::kCpu}),
       ZeroCopy()},
      {"HostPathIgnoresIdList", Producer(Type::kCudaHost, 0), With(Reads({Type::kCpu}), ids({5})),
       ZeroCopy()},
      {"UnknownProducerContext", With(Producer(Type::kCuda, 0), context(0)),
       With(Reads({Type::kCuda}), context(0x5)), ZeroCopy()},
      {"SameContext", With(Producer(Type::kCuda, 0), context(0x5)),
       With(Reads({Type::kCuda}), context(0x5)), ZeroCopy()},
      {"CpuMemoryHasNoContext", With(Producer(Type::kCpu), context(0x1)),
       With(Reads({Type::kCpu}), context(0x2)), ZeroCopy()},
      {"ExclusiveLeaseAvoidsCopy", Producer(Type::kOpenCL, 0),
       With(Reads({Type::kOpenCL}),
            [](ConsumerCapabilities& c) {
              c.needs_write = true;
              c.exclusive_lease = true;
            }),
       ZeroCopy()},
      {"LeaseWithoutWriteIsHarmless", Producer(Type::kCpu),
       With(Reads({Type::kCpu}), [](ConsumerCapabilities& c) { c.exclusive_lease = true; }),
       ZeroCopy()},
      {"MetalReadInPlaceNeedsNoBackend", Producer(Type::kMetal, 0), Reads({Type::kMetal}),
       ZeroCopy()},
      {"VulkanReadInPlace", Producer(Type::kVulkan, 0), Reads({Type::kVulkan}), ZeroCopy()},
      {"HexagonReadInPlace", Producer(Type::kHexagon, 0), Reads({Type::kHexagon}), ZeroCopy()},
      {"WebGpuReadInPlace", Producer(Type::kWebGpu, 0), Reads({Type::kWebGpu, Type::kCpu}),
       ZeroCopy()},
      {"AllowCopyFalseDoesNotAffectZeroCopy", Producer(Type::kCpu),
       With(Reads({Type::kCpu}), no_copies), ZeroCopy()},

      // ---- Unsupported device type ------------------------------------------
      {"CudaToCpuReader", Producer(Type::kCuda, 0, kCu), Reads({Type::kCpu}),
       Copy(R::kUnsupportedDeviceType, Type::kCpu, -1, kD2H, "consumer reads cpu, not cuda")},
      {"OpenCLToCpuReader", Producer(Type::kOpenCL, 0, kCl), Reads({}),
       Copy(R::kUnsupportedDeviceType, Type::kCpu, -1, kD2H, "copy D2H from opencl device 0")},
      {"CpuToOpenCLReader", Producer(Type::kCpu), Reads({Type::kOpenCL}),
       Copy(R::kUnsupportedDeviceType, Type::kOpenCL, 0, kH2D, "H2D from cpu to opencl device 0")},
      {"CpuToCudaReaderWithListedId", Producer(Type::kCpu), With(Reads({Type::kCuda}), ids({1})),
       Copy(R::kUnsupportedDeviceType, Type::kCuda, 1, kH2D)},
      {"HostAccessibleNotAccepted", Producer(Type::kCudaHost, 0),
       With(Reads({Type::kCpu}),
            [](ConsumerCapabilities& c) { c.accepts_host_accessible = false; }),
       Copy(R::kUnsupportedDeviceType, Type::kCpu, -1, kHost,
            "host-accessible memory not accepted")},
      {"CudaManagedToCudaHostReader", Producer(Type::kCudaManaged, 0), Reads({Type::kCudaHost}),
       Copy(R::kUnsupportedDeviceType, Type::kCudaHost, 0, kHost)},
      {"FirstListedTypeWithBackendWins", Producer(Type::kCuda, 0),
       Reads({Type::kVulkan, Type::kOpenCL, Type::kCpu}),
       Copy(R::kUnsupportedDeviceType, Type::kOpenCL, 0, kD2D)},
      {"CpuToVulkanOnlyReaderHasNoTarget", Producer(Type::kCpu), Reads({Type::kVulkan}),
       Refused(R::kUnsupportedDeviceType, "none of the consumer's device types (vulkan)")},
      {"MetalWithoutBackend", Producer(Type::kMetal, 0), Reads({Type::kCpu}),
       Refused(R::kUnsupportedDeviceType, "no backend for metal device 0")},
      {"VulkanWithoutBackend", Producer(Type::kVulkan, 0), Reads({Type::kCpu}),
       Refused(R::kUnsupportedDeviceType, "no backend for vulkan")},
      {"RocmWithoutBackend", Producer(Type::kRocm, 0), Reads({Type::kCpu}),
       Refused(R::kUnsupportedDeviceType, "rocm")},
      {"RocmHostNotAcceptedWithoutBackend", Producer(Type::kRocmHost, 0),
       With(Reads({Type::kCpu}),
            [](ConsumerCapabilities& c) { c.accepts_host_accessible = false; }),
       Refused(R::kUnsupportedDeviceType, "rocm_host")},
      {"VpiWithoutBackend", Producer(Type::kVpi, 0), Reads({Type::kCpu}),
       Refused(R::kUnsupportedDeviceType, "vpi")},
      {"ExtDevWithoutBackend", Producer(Type::kExtDev, 0), Reads({Type::kCpu}),
       Refused(R::kUnsupportedDeviceType, "ext_dev")},
      {"OneApiWithoutBackend", Producer(Type::kOneApi, 0), Reads({Type::kCpu}),
       Refused(R::kUnsupportedDeviceType, "oneapi")},
      {"WebGpuWithoutBackend", Producer(Type::kWebGpu, 0), Reads({Type::kCpu}),
       Refused(R::kUnsupportedDeviceType, "webgpu")},
      {"HexagonWithoutBackend", Producer(Type::kHexagon, 0), Reads({Type::kCuda}),
       Refused(R::kUnsupportedDeviceType, "hexagon")},

      // ---- Different device id ---------------------------------------------
      {"CudaOtherId", Producer(Type::kCuda, 1, kCu), With(Reads({Type::kCuda}), ids({0})),
       Copy(R::kDifferentDeviceId, Type::kCuda, 0, kD2D, "other cuda devices than id 1")},
      {"OtherIdWithoutBackendFallsBackToCpu", Producer(Type::kCuda, 0),
       With(Reads({Type::kCuda, Type::kCpu}), ids({7})),
       Copy(R::kDifferentDeviceId, Type::kCpu, -1, kD2H)},
      {"OtherIdWithNoTargetAtAll", Producer(Type::kOpenCL, 0),
       With(Reads({Type::kOpenCL}), ids({3})), Refused(R::kDifferentDeviceId, "has a backend")},
      {"CudaHostOtherIdReadsThroughHost", Producer(Type::kCudaHost, 0),
       With(Reads({Type::kCudaHost, Type::kCpu}), ids({1})), ZeroCopy("as cpu")},

      // ---- Different context ------------------------------------------------
      {"CudaOtherContext", With(Producer(Type::kCuda, 0, kCu), context(0x1)),
       With(Reads({Type::kCuda, Type::kCpu}), context(0x2)),
       Copy(R::kDifferentContext, Type::kCuda, 0, kD2D, "another context on cuda device 0")},
      {"OpenCLOtherContext", With(Producer(Type::kOpenCL, 0), context(0x10)),
       With(Reads({Type::kOpenCL}), context(0x20)),
       Copy(R::kDifferentContext, Type::kOpenCL, 0, kD2D)},
      {"OtherContextStillReadableThroughHost", With(Producer(Type::kCudaManaged, 0), context(0x1)),
       With(Reads({Type::kCudaManaged, Type::kCpu}), context(0x2)), ZeroCopy("as cpu")},

      // ---- Lifetime not provable -------------------------------------------
      {"CpuLifetimeNotProvable", With(Producer(Type::kCpu), not_provable), Reads({Type::kCpu}),
       Copy(R::kLifetimeNotProvable, Type::kCpu, -1, kHost, "outlive the exchange")},
      {"OpenCLLifetimeNotProvable", With(Producer(Type::kOpenCL, 0, kCl), not_provable),
       Reads({Type::kOpenCL}, {kCl}), Copy(R::kLifetimeNotProvable, Type::kOpenCL, 0, kD2D)},
      {"CudaHostLifetimeThroughHostPath", With(Producer(Type::kCudaHost, 0), not_provable),
       Reads({Type::kCpu}), Copy(R::kLifetimeNotProvable, Type::kCpu, -1, kHost)},

      // ---- Consumer needs write ----------------------------------------------
      {"CpuWriter", Producer(Type::kCpu), With(Reads({Type::kCpu}), writes),
       Copy(R::kConsumerNeedsWrite, Type::kCpu, -1, kHost, "no exclusive lease")},
      {"OpenCLWriterGetsDeviceCopy", Producer(Type::kOpenCL, 0, kCl),
       With(Reads({Type::kOpenCL, Type::kCpu}), writes),
       Copy(R::kConsumerNeedsWrite, Type::kOpenCL, 0, kD2D)},
      {"CudaWriterGetsCopyOnItsOwnDevice", Producer(Type::kCuda, 1),
       With(Reads({Type::kCuda}), writes), Copy(R::kConsumerNeedsWrite, Type::kCuda, 1, kD2D)},
      {"CudaManagedWriterThroughHostPath", Producer(Type::kCudaManaged, 0),
       With(Reads({Type::kCpu}), writes), Copy(R::kConsumerNeedsWrite, Type::kCpu, -1, kHost)},

      // ---- Crosses process ----------------------------------------------------
      {"CudaCrossesProcess", With(Producer(Type::kCuda, 0, kCu), remote),
       Reads({Type::kCuda}, {kCu}),
       Copy(R::kCrossesProcess, Type::kCpu, -1, kD2H, "another process")},
      {"CpuCrossesProcess", With(Producer(Type::kCpu), remote), Reads({Type::kCpu}),
       Copy(R::kCrossesProcess, Type::kCpu, -1, kHost)},
      {"MetalCrossesProcessWithoutBackend", With(Producer(Type::kMetal, 0), remote),
       Reads({Type::kMetal}), Refused(R::kCrossesProcess, "no backend for metal")},

      // ---- Event kind not importable --------------------------------------------
      {"OpenCLEventForDeviceOnlyReader", Producer(Type::kOpenCL, 0, kCl), Reads({Type::kOpenCL}),
       Copy(R::kEventKindNotImportable, Type::kOpenCL, 0, kD2D, "opencl event")},
      {"CudaEventForOpenCLWaiter", Producer(Type::kCuda, 0, kCu), Reads({Type::kCuda}, {kCl}),
       Copy(R::kEventKindNotImportable, Type::kCuda, 0, kD2D)},
      {"HostWaitNeedsProducerBackend", Producer(Type::kCudaHost, 3, kCu), Reads({Type::kCpu}),
       Refused(R::kEventKindNotImportable, "no backend for cuda_host device 3")},

      // ---- allow_copy = false -------------------------------------------------------
      {"NoCopiesUnsupportedType", Producer(Type::kCuda, 0), With(Reads({Type::kCpu}), no_copies),
       Refused(R::kUnsupportedDeviceType, "does not allow the D2H copy from cuda device 0 to cpu")},
      {"NoCopiesWriter", Producer(Type::kCpu), With(With(Reads({Type::kCpu}), writes), no_copies),
       Refused(R::kConsumerNeedsWrite, "does not allow")},
      {"NoCopiesCrossProcess", With(Producer(Type::kOpenCL, 0), remote),
       With(Reads({Type::kOpenCL}), no_copies), Refused(R::kCrossesProcess, "does not allow")},
      {"NoCopiesEventNotImportable", Producer(Type::kOpenCL, 0, kCl),
       With(Reads({Type::kOpenCL}), no_copies), Refused(R::kEventKindNotImportable)},
      {"NoCopiesOtherContext", With(Producer(Type::kOpenCL, 0), context(0x1)),
       With(With(Reads({Type::kOpenCL}), context(0x2)), no_copies),
       Refused(R::kDifferentContext, "does not allow the D2D")},
      {"NoCopiesLifetime", With(Producer(Type::kCpu), not_provable),
       With(Reads({Type::kCpu}), no_copies), Refused(R::kLifetimeNotProvable)},
      {"NoCopiesOtherId", Producer(Type::kCuda, 1),
       With(With(Reads({Type::kCuda}), ids({0})), no_copies), Refused(R::kDifferentDeviceId)},

      // ---- Precedence when several rules apply -----------------------------------------
      {"CrossProcessBeatsEverything",
       With(With(Producer(Type::kCuda, 1, kCu), remote), not_provable),
       With(With(Reads({Type::kOpenCL}), writes), ids({0})),
       Copy(R::kCrossesProcess, Type::kCpu, -1, kD2H)},
      {"UnsupportedTypeBeatsLifetimeAndWrite", With(Producer(Type::kOpenCL, 0, kCl), not_provable),
       With(Reads({Type::kCpu}), writes), Copy(R::kUnsupportedDeviceType, Type::kCpu, -1, kD2H)},
      {"OtherIdBeatsContext", With(Producer(Type::kCuda, 1), context(0x1)),
       With(With(Reads({Type::kCuda}), ids({0})), context(0x2)),
       Copy(R::kDifferentDeviceId, Type::kCuda, 0, kD2D)},
      {"ContextBeatsLifetime", With(With(Producer(Type::kCuda, 0), context(0x1)), not_provable),
       With(Reads({Type::kCuda}), context(0x2)), Copy(R::kDifferentContext, Type::kCuda, 0, kD2D)},
      {"LifetimeBeatsWrite", With(Producer(Type::kCpu), not_provable),
       With(Reads({Type::kCpu}), writes), Copy(R::kLifetimeNotProvable, Type::kCpu, -1, kHost)},
      {"WriteBeatsEventKind", Producer(Type::kOpenCL, 0, kCl), With(Reads({Type::kOpenCL}), writes),
       Copy(R::kConsumerNeedsWrite, Type::kOpenCL, 0, kD2D)},
      {"ZeroCopyOptionBeatsEveryCopy", Producer(Type::kCudaHost, 0),
       With(Reads({Type::kVulkan, Type::kCpu}), ids({9})), ZeroCopy()},
  };
}

class NegotiateTable : public ::testing::TestWithParam<Scenario> {};

TEST_P(NegotiateTable, PicksTheExpectedPlan) {
  const Scenario& scenario = GetParam();
  ExchangePlan plan = Negotiate(scenario.producer, scenario.consumer, TablePresence);
  const Expected& expected = scenario.expected;
  SCOPED_TRACE(plan.explanation);
  EXPECT_EQ(ExchangeModeName(plan.mode), std::string(ExchangeModeName(expected.mode)));
  EXPECT_EQ(plan.reason.has_value(), expected.reason.has_value());
  if (plan.reason && expected.reason) {
    EXPECT_STREQ(telemetry::FallbackReasonName(*plan.reason),
                 telemetry::FallbackReasonName(*expected.reason));
    // The explanation names the reason code, so logs can be grepped by it.
    EXPECT_THAT(plan.explanation, HasSubstr(telemetry::FallbackReasonName(*expected.reason)));
  }
  if (expected.mode == ExchangeMode::kCopy) {
    EXPECT_STREQ(DeviceTypeName(plan.target_type), DeviceTypeName(expected.target_type));
    EXPECT_EQ(plan.target_id, expected.target_id);
    EXPECT_STREQ(CopyDirectionName(plan.direction), CopyDirectionName(expected.direction));
  }
  EXPECT_THAT(plan.explanation, HasSubstr(expected.explains));
  // One sentence: no line breaks, begins with the decision.
  EXPECT_THAT(plan.explanation, Not(HasSubstr("\n")));
  const std::string decision = expected.mode == ExchangeMode::kCopy      ? "copy "
                               : expected.mode == ExchangeMode::kRefused ? "refused: "
                                                                         : "zero-copy";
  EXPECT_EQ(plan.explanation.rfind(decision, 0), 0u) << plan.explanation;
}

INSTANTIATE_TEST_SUITE_P(Rules, NegotiateTable, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

TEST(Negotiate, TableCoversEverySpecDeviceTypeAsProducer) {
  std::set<DeviceType> seen;
  for (const Scenario& scenario : Scenarios()) seen.insert(scenario.producer.device_type);
  for (DeviceType type : AllDeviceTypes()) {
    EXPECT_TRUE(seen.count(type)) << DeviceTypeName(type) << " has no scenario";
  }
  EXPECT_EQ(seen.size(), 14u);
}

TEST(Negotiate, TableCoversEveryModeAndReason) {
  std::set<ExchangeMode> modes;
  std::set<FallbackReason> copy_reasons;
  std::set<FallbackReason> refusal_reasons;
  for (const Scenario& scenario : Scenarios()) {
    modes.insert(scenario.expected.mode);
    if (scenario.expected.mode == ExchangeMode::kCopy) {
      copy_reasons.insert(*scenario.expected.reason);
    }
    if (scenario.expected.mode == ExchangeMode::kRefused) {
      refusal_reasons.insert(*scenario.expected.reason);
    }
  }
  EXPECT_EQ(modes.size(), 4u);
  const auto reason_count = static_cast<size_t>(FallbackReason::kCount);
  EXPECT_EQ(copy_reasons.size(), reason_count);
  EXPECT_EQ(refusal_reasons.size(), reason_count);
}

TEST(Negotiate, DoesNotCountTelemetry) {
  std::array<int64_t, static_cast<size_t>(FallbackReason::kCount)> before{};
  for (size_t i = 0; i < before.size(); ++i) {
    before[i] = telemetry::GetFallback(static_cast<FallbackReason>(i));
  }
  for (const Scenario& scenario : Scenarios()) {
    (void)Negotiate(scenario.producer, scenario.consumer, TablePresence);
  }
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(telemetry::GetFallback(static_cast<FallbackReason>(i)), before[i]);
  }
}

TEST(Negotiate, RecordPlanCountsExactlyOneFallbackPerCopyOrRefusal) {
  std::array<int64_t, static_cast<size_t>(FallbackReason::kCount)> expected{};
  for (size_t i = 0; i < expected.size(); ++i) {
    expected[i] = telemetry::GetFallback(static_cast<FallbackReason>(i));
  }
  for (const Scenario& scenario : Scenarios()) {
    ExchangePlan plan = Negotiate(scenario.producer, scenario.consumer, TablePresence);
    RecordPlan(plan);
    if (scenario.expected.reason) ++expected[static_cast<size_t>(*scenario.expected.reason)];
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    auto reason = static_cast<FallbackReason>(i);
    EXPECT_EQ(telemetry::GetFallback(reason), expected[i]) << telemetry::FallbackReasonName(reason);
  }
}

TEST(Negotiate, RecordPlanIgnoresZeroCopyPlans) {
  const int64_t before = telemetry::GetFallback(FallbackReason::kUnsupportedDeviceType);
  ExchangePlan zero_copy;
  zero_copy.mode = ExchangeMode::kZeroCopy;
  RecordPlan(zero_copy);
  // A stray reason on a zero-copy plan is not a fallback either.
  zero_copy.reason = FallbackReason::kUnsupportedDeviceType;
  RecordPlan(zero_copy);
  zero_copy.mode = ExchangeMode::kZeroCopyDeviceWait;
  RecordPlan(zero_copy);
  EXPECT_EQ(telemetry::GetFallback(FallbackReason::kUnsupportedDeviceType), before);

  ExchangePlan refused;
  refused.mode = ExchangeMode::kRefused;
  refused.reason = FallbackReason::kUnsupportedDeviceType;
  RecordPlan(refused);
  RecordPlan(refused);
  EXPECT_EQ(telemetry::GetFallback(FallbackReason::kUnsupportedDeviceType), before + 2);
}

TEST(Negotiate, ModeNames) {
  EXPECT_STREQ(ExchangeModeName(ExchangeMode::kZeroCopy), "zero_copy");
  EXPECT_STREQ(ExchangeModeName(ExchangeMode::kZeroCopyDeviceWait), "zero_copy_device_wait");
  EXPECT_STREQ(ExchangeModeName(ExchangeMode::kCopy), "copy");
  EXPECT_STREQ(ExchangeModeName(ExchangeMode::kRefused), "refused");
  EXPECT_STREQ(ExchangeModeName(static_cast<ExchangeMode>(200)), "unknown");
}

// The default overload asks the process's registry; these hold on any machine.
TEST(NegotiateWithRegistry, CpuAlwaysZeroCopy) {
  ExchangePlan plan = Negotiate(Producer(Type::kCpu), ConsumerCapabilities{});
  EXPECT_EQ(plan.mode, ExchangeMode::kZeroCopy) << plan.explanation;
  EXPECT_FALSE(plan.reason.has_value());
}

TEST(NegotiateWithRegistry, TypesWithoutBackendAreRefusedForCpuReaders) {
  for (DeviceType type : {Type::kMetal, Type::kVulkan, Type::kRocm, Type::kVpi, Type::kExtDev,
                          Type::kOneApi, Type::kWebGpu, Type::kHexagon}) {
    ASSERT_FALSE(DeviceRegistry::Global().Get(type, 0).ok()) << DeviceTypeName(type);
    ExchangePlan plan = Negotiate(Producer(type, 0), ConsumerCapabilities{});
    EXPECT_EQ(plan.mode, ExchangeMode::kRefused) << plan.explanation;
    ASSERT_TRUE(plan.reason.has_value());
    EXPECT_EQ(*plan.reason, FallbackReason::kUnsupportedDeviceType);
    EXPECT_THAT(plan.explanation, HasSubstr(DeviceTypeName(type)));
  }
}

TEST(NegotiateWithRegistry, PresentDevicesCopyToTheCpu) {
  int checked = 0;
  for (Device* device : DeviceRegistry::Global().Present()) {
    if (device->host_accessible()) continue;
    ExchangePlan plan = Negotiate(Producer(device->type(), device->id(), device->event_kind()),
                                  ConsumerCapabilities{});
    EXPECT_EQ(plan.mode, ExchangeMode::kCopy) << plan.explanation;
    EXPECT_EQ(plan.target_type, Type::kCpu);
    EXPECT_EQ(plan.direction, CopyDirection::kDeviceToHost);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no device other than host memory is present here";
}

TEST(NegotiateWithRegistry, AbsentCudaIsRefusedUnlessReadInPlace) {
  if (DeviceRegistry::Global().Get(Type::kCuda, 0).ok()) {
    GTEST_SKIP() << "CUDA is present on this machine";
  }
  ExchangePlan to_cpu = Negotiate(Producer(Type::kCuda, 0, kCu), ConsumerCapabilities{});
  EXPECT_EQ(to_cpu.mode, ExchangeMode::kRefused) << to_cpu.explanation;
  ExchangePlan in_place = Negotiate(Producer(Type::kCuda, 0, kCu), Reads({Type::kCuda}, {kCu}));
  EXPECT_EQ(in_place.mode, ExchangeMode::kZeroCopyDeviceWait) << in_place.explanation;
}

}  // namespace
}  // namespace ferry::device
