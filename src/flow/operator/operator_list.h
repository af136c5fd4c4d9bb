// The operators of a runtime node, as the daemon hands them to `ferry
// runtime` / `python -m ferry.runtime` in the environment variable
// FERRY_OPERATORS (see runtime_main.h for the format). Internal.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/flow/dataflow.h"

namespace ferry::flow {

inline constexpr const char* kOperatorsEnv = "FERRY_OPERATORS";
// The source of an input fed from outside the runtime (another node, a timer).
inline constexpr const char* kExternalSource = "external";

struct OperatorDefinition {
  std::string id;
  OperatorSpec::Kind kind = OperatorSpec::Kind::kSharedLibrary;
  std::string path;
  struct Input {
    std::string id;
    // "external", or "<operator>/<output>" of an operator of the same runtime.
    std::string source = kExternalSource;
    // For inputs fed inside the runtime (external ones are queued by the node).
    uint32_t queue_size = 64;
    std::string overflow = "block";  // "block" | "drop_oldest" | "drop_newest"
  };
  std::vector<Input> inputs;
  std::vector<std::string> outputs;
  std::string config_json = "{}";  // a JSON object

  bool external(const Input& input) const { return input.source == kExternalSource; }
};

// Parses and checks FERRY_OPERATORS. Invalid naming the entry and field on
// bad input ("operator 2 ('sum'): input 'x': source must be \"external\" or
// \"<operator>/<output>\", not 'x'"). Unknown keys are ignored, so that a
// newer daemon may add some.
Result<std::vector<OperatorDefinition>> ParseOperatorList(const std::string& json);
// The JSON text of a list (what the daemon puts in FERRY_OPERATORS).
std::string OperatorListToJson(const std::vector<OperatorDefinition>& operators);
// The list of a runtime node of a parsed descriptor: inputs whose source is
// an operator of this node are in-process, every other one external.
std::vector<OperatorDefinition> OperatorDefinitionsOf(const NodeSpec& runtime_node);

}  // namespace ferry::flow
