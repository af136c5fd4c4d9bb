// Strict reading of YAML config files: unknown keys, duplicate keys and wrong
// types are errors naming the file, line, column and key path. Shared by the
// scheduler config (sched_config.cc) and the agent's storage config
// (fleet/staging). Not installed.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/yaml_tree.h"
#include "ferry/base/status.h"

namespace ferry::fleet::config {

using yaml::Node;
using yaml::Ref;

// The largest config file read; a fleet's config is kilobytes.
inline constexpr size_t kMaxConfigBytes = size_t{1} << 20;

// The text of the config file at `path` (`what` names it in errors: "the
// storage config"), refused above kMaxConfigBytes.
inline Result<std::string> ReadConfigText(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open " + what);
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxConfigBytes) {
    return Status::Invalid(path + ": larger than " + std::to_string(kMaxConfigBytes) + " bytes");
  }
  return text.str();
}

inline std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += (i + 1 == items.size()) ? " or " : ", ";
    out += items[i];
  }
  return out;
}

inline const char* KindName(const Node& node) {
  switch (node.kind) {
    case Node::Kind::kNull:
      return "null";
    case Node::Kind::kScalar:
      return node.is_plain_scalar() ? "a scalar" : "a string";
    case Node::Kind::kSequence:
      return "a list";
    case Node::Kind::kMapping:
      return "a mapping";
  }
  return "a value";
}

// Plain scalars and the core schema's explicit tags may hold numbers and
// booleans; a quoted "8" is a string.
inline bool MayBeTyped(const Node& node, std::string_view tag) {
  if (node.kind != Node::Kind::kScalar) return false;
  return node.tag == "?" || node.tag == std::string("tag:yaml.org,2002:") + std::string(tag);
}

class ConfigReader {
 public:
  explicit ConfigReader(std::string name) : reporter_(std::move(name)) {}

  Status Error(const Ref& at, const std::string& path, std::string_view what) const {
    return reporter_.Error(at.location, path + ": " + std::string(what));
  }

  // Where each key path (and list item) was written, for Validate's errors.
  void Remember(const std::string& path, const Ref& at) { locations_.emplace(path, at.location); }

  // Maps "path: message" from Validate to "<name>:<line>:<col>: path: message",
  // using the longest written prefix of the path.
  Status Locate(const Status& status) const {
    const std::string& message = status.message();
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) {
      std::string path = message.substr(0, colon);
      while (!path.empty()) {
        auto it = locations_.find(path);
        if (it != locations_.end()) {
          return Status(status.code(), reporter_.name() + ":" + std::to_string(it->second.line) +
                                           ":" + std::to_string(it->second.column) + ": " +
                                           message);
        }
        const size_t cut = path.find_last_of(".[");
        if (cut == std::string::npos) break;
        path.resize(cut);
      }
    }
    return Status(status.code(), reporter_.name() + ": " + message);
  }

  // Calls `field(key, value, key_path)` for each key of a mapping (null reads
  // as an empty mapping). Keys must be among `allowed` (when not empty) and
  // appear once.
  Status Mapping(
      const Ref& ref, const std::string& path, const std::vector<std::string>& allowed,
      const std::function<Status(const std::string&, const Ref&, const std::string&)>& field) {
    const Node& node = *ref.node;
    if (node.kind == Node::Kind::kNull) return Status::OK();
    if (node.kind != Node::Kind::kMapping) {
      return Error(ref, path.empty() ? "(top level)" : path,
                   std::string("expected a mapping, got ") + KindName(node));
    }
    std::set<std::string> seen;
    for (size_t i = 0; i + 1 < node.items.size(); i += 2) {
      const Ref& key_ref = node.items[i];
      Ref value = node.items[i + 1];
      // yaml-cpp places an empty value at the next token; the key is clearer.
      if (value.node->kind == Node::Kind::kNull) value.location = key_ref.location;
      if (key_ref.node->kind != Node::Kind::kScalar) {
        return Error(key_ref, path.empty() ? "(top level)" : path,
                     std::string("keys must be strings, got ") + KindName(*key_ref.node));
      }
      const std::string& key = key_ref.node->value;
      const std::string key_path = path.empty() ? key : std::string(path).append(".").append(key);
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Error(key_ref, key_path, "unknown key (expected " + Join(allowed) + ")");
      }
      if (!seen.insert(key).second) return Error(key_ref, key_path, "duplicate key");
      Remember(key_path, value);
      FERRY_RETURN_NOT_OK(field(key, value, key_path));
    }
    return Status::OK();
  }

  // Calls `item(value, item_path)` for each item of a list (null: none).
  Status Sequence(const Ref& ref, const std::string& path,
                  const std::function<Status(const Ref&, const std::string&)>& item) {
    const Node& node = *ref.node;
    if (node.kind == Node::Kind::kNull) return Status::OK();
    if (node.kind != Node::Kind::kSequence) {
      return Error(ref, path, std::string("expected a list, got ") + KindName(node));
    }
    for (size_t i = 0; i < node.items.size(); ++i) {
      const std::string item_path = path + "[" + std::to_string(i) + "]";
      Remember(item_path, node.items[i]);
      FERRY_RETURN_NOT_OK(item(node.items[i], item_path));
    }
    return Status::OK();
  }

  Status String(const Ref& ref, const std::string& path, std::string* out) const {
    if (ref.node->kind != Node::Kind::kScalar) {
      return Error(ref, path, std::string("expected a string, got ") + KindName(*ref.node));
    }
    *out = ref.node->value;
    return Status::OK();
  }

  Status StringList(const Ref& ref, const std::string& path, std::vector<std::string>* out) {
    out->clear();
    return Sequence(ref, path, [&](const Ref& item, const std::string& item_path) {
      std::string value;
      FERRY_RETURN_NOT_OK(String(item, item_path, &value));
      out->push_back(std::move(value));
      return Status::OK();
    });
  }

  Status Bool(const Ref& ref, const std::string& path, bool* out) const {
    const std::string& text = ref.node->value;
    if (MayBeTyped(*ref.node, "bool")) {
      if (text == "true" || text == "True" || text == "TRUE") {
        *out = true;
        return Status::OK();
      }
      if (text == "false" || text == "False" || text == "FALSE") {
        *out = false;
        return Status::OK();
      }
    }
    return Error(ref, path, "expected true or false, got " + Describe(*ref.node));
  }

  Status Int64(const Ref& ref, const std::string& path, int64_t* out) const {
    if (MayBeTyped(*ref.node, "int")) {
      std::string_view text = ref.node->value;
      if (!text.empty() && text.front() == '+') text.remove_prefix(1);
      int64_t value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error == std::errc::result_out_of_range) return Error(ref, path, "integer out of range");
      if (error == std::errc() && end == text.data() + text.size() && !text.empty()) {
        *out = value;
        return Status::OK();
      }
    }
    return Error(ref, path, "expected an integer, got " + Describe(*ref.node));
  }

  Status Int(const Ref& ref, const std::string& path, int* out) const {
    int64_t value = 0;
    FERRY_RETURN_NOT_OK(Int64(ref, path, &value));
    if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
      return Error(ref, path, "integer out of range");
    }
    *out = static_cast<int>(value);
    return Status::OK();
  }

  Status OptionalInt(const Ref& ref, const std::string& path, std::optional<int>* out) const {
    if (ref.node->kind == Node::Kind::kNull) {
      out->reset();
      return Status::OK();
    }
    int value = 0;
    FERRY_RETURN_NOT_OK(Int(ref, path, &value));
    *out = value;
    return Status::OK();
  }

  Status Double(const Ref& ref, const std::string& path, double* out) const {
    if (MayBeTyped(*ref.node, "float") || MayBeTyped(*ref.node, "int")) {
      std::string_view text = ref.node->value;
      if (!text.empty() && text.front() == '+') text.remove_prefix(1);
      double value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error == std::errc() && end == text.data() + text.size() && !text.empty()) {
        if (!std::isfinite(value)) return Error(ref, path, "must be a finite number");
        *out = value;
        return Status::OK();
      }
      if (error == std::errc::result_out_of_range) return Error(ref, path, "number out of range");
    }
    return Error(ref, path, "expected a number, got " + Describe(*ref.node));
  }

  const std::string& name() const { return reporter_.name(); }

 private:
  static std::string Describe(const Node& node) {
    if (node.kind != Node::Kind::kScalar) return KindName(node);
    std::string text = node.value.size() > 40 ? node.value.substr(0, 40) + "..." : node.value;
    return (node.is_plain_scalar() ? "'" : "the string '") + text + "'";
  }

  yaml::Reporter reporter_;
  std::map<std::string, SourceLocation> locations_;
};

template <typename T>
Status ReadList(ConfigReader& p, const Ref& ref, const std::string& path, std::vector<T>* out,
                Status (*read)(ConfigReader&, const Ref&, const std::string&, T*)) {
  out->clear();
  return p.Sequence(ref, path, [&](const Ref& item, const std::string& item_path) {
    T value;
    FERRY_RETURN_NOT_OK(read(p, item, item_path, &value));
    out->push_back(std::move(value));
    return Status::OK();
  });
}

// A secret named by `<key>_file` (`from_file`: a file holding the value) or
// `<key>_env` (an environment variable); the value itself is never written
// in a config file, where it would end up in backups and diffs. Trailing
// newlines and spaces are dropped; an empty secret is an error.
inline Status ReadSecret(ConfigReader& p, const Ref& value, const std::string& at, bool from_file,
                         std::string* out) {
  std::string source;
  FERRY_RETURN_NOT_OK(p.String(value, at, &source));
  if (from_file) {
    std::ifstream in(source, std::ios::binary);
    if (!in) return Status::Invalid(at + ": cannot read " + source);
    std::stringstream text;
    text << in.rdbuf();
    *out = text.str();
  } else {
    const char* env = std::getenv(source.c_str());
    if (env == nullptr)
      return Status::Invalid(at + ": environment variable " + source + " is not set");
    *out = env;
  }
  while (!out->empty() && (out->back() == '\n' || out->back() == '\r' || out->back() == ' ')) {
    out->pop_back();
  }
  if (out->empty()) return Status::Invalid(at + ": the secret is empty");
  return Status::OK();
}

}  // namespace ferry::fleet::config
