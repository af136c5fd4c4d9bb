// Uses an installed Ferry through its public headers only:
//   ferry_consumer roundtrip        an Arrow C Data round trip, no copy
//   ferry_consumer node             a C++ node under `ferry run` (counts its input)
//   ferry_consumer whoami URL TOKEN a fleet API call with the client library
#include <cstdio>
#include <memory>
#include <string>

#include "ferry/base/telemetry.h"
#include "ferry/exchange/bridge.h"
#include "ferry/exchange/sample.h"
#include "ferry/fleet/client.h"
#include "ferry/flow/node.h"

namespace {

int Fail(const std::string& what, const ferry::Status& status) {
  std::fprintf(stderr, "consumer: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

int RoundTrip() {
  auto batch = ferry::MakeSampleBatch(4);
  if (!batch.ok()) return Fail("sample", batch.status());
  ArrowArray array;
  ArrowSchema schema;
  if (auto st = ferry::ExportRecordBatch(**batch, &array, &schema); !st.ok()) {
    return Fail("export", st);
  }
  auto back = ferry::ImportRecordBatch(&array, &schema);
  schema.release(&schema);
  if (!back.ok()) return Fail("import", back.status());
  const bool same =
      (*back)->column(0)->buffers[1]->data() == (*batch)->column(0)->buffers[1]->data();
  const int64_t copied = ferry::telemetry::Snapshot()["bytes_copied_host"];
  std::printf("roundtrip: %lld rows, same buffers %s, bytes copied %lld\n",
              static_cast<long long>((*back)->num_rows()), same ? "yes" : "no",
              static_cast<long long>(copied));
  return same && copied == 0 ? 0 : 1;
}

int RunNode() {
  auto created = ferry::flow::Node::FromEnvironment();
  if (!created.ok()) return Fail("node", created.status());
  std::unique_ptr<ferry::flow::Node> node = std::move(created).MoveValueUnsafe();
  int64_t rows = 0, batches = 0;
  for (;;) {
    auto next = node->Next();
    if (!next.ok()) return Fail("next", next.status());
    if (!next->has_value()) break;
    if ((**next).type != ferry::flow::EventType::kInput) continue;
    rows += (**next).value->num_rows();
    ++batches;
  }
  std::printf("consumer node: %lld rows in %lld batches\n", static_cast<long long>(rows),
              static_cast<long long>(batches));
  return batches > 0 ? 0 : 1;
}

int WhoAmI(const std::string& url, const std::string& token) {
  ferry::fleet::ClientOptions options;
  options.base_url = url;
  options.token = token;
  ferry::fleet::Client client(options);
  auto response = client.Get("/v1/whoami");
  if (!response.ok()) return Fail("GET /v1/whoami", response.status());
  std::printf("whoami: %s (%s)\n", response->body.value("user", "?").c_str(),
              response->body.value("role", "?").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "roundtrip") return RoundTrip();
  if (mode == "node") return RunNode();
  if (mode == "whoami" && argc == 4) return WhoAmI(argv[2], argv[3]);
  std::fprintf(stderr, "usage: ferry_consumer roundtrip | node | whoami URL TOKEN\n");
  return 2;
}
