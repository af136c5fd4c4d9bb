#include "fleet/server/in_flight_keys.h"

namespace ferry::fleet::server_internal {

InFlightKeys::Claim::Claim(InFlightKeys* owner, int64_t user_id, std::string key)
    : owner_(owner), entry_(user_id, std::move(key)) {
  std::lock_guard<std::mutex> lock(owner_->mutex_);
  held_ = owner_->keys_.insert(entry_).second;
}

InFlightKeys::Claim::~Claim() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(owner_->mutex_);
  owner_->keys_.erase(entry_);
}

size_t InFlightKeys::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return keys_.size();
}

}  // namespace ferry::fleet::server_internal
