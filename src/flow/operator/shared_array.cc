#include "flow/operator/shared_array.h"

#include <cstring>
#include <new>
#include <vector>

namespace ferry::flow::internal {

OwnedDeviceArray::OwnedDeviceArray(ArrowDeviceArray* source) {
  std::memcpy(&array_, source, sizeof(array_));
  source->array.release = nullptr;
}

OwnedDeviceArray::OwnedDeviceArray(OwnedDeviceArray&& other) noexcept {
  std::memcpy(&array_, &other.array_, sizeof(array_));
  other.array_.array.release = nullptr;
}

OwnedDeviceArray& OwnedDeviceArray::operator=(OwnedDeviceArray&& other) noexcept {
  if (this != &other) {
    Reset();
    std::memcpy(&array_, &other.array_, sizeof(array_));
    other.array_.array.release = nullptr;
  }
  return *this;
}

void OwnedDeviceArray::MoveTo(ArrowDeviceArray* out) {
  std::memcpy(out, &array_, sizeof(array_));
  array_.array.release = nullptr;
}

void OwnedDeviceArray::Reset() {
  if (array_.array.release != nullptr) array_.array.release(&array_.array);
  array_.array.release = nullptr;
}

// The original struct; released when the last tree (and the owner) let go.
struct SharedDeviceArray::Root {
  ArrowDeviceArray array;
  ~Root() {
    if (array.array.release != nullptr) array.array.release(&array.array);
  }
};

namespace {

// Private data of one node of a shared tree: a reference on the root, and
// the node's own children and dictionary structs.
struct TreeNode {
  std::shared_ptr<void> root;
  std::vector<ArrowArray*> children;  // owned
  ArrowArray* dictionary = nullptr;   // owned
};

void ReleaseTree(ArrowArray* array) {
  if (array == nullptr || array->release == nullptr) return;
  auto* node = static_cast<TreeNode*>(array->private_data);
  for (ArrowArray* child : node->children) {
    if (child->release != nullptr) child->release(child);
    delete child;
  }
  if (node->dictionary != nullptr) {
    if (node->dictionary->release != nullptr) node->dictionary->release(node->dictionary);
    delete node->dictionary;
  }
  delete node;
  array->release = nullptr;
}

// Fills `out` as a view of `source` (a node of the root's struct). The
// buffers pointer array is the source's own: it lives as long as the root.
Status ShareNode(const ArrowArray& source, const std::shared_ptr<void>& root, ArrowArray* out,
                 int depth) {
  if (depth > 64) return Status::Invalid("the array nests deeper than 64 levels");
  if (source.n_children < 0 || (source.n_children > 0 && source.children == nullptr)) {
    return Status::Invalid("the array has a malformed children list");
  }
  auto node = std::make_unique<TreeNode>();
  node->root = root;
  node->children.reserve(static_cast<size_t>(source.n_children));
  auto undo = [&]() {
    for (ArrowArray* child : node->children) {
      if (child->release != nullptr) child->release(child);
      delete child;
    }
    node->children.clear();
  };
  for (int64_t i = 0; i < source.n_children; ++i) {
    if (source.children[i] == nullptr) {
      undo();
      return Status::Invalid("the array has a null child");
    }
    auto* child = new ArrowArray{};
    Status shared = ShareNode(*source.children[i], root, child, depth + 1);
    if (!shared.ok()) {
      delete child;
      undo();
      return shared;
    }
    node->children.push_back(child);
  }
  if (source.dictionary != nullptr) {
    auto* dictionary = new ArrowArray{};
    Status shared = ShareNode(*source.dictionary, root, dictionary, depth + 1);
    if (!shared.ok()) {
      delete dictionary;
      undo();
      return shared;
    }
    node->dictionary = dictionary;
  }
  out->length = source.length;
  out->null_count = source.null_count;
  out->offset = source.offset;
  out->n_buffers = source.n_buffers;
  out->n_children = source.n_children;
  out->buffers = source.buffers;
  out->children = node->children.empty() ? nullptr : node->children.data();
  out->dictionary = node->dictionary;
  out->release = ReleaseTree;
  out->private_data = node.release();
  return Status::OK();
}

}  // namespace

std::shared_ptr<SharedDeviceArray> SharedDeviceArray::Adopt(OwnedDeviceArray array) {
  std::shared_ptr<SharedDeviceArray> out(new SharedDeviceArray());
  auto root = std::make_shared<Root>();
  array.MoveTo(&root->array);
  out->original_ = root->array;  // a description only: the root owns it
  out->root_ = std::move(root);
  return out;
}

SharedDeviceArray::~SharedDeviceArray() = default;

Status SharedDeviceArray::Share(ArrowDeviceArray* out) {
  std::memset(out, 0, sizeof(*out));
  FERRY_RETURN_NOT_OK(
      ShareNode(root_->array.array, std::static_pointer_cast<void>(root_), &out->array, 0));
  out->device_id = root_->array.device_id;
  out->device_type = root_->array.device_type;
  out->sync_event = root_->array.sync_event;
  return Status::OK();
}

}  // namespace ferry::flow::internal
