// `ferry graph` (dataflow_graph.h).
#include "cli/dataflow_graph.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/base/markup.h"

namespace ferry::cli {
namespace {

using flow::Dataflow;
using flow::InputSource;
using flow::InputSpec;
using flow::NodeSpec;
using flow::OperatorSpec;

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string FormatInterval(std::chrono::nanoseconds interval) {
  const int64_t ns = interval.count();
  char text[64];
  if (ns % 1'000'000'000 == 0) {
    std::snprintf(text, sizeof(text), "every %lld s", static_cast<long long>(ns / 1'000'000'000));
  } else if (ns % 1'000'000 == 0) {
    std::snprintf(text, sizeof(text), "every %lld ms", static_cast<long long>(ns / 1'000'000));
  } else {
    std::snprintf(text, sizeof(text), "every %.3f ms", static_cast<double>(ns) / 1e6);
  }
  return text;
}

std::string EdgeLabel(const InputSpec& input) {
  std::string label =
      input.source.output == input.id ? input.id : input.source.output + " \u2192 " + input.id;
  return label + " (queue " + std::to_string(input.queue_size) + ", " + input.overflow + ")";
}

// Mermaid's quoted labels take entity codes for the characters that would
// end or confuse them.
std::string MermaidText(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"':
        out += "#quot;";
        break;
      case '#':
        out += "#35;";
        break;
      case '<':
        out += "#lt;";
        break;
      case '>':
        out += "#gt;";
        break;
      case '|':
        out += "#124;";
        break;
      case '\n':
        out += "<br/>";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// At most `limit` characters (UTF-8 aware enough not to cut a sequence).
std::string Shorten(const std::string& text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t cut = limit - 1;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "\u2026";
}

std::string MermaidLabel(const GraphVertex& vertex) {
  std::string label = MermaidText(vertex.name);
  if (!vertex.detail.empty()) label += "<br/>" + MermaidText(vertex.detail);
  return "\"" + label + "\"";
}

}  // namespace

DataflowGraph BuildGraph(const Dataflow& dataflow) {
  DataflowGraph graph;
  // Where each node's (and operator's) vertex is.
  std::map<std::string, int> node_vertex;
  std::map<std::pair<std::string, std::string>, int> operator_vertex;
  std::map<std::string, int> timer_vertex;

  for (size_t n = 0; n < dataflow.nodes.size(); ++n) {
    const NodeSpec& node = dataflow.nodes[n];
    GraphVertex vertex;
    vertex.key = "n" + std::to_string(n);
    vertex.name = node.id;
    if (node.is_runtime()) {
      vertex.kind = GraphVertex::Kind::kRuntime;
      vertex.detail = "runtime";
    } else {
      vertex.kind = GraphVertex::Kind::kNode;
      vertex.detail = (node.python ? "python " : "") + BaseName(node.path);
      for (const auto& arg : node.args) vertex.detail += " " + arg;
      vertex.outputs = node.outputs;
    }
    node_vertex[node.id] = static_cast<int>(graph.vertices.size());
    graph.vertices.push_back(std::move(vertex));
    const int parent = node_vertex[node.id];
    for (size_t o = 0; o < node.operators.size(); ++o) {
      const OperatorSpec& op = node.operators[o];
      GraphVertex child;
      child.kind = GraphVertex::Kind::kOperator;
      child.key = "n" + std::to_string(n) + "_o" + std::to_string(o);
      child.name = node.id + "/" + op.id;
      child.detail =
          (op.kind == OperatorSpec::Kind::kPython ? "python " : "library ") + BaseName(op.path);
      child.outputs = op.outputs;
      child.parent = parent;
      operator_vertex[{node.id, op.id}] = static_cast<int>(graph.vertices.size());
      graph.vertices.push_back(std::move(child));
    }
  }

  auto source_vertex = [&](const InputSource& source) -> int {
    if (source.kind == InputSource::Kind::kTimer) {
      auto found = timer_vertex.find(source.text);
      if (found != timer_vertex.end()) return found->second;
      GraphVertex timer;
      timer.kind = GraphVertex::Kind::kTimer;
      timer.key = "t" + std::to_string(timer_vertex.size());
      timer.name = source.text;
      timer.detail = FormatInterval(source.interval);
      const int index = static_cast<int>(graph.vertices.size());
      graph.vertices.push_back(std::move(timer));
      timer_vertex[source.text] = index;
      return index;
    }
    if (!source.operator_id.empty()) {
      auto found = operator_vertex.find({source.node, source.operator_id});
      if (found != operator_vertex.end()) return found->second;
    }
    auto found = node_vertex.find(source.node);
    return found == node_vertex.end() ? -1 : found->second;
  };
  auto add_inputs = [&](const std::vector<InputSpec>& inputs, int consumer,
                        const std::string& consumer_name) {
    for (const InputSpec& input : inputs) {
      GraphEdge edge;
      edge.from = source_vertex(input.source);
      edge.to = consumer;
      if (edge.from < 0) continue;  // a parsed dataflow has no dangling sources
      edge.target = consumer_name + "/" + input.id;
      if (input.source.kind == InputSource::Kind::kTimer) {
        edge.source = input.source.text;
        edge.label = input.id;
      } else {
        edge.source = input.source.node + "/" +
                      (input.source.operator_id.empty() ? "" : input.source.operator_id + "/") +
                      input.source.output;
        edge.label = EdgeLabel(input);
      }
      graph.edges.push_back(std::move(edge));
    }
  };
  for (const NodeSpec& node : dataflow.nodes) {
    add_inputs(node.inputs, node_vertex[node.id], node.id);
    for (const OperatorSpec& op : node.operators) {
      add_inputs(op.inputs, operator_vertex[{node.id, op.id}], node.id + "/" + op.id);
    }
  }
  return graph;
}

std::string RenderMermaid(const DataflowGraph& graph) {
  std::ostringstream out;
  out << "flowchart LR\n";
  for (size_t v = 0; v < graph.vertices.size(); ++v) {
    const GraphVertex& vertex = graph.vertices[v];
    switch (vertex.kind) {
      case GraphVertex::Kind::kNode:
        out << "  " << vertex.key << "[" << MermaidLabel(vertex) << "]\n";
        break;
      case GraphVertex::Kind::kTimer:
        out << "  " << vertex.key << "([" << MermaidLabel(vertex) << "])\n";
        break;
      case GraphVertex::Kind::kRuntime: {
        GraphVertex title = vertex;
        title.detail = "";
        out << "  subgraph " << vertex.key << " [" << MermaidLabel(title) << "]\n";
        for (const GraphVertex& child : graph.vertices) {
          if (child.parent != static_cast<int>(v)) continue;
          GraphVertex shown = child;
          shown.name = child.name.substr(child.name.find('/') + 1);
          out << "    " << child.key << "[[" << MermaidLabel(shown) << "]]\n";
        }
        out << "  end\n";
        break;
      }
      case GraphVertex::Kind::kOperator:
        break;  // inside its runtime's subgraph
    }
  }
  for (const GraphEdge& edge : graph.edges) {
    out << "  " << graph.vertices[static_cast<size_t>(edge.from)].key << " -->|\""
        << MermaidText(edge.label) << "\"| " << graph.vertices[static_cast<size_t>(edge.to)].key
        << "\n";
  }
  return out.str();
}

namespace {

// A left-to-right layered drawing: every top-level vertex (node, runtime,
// timer) goes into the column of its longest path from a source, ignoring
// the edges that close a cycle; operators stack inside their runtime's box.
struct Box {
  double x = 0, y = 0, width = 0, height = 0;
};

constexpr double kMargin = 24;
constexpr double kBoxWidth = 210;
constexpr double kColumnGap = 170;
constexpr double kRowGap = 34;
constexpr double kNodeHeight = 54;
constexpr double kTimerHeight = 44;
constexpr double kRuntimeHeader = 30;
constexpr double kOperatorHeight = 50;
constexpr double kOperatorGap = 28;  // room for an edge between two operators

std::vector<Box> Layout(const DataflowGraph& graph, double* width, double* height) {
  const size_t count = graph.vertices.size();
  auto unit = [&](int v) {
    const int parent = graph.vertices[static_cast<size_t>(v)].parent;
    return parent >= 0 ? parent : v;
  };
  // Unit-level adjacency, and the edges that close a cycle (found by DFS).
  std::vector<std::vector<int>> next(count);
  for (const GraphEdge& edge : graph.edges) {
    const int a = unit(edge.from), b = unit(edge.to);
    if (a != b) next[static_cast<size_t>(a)].push_back(b);
  }
  std::vector<int> state(count, 0);  // 0 new, 1 on the stack, 2 done
  std::vector<std::pair<int, int>> forward;
  std::function<void(int)> visit = [&](int a) {
    state[static_cast<size_t>(a)] = 1;
    for (int b : next[static_cast<size_t>(a)]) {
      if (state[static_cast<size_t>(b)] == 1) continue;  // closes a cycle
      forward.emplace_back(a, b);
      if (state[static_cast<size_t>(b)] == 0) visit(b);
    }
    state[static_cast<size_t>(a)] = 2;
  };
  for (size_t v = 0; v < count; ++v) {
    if (graph.vertices[v].parent < 0 && state[v] == 0) visit(static_cast<int>(v));
  }
  std::vector<int> layer(count, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [a, b] : forward) {
      if (layer[static_cast<size_t>(b)] < layer[static_cast<size_t>(a)] + 1) {
        layer[static_cast<size_t>(b)] = layer[static_cast<size_t>(a)] + 1;
        changed = true;
      }
    }
  }

  std::vector<Box> boxes(count);
  std::map<int, double> column_bottom;
  *width = 0;
  *height = 0;
  for (size_t v = 0; v < count; ++v) {
    const GraphVertex& vertex = graph.vertices[v];
    if (vertex.parent >= 0) continue;
    int children = 0;
    for (const GraphVertex& child : graph.vertices) children += child.parent == static_cast<int>(v);
    Box& box = boxes[v];
    box.width = kBoxWidth;
    switch (vertex.kind) {
      case GraphVertex::Kind::kTimer:
        box.height = kTimerHeight;
        break;
      case GraphVertex::Kind::kRuntime:
        box.height = kRuntimeHeader + children * (kOperatorHeight + kOperatorGap);
        break;
      default:
        box.height = kNodeHeight;
    }
    box.x = kMargin + layer[v] * (kBoxWidth + kColumnGap);
    double& bottom = column_bottom[layer[v]];
    box.y = kMargin + bottom;
    bottom += box.height + kRowGap;
    int slot = 0;
    for (size_t c = 0; c < count; ++c) {
      if (graph.vertices[c].parent != static_cast<int>(v)) continue;
      boxes[c] = {box.x + 10, box.y + kRuntimeHeader + slot * (kOperatorHeight + kOperatorGap),
                  kBoxWidth - 20, kOperatorHeight};
      ++slot;
    }
    *width = std::max(*width, box.x + box.width + kMargin);
    *height = std::max(*height, box.y + box.height + kMargin);
  }
  // Room for edges that loop back below the drawing.
  *height += 40;
  return boxes;
}

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

}  // namespace

std::string RenderHtml(const DataflowGraph& graph, const std::string& title) {
  double width = 0, height = 0;
  const std::vector<Box> boxes = Layout(graph, &width, &height);
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << Number(width) << "\" height=\""
      << Number(height) << "\" viewBox=\"0 0 " << Number(width) << " " << Number(height)
      << "\" role=\"img\" aria-label=\"" << markup::Escape(title) << "\">\n"
      << "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" "
         "markerWidth=\"8\" markerHeight=\"8\" orient=\"auto-start-reverse\">"
         "<path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#555\"/></marker></defs>\n";

  auto vertex_class = [](GraphVertex::Kind kind) {
    switch (kind) {
      case GraphVertex::Kind::kTimer:
        return "timer";
      case GraphVertex::Kind::kRuntime:
        return "runtime";
      case GraphVertex::Kind::kOperator:
        return "operator";
      default:
        return "node";
    }
  };
  // Runtimes first, so that their operators are drawn on top of them.
  std::vector<size_t> order;
  for (size_t v = 0; v < graph.vertices.size(); ++v) {
    if (graph.vertices[v].kind != GraphVertex::Kind::kOperator) order.push_back(v);
  }
  for (size_t v = 0; v < graph.vertices.size(); ++v) {
    if (graph.vertices[v].kind == GraphVertex::Kind::kOperator) order.push_back(v);
  }
  for (size_t v : order) {
    const GraphVertex& vertex = graph.vertices[v];
    const Box& box = boxes[v];
    const bool runtime = vertex.kind == GraphVertex::Kind::kRuntime;
    std::string tooltip = vertex.name + (vertex.detail.empty() ? "" : "\n" + vertex.detail);
    if (!vertex.outputs.empty()) {
      tooltip += "\noutputs:";
      for (const auto& output : vertex.outputs) tooltip += " " + output;
    }
    svg << "<g class=\"vertex " << vertex_class(vertex.kind) << "\" data-name=\""
        << markup::Escape(vertex.name) << "\"><title>" << markup::Escape(tooltip) << "</title>"
        << "<rect x=\"" << Number(box.x) << "\" y=\"" << Number(box.y) << "\" width=\""
        << Number(box.width) << "\" height=\"" << Number(box.height) << "\" rx=\""
        << (vertex.kind == GraphVertex::Kind::kTimer ? "22" : "6") << "\"/>";
    const double center = box.x + box.width / 2;
    const std::string shown = vertex.kind == GraphVertex::Kind::kOperator
                                  ? vertex.name.substr(vertex.name.find('/') + 1)
                                  : vertex.name;
    if (runtime) {
      svg << "<text class=\"name\" x=\"" << Number(center) << "\" y=\"" << Number(box.y + 20)
          << "\">" << markup::Escape(Shorten(shown, 30)) << "</text>";
    } else {
      svg << "<text class=\"name\" x=\"" << Number(center) << "\" y=\""
          << Number(box.y + box.height / 2 - 3) << "\">" << markup::Escape(Shorten(shown, 28))
          << "</text><text class=\"detail\" x=\"" << Number(center) << "\" y=\""
          << Number(box.y + box.height / 2 + 14) << "\">"
          << markup::Escape(Shorten(vertex.detail, 34)) << "</text>";
    }
    svg << "</g>\n";
  }

  // Several edges at one box spread over its side, in edge order.
  std::vector<int> out_count(graph.vertices.size(), 0), in_count(graph.vertices.size(), 0);
  for (const GraphEdge& edge : graph.edges) {
    ++out_count[static_cast<size_t>(edge.from)];
    ++in_count[static_cast<size_t>(edge.to)];
  }
  std::vector<int> out_seen(graph.vertices.size(), 0), in_seen(graph.vertices.size(), 0);
  for (const GraphEdge& edge : graph.edges) {
    const auto from = static_cast<size_t>(edge.from), to = static_cast<size_t>(edge.to);
    const Box& a = boxes[from];
    const Box& b = boxes[to];
    const double sx = a.x + a.width;
    const double sy = a.y + a.height * (++out_seen[from]) / (out_count[from] + 1);
    const double ex = b.x;
    const double ey = b.y + b.height * (++in_seen[to]) / (in_count[to] + 1);
    const GraphVertex& source = graph.vertices[from];
    const GraphVertex& target = graph.vertices[to];
    if (source.parent >= 0 && source.parent == target.parent && b.y > a.y) {
      // Between operators of one runtime, stacked: straight down.
      const double x = a.x + a.width / 2;
      svg << "<g class=\"edge\" data-source=\"" << markup::Escape(edge.source)
          << "\" data-target=\"" << markup::Escape(edge.target) << "\"><title>"
          << markup::Escape(edge.source + " \u2192 " + edge.target) << "</title><path d=\"M "
          << Number(x) << " " << Number(a.y + a.height) << " L " << Number(x) << " " << Number(b.y)
          << "\" marker-end=\"url(#arrow)\"/><text class=\"label\" x=\"" << Number(x) << "\" y=\""
          << Number((a.y + a.height + b.y) / 2 + 4) << "\">"
          << markup::Escape(Shorten(edge.label, 34)) << "</text></g>\n";
      continue;
    }
    double c1x, c1y, c2x, c2y;
    if (ex > sx + 20) {
      const double bend = (ex - sx) / 2;
      c1x = sx + bend, c1y = sy, c2x = ex - bend, c2y = ey;
    } else {
      // Back to an earlier (or the same) column: around, below the boxes.
      const double below = std::max(a.y + a.height, b.y + b.height) + 30;
      c1x = sx + 90, c1y = below, c2x = ex - 90, c2y = below;
    }
    const double lx = (sx + 3 * c1x + 3 * c2x + ex) / 8;
    const double ly = (sy + 3 * c1y + 3 * c2y + ey) / 8;
    svg << "<g class=\"edge\" data-source=\"" << markup::Escape(edge.source) << "\" data-target=\""
        << markup::Escape(edge.target) << "\"><title>"
        << markup::Escape(edge.source + " \u2192 " + edge.target) << "</title><path d=\"M "
        << Number(sx) << " " << Number(sy) << " C " << Number(c1x) << " " << Number(c1y) << ", "
        << Number(c2x) << " " << Number(c2y) << ", " << Number(ex) << " " << Number(ey)
        << "\" marker-end=\"url(#arrow)\"/><text class=\"label\" x=\"" << Number(lx) << "\" y=\""
        << Number(ly - 4) << "\">" << markup::Escape(Shorten(edge.label, 40)) << "</text></g>\n";
  }
  svg << "</svg>";

  std::ostringstream page;
  page << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
       << markup::Escape(title) << "</title>\n<style>\n"
       << "body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }\n"
          ".drawing { overflow: auto; border: 1px solid #ddd; }\n"
          "svg text { text-anchor: middle; font-size: 12px; }\n"
          "svg .name { font-weight: 600; font-size: 13px; }\n"
          "svg .detail { fill: #555; font-family: ui-monospace, monospace; font-size: 11px; }\n"
          "svg .vertex rect { fill: #eef4fb; stroke: #3b6ea8; stroke-width: 1.5; }\n"
          "svg .runtime > rect { fill: #f6f6f6; stroke: #888; stroke-dasharray: 5 3; }\n"
          "svg .operator rect { fill: #fdf3e4; stroke: #b07a1e; }\n"
          "svg .timer rect { fill: #eef8ee; stroke: #3c8a3c; }\n"
          "svg .edge path { fill: none; stroke: #555; stroke-width: 1.3; }\n"
          "svg .edge .label { fill: #333; font-size: 11px; paint-order: stroke; stroke: #fff; "
          "stroke-width: 3px; }\n"
          "table { border-collapse: collapse; margin-top: 1em; }\n"
          "td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }\n"
          "pre { background: #f6f6f6; padding: 0.8em; overflow: auto; }\n"
       << "</style>\n</head>\n<body>\n<h1>" << markup::Escape(title)
       << "</h1>\n<div class=\"drawing\">\n"
       << svg.str() << "\n</div>\n<h2>Edges</h2>\n<table>\n"
       << "<tr><th>source</th><th>target</th><th>label</th></tr>\n";
  for (const GraphEdge& edge : graph.edges) {
    page << "<tr><td>" << markup::Escape(edge.source) << "</td><td>" << markup::Escape(edge.target)
         << "</td><td>" << markup::Escape(edge.label) << "</td></tr>\n";
  }
  page << "</table>\n<h2>Mermaid</h2>\n<pre>" << markup::Escape(RenderMermaid(graph))
       << "</pre>\n</body>\n</html>\n";
  return page.str();
}

int RunGraphCommand(const GraphCommandOptions& options, std::ostream& out, std::ostream& err) {
  flow::ParseOptions parse;
  parse.check_paths = false;
  parse.allow_cycles = options.allow_cycles;
  auto dataflow = flow::ParseDataflow(options.file, parse);
  if (!dataflow.ok()) {
    err << dataflow.status().message() << "\n";
    return 1;
  }
  std::string format = options.format;
  if (format.empty()) {
    const auto ends_with = [&](const std::string& suffix) {
      return options.output.size() >= suffix.size() &&
             options.output.compare(options.output.size() - suffix.size(), suffix.size(), suffix) ==
                 0;
    };
    format = ends_with(".html") || ends_with(".htm") ? "html" : "mermaid";
  }
  if (format != "mermaid" && format != "html") {
    err << "ferry: unknown graph format '" << format << "' (expected mermaid or html)\n";
    return 1;
  }
  const DataflowGraph graph = BuildGraph(*dataflow);
  const std::string text =
      format == "html" ? RenderHtml(graph, options.file) : RenderMermaid(graph);
  if (options.output.empty() || options.output == "-") {
    out << text;
    out.flush();
    return 0;
  }
  std::ofstream file(options.output, std::ios::trunc | std::ios::binary);
  file << text;
  file.close();
  if (!file) {
    err << "ferry: cannot write '" << options.output << "': " << std::strerror(errno) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ferry::cli
