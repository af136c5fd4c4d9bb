// The server's one clock: wall-clock milliseconds since the Unix epoch, the
// unit of every time the store keeps and every deadline the server computes.
#pragma once

#include <chrono>
#include <cstdint>

namespace ferry::fleet::server_internal {

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ferry::fleet::server_internal
