// `ferry graph`: the graph model, the Mermaid text's structure, the HTML
// page's content, and the command's errors.
#include "cli/dataflow_graph.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "testing/test_util.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDescriptor = R"(nodes:
  - id: camera
    path: camera.py
    args: --fps 30
    inputs:
      tick: dora/timer/millis/33
    outputs: [image]
  - id: runtime
    operators:
      - id: detect
        python: detect.py
        inputs:
          image: {source: camera/image, queue_size: 4, overflow: drop_oldest}
        outputs: [boxes]
      - id: track
        shared-library: libtrack.so
        inputs: {boxes: runtime/detect/boxes}
        outputs: [tracks]
  - id: sink
    path: sink
    inputs:
      tracks: runtime/track/tracks
      frame: camera/image
      beat: ferry/timer/hz/2
)";

flow::Dataflow Parse(const std::string& text) {
  flow::ParseOptions options;
  options.check_paths = false;
  auto parsed = flow::ParseDataflowString(text, "df.yml", "/flows", options);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  return parsed.ok() ? *parsed : flow::Dataflow{};
}

TEST(DataflowGraph, VerticesAndEdges) {
  const DataflowGraph graph = BuildGraph(Parse(kDescriptor));
  std::map<std::string, const GraphVertex*> by_name;
  for (const auto& vertex : graph.vertices) by_name[vertex.name] = &vertex;
  ASSERT_EQ(by_name.size(), 7u);  // 3 nodes, 2 operators, 2 timers
  EXPECT_EQ(by_name["camera"]->detail, "python camera.py --fps 30");
  EXPECT_EQ(by_name["runtime"]->kind, GraphVertex::Kind::kRuntime);
  EXPECT_EQ(by_name["runtime/detect"]->kind, GraphVertex::Kind::kOperator);
  EXPECT_EQ(by_name["runtime/detect"]->detail, "python detect.py");
  EXPECT_EQ(by_name["runtime/track"]->detail, "library libtrack.so");
  EXPECT_EQ(by_name["dora/timer/millis/33"]->detail, "every 33 ms");
  EXPECT_EQ(by_name["ferry/timer/hz/2"]->detail, "every 500 ms");

  std::map<std::string, const GraphEdge*> by_target;
  for (const auto& edge : graph.edges) by_target[edge.target] = &edge;
  ASSERT_EQ(by_target.size(), 6u);
  EXPECT_EQ(by_target["runtime/detect/image"]->source, "camera/image");
  EXPECT_EQ(by_target["runtime/detect/image"]->label, "image (queue 4, drop_oldest)");
  EXPECT_EQ(by_target["sink/frame"]->label, "image \u2192 frame (queue 64, block)");
  EXPECT_EQ(by_target["camera/tick"]->source, "dora/timer/millis/33");
  EXPECT_EQ(by_target["camera/tick"]->label, "tick");
  EXPECT_EQ(by_target["sink/tracks"]->source, "runtime/track/tracks");
  EXPECT_EQ(graph.vertices[static_cast<size_t>(by_target["sink/tracks"]->from)].name,
            "runtime/track");
}

// Every line of the Mermaid text is one statement of the few forms it uses;
// every edge joins declared ids; subgraphs are balanced.
TEST(DataflowGraph, MermaidStructure) {
  const std::string text = RenderMermaid(BuildGraph(Parse(kDescriptor)));
  std::istringstream lines(text);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(line, "flowchart LR");
  const std::regex node(R"re(^ +(\w+)(\[|\(\[|\[\[)"[^"]*"(\]|\]\)|\]\])$)re");
  const std::regex subgraph(R"re(^  subgraph (\w+) \["[^"]*"\]$)re");
  const std::regex edge(R"re(^  (\w+) -->\|"[^"|]*"\| (\w+)$)re");
  std::set<std::string> declared;
  int depth = 0, edges = 0;
  std::smatch match;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, match, subgraph)) {
      declared.insert(match[1]);
      ++depth;
    } else if (line == "  end") {
      --depth;
      EXPECT_GE(depth, 0);
    } else if (std::regex_match(line, match, node)) {
      EXPECT_TRUE(declared.insert(match[1]).second) << "declared twice: " << line;
    } else if (std::regex_match(line, match, edge)) {
      EXPECT_TRUE(declared.count(match[1])) << line;
      EXPECT_TRUE(declared.count(match[2])) << line;
      ++edges;
    } else {
      ADD_FAILURE() << "not a Mermaid statement of ours: " << line;
    }
  }
  EXPECT_EQ(depth, 0);
  EXPECT_EQ(edges, 6);
  EXPECT_NE(text.find("n1_o0[[\"detect<br/>python detect.py\"]]"), std::string::npos) << text;
  EXPECT_NE(text.find("|\"image (queue 4, drop_oldest)\"|"), std::string::npos) << text;
}

TEST(DataflowGraph, MermaidEscapesLabels) {
  const std::string text = RenderMermaid(
      BuildGraph(Parse("nodes: [{id: a, path: run, args: ['say \"hi\" #1 <b>|c']}]")));
  EXPECT_NE(text.find("say #quot;hi#quot; #35;1 #lt;b#gt;#124;c"), std::string::npos) << text;
}

TEST(DataflowGraph, HtmlHasEveryVertexAndEdge) {
  const DataflowGraph graph = BuildGraph(Parse(kDescriptor));
  const std::string html = RenderHtml(graph, "df.yml");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://", 0), html.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
  for (const auto& vertex : graph.vertices) {
    EXPECT_NE(html.find("data-name=\"" + vertex.name + "\""), std::string::npos) << vertex.name;
  }
  for (const auto& edge : graph.edges) {
    EXPECT_NE(html.find("data-source=\"" + edge.source + "\" data-target=\"" + edge.target + "\""),
              std::string::npos)
        << edge.target;
  }
}

TEST(DataflowGraph, CyclesAreDrawn) {
  flow::ParseOptions options;
  options.check_paths = false;
  options.allow_cycles = true;
  auto parsed = flow::ParseDataflowString(R"(nodes:
  - {id: a, path: a, inputs: {x: b/y}, outputs: [x]}
  - {id: b, path: b, inputs: {x: a/x}, outputs: [y]}
)",
                                          "df.yml", "/flows", options);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const DataflowGraph graph = BuildGraph(*parsed);
  EXPECT_EQ(graph.edges.size(), 2u);
  const std::string html = RenderHtml(graph, "cycle");
  EXPECT_NE(html.find("data-target=\"a/x\""), std::string::npos);
}

class GraphCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ferry_graph_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream((dir_ / name).string()) << text;
    return (dir_ / name).string();
  }
  int Run(const GraphCommandOptions& options) {
    out_.str("");
    err_.str("");
    return RunGraphCommand(options, out_, err_);
  }
  fs::path dir_;
  std::ostringstream out_, err_;
};

TEST_F(GraphCommand, WritesMermaidOrHtml) {
  const std::string file = Write("dataflow.yml", kDescriptor);
  ASSERT_EQ(Run({file, "", "", false}), 0) << err_.str();
  EXPECT_EQ(out_.str().rfind("flowchart LR\n", 0), 0u);
  const std::string page = (dir_ / "graph.html").string();
  ASSERT_EQ(Run({file, "", page, false}), 0) << err_.str();
  EXPECT_TRUE(out_.str().empty());
  std::ifstream written(page);
  std::string head;
  std::getline(written, head);
  EXPECT_EQ(head, "<!DOCTYPE html>");
  ASSERT_EQ(Run({file, "html", "", false}), 0);
  EXPECT_EQ(out_.str().rfind("<!DOCTYPE html>", 0), 0u);
}

TEST_F(GraphCommand, BadInputIsAClearError) {
  EXPECT_EQ(Run({(dir_ / "missing.yml").string(), "", "", false}), 1);
  EXPECT_NE(err_.str().find("missing.yml"), std::string::npos) << err_.str();

  const std::string bad =
      Write("bad.yml", "nodes:\n  - id: a\n    path: a\n    inputs: {x: b/y}\n");
  EXPECT_EQ(Run({bad, "", "", false}), 1);
  EXPECT_NE(err_.str().find("bad.yml:4:"), std::string::npos) << err_.str();
  EXPECT_NE(err_.str().find("unknown node 'b'"), std::string::npos) << err_.str();
  EXPECT_TRUE(out_.str().empty());

  const std::string good = Write("good.yml", kDescriptor);
  EXPECT_EQ(Run({good, "svg", "", false}), 1);
  EXPECT_NE(err_.str().find("unknown graph format 'svg'"), std::string::npos);
  EXPECT_EQ(Run({good, "", (dir_ / "no/such/dir/g.html").string(), false}), 1);
  EXPECT_NE(err_.str().find("cannot write"), std::string::npos) << err_.str();
}

}  // namespace
}  // namespace ferry::cli
