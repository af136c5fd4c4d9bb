// Builds the YAML tree from yaml-cpp's parser events (yaml_tree.h).
#include "base/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <sstream>
#include <utility>

namespace ferry::yaml {
namespace {

SourceLocation ToLocation(const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0 || mark.column < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

// Thrown from inside yaml-cpp's callbacks to stop the parse; caught in Parse.
struct BuildError : std::exception {
  BuildError(SourceLocation where, std::string what) : location(where), message(std::move(what)) {}
  const char* what() const noexcept override { return message.c_str(); }
  SourceLocation location;
  std::string message;
};

// Decodes one UTF-8 sequence at text[*pos]; returns false for a malformed,
// overlong or surrogate sequence, else advances *pos and sets *code_point.
bool DecodeUtf8(std::string_view text, size_t* pos, uint32_t* code_point) {
  const auto byte = [&](size_t index) { return static_cast<unsigned char>(text[index]); };
  const unsigned char lead = byte(*pos);
  int length = 0;
  uint32_t value = 0;
  if (lead < 0x80) {
    *code_point = lead;
    ++*pos;
    return true;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2;
    value = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    value = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    value = lead & 0x07;
  } else {
    return false;
  }
  if (*pos + length > text.size()) return false;
  for (int i = 1; i < length; ++i) {
    const unsigned char next = byte(*pos + i);
    if ((next & 0xC0) != 0x80) return false;
    value = (value << 6) | (next & 0x3F);
  }
  static constexpr uint32_t kSmallest[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < kSmallest[length] || value > 0x10FFFF) return false;
  if (value >= 0xD800 && value <= 0xDFFF) return false;
  *code_point = value;
  *pos += length;
  return true;
}

std::string CodePointName(uint32_t code_point) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "U+%04X", static_cast<unsigned>(code_point));
  return buffer;
}

// Checks UTF-8; with `yaml_characters` also YAML's printable set (c-printable).
bool CheckCharacters(std::string_view text, bool yaml_characters, size_t* offset,
                     std::string* what) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    uint32_t code_point = 0;
    if (!DecodeUtf8(text, &pos, &code_point)) {
      *offset = start;
      *what = "not valid UTF-8 (byte 0x";
      static constexpr char kHex[] = "0123456789ABCDEF";
      const auto bad = static_cast<unsigned char>(text[start]);
      what->push_back(kHex[bad >> 4]);
      what->push_back(kHex[bad & 0xF]);
      what->append(yaml_characters ? "); descriptors must be UTF-8" : ") in a string");
      return false;
    }
    bool allowed = code_point != 0;
    if (yaml_characters) {
      allowed = code_point == '\t' || code_point == '\n' || code_point == '\r' ||
                (code_point >= 0x20 && code_point <= 0x7E) || code_point == 0x85 ||
                (code_point >= 0xA0 && code_point != 0xFFFE && code_point != 0xFFFF);
    }
    if (!allowed) {
      *offset = start;
      *what =
          (code_point == 0 ? "NUL character" : "control character " + CodePointName(code_point)) +
          std::string(yaml_characters ? " is not allowed in YAML" : " is not allowed in a string");
      return false;
    }
  }
  return true;
}

}  // namespace

Status Reporter::Error(SourceLocation location, std::string_view what) const {
  return Status::Invalid((name_.empty() ? "" : name_ + ":") + std::to_string(location.line) + ":" +
                         std::to_string(location.column) + ": " + std::string(what));
}

Status Reporter::FileError(std::string_view what) const {
  return Status::Invalid((name_.empty() ? "" : name_ + ": ") + std::string(what));
}

bool CheckText(std::string_view text, size_t* offset, std::string* what) {
  return CheckCharacters(text, /*yaml_characters=*/true, offset, what);
}

// Receives yaml-cpp's events for the first document and builds the tree.
class Builder : public YAML::EventHandler {
 public:
  explicit Builder(Document* document) : document_(document) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) {
      throw BuildError(ToLocation(mark),
                       "a descriptor holds one YAML document; found a second one here");
    }
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Node* node = NewNode(Node::Kind::kNull, mark, "?", anchor);
    Complete(node);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const SourceLocation location = ToLocation(mark);
    if (anchor >= anchors_.size() || anchors_[anchor] == nullptr) {
      throw BuildError(location, "alias refers to an unknown anchor");
    }
    const Node* target = anchors_[anchor];
    if (!target->complete) {
      throw BuildError(location, "alias refers to a node that contains it");
    }
    CountExpanded(target->expanded_size, location);
    if (static_cast<int>(open_.size()) + target->height > kMaxDepth) {
      throw BuildError(location,
                       "alias nests values deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    Attach(Ref{target, location});
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    // Escapes in quoted scalars can produce what the raw text may not hold.
    size_t offset = 0;
    std::string what;
    if (!CheckCharacters(value, /*yaml_characters=*/false, &offset, &what)) {
      throw BuildError(ToLocation(mark), what);
    }
    Node* node = NewNode(Node::Kind::kScalar, mark, tag, anchor);
    node->value = value;
    Complete(node);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value /*style*/) override {
    Open(NewNode(Node::Kind::kSequence, mark, tag, anchor));
  }
  void OnSequenceEnd() override { Close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value /*style*/) override {
    Open(NewNode(Node::Kind::kMapping, mark, tag, anchor));
  }
  void OnMapEnd() override { Close(); }

  // Gives a document without any content an empty root.
  void Finish() {
    if (document_->root_.node != nullptr) return;
    Node& node = document_->nodes_.emplace_back();
    node.tag = "?";
    node.location = {1, 1};
    node.complete = true;
    document_->root_ = Ref{&node, node.location};
  }

 private:
  Node* NewNode(Node::Kind kind, const YAML::Mark& mark, const std::string& tag,
                YAML::anchor_t anchor) {
    const SourceLocation location = ToLocation(mark);
    CountExpanded(1, location);
    Node& node = document_->nodes_.emplace_back();
    node.kind = kind;
    node.tag = tag.empty() ? "?" : tag;
    node.location = location;
    if (anchor != YAML::NullAnchor) {
      if (anchor >= anchors_.size()) anchors_.resize(anchor + 1, nullptr);
      anchors_[anchor] = &node;
    }
    return &node;
  }

  void CountExpanded(uint64_t count, SourceLocation location) {
    expanded_ += count;
    if (expanded_ > kMaxExpandedNodes) {
      throw BuildError(location, "the document holds more than " +
                                     std::to_string(kMaxExpandedNodes) +
                                     " values once aliases are expanded");
    }
  }

  // Adds `ref` to the open collection (or makes it the root).
  void Attach(Ref ref) {
    if (open_.empty()) {
      document_->root_ = ref;
      return;
    }
    Node* parent = open_.back();
    if (parent->kind == Node::Kind::kMapping && parent->items.size() % 2 == 0 &&
        ref.node->kind != Node::Kind::kScalar) {
      throw BuildError(ref.location, ref.node->kind == Node::Kind::kNull
                                         ? "mapping key is empty"
                                         : "mapping keys must be plain strings, not a list or "
                                           "mapping");
    }
    parent->items.push_back(ref);
  }

  void Open(Node* node) {
    if (static_cast<int>(open_.size()) + 1 > kMaxDepth) {
      throw BuildError(node->location,
                       "values nest deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    Attach(Ref{node, node->location});
    open_.push_back(node);
  }

  void Close() {
    Node* node = open_.back();
    open_.pop_back();
    uint64_t size = 1;
    int height = 0;
    for (const Ref& item : node->items) {
      size = std::min(size + item.node->expanded_size, kMaxExpandedNodes + 1);
      height = std::max(height, item.node->height);
    }
    node->expanded_size = size;
    node->height = height + 1;
    node->complete = true;
  }

  // A scalar or null: attach it and mark it complete.
  void Complete(Node* node) {
    node->complete = true;
    Attach(Ref{node, node->location});
  }

  Document* document_;
  std::vector<Node*> open_;
  std::vector<const Node*> anchors_;
  uint64_t expanded_ = 0;
  int documents_ = 0;
};

Result<Document> Parse(std::string_view text, const Reporter& reporter) {
  if (text.size() > kMaxDocumentBytes) {
    return reporter.FileError("descriptor is " + std::to_string(text.size()) +
                              " bytes; the limit is " + std::to_string(kMaxDocumentBytes));
  }
  size_t offset = 0;
  std::string what;
  if (!CheckText(text, &offset, &what)) {
    const std::string_view before = text.substr(0, offset);
    const int line = 1 + static_cast<int>(std::count(before.begin(), before.end(), '\n'));
    const size_t line_start = before.rfind('\n');
    const int column =
        static_cast<int>(line_start == std::string_view::npos ? offset + 1 : offset - line_start);
    return reporter.Error({line, column}, what);
  }
  Document document;
  try {
    std::istringstream stream{std::string(text)};
    YAML::Parser parser(stream);
    Builder builder(&document);
    // The second call only looks for another document (which Builder refuses).
    if (parser.HandleNextDocument(builder)) parser.HandleNextDocument(builder);
    builder.Finish();
  } catch (const BuildError& error) {
    return reporter.Error(error.location, error.message);
  } catch (const YAML::Exception& error) {
    return reporter.Error(ToLocation(error.mark), "invalid YAML: " + error.msg);
  }
  return document;
}

}  // namespace ferry::yaml
