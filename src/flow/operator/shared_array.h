// Moving and sharing ArrowDeviceArray structs inside a runtime without
// copying a byte of their buffers. Internal to the operator host.
//
// OwnedDeviceArray holds one struct and releases it when destroyed (unless
// it was moved on). SharedDeviceArray adopts one struct and hands each
// consumer a struct tree of its own over the same buffers (same buffer
// addresses, same sync_event); the producer's release runs once, when the
// original and every tree handed out are released. Consumers may move
// children out of their tree and release them in any order, as the C Data
// Interface allows.
//
// Thread safety: an OwnedDeviceArray is used by one thread at a time; the
// trees of one SharedDeviceArray may be released from any threads.
#pragma once

#include <memory>

#include "ferry/base/status.h"
#include "ferry/c/abi.h"

namespace ferry::flow::internal {

class OwnedDeviceArray {
 public:
  OwnedDeviceArray() = default;
  // Takes `source` over (its release is NULL afterwards).
  explicit OwnedDeviceArray(ArrowDeviceArray* source);
  OwnedDeviceArray(OwnedDeviceArray&& other) noexcept;
  OwnedDeviceArray& operator=(OwnedDeviceArray&& other) noexcept;
  OwnedDeviceArray(const OwnedDeviceArray&) = delete;
  OwnedDeviceArray& operator=(const OwnedDeviceArray&) = delete;
  ~OwnedDeviceArray() { Reset(); }

  bool valid() const { return array_.array.release != nullptr; }
  ArrowDeviceArray* get() { return &array_; }
  const ArrowDeviceArray* get() const { return &array_; }
  // Moves the struct into `out` (this becomes empty).
  void MoveTo(ArrowDeviceArray* out);
  // Releases what is held, if anything.
  void Reset();

 private:
  ArrowDeviceArray array_{};  // all zero: empty (release NULL)
};

class SharedDeviceArray {
 public:
  // Takes `array` over. The result keeps it alive until released by the last holder.
  static std::shared_ptr<SharedDeviceArray> Adopt(OwnedDeviceArray array);
  ~SharedDeviceArray();

  // A new struct tree over the same buffers; valid after this object is gone.
  Status Share(ArrowDeviceArray* out);
  const ArrowDeviceArray& original() const { return original_; }

 private:
  SharedDeviceArray() = default;
  struct Root;
  std::shared_ptr<Root> root_;
  ArrowDeviceArray original_{};
};

}  // namespace ferry::flow::internal
