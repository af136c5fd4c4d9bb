// Graph checks of a descriptor: every source exists, and no forbidden cycle.
#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "flow/dataflow/dataflow_internal.h"

namespace ferry::flow::internal {
namespace {

std::vector<std::string> NodeIds(const Dataflow& dataflow) {
  std::vector<std::string> ids;
  for (const NodeSpec& node : dataflow.nodes) ids.push_back(node.id);
  return ids;
}

std::vector<std::string> OperatorIds(const NodeSpec& node) {
  std::vector<std::string> ids;
  for (const OperatorSpec& op : node.operators) ids.push_back(op.id);
  return ids;
}

const OperatorSpec* FindOperator(const NodeSpec& node, const std::string& id) {
  for (const OperatorSpec& op : node.operators) {
    if (op.id == id) return &op;
  }
  return nullptr;
}

struct Edge {
  size_t to = 0;
  size_t site = 0;  // index into the InputSite list
};

struct Cycle {
  // Vertices in data-flow order, the first repeated at the end.
  std::vector<size_t> vertices;
  size_t closing_site = 0;
};

// Depth-first search without recursion (graphs may be long chains). Edges go
// from a consumer to its producer; the first cycle met in vertex order wins.
std::optional<Cycle> FindCycle(const std::vector<std::vector<Edge>>& edges) {
  enum class State : uint8_t { kNew, kOnStack, kDone };
  std::vector<State> state(edges.size(), State::kNew);
  std::vector<std::pair<size_t, size_t>> stack;   // vertex, next edge index
  std::vector<size_t> position(edges.size(), 0);  // index of a vertex on the stack
  for (size_t start = 0; start < edges.size(); ++start) {
    if (state[start] != State::kNew) continue;
    stack.push_back({start, 0});
    state[start] = State::kOnStack;
    position[start] = 0;
    while (!stack.empty()) {
      auto& [vertex, next] = stack.back();
      if (next == edges[vertex].size()) {
        state[vertex] = State::kDone;
        stack.pop_back();
        continue;
      }
      const Edge edge = edges[vertex][next++];
      if (state[edge.to] == State::kOnStack) {
        // stack[position[to]..] is to, x1, ..., vertex: each consumes the
        // next, and `vertex` consumes `to`, so data flows to -> vertex -> ... -> x1 -> to.
        Cycle cycle;
        cycle.closing_site = edge.site;
        cycle.vertices.push_back(edge.to);
        for (size_t i = stack.size() - 1; i > position[edge.to]; --i) {
          cycle.vertices.push_back(stack[i].first);
        }
        cycle.vertices.push_back(edge.to);
        return cycle;
      }
      if (state[edge.to] == State::kNew) {
        state[edge.to] = State::kOnStack;
        position[edge.to] = stack.size();
        stack.push_back({edge.to, 0});
      }
    }
  }
  return std::nullopt;
}

// "a -> b -> a"; a long cycle shows its first and last steps.
std::string CycleText(const Cycle& cycle, const std::vector<std::string>& names) {
  constexpr size_t kHead = 8;
  constexpr size_t kTail = 4;
  const size_t count = cycle.vertices.size();
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    if (count > kHead + kTail + 1 && i == kHead) {
      text += " -> ... (" + std::to_string(count - kHead - kTail) + " more)";
      i = count - kTail - 1;
      continue;
    }
    if (!text.empty()) text += " -> ";
    text += names[cycle.vertices[i]];
  }
  return text;
}

}  // namespace

std::string JoinNames(const std::vector<std::string>& names) {
  constexpr size_t kShown = 16;
  if (names.empty()) return "none";
  std::string text;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) {
    if (i > 0) text += ", ";
    text += names[i];
  }
  if (names.size() > kShown) text += ", ... (" + std::to_string(names.size() - kShown) + " more)";
  return text;
}

const InputSpec& InputAt(const Dataflow& dataflow, const InputSite& site) {
  const NodeSpec& node = dataflow.nodes[site.node];
  if (site.operator_index < 0) return node.inputs[site.input];
  return node.operators[static_cast<size_t>(site.operator_index)].inputs[site.input];
}

std::string DescribeInput(const Dataflow& dataflow, const InputSite& site) {
  const NodeSpec& node = dataflow.nodes[site.node];
  const std::string input = "input '" + InputAt(dataflow, site).id + "'";
  if (site.operator_index < 0) return input + " of node '" + node.id + "'";
  return input + " of operator '" + node.id + "/" +
         node.operators[static_cast<size_t>(site.operator_index)].id + "'";
}

Status ResolveSources(const Dataflow& dataflow, const std::vector<InputSite>& sites,
                      const yaml::Reporter& reporter) {
  std::unordered_map<std::string_view, const NodeSpec*> nodes;
  for (const NodeSpec& node : dataflow.nodes) nodes.emplace(node.id, &node);
  for (const InputSite& site : sites) {
    const InputSource& source = InputAt(dataflow, site).source;
    if (source.kind != InputSource::Kind::kOutput) continue;
    const auto fail = [&](const std::string& what) {
      return reporter.Error(site.source, DescribeInput(dataflow, site) + " " + what);
    };
    const auto found = nodes.find(source.node);
    if (found == nodes.end()) {
      return fail("refers to unknown node '" + source.node +
                  "' (nodes: " + JoinNames(NodeIds(dataflow)) + ")");
    }
    const NodeSpec* producer = found->second;
    const std::vector<std::string>* outputs = &producer->outputs;
    std::string owner = "node '" + producer->id + "'";
    if (producer->is_runtime()) {
      if (source.operator_id.empty()) {
        return fail("refers to '" + source.text + "', but '" + producer->id +
                    "' is a runtime node: write '" + producer->id +
                    "/<operator>/<output>' (operators: " + JoinNames(OperatorIds(*producer)) + ")");
      }
      const OperatorSpec* op = FindOperator(*producer, source.operator_id);
      if (op == nullptr) {
        return fail("refers to unknown operator '" + source.node + "/" + source.operator_id +
                    "' (node '" + producer->id +
                    "' has operators: " + JoinNames(OperatorIds(*producer)) + ")");
      }
      outputs = &op->outputs;
      owner = "operator '" + producer->id + "/" + op->id + "'";
    } else if (!source.operator_id.empty()) {
      return fail("refers to '" + source.text + "', but node '" + producer->id +
                  "' has no operators: write '" + producer->id +
                  "/<output>' (outputs: " + JoinNames(producer->outputs) + ")");
    }
    if (std::find(outputs->begin(), outputs->end(), source.output) == outputs->end()) {
      return fail(
          "refers to unknown output '" + source.text + "' (" + owner +
          (outputs->empty() ? " has no outputs)" : " has outputs: " + JoinNames(*outputs) + ")"));
    }
  }
  return Status::OK();
}

Status CheckCycles(const Dataflow& dataflow, const std::vector<InputSite>& sites, bool allow_cycles,
                   const yaml::Reporter& reporter) {
  std::map<std::string, size_t> node_index;
  for (size_t i = 0; i < dataflow.nodes.size(); ++i) node_index[dataflow.nodes[i].id] = i;

  std::vector<std::vector<size_t>> sites_of_node(dataflow.nodes.size());
  for (size_t s = 0; s < sites.size(); ++s) sites_of_node[sites[s].node].push_back(s);

  // Operators of one runtime node, always.
  for (size_t n = 0; n < dataflow.nodes.size(); ++n) {
    const NodeSpec& node = dataflow.nodes[n];
    if (!node.is_runtime()) continue;
    std::map<std::string, size_t> operator_index;
    std::vector<std::string> names;
    for (size_t i = 0; i < node.operators.size(); ++i) {
      operator_index[node.operators[i].id] = i;
      names.push_back(node.operators[i].id);
    }
    std::vector<std::vector<Edge>> edges(node.operators.size());
    for (size_t s : sites_of_node[n]) {
      const InputSite& site = sites[s];
      if (site.operator_index < 0) continue;
      const InputSource& source = InputAt(dataflow, site).source;
      if (source.kind != InputSource::Kind::kOutput || source.node != node.id) continue;
      edges[static_cast<size_t>(site.operator_index)].push_back(
          {operator_index.at(source.operator_id), s});
    }
    if (std::optional<Cycle> cycle = FindCycle(edges)) {
      return reporter.Error(sites[cycle->closing_site].source,
                            "operators of runtime node '" + node.id +
                                "' form a cycle: " + CycleText(*cycle, names) + " (through " +
                                DescribeInput(dataflow, sites[cycle->closing_site]) +
                                "); operators in one runtime may not feed back");
    }
  }

  if (allow_cycles) return Status::OK();
  std::vector<std::vector<Edge>> edges(dataflow.nodes.size());
  for (size_t s = 0; s < sites.size(); ++s) {
    const InputSite& site = sites[s];
    const InputSource& source = InputAt(dataflow, site).source;
    if (source.kind != InputSource::Kind::kOutput) continue;
    const size_t producer = node_index.at(source.node);
    // Operators feeding operators of the same runtime were checked above.
    if (producer == site.node && site.operator_index >= 0) continue;
    edges[site.node].push_back({producer, s});
  }
  if (std::optional<Cycle> cycle = FindCycle(edges)) {
    return reporter.Error(sites[cycle->closing_site].source,
                          "nodes form a cycle: " + CycleText(*cycle, NodeIds(dataflow)) +
                              " (through " + DescribeInput(dataflow, sites[cycle->closing_site]) +
                              "); feedback loops between nodes must be allowed (allow_cycles)");
  }
  return Status::OK();
}

}  // namespace ferry::flow::internal
