// Pieces of the descriptor parser shared by its source files. Not installed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/yaml_tree.h"
#include "ferry/base/status.h"
#include "ferry/flow/dataflow.h"

namespace ferry::flow::internal {

// Where one input was declared: node index, operator index (-1 for a plain
// node's input), input index, and where its source text was written.
struct InputSite {
  size_t node = 0;
  int operator_index = -1;
  size_t input = 0;
  SourceLocation source;
};

// "input 'x' of node 'n'" or "input 'x' of operator 'n/op'".
std::string DescribeInput(const Dataflow& dataflow, const InputSite& site);
const InputSpec& InputAt(const Dataflow& dataflow, const InputSite& site);

// "a, b, c" (at most 16 names, then how many more); "none" when empty.
std::string JoinNames(const std::vector<std::string>& names);

// Checks that every output source names an existing node, operator and output.
Status ResolveSources(const Dataflow& dataflow, const std::vector<InputSite>& sites,
                      const yaml::Reporter& reporter);

// Refuses cycles between nodes (unless allow_cycles) and, always, between
// the operators of one runtime node.
Status CheckCycles(const Dataflow& dataflow, const std::vector<InputSite>& sites, bool allow_cycles,
                   const yaml::Reporter& reporter);

// Resolves a node's `path` (paths.cc): a text with '/' against `directory`;
// a bare name in `directory` if it is there, else on PATH (not for .py).
// With `check`, the file must exist and be executable (a .py script:
// readable). Errors are Invalid with a message to prefix with the node.
Result<std::string> ResolveProgram(const std::string& text, const std::string& directory,
                                   bool check);
// Resolves an operator's library or script against `directory`; with
// `check` it must be a readable regular file.
Result<std::string> ResolveOperatorFile(const std::string& text, const std::string& directory,
                                        bool check);
bool IsPythonScript(std::string_view path);

}  // namespace ferry::flow::internal
