#include <poll.h>

#include <algorithm>
#include <vector>

#include "ferry/flow/transport.h"
#include "flow/transport/futex.h"
#include "flow/transport/subscriber_impl.h"

namespace ferry::flow {

void WaitSet::Add(Subscriber* subscriber) {
  if (subscriber == nullptr) return;
  if (std::find(subscribers_.begin(), subscribers_.end(), subscriber) != subscribers_.end()) return;
  subscribers_.push_back(subscriber);
}

void WaitSet::Remove(Subscriber* subscriber) {
  subscribers_.erase(std::remove(subscribers_.begin(), subscribers_.end(), subscriber),
                     subscribers_.end());
}

Result<std::vector<Subscriber*>> WaitSet::Wait(std::chrono::nanoseconds timeout) {
  const internal::Deadline deadline(timeout);
  std::vector<Subscriber*> ready;
  if (subscribers_.empty()) return ready;
  std::vector<pollfd> fds(subscribers_.size());
  for (;;) {
    // Cheap checks first; arming tells each publisher to write the eventfd.
    for (Subscriber* subscriber : subscribers_) {
      auto* impl = dynamic_cast<internal::SubscriberImpl*>(subscriber);
      if (impl != nullptr && impl->ReadyOrArm()) ready.push_back(subscriber);
    }
    if (!ready.empty()) return ready;
    for (size_t index = 0; index < subscribers_.size(); ++index) {
      fds[index] = pollfd{subscribers_[index]->wait_fd(), POLLIN, 0};
    }
    // Wake up now and then anyway: a foreign Subscriber may not wake its fd.
    const auto left = deadline.Remaining(std::chrono::seconds(1));
    const int timeout_ms = static_cast<int>(
        (std::chrono::duration_cast<std::chrono::microseconds>(left).count() + 999) / 1000);
    int count = ::poll(fds.data(), fds.size(), timeout_ms);
    if (count < 0 && errno != EINTR) {
      return Status::IOError("poll over " + std::to_string(fds.size()) + " subscribers failed");
    }
    for (size_t index = 0; count > 0 && index < subscribers_.size(); ++index) {
      if (fds[index].revents == 0) continue;
      auto* impl = dynamic_cast<internal::SubscriberImpl*>(subscribers_[index]);
      if (impl == nullptr || impl->CheckAfterWake()) ready.push_back(subscribers_[index]);
    }
    if (!ready.empty() || deadline.Expired()) return ready;
  }
}

}  // namespace ferry::flow
