// A memory pool for tests: forwards to the default pool, counts live bytes
// and successful Allocate calls, and refuses every call once its budget of
// calls is spent, so tests can inject allocation failures and prove that
// nothing leaks. Header-only.
#pragma once

#include <cstdint>
#include <string_view>

#include "ferry/exchange/buffer.h"

namespace ferry::testing {

class TestPool final : public MemoryPool {
 public:
  // `allowed_calls`: how many Allocate/Reallocate calls succeed; -1: all.
  explicit TestPool(int64_t allowed_calls = -1) : allowed_calls_(allowed_calls) {}

  Result<uint8_t*> Allocate(int64_t size) override {
    if (!Spend()) return Status::OutOfMemory("test pool refused an allocation");
    FERRY_ASSIGN_OR_RAISE(uint8_t * data, default_memory_pool()->Allocate(size));
    bytes_ += size;
    ++allocations_;
    return data;
  }
  Result<uint8_t*> Reallocate(uint8_t* data, int64_t old_size, int64_t new_size) override {
    if (!Spend()) return Status::OutOfMemory("test pool refused a reallocation");
    FERRY_ASSIGN_OR_RAISE(uint8_t * fresh,
                          default_memory_pool()->Reallocate(data, old_size, new_size));
    bytes_ += new_size - old_size;
    return fresh;
  }
  void Free(uint8_t* data, int64_t size) override {
    default_memory_pool()->Free(data, size);
    bytes_ -= size;
  }
  int64_t bytes_allocated() const override { return bytes_; }
  std::string_view name() const override { return "test"; }
  // Successful Allocate calls so far.
  int64_t allocations() const { return allocations_; }

 private:
  bool Spend() {
    if (allowed_calls_ == 0) return false;
    if (allowed_calls_ > 0) --allowed_calls_;
    return true;
  }

  int64_t allowed_calls_;
  int64_t bytes_ = 0;
  int64_t allocations_ = 0;
};

}  // namespace ferry::testing
