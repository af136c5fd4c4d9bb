// Reading a dataflow descriptor (dataflow.h): the YAML tree (yaml_tree.h) is
// checked key by key against the schema, then the graph (graph.cc) and the
// paths (paths.cc).
#include "ferry/flow/dataflow.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/yaml_tree.h"
#include "flow/dataflow/dataflow_internal.h"

namespace ferry::flow {
namespace {

namespace fs = std::filesystem;
using yaml::Node;
using yaml::Ref;
using yaml::Reporter;

// Ids become parts of shared-memory channel names, "<run>/<node>/<op>/<output>",
// which the transport limits to 100 characters; 64 leave room for the run id.
constexpr size_t kMaxIdLength = 64;
constexpr size_t kMaxQualifiedOutputLength = 64;
// The transport's largest ring (kMaxRingCapacity).
constexpr int64_t kMaxQueueSize = int64_t{1} << 20;
constexpr int64_t kMaxTimerMillis = int64_t{24} * 60 * 60 * 1000;
constexpr double kMaxTimerHz = 1e6;
constexpr int64_t kMaxRestarts = 10000;
constexpr int64_t kMaxStopGraceMs = int64_t{60} * 60 * 1000;
constexpr int64_t kMaxGpus = 1024;

// Built-in sources: Ferry's own prefix and dora-rs's, which mean the same.
constexpr std::string_view kBuiltinPrefixes[] = {"ferry/", "dora/"};
constexpr const char* kTimerForms =
    "ferry/timer/millis/N, ferry/timer/secs/N or ferry/timer/hz/N, or dora/timer/... alike";
// The operator id of dora-rs's single `operator:` when it has no `id`. Its
// outputs are written node/output, as dora-rs does (node/op/output works too).
constexpr const char* kSingleOperatorId = "op";

using Names = std::span<const std::string_view>;
constexpr std::string_view kTopKeys[] = {"nodes", "communication", "_unstable_deploy"};
constexpr std::string_view kNodeKeys[] = {
    "id",           "path",          "args",      "env",   "inputs",         "outputs",
    "operators",    "operator",      "restart",   "build", "send_stdout_as", "_unstable_deploy",
    "max_restarts", "stop_grace_ms", "resources", "name",  "description"};
constexpr std::string_view kOperatorKeys[] = {"id",      "shared-library", "python", "inputs",
                                              "outputs", "config",         "name",   "description"};
constexpr std::string_view kPythonOperatorKeys[] = {"source"};
constexpr std::string_view kDeployKeys[] = {"machine"};

// dora-rs keys that Ferry does not support, with what to do instead.
struct UnsupportedKey {
  std::string_view key;
  std::string_view hint;
};
constexpr UnsupportedKey kUnsupportedDoraKeys[] = {
    {"custom",
     "write its source, args, inputs and outputs on the node as path, args, inputs, outputs"},
    {"git", "clone the repository yourself and point path (and build) at it"},
    {"branch", "clone the repository yourself and point path (and build) at it"},
    {"tag", "clone the repository yourself and point path (and build) at it"},
    {"rev", "clone the repository yourself and point path (and build) at it"},
    {"send_logs_as", "use send_stdout_as, or read the node's log file"},
    {"min_log_level", "Ferry forwards every line a node prints"},
    {"deploy", "Ferry runs a dataflow on one machine; _unstable_deploy: machine: is recorded"},
    {"conda_env", "start the operator's interpreter through FERRY_PYTHON instead"},
    {"wasm", "use a shared-library or python operator"},
    {"input_timeout", "handle timeouts in the node (next(timeout=...))"},
};
constexpr std::string_view kInputKeys[] = {"source", "queue_size", "overflow"};
constexpr std::string_view kResourceKeys[] = {"gpus", "device"};
constexpr std::string_view kOverflowNames[] = {"block", "drop_oldest", "drop_newest"};
constexpr std::string_view kRestartNames[] = {"never", "on-failure", "always"};
constexpr std::string_view kDeviceNames[] = {"any", "cpu", "cuda", "opencl"};
// Set by the daemon for every node.
constexpr std::string_view kReservedEnv[] = {"FERRY_NODE_CONFIG", "FERRY_NODE_ID",
                                             "FERRY_DATAFLOW"};

std::string JoinList(Names names) {
  std::string text;
  for (std::string_view name : names) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

// 'text', shortened for messages.
std::string Quote(std::string_view text) {
  constexpr size_t kLongest = 60;
  if (text.size() <= kLongest) return "'" + std::string(text) + "'";
  size_t cut = kLongest;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return "'" + std::string(text.substr(0, cut)) + "...'";
}

std::string Describe(Ref ref) {
  switch (ref.node->kind) {
    case Node::Kind::kNull:
      return "an empty value";
    case Node::Kind::kScalar:
      return Quote(ref.node->value);
    case Node::Kind::kSequence:
      return "a list";
    case Node::Kind::kMapping:
      return "a mapping";
  }
  return "a value";
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "did you mean 'x'? " when `wrong` is a typo of one of `names` (at most
// two edits, and fewer than half of the name's letters), else "".
std::string Suggestion(std::string_view wrong, Names names) {
  if (wrong.size() > 64) return "";
  std::string_view best;
  size_t best_distance = 3;
  for (std::string_view name : names) {
    const size_t distance = EditDistance(wrong, name);
    if (distance < best_distance && distance <= name.size() / 2) {
      best = name;
      best_distance = distance;
    }
  }
  return best.empty() ? "" : "did you mean '" + std::string(best) + "'? ";
}

// "line:column" of an earlier definition.
std::string At(SourceLocation location) {
  return std::to_string(location.line) + ":" + std::to_string(location.column);
}

bool IsIdCharacter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool IsValidId(std::string_view text) {
  return !text.empty() && text.size() <= kMaxIdLength &&
         std::all_of(text.begin(), text.end(), IsIdCharacter);
}

bool IsDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string> SplitOn(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

// One key of a mapping.
struct Entry {
  std::string key;
  SourceLocation key_location;
  Ref value;
};

class Entries {
 public:
  explicit Entries(std::vector<Entry> entries) : entries_(std::move(entries)) {}
  // The entry, or nullptr when absent.
  const Entry* Find(std::string_view key) const {
    for (const Entry& entry : entries_) {
      if (entry.key == key) return &entry;
    }
    return nullptr;
  }
  // Like Find, but an empty value counts as absent.
  const Entry* Get(std::string_view key) const {
    const Entry* entry = Find(key);
    return entry != nullptr && entry->value.node->kind != Node::Kind::kNull ? entry : nullptr;
  }
  const std::vector<Entry>& all() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// YAML 1.2 core schema resolution of plain scalars, for `config:`.
Result<nlohmann::ordered_json> PlainScalarToJson(const std::string& text, bool* resolved) {
  *resolved = true;
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    return nlohmann::ordered_json(nullptr);
  }
  if (text == "true" || text == "True" || text == "TRUE") return nlohmann::ordered_json(true);
  if (text == "false" || text == "False" || text == "FALSE") return nlohmann::ordered_json(false);
  std::string_view body = text;
  const bool negative = body.front() == '-';
  if (body.front() == '-' || body.front() == '+') body.remove_prefix(1);
  if (IsDigits(body)) {
    int64_t value = 0;
    const std::string digits = (negative ? "-" : "") + std::string(body);
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error == std::errc() && end == digits.data() + digits.size())
      return nlohmann::ordered_json(value);
    uint64_t unsigned_value = 0;
    auto [uend, uerror] = std::from_chars(body.data(), body.data() + body.size(), unsigned_value);
    if (!negative && uerror == std::errc() && uend == body.data() + body.size()) {
      return nlohmann::ordered_json(unsigned_value);
    }
    return Status::Invalid("integer " + Quote(text) + " is out of range (quote it for a string)");
  }
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'o' || text[1] == 'x')) {
    const int base = text[1] == 'o' ? 8 : 16;
    uint64_t value = 0;
    auto [end, error] = std::from_chars(text.data() + 2, text.data() + text.size(), value, base);
    if (end == text.data() + text.size()) {
      if (error == std::errc()) return nlohmann::ordered_json(value);
      return Status::Invalid("integer " + Quote(text) + " is out of range (quote it for a string)");
    }
  }
  // [-+]? ( . digits | digits ( . digits? )? ) ( [eE] [-+]? digits )?
  size_t pos = 0;
  const auto digits_at = [&](size_t from) {
    size_t end = from;
    while (end < body.size() && body[end] >= '0' && body[end] <= '9') ++end;
    return end - from;
  };
  size_t integer_digits = digits_at(pos);
  pos += integer_digits;
  size_t fraction_digits = 0;
  bool has_dot = false;
  if (pos < body.size() && body[pos] == '.') {
    has_dot = true;
    fraction_digits = digits_at(pos + 1);
    pos += 1 + fraction_digits;
  }
  bool number = integer_digits + fraction_digits > 0;
  if (number && pos < body.size() && (body[pos] == 'e' || body[pos] == 'E')) {
    size_t exponent = pos + 1;
    if (exponent < body.size() && (body[exponent] == '-' || body[exponent] == '+')) ++exponent;
    const size_t exponent_digits = digits_at(exponent);
    number = exponent_digits > 0;
    pos = exponent + exponent_digits;
  }
  if (number && pos == body.size() && (has_dot || integer_digits > 0)) {
    double value = 0;
    const std::string digits = (negative ? "-" : "") + std::string(body);
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error == std::errc() && end == digits.data() + digits.size() && std::isfinite(value)) {
      return nlohmann::ordered_json(value);
    }
    return Status::Invalid("number " + Quote(text) + " is out of range (quote it for a string)");
  }
  std::string lowered = std::string(body);
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lowered == ".inf" || lowered == ".nan") {
    return Status::Invalid(Quote(text) + " has no JSON equivalent (quote it for a string)");
  }
  *resolved = false;
  return nlohmann::ordered_json(text);
}

class Reader {
 public:
  Reader(const Reporter& reporter, std::string directory, const ParseOptions& options)
      : reporter_(reporter), directory_(std::move(directory)), options_(options) {}

  Status Read(Ref root, Dataflow* dataflow) {
    FERRY_ASSIGN_OR_RAISE(Entries top, ReadMapping(root, "the descriptor", kTopKeys));
    if (const Entry* communication = top.Get("communication")) {
      // dora-rs's transport settings: Ferry always uses shared memory on one machine.
      FERRY_RETURN_NOT_OK(ExpectKind(communication->value, Node::Kind::kMapping,
                                     "'communication' must be a mapping"));
    }
    if (const Entry* deploy = top.Get("_unstable_deploy")) {
      std::string machine;
      FERRY_RETURN_NOT_OK(ReadDeploy(*deploy, "the descriptor", &machine));
    }
    const Entry* nodes = top.Get("nodes");
    if (nodes == nullptr) {
      return reporter_.Error(root.location, "the descriptor has no 'nodes' (a list of nodes)");
    }
    FERRY_RETURN_NOT_OK(
        ExpectKind(nodes->value, Node::Kind::kSequence, "'nodes' must be a list of nodes"));
    if (nodes->value.node->items.empty()) {
      return reporter_.Error(nodes->value.location, "'nodes' must list at least one node");
    }
    std::unordered_map<std::string, SourceLocation> seen;
    for (const Ref& item : nodes->value.node->items) {
      dataflow->nodes.emplace_back();
      NodeSpec& node = dataflow->nodes.back();
      const size_t index = dataflow->nodes.size() - 1;
      SourceLocation id_location;
      FERRY_RETURN_NOT_OK(ReadNode(item, index, &node, &id_location));
      auto [first, inserted] = seen.emplace(node.id, id_location);
      if (!inserted) {
        return reporter_.Error(id_location, "duplicate node id '" + node.id + "' (first at " +
                                                At(first->second) + ")");
      }
    }
    // dora-rs names the outputs of a single `operator:` node/output.
    for (const internal::InputSite& site : sites_) {
      NodeSpec& consumer = dataflow->nodes[site.node];
      std::vector<InputSpec>& inputs =
          site.operator_index < 0
              ? consumer.inputs
              : consumer.operators[static_cast<size_t>(site.operator_index)].inputs;
      InputSource& source = inputs[site.input].source;
      if (source.kind != InputSource::Kind::kOutput || !source.operator_id.empty()) continue;
      if (single_operator_nodes_.count(source.node) == 0) continue;
      for (const NodeSpec& producer : dataflow->nodes) {
        if (producer.id == source.node) source.operator_id = producer.operators.front().id;
      }
    }
    FERRY_RETURN_NOT_OK(internal::ResolveSources(*dataflow, sites_, reporter_));
    return internal::CheckCycles(*dataflow, sites_, options_.allow_cycles, reporter_);
  }

 private:
  Status Error(SourceLocation location, const std::string& what) const {
    return reporter_.Error(location, what);
  }

  Status ExpectKind(Ref ref, Node::Kind kind, const std::string& what) const {
    if (ref.node->kind == kind) return Status::OK();
    return Error(ref.location, what + ", got " + Describe(ref));
  }

  // A mapping's entries; refuses keys not in `allowed` (unless it is empty)
  // and repeated keys ("duplicate <noun> 'k' in <owner>").
  Result<Entries> ReadMapping(Ref ref, const std::string& owner, Names allowed,
                              std::string_view noun = "key") const {
    if (ref.node->kind != Node::Kind::kMapping) {
      return Error(ref.location, owner + " must be a mapping, got " + Describe(ref));
    }
    std::vector<Entry> entries;
    std::unordered_map<std::string_view, SourceLocation> seen;
    const std::vector<Ref>& items = ref.node->items;
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      const std::string& key = items[i].node->value;
      if (allowed.size() > 0 && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        for (const UnsupportedKey& dora : kUnsupportedDoraKeys) {
          if (dora.key == key) {
            return Error(items[i].location,
                         "dora-rs key " + Quote(key) + " in " + owner +
                             " is not supported by Ferry: " + std::string(dora.hint) +
                             " (allowed: " + JoinList(allowed) + ")");
          }
        }
        return Error(items[i].location, "unknown key " + Quote(key) + " in " + owner + " (" +
                                            Suggestion(key, allowed) +
                                            "allowed: " + JoinList(allowed) + ")");
      }
      auto [first, inserted] = seen.emplace(key, items[i].location);
      if (!inserted) {
        return Error(items[i].location, "duplicate " + std::string(noun) + " " + Quote(key) +
                                            " in " + owner + " (first at " + At(first->second) +
                                            ")");
      }
      entries.push_back({key, items[i].location, items[i + 1]});
    }
    return Entries(std::move(entries));
  }

  Result<std::string> ReadString(const Entry& entry, const std::string& owner) const {
    if (entry.value.node->kind != Node::Kind::kScalar) {
      return Error(entry.value.location, "'" + entry.key + "' of " + owner +
                                             " must be a string, got " + Describe(entry.value));
    }
    return entry.value.node->value;
  }

  // A plain (or !!int) decimal integer in [min, max].
  Result<int64_t> ReadInteger(const Entry& entry, const std::string& owner, int64_t min,
                              int64_t max) const {
    const Node& node = *entry.value.node;
    const std::string range =
        "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    const bool untyped = node.tag == "?" || node.tag == "tag:yaml.org,2002:int";
    if (node.kind != Node::Kind::kScalar || !untyped) {
      return Error(entry.value.location,
                   "'" + entry.key + "' of " + owner + " must be " + range + ", got " +
                       (node.tag == "!" ? "the quoted string " : "") + Describe(entry.value));
    }
    std::string_view text = node.value;
    if (!text.empty() && text.front() == '+') text.remove_prefix(1);
    int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    const bool whole = !text.empty() && end == text.data() + text.size();
    if (!whole || error != std::errc() || value < min || value > max) {
      return Error(entry.value.location, "'" + entry.key + "' of " + owner + " must be " + range +
                                             ", got " + Describe(entry.value));
    }
    return value;
  }

  // One of `names`, with a suggestion when it is close to one.
  Result<std::string> ReadName(const Entry& entry, const std::string& owner, Names names) const {
    FERRY_ASSIGN_OR_RAISE(std::string text, ReadString(entry, owner));
    if (std::find(names.begin(), names.end(), text) != names.end()) return text;
    return Error(entry.value.location, "'" + entry.key + "' of " + owner + " is " + Quote(text) +
                                           " (" + Suggestion(text, names) +
                                           "expected one of: " + JoinList(names) + ")");
  }

  Status CheckId(const std::string& id, SourceLocation location, const std::string& what) const {
    if (IsValidId(id)) return Status::OK();
    if (id.empty()) return Error(location, what + " must not be empty");
    if (id.size() > kMaxIdLength) {
      return Error(location, what + " " + Quote(id) + " is longer than " +
                                 std::to_string(kMaxIdLength) + " characters");
    }
    return Error(location, what + " " + Quote(id) + " may only use letters, digits, '_' and '-'");
  }

  // How messages name a node or operator before its mapping is checked:
  // "node 'camera'" when it has a valid id, else "node #2".
  static std::string PeekId(Ref ref, const std::string& kind, size_t index,
                            const std::string& prefix = "") {
    if (ref.node->kind == Node::Kind::kMapping) {
      const std::vector<Ref>& items = ref.node->items;
      for (size_t i = 0; i + 1 < items.size(); i += 2) {
        if (items[i].node->value == "id" && items[i + 1].node->kind == Node::Kind::kScalar &&
            IsValidId(items[i + 1].node->value)) {
          return kind + " '" + prefix + items[i + 1].node->value + "'";
        }
      }
    }
    std::string text = kind + " #" + std::to_string(index + 1);
    if (!prefix.empty()) text += " of node '" + prefix.substr(0, prefix.size() - 1) + "'";
    return text;
  }

  // The `id` of a node or operator; `what` is "node #2" until it is known.
  Result<std::string> ReadId(const Entries& entries, Ref map, const std::string& what,
                             const std::string& kind, SourceLocation* location) const {
    const Entry* entry = entries.Find("id");
    if (entry == nullptr) return Error(map.location, what + " has no 'id'");
    FERRY_ASSIGN_OR_RAISE(std::string id, ReadString(*entry, what));
    *location = entry->value.location;
    FERRY_RETURN_NOT_OK(CheckId(id, entry->value.location, kind + " id"));
    return id;
  }

  Status ReadNode(Ref ref, size_t index, NodeSpec* node, SourceLocation* id_location) {
    const std::string provisional = PeekId(ref, "node", index);
    FERRY_ASSIGN_OR_RAISE(Entries entries, ReadMapping(ref, provisional, kNodeKeys));
    node->location = ref.location;
    FERRY_ASSIGN_OR_RAISE(node->id, ReadId(entries, ref, provisional, "node", id_location));
    for (std::string_view prefix : kBuiltinPrefixes) {
      if (prefix.substr(0, prefix.size() - 1) == node->id) {
        return Error(*id_location, "node id '" + node->id + "' is reserved for built-in sources (" +
                                       std::string(kTimerForms) + ")");
      }
    }
    const std::string owner = "node '" + node->id + "'";
    for (std::string_view key : {"name", "description"}) {
      if (const Entry* entry = entries.Get(key))
        FERRY_RETURN_NOT_OK(ReadString(*entry, owner).status());
    }
    if (const Entry* build = entries.Get("build")) {
      FERRY_ASSIGN_OR_RAISE(node->build, ReadString(*build, owner));
      if (node->build.find_first_not_of(" \t\n") == std::string::npos) {
        return Error(build->value.location, "'build' of " + owner + " is empty");
      }
    }
    if (const Entry* deploy = entries.Get("_unstable_deploy")) {
      FERRY_RETURN_NOT_OK(ReadDeploy(*deploy, owner, &node->deploy_machine));
    }

    const Entry* path = entries.Get("path");
    const Entry* operators = entries.Get("operators");
    const Entry* single = entries.Get("operator");
    const int given =
        (path != nullptr ? 1 : 0) + (operators != nullptr ? 1 : 0) + (single != nullptr ? 1 : 0);
    if (given > 1) {
      const Entry* first = path != nullptr ? path : operators;
      const Entry* second = first == path && operators != nullptr ? operators : single;
      return Error(second->key_location,
                   owner + " has both '" + first->key + "' and '" + second->key +
                       "': a node runs either a program (path) or operators in a runtime "
                       "(operators, or one operator)");
    }
    if (given == 0) {
      return Error(ref.location, owner +
                                     " needs 'path' (a program or a .py script), "
                                     "'operators' (operators in a runtime) or 'operator' (one "
                                     "operator)");
    }
    if (path == nullptr) {
      for (std::string_view key : {"args", "inputs", "outputs", "send_stdout_as"}) {
        if (const Entry* entry = entries.Get(key)) {
          return Error(entry->key_location,
                       "'" + entry->key + "' of " + owner +
                           " does not apply: it has operators (list inputs and outputs under "
                           "each operator)");
        }
      }
      if (!node->build.empty()) {
        // Operators' files are checked when the descriptor is read; a build
        // that makes them would run too late.
        return Error(entries.Get("build")->key_location,
                     "'build' of " + owner +
                         " is only supported on a node with 'path' (build the operator first)");
      }
      if (operators != nullptr) {
        FERRY_RETURN_NOT_OK(ReadOperators(*operators, index, node));
      } else {
        node->operators.emplace_back();
        SourceLocation op_id_location;
        FERRY_RETURN_NOT_OK(ReadOperator(single->value, index, 0, node->id, &node->operators.back(),
                                         &op_id_location, kSingleOperatorId));
        single_operator_nodes_.insert(node->id);
      }
    } else {
      FERRY_ASSIGN_OR_RAISE(std::string text, ReadString(*path, owner));
      if (text.empty()) return Error(path->value.location, "'path' of " + owner + " is empty");
      if (text == "dynamic") {
        return Error(path->value.location, owner +
                                               ": dora-rs dynamic nodes (path: dynamic) are not "
                                               "supported; give the program or script to run");
      }
      // A program the build makes is checked when it is launched.
      auto resolved =
          internal::ResolveProgram(text, directory_, options_.check_paths && node->build.empty());
      if (!resolved.ok()) {
        return Error(path->value.location, owner + ": " + resolved.status().message());
      }
      node->path = std::move(resolved).MoveValueUnsafe();
      node->python = internal::IsPythonScript(node->path);
      if (const Entry* args = entries.Get("args"))
        FERRY_RETURN_NOT_OK(ReadArgs(*args, owner, node));
      if (const Entry* inputs = entries.Get("inputs")) {
        FERRY_RETURN_NOT_OK(ReadInputs(*inputs, owner, index, -1, &node->inputs));
      }
      if (const Entry* outputs = entries.Get("outputs")) {
        FERRY_RETURN_NOT_OK(ReadOutputs(*outputs, owner, node->id, &node->outputs));
      }
      if (const Entry* stdout_as = entries.Get("send_stdout_as")) {
        FERRY_ASSIGN_OR_RAISE(node->send_stdout_as, ReadString(*stdout_as, owner));
        if (std::find(node->outputs.begin(), node->outputs.end(), node->send_stdout_as) ==
            node->outputs.end()) {
          return Error(stdout_as->value.location,
                       "'send_stdout_as' of " + owner + " names " + Quote(node->send_stdout_as) +
                           ", which is not one of its outputs (outputs: " +
                           internal::JoinNames(node->outputs) + ")");
        }
      }
    }
    if (const Entry* env = entries.Get("env")) FERRY_RETURN_NOT_OK(ReadEnv(*env, owner, node));
    if (const Entry* restart = entries.Get("restart")) {
      FERRY_ASSIGN_OR_RAISE(std::string name, ReadName(*restart, owner, kRestartNames));
      node->restart = name == "always"       ? RestartPolicy::kAlways
                      : name == "on-failure" ? RestartPolicy::kOnFailure
                                             : RestartPolicy::kNever;
    }
    if (const Entry* entry = entries.Get("max_restarts")) {
      FERRY_ASSIGN_OR_RAISE(int64_t value, ReadInteger(*entry, owner, 0, kMaxRestarts));
      node->max_restarts = static_cast<int>(value);
    }
    if (const Entry* entry = entries.Get("stop_grace_ms")) {
      FERRY_ASSIGN_OR_RAISE(int64_t value, ReadInteger(*entry, owner, 0, kMaxStopGraceMs));
      node->stop_grace = std::chrono::milliseconds(value);
    }
    if (const Entry* entry = entries.Get("resources")) {
      FERRY_RETURN_NOT_OK(ReadResources(*entry, owner, &node->resources));
    }
    return Status::OK();
  }

  Status ReadArgs(const Entry& entry, const std::string& owner, NodeSpec* node) const {
    const Node& value = *entry.value.node;
    if (value.kind == Node::Kind::kScalar) {
      // One string: split on whitespace, no quoting.
      std::string current;
      for (char c : value.value) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
          if (!current.empty()) node->args.push_back(std::move(current));
          current.clear();
        } else {
          current.push_back(c);
        }
      }
      if (!current.empty()) node->args.push_back(std::move(current));
      return Status::OK();
    }
    if (value.kind != Node::Kind::kSequence) {
      return Error(entry.value.location, "'args' of " + owner +
                                             " must be a list of strings or one string, got " +
                                             Describe(entry.value));
    }
    for (const Ref& item : value.items) {
      if (item.node->kind != Node::Kind::kScalar) {
        return Error(item.location,
                     "each of 'args' of " + owner + " must be a string, got " + Describe(item));
      }
      node->args.push_back(item.node->value);
    }
    return Status::OK();
  }

  Status CheckEnvName(const std::string& name, SourceLocation location,
                      const std::string& owner) const {
    if (name.empty() || name.find('=') != std::string::npos) {
      return Error(location, "environment variable name " + Quote(name) + " of " + owner +
                                 " must be non-empty and may not contain '='");
    }
    for (std::string_view reserved : kReservedEnv) {
      if (name == reserved) {
        return Error(location, "environment variable " + name + " of " + owner +
                                   " is set by Ferry and may not be overridden");
      }
    }
    return Status::OK();
  }

  Status ReadEnv(const Entry& entry, const std::string& owner, NodeSpec* node) const {
    const Node& value = *entry.value.node;
    if (value.kind == Node::Kind::kSequence) {
      // ["NAME=value", ...]
      std::unordered_map<std::string, SourceLocation> seen;
      for (const Ref& item : value.items) {
        const size_t equals =
            item.node->kind == Node::Kind::kScalar ? item.node->value.find('=') : std::string::npos;
        if (equals == std::string::npos) {
          return Error(item.location, "each of 'env' of " + owner + " must be 'NAME=value', got " +
                                          Describe(item));
        }
        std::string name = item.node->value.substr(0, equals);
        FERRY_RETURN_NOT_OK(CheckEnvName(name, item.location, owner));
        auto [first, inserted] = seen.emplace(name, item.location);
        if (!inserted) {
          return Error(item.location, "duplicate environment variable " + Quote(name) + " in " +
                                          owner + " (first at " + At(first->second) + ")");
        }
        node->env[name] = item.node->value.substr(equals + 1);
      }
      return Status::OK();
    }
    if (value.kind != Node::Kind::kMapping) {
      return Error(entry.value.location, "'env' of " + owner +
                                             " must be a mapping of NAME: value or a list of "
                                             "'NAME=value', got " +
                                             Describe(entry.value));
    }
    FERRY_ASSIGN_OR_RAISE(Entries variables,
                          ReadMapping(entry.value, "'env' of " + owner, {}, "variable"));
    for (const Entry& variable : variables.all()) {
      FERRY_RETURN_NOT_OK(CheckEnvName(variable.key, variable.key_location, owner));
      if (variable.value.node->kind != Node::Kind::kScalar) {
        return Error(variable.value.location,
                     "environment variable " + variable.key + " of " + owner +
                         " must be a string (write '' for an empty one), got " +
                         Describe(variable.value));
      }
      node->env[variable.key] = variable.value.node->value;
    }
    return Status::OK();
  }

  // dora-rs's `_unstable_deploy: {machine: NAME}`.
  Status ReadDeploy(const Entry& entry, const std::string& owner, std::string* machine) const {
    const std::string what = "'_unstable_deploy' of " + owner;
    FERRY_ASSIGN_OR_RAISE(Entries entries, ReadMapping(entry.value, what, kDeployKeys));
    if (const Entry* name = entries.Get("machine")) {
      FERRY_ASSIGN_OR_RAISE(*machine, ReadString(*name, what));
    }
    return Status::OK();
  }

  Status ReadResources(const Entry& entry, const std::string& owner,
                       ResourceSpec* resources) const {
    const std::string what = "'resources' of " + owner;
    FERRY_ASSIGN_OR_RAISE(Entries entries, ReadMapping(entry.value, what, kResourceKeys));
    if (const Entry* gpus = entries.Get("gpus")) {
      FERRY_ASSIGN_OR_RAISE(int64_t value, ReadInteger(*gpus, what, 0, kMaxGpus));
      resources->gpus = static_cast<int>(value);
    }
    if (const Entry* device = entries.Get("device")) {
      FERRY_ASSIGN_OR_RAISE(std::string name, ReadName(*device, what, kDeviceNames));
      resources->device = name == "any" ? "" : name;
    }
    return Status::OK();
  }

  Status ReadOperators(const Entry& entry, size_t node_index, NodeSpec* node) {
    const std::string owner = "node '" + node->id + "'";
    FERRY_RETURN_NOT_OK(ExpectKind(entry.value, Node::Kind::kSequence,
                                   "'operators' of " + owner + " must be a list of operators"));
    if (entry.value.node->items.empty()) {
      return Error(entry.value.location,
                   "'operators' of " + owner + " must list at least one operator");
    }
    std::unordered_map<std::string, SourceLocation> seen;
    for (const Ref& item : entry.value.node->items) {
      node->operators.emplace_back();
      OperatorSpec& op = node->operators.back();
      const int op_index = static_cast<int>(node->operators.size() - 1);
      SourceLocation id_location;
      FERRY_RETURN_NOT_OK(ReadOperator(item, node_index, op_index, node->id, &op, &id_location));
      auto [first, inserted] = seen.emplace(op.id, id_location);
      if (!inserted) {
        return Error(id_location, "duplicate operator id '" + op.id + "' in " + owner +
                                      " (first at " + At(first->second) + ")");
      }
    }
    return Status::OK();
  }

  // `default_id`, when not null, is the id of an operator without `id`
  // (dora-rs's single `operator:`).
  Status ReadOperator(Ref ref, size_t node_index, int op_index, const std::string& node_id,
                      OperatorSpec* op, SourceLocation* id_location,
                      const char* default_id = nullptr) {
    const std::string provisional =
        PeekId(ref, "operator", static_cast<size_t>(op_index), node_id + "/");
    FERRY_ASSIGN_OR_RAISE(Entries entries, ReadMapping(ref, provisional, kOperatorKeys));
    op->location = ref.location;
    if (default_id != nullptr && entries.Find("id") == nullptr) {
      op->id = default_id;
      *id_location = ref.location;
    } else {
      FERRY_ASSIGN_OR_RAISE(op->id, ReadId(entries, ref, provisional, "operator", id_location));
    }
    const std::string owner = "operator '" + node_id + "/" + op->id + "'";
    for (std::string_view key : {"name", "description"}) {
      if (const Entry* entry = entries.Get(key))
        FERRY_RETURN_NOT_OK(ReadString(*entry, owner).status());
    }
    const Entry* library = entries.Get("shared-library");
    const Entry* python = entries.Get("python");
    if (library != nullptr && python != nullptr) {
      return Error(python->key_location,
                   owner + " has both 'shared-library' and 'python'; give one of them");
    }
    if (library == nullptr && python == nullptr) {
      return Error(ref.location, owner + " needs 'shared-library' (a .so) or 'python' (a script)");
    }
    const Entry* file = library != nullptr ? library : python;
    op->kind =
        library != nullptr ? OperatorSpec::Kind::kSharedLibrary : OperatorSpec::Kind::kPython;
    std::optional<Entries> python_fields;
    if (python != nullptr && python->value.node->kind == Node::Kind::kMapping) {
      // dora-rs's long form: python: {source: op.py}
      FERRY_ASSIGN_OR_RAISE(
          Entries fields, ReadMapping(python->value, "'python' of " + owner, kPythonOperatorKeys));
      python_fields.emplace(std::move(fields));
      file = python_fields->Get("source");
      if (file == nullptr)
        return Error(python->value.location, "'python' of " + owner + " has no 'source'");
    }
    FERRY_ASSIGN_OR_RAISE(std::string text, ReadString(*file, owner));
    if (text.empty())
      return Error(file->value.location, "'" + file->key + "' of " + owner + " is empty");
    auto resolved = internal::ResolveOperatorFile(text, directory_, options_.check_paths);
    if (!resolved.ok())
      return Error(file->value.location, owner + ": " + resolved.status().message());
    op->path = std::move(resolved).MoveValueUnsafe();
    if (const Entry* inputs = entries.Get("inputs")) {
      FERRY_RETURN_NOT_OK(ReadInputs(*inputs, owner, node_index, op_index, &op->inputs));
    }
    if (const Entry* outputs = entries.Get("outputs")) {
      FERRY_RETURN_NOT_OK(ReadOutputs(*outputs, owner, node_id + "/" + op->id, &op->outputs));
    }
    if (const Entry* config = entries.Get("config")) {
      FERRY_RETURN_NOT_OK(ExpectKind(config->value, Node::Kind::kMapping,
                                     "'config' of " + owner + " must be a mapping"));
      FERRY_ASSIGN_OR_RAISE(nlohmann::ordered_json json,
                            ToJson(config->value, "'config' of " + owner));
      op->config_json = json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
    return Status::OK();
  }

  Status ReadOutputs(const Entry& entry, const std::string& owner, const std::string& prefix,
                     std::vector<std::string>* outputs) const {
    FERRY_RETURN_NOT_OK(ExpectKind(entry.value, Node::Kind::kSequence,
                                   "'outputs' of " + owner + " must be a list of output ids"));
    std::unordered_map<std::string, SourceLocation> seen;
    for (const Ref& item : entry.value.node->items) {
      if (item.node->kind != Node::Kind::kScalar) {
        return Error(item.location, "each of 'outputs' of " + owner +
                                        " must be an output id, got " + Describe(item));
      }
      const std::string& id = item.node->value;
      FERRY_RETURN_NOT_OK(CheckId(id, item.location, "output id"));
      if (prefix.size() + 1 + id.size() > kMaxQualifiedOutputLength) {
        return Error(item.location, "output '" + prefix + "/" + id + "' is longer than " +
                                        std::to_string(kMaxQualifiedOutputLength) +
                                        " characters (it names a shared-memory channel)");
      }
      auto [first, inserted] = seen.emplace(id, item.location);
      if (!inserted) {
        return Error(item.location, "duplicate output '" + id + "' in " + owner + " (first at " +
                                        At(first->second) + ")");
      }
      outputs->push_back(id);
    }
    return Status::OK();
  }

  Status ReadInputs(const Entry& entry, const std::string& owner, size_t node_index, int op_index,
                    std::vector<InputSpec>* inputs) {
    if (entry.value.node->kind != Node::Kind::kMapping) {
      return Error(entry.value.location, "'inputs' of " + owner +
                                             " must be a mapping of input id to source, got " +
                                             Describe(entry.value));
    }
    FERRY_ASSIGN_OR_RAISE(Entries entries,
                          ReadMapping(entry.value, "'inputs' of " + owner, {}, "input"));
    for (const Entry& input_entry : entries.all()) {
      FERRY_RETURN_NOT_OK(CheckId(input_entry.key, input_entry.key_location, "input id"));
      InputSpec input;
      input.id = input_entry.key;
      input.location = input_entry.key_location;
      const std::string what = "input '" + input.id + "' of " + owner;
      Ref source = input_entry.value;
      const Node::Kind kind = input_entry.value.node->kind;
      if (kind == Node::Kind::kMapping) {
        FERRY_ASSIGN_OR_RAISE(Entries fields, ReadMapping(input_entry.value, what, kInputKeys));
        const Entry* source_entry = fields.Get("source");
        if (source_entry == nullptr) {
          return Error(input_entry.value.location, what + " has no 'source'");
        }
        source = source_entry->value;
        if (const Entry* size = fields.Get("queue_size")) {
          FERRY_ASSIGN_OR_RAISE(int64_t value, ReadInteger(*size, what, 1, kMaxQueueSize));
          input.queue_size = static_cast<uint32_t>(value);
        }
        if (const Entry* overflow = fields.Get("overflow")) {
          FERRY_ASSIGN_OR_RAISE(input.overflow, ReadName(*overflow, what, kOverflowNames));
        }
      } else if (kind != Node::Kind::kScalar) {
        return Error(input_entry.value.location,
                     what + " must be a source ('node/output') or a mapping with 'source', got " +
                         Describe(input_entry.value));
      }
      if (source.node->kind != Node::Kind::kScalar) {
        return Error(source.location,
                     "the source of " + what + " must be a string, got " + Describe(source));
      }
      FERRY_RETURN_NOT_OK(ParseSource(source.node->value, source.location, what, &input.source));
      inputs->push_back(std::move(input));
      sites_.push_back({node_index, op_index, inputs->size() - 1, source.location});
    }
    return Status::OK();
  }

  Status ParseSource(const std::string& text, SourceLocation location, const std::string& what,
                     InputSource* source) const {
    source->text = text;
    for (std::string_view prefix : kBuiltinPrefixes) {
      if (text.starts_with(prefix)) return ParseTimer(text, location, what, source);
    }
    const std::vector<std::string> parts = SplitOn(text, '/');
    const bool well_formed = (parts.size() == 2 || parts.size() == 3) &&
                             std::all_of(parts.begin(), parts.end(), IsValidId);
    if (!well_formed) {
      return Error(location, what + " has a malformed source " + Quote(text) +
                                 " (expected node/output, node/operator/output, or a timer: " +
                                 kTimerForms + ")");
    }
    source->kind = InputSource::Kind::kOutput;
    source->node = parts[0];
    source->operator_id = parts.size() == 3 ? parts[1] : "";
    source->output = parts.back();
    return Status::OK();
  }

  Status ParseTimer(const std::string& text, SourceLocation location, const std::string& what,
                    InputSource* source) const {
    const std::vector<std::string> parts = SplitOn(text, '/');
    if (parts.size() != 4 || parts[1] != "timer" ||
        (parts[2] != "millis" && parts[2] != "secs" && parts[2] != "hz")) {
      return Error(location, what + " has an unknown built-in source " + Quote(text) +
                                 " (built-in sources: " + kTimerForms + ")");
    }
    const std::string& number = parts[3];
    source->kind = InputSource::Kind::kTimer;
    if (parts[2] == "millis") {
      int64_t millis = 0;
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), millis);
      if (!IsDigits(number) || error != std::errc() || end != number.data() + number.size() ||
          millis < 1 || millis > kMaxTimerMillis) {
        return Error(location, what + ": timer period " + Quote(number) +
                                   " must be a whole number of milliseconds from 1 to " +
                                   std::to_string(kMaxTimerMillis) + " (one day)");
      }
      source->interval = std::chrono::milliseconds(millis);
      return Status::OK();
    }
    if (parts[2] == "secs") {
      int64_t secs = 0;
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), secs);
      constexpr int64_t kMaxTimerSecs = kMaxTimerMillis / 1000;
      if (!IsDigits(number) || error != std::errc() || end != number.data() + number.size() ||
          secs < 1 || secs > kMaxTimerSecs) {
        return Error(location, what + ": timer period " + Quote(number) +
                                   " must be a whole number of seconds from 1 to " +
                                   std::to_string(kMaxTimerSecs) + " (one day)");
      }
      source->interval = std::chrono::seconds(secs);
      return Status::OK();
    }
    // digits with an optional fraction: 30, 0.5, 2.5
    const size_t dot = number.find('.');
    const bool decimal = dot == std::string::npos
                             ? IsDigits(number)
                             : IsDigits(number.substr(0, dot)) && IsDigits(number.substr(dot + 1));
    double hz = 0;
    if (decimal) std::from_chars(number.data(), number.data() + number.size(), hz);
    if (!decimal || !(hz >= 1.0 && hz <= kMaxTimerHz)) {
      return Error(location, what + ": timer frequency " + Quote(number) +
                                 " must be a number of hertz from 1 to 1000000");
    }
    source->interval = std::chrono::nanoseconds(static_cast<int64_t>(std::llround(1e9 / hz)));
    return Status::OK();
  }

  // `config:` values as JSON (YAML 1.2 core schema for plain scalars).
  Result<nlohmann::ordered_json> ToJson(Ref ref, const std::string& what) const {
    const Node& node = *ref.node;
    static const std::string kCore = "tag:yaml.org,2002:";
    const auto unsupported = [&]() {
      return Error(ref.location, "unsupported tag " + Quote(node.tag) + " in " + what);
    };
    switch (node.kind) {
      case Node::Kind::kNull:
        if (node.tag == kCore + "str") return nlohmann::ordered_json("");
        if (node.tag != "?" && node.tag != kCore + "null") return unsupported();
        return nlohmann::ordered_json(nullptr);
      case Node::Kind::kScalar: {
        if (node.tag == "!" || node.tag == kCore + "str") return nlohmann::ordered_json(node.value);
        const bool plain = node.tag == "?";
        if (!plain && node.tag != kCore + "int" && node.tag != kCore + "float" &&
            node.tag != kCore + "bool" && node.tag != kCore + "null") {
          return unsupported();
        }
        bool resolved = false;
        auto json = PlainScalarToJson(node.value, &resolved);
        if (!json.ok()) return Error(ref.location, json.status().message() + " in " + what);
        if (!plain) {
          const std::string type = node.tag.substr(kCore.size());
          const bool matches = resolved && ((type == "int" && json->is_number_integer()) ||
                                            (type == "float" && json->is_number()) ||
                                            (type == "bool" && json->is_boolean()) ||
                                            (type == "null" && json->is_null()));
          if (!matches) {
            return Error(ref.location,
                         Quote(node.value) + " is not a valid !!" + type + " in " + what);
          }
          if (type == "float") return nlohmann::ordered_json(json->get<double>());
        }
        return json;
      }
      case Node::Kind::kSequence: {
        if (node.tag != "?" && node.tag != kCore + "seq") return unsupported();
        nlohmann::ordered_json array = nlohmann::ordered_json::array();
        for (const Ref& item : node.items) {
          FERRY_ASSIGN_OR_RAISE(nlohmann::ordered_json value, ToJson(item, what));
          array.push_back(std::move(value));
        }
        return array;
      }
      case Node::Kind::kMapping: {
        if (node.tag != "?" && node.tag != kCore + "map") return unsupported();
        FERRY_ASSIGN_OR_RAISE(Entries entries, ReadMapping(ref, what, {}));
        nlohmann::ordered_json object = nlohmann::ordered_json::object();
        for (const Entry& entry : entries.all()) {
          FERRY_ASSIGN_OR_RAISE(nlohmann::ordered_json value, ToJson(entry.value, what));
          object[entry.key] = std::move(value);
        }
        return object;
      }
    }
    return unsupported();
  }

  const Reporter& reporter_;
  std::string directory_;
  ParseOptions options_;
  std::vector<internal::InputSite> sites_;
  // Nodes written with dora-rs's single `operator:`.
  std::set<std::string> single_operator_nodes_;
};

// Reads at most kMaxDocumentBytes + 1 bytes of a regular file.
Result<std::string> ReadDescriptorFile(const std::string& path, const Reporter& reporter) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return Status::IOError(reporter.name() + ": cannot open: " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    return Status::IOError(reporter.name() + ": cannot stat: " + std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) return reporter.FileError("is a directory, not a descriptor");
  if (!S_ISREG(info.st_mode)) return reporter.FileError("is not a regular file");
  if (static_cast<uint64_t>(info.st_size) > yaml::kMaxDocumentBytes) {
    return reporter.FileError("descriptor is " + std::to_string(info.st_size) +
                              " bytes; the limit is " + std::to_string(yaml::kMaxDocumentBytes));
  }
  std::string text;
  char buffer[64 * 1024];
  while (text.size() <= yaml::kMaxDocumentBytes) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(reporter.name() + ": cannot read: " + std::strerror(errno));
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  return text;  // yaml::Parse refuses it if the file grew past the limit
}

std::string AbsolutePath(const std::string& directory) {
  fs::path path(directory);
  if (path.is_relative()) {
    std::error_code error;
    const fs::path cwd = fs::current_path(error);
    if (!error) path = cwd / path;
  }
  std::string text = path.lexically_normal().string();
  if (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

Result<Dataflow> Parse(const std::string& text, const Reporter& reporter, Dataflow dataflow,
                       const ParseOptions& options) {
  try {
    FERRY_ASSIGN_OR_RAISE(yaml::Document document, yaml::Parse(text, reporter));
    const Ref root = document.root();
    if (root.node->kind == Node::Kind::kNull) {
      return reporter.Error(root.location,
                            "the descriptor is empty (expected a mapping with "
                            "'nodes')");
    }
    Reader reader(reporter, dataflow.directory, options);
    FERRY_RETURN_NOT_OK(reader.Read(root, &dataflow));
    return dataflow;
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(reporter.name() + ": out of memory while reading the descriptor");
  } catch (const std::exception& error) {
    return Status::UnknownError(reporter.name() + ": " + error.what());
  }
}

}  // namespace

const char* RestartPolicyName(RestartPolicy policy) {
  switch (policy) {
    case RestartPolicy::kNever:
      return "never";
    case RestartPolicy::kOnFailure:
      return "on-failure";
    case RestartPolicy::kAlways:
      return "always";
  }
  return "unknown";
}

const NodeSpec* Dataflow::FindNode(const std::string& id) const {
  for (const NodeSpec& node : nodes) {
    if (node.id == id) return &node;
  }
  return nullptr;
}

Result<Dataflow> ParseDataflow(const std::string& path, const ParseOptions& options) {
  const Reporter reporter(path);
  FERRY_ASSIGN_OR_RAISE(std::string text, ReadDescriptorFile(path, reporter));
  Dataflow dataflow;
  dataflow.path = AbsolutePath(path);
  dataflow.directory = fs::path(dataflow.path).parent_path().string();
  return Parse(text, reporter, std::move(dataflow), options);
}

Result<Dataflow> ParseDataflowString(const std::string& text, const std::string& name,
                                     const std::string& directory, const ParseOptions& options) {
  const Reporter reporter(name.empty() ? "<dataflow>" : name);
  Dataflow dataflow;
  if (!directory.empty()) dataflow.directory = AbsolutePath(directory);
  if (!name.empty()) {
    const fs::path named(name);
    dataflow.path = named.is_absolute() ? named.lexically_normal().string()
                                        : AbsolutePath((fs::path(directory) / named).string());
    if (dataflow.directory.empty()) {
      dataflow.directory = fs::path(dataflow.path).parent_path().string();
    }
  }
  return Parse(text, reporter, std::move(dataflow), options);
}

}  // namespace ferry::flow
