// Node "check": verifies what the runtime node computed. For each "total"
// (from the sum operator) and each "values" batch (the fill operator's
// device batch, copied to the host because it leaves the runtime's process),
// the sum must be rows * start + rows * (rows - 1) / 2. Exits 1 on a wrong
// sum or when nothing arrived.
#include <cstdio>
#include <string>

#include "ferry/flow/node.h"

namespace {

int64_t Number(const ferry::Metadata& metadata, const std::string& key) {
  for (const auto& [name, value] : metadata) {
    if (name == key) return std::stoll(value);
  }
  return -1;
}

std::string Text(const ferry::Metadata& metadata, const std::string& key) {
  for (const auto& [name, value] : metadata) {
    if (name == key) return value;
  }
  return "?";
}

}  // namespace

int main() {
  auto node = ferry::flow::Node::FromEnvironment();
  if (!node.ok()) {
    std::fprintf(stderr, "check: %s\n", node.status().message().c_str());
    return 2;
  }
  int totals = 0, value_batches = 0, wrong = 0;
  for (;;) {
    auto event = (*node)->Next();
    if (!event.ok()) {
      std::fprintf(stderr, "check: %s\n", event.status().message().c_str());
      return 1;
    }
    if (!event->has_value()) break;
    const ferry::flow::Event& e = **event;
    if (e.type != ferry::flow::EventType::kInput) continue;
    const int64_t start = Number(e.metadata, "start");
    const int64_t rows = Number(e.metadata, "rows");
    const int64_t expected = rows * start + rows * (rows - 1) / 2;
    const auto& column = e.value->column(0);
    int64_t got = 0;
    if (e.id == "total") {
      got = column->GetValues<int64_t>(1)[0];
      ++totals;
      std::printf("total %d: %lld (rows %lld from %lld on %s, waited on the device: %s) %s\n",
                  totals, static_cast<long long>(got), static_cast<long long>(rows),
                  static_cast<long long>(start), Text(e.metadata, "device").c_str(),
                  Text(e.metadata, "waited_on_device").c_str(), got == expected ? "ok" : "WRONG");
    } else {
      const int64_t* values = column->GetValues<int64_t>(1);
      for (int64_t i = 0; i < column->length; ++i) got += values[i];
      ++value_batches;
    }
    if (got != expected) ++wrong;
  }
  std::printf("checked %d totals and %d value batches: %s\n", totals, value_batches,
              wrong == 0 && totals > 0 ? "all correct" : "FAILED");
  return wrong == 0 && totals > 0 ? 0 : 1;
}
