// `ferry graph`: a dataflow descriptor drawn as a Mermaid flowchart or as a
// self-contained HTML page (inline SVG laid out here, no script, nothing
// fetched from the network).
//
// Both drawings show the same graph: every node (plain nodes as boxes,
// runtime nodes as a group holding their operators), every built-in timer
// that feeds an input, and one edge per input fed by an output, labelled with
// the input id and, for outputs, its queue size and overflow policy.
//
// Thread safety: the functions are thread-safe; the structs are plain values.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "ferry/flow/dataflow.h"

namespace ferry::cli {

// One box of the drawing: a plain node, a runtime node (a group), an operator
// of a runtime node, or a timer.
struct GraphVertex {
  enum class Kind { kNode, kRuntime, kOperator, kTimer };
  Kind kind = Kind::kNode;
  // A Mermaid-safe identifier ("n0", "n2_o1", "t0").
  std::string key;
  // What the reader knows it by: "camera", "runtime/detect", the timer's
  // source text.
  std::string name;
  // A second line: the program, "python op.py", "every 33 ms"; may be "".
  std::string detail;
  // The outputs (for nodes and operators), in descriptor order.
  std::vector<std::string> outputs;
  // For an operator: the index of its runtime vertex; else -1.
  int parent = -1;
};

struct GraphEdge {
  int from = -1;  // vertex indices
  int to = -1;
  // "camera/image" (the source as resolved) and "sink/image" (consumer/input).
  std::string source;
  std::string target;
  // "image" or "image (queue 4, drop_oldest)".
  std::string label;
};

struct DataflowGraph {
  std::vector<GraphVertex> vertices;
  std::vector<GraphEdge> edges;
};

// The vertices and edges of a parsed (hence valid) dataflow.
DataflowGraph BuildGraph(const flow::Dataflow& dataflow);

// A Mermaid flowchart (`flowchart LR`): one statement per line, labels quoted
// with Mermaid's entity escapes, runtime nodes as subgraphs.
std::string RenderMermaid(const DataflowGraph& graph);

// A complete HTML document titled `title` (the descriptor's name) with the
// graph as inline SVG (each node a <g class="vertex" data-name=...>, each edge
// a <g class="edge" data-source=... data-target=...>), a table of the edges
// and the Mermaid text. The SVG part is well-formed XML.
std::string RenderHtml(const DataflowGraph& graph, const std::string& title);

// `ferry graph FILE [--format mermaid|html] [-o OUT] [--allow-cycles]`.
struct GraphCommandOptions {
  std::string file;
  // "mermaid", "html", or "" (html when `output` ends in .html or .htm).
  std::string format;
  // Where to write ("" or "-": `out`).
  std::string output;
  bool allow_cycles = false;
};

// Parses the descriptor (without checking that its programs exist: a graph
// can be drawn before the build) and writes the drawing. Returns the exit
// code: 0, or 1 with the parser's file:line:column message (or why the
// output cannot be written) on `err`.
int RunGraphCommand(const GraphCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::cli
