// Counts heap allocations on the message path: Send of a batch whose schema
// the channel already knows must not allocate at all, and Receive allocates
// only the received batch's own objects (a constant per message). This binary
// replaces the global operator new (forwarding to malloc, so ASan still sees
// every block), which is why it is a test binary of its own.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <thread>

#include "ferry/flow/transport.h"
#include "flow/transport/transport_test_util.h"
#include "testing/counting_new.h"

namespace ferry::flow {
namespace {

using namespace std::chrono_literals;

TEST(TransportAllocations, SendOfAKnownSchemaAllocatesNothingAndReceiveAConstant) {
  auto publisher = Publisher::Create(testing::UniqueChannel("alloc"));
  ASSERT_TRUE(publisher.ok());
  Result<std::unique_ptr<Subscriber>> connected = Status::UnknownError("");
  std::thread connector([&] { connected = Subscriber::Connect((*publisher)->name()); });
  ASSERT_TRUE((*publisher)->WaitForSubscribers(1, 10s).ok());
  connector.join();
  ASSERT_TRUE(connected.ok());
  Subscriber& subscriber = **connected;

  auto batch = testing::MakeBatch((*publisher)->LoanPool(), 64, 1);
  ASSERT_TRUE(batch.ok());
  // Warm up: the schema is announced, tables reach their steady size.
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE((*publisher)->Send(**batch).ok());
    auto message = subscriber.Receive(1s);
    ASSERT_TRUE(message.ok()) << message.status().ToString();
  }
  int64_t most_send = 0;
  int64_t most_receive = 0;
  int64_t least_receive = INT64_MAX;
  for (int round = 0; round < 100; ++round) {
    const int64_t before_send = allocation_count.load();
    const Status sent = (*publisher)->Send(**batch);
    const int64_t send_allocations = allocation_count.load() - before_send;
    ASSERT_TRUE(sent.ok());
    const int64_t before_receive = allocation_count.load();
    {
      auto message = subscriber.Receive(1s);
      ASSERT_TRUE(message.ok());
      const int64_t receive_allocations = allocation_count.load() - before_receive;
      most_receive = std::max(most_receive, receive_allocations);
      least_receive = std::min(least_receive, receive_allocations);
    }
    most_send = std::max(most_send, send_allocations);
  }
  std::printf("per message: Send %lld allocations, Receive %lld..%lld allocations\n",
              static_cast<long long>(most_send), static_cast<long long>(least_receive),
              static_cast<long long>(most_receive));
  EXPECT_EQ(most_send, 0);
  // The same every time: the token, the batch's objects, nothing that grows.
  EXPECT_EQ(most_receive, least_receive);
  EXPECT_LE(most_receive, 24);
}

}  // namespace
}  // namespace ferry::flow
