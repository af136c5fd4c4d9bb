#include "flow/operator/runtime_main.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ferry/flow/node.h"
#include "flow/operator/operator_host.h"
#include "flow/operator/operator_list.h"

namespace ferry::flow {
namespace {

constexpr const char* kUsage =
    "usage: ferry runtime\n"
    "\n"
    "Runs the operators of one runtime node of a dataflow. The daemon (`ferry run`)\n"
    "starts it with FERRY_NODE_CONFIG and FERRY_OPERATORS in the environment.\n";

}  // namespace

int RunHostOnNode(OperatorHost& host) {
  auto node = Node::FromEnvironment();
  if (!node.ok()) {
    std::fprintf(stderr, "ferry runtime: %s\n", node.status().message().c_str());
    return 1;
  }
  Status ran = host.Run(node->get());
  // Destroying the node reports its statistics and closes its outputs.
  node->reset();
  if (!ran.ok()) {
    std::fprintf(stderr, "ferry runtime: %s\n", ran.message().c_str());
    return 1;
  }
  return host.errors().empty() ? 0 : 1;
}

int RunOperatorRuntime(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "ferry runtime: unexpected argument '%s'\n%s", argv[i], kUsage);
    return 2;
  }
  const char* text = std::getenv(kOperatorsEnv);
  if (text == nullptr) {
    std::fprintf(stderr,
                 "ferry runtime: %s is not set: this command runs a runtime node of a dataflow; "
                 "start it with `ferry run dataflow.yml`\n",
                 kOperatorsEnv);
    return 2;
  }
  auto operators = ParseOperatorList(text);
  if (!operators.ok()) {
    std::fprintf(stderr, "ferry runtime: %s\n", operators.status().message().c_str());
    return 2;
  }
  OperatorHost host;
  for (const OperatorDefinition& definition : *operators) {
    Status added = host.Add(definition);
    if (!added.ok()) {
      std::fprintf(stderr, "ferry runtime: %s\n", added.message().c_str());
      return 1;
    }
  }
  return RunHostOnNode(host);
}

}  // namespace ferry::flow
