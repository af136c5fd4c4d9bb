// `ferry agent`: the per-node agent. Registers the node and its GPUs (NVML
// when an NVIDIA driver is present, else the declared inventory), syncs with
// the server (heartbeat + long poll for assignments), launches each task as a
// process group with CUDA_VISIBLE_DEVICES and FERRY_* variables, ships its
// stdout/stderr, reports exits, and kills tasks the server says to stop
// (SIGTERM, then SIGKILL after the grace period).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/fleet/store.h"

namespace ferry::fleet {

struct AgentOptions {
  std::string server_url = "http://127.0.0.1:8700";  // https://: TLS, the server verified
  std::string ca_file;    // PEM CAs to verify an https server with; empty: the system's
  std::string token;      // bearer token of an agent identity
  std::string node_name;  // default: the host name
  std::string pool = "default";
  std::map<std::string, std::string> labels;
  double cpus = 0;        // 0: the machine's
  int64_t memory_mb = 0;  // 0: the machine's
  // Declared GPUs, used when NVML finds none (or when `ignore_nvml`).
  std::vector<GpuInventory> declared_gpus;
  bool ignore_nvml = false;
  std::string work_dir = ".";    // tasks run here unless the spec says otherwise
  int64_t sync_wait_ms = 2'000;  // long-poll wait per sync
  // The address other nodes reach this one at (a gang's MASTER_ADDR when it
  // runs task 0 here). Empty: the local address of the route to the server,
  // else the host name.
  std::string advertise_host;
  // HOST:PORT to serve `GET /metrics` on (docs/fleet-metrics.md); empty: no
  // metrics listener. Port 0 picks a free port (logged).
  std::string metrics_listen;
  // Stage-in of job inputs (docs/fleet-staging.md): the node cache's
  // directory (empty: <work_dir>/cache) and size quota, and the storage
  // config (S3 endpoints and credentials, file roots; empty: none).
  std::string cache_dir;
  int64_t cache_quota_bytes = 10LL << 30;
  std::string storage_config;
  // Container images (docs/fleet-images.md): tasks of a job with an image
  // run through `podman run`. The podman binary (empty: "podman" on PATH);
  // registries pulled from over plain http besides loopback ones
  // (host[:port]); podman's auth file (containers-auth.json) for private
  // registries, empty: podman's default.
  std::string podman;
  std::vector<std::string> insecure_registries;
  std::string registry_auth_file;
  // "text" (default) or "json": JSON lines on stderr with the node, job id,
  // task and attempt as fields where they apply (docs/fleet-agent.md#logs).
  std::string log_format = "text";
};

// An address to listen on: "127.0.0.1:9402", "[::1]:9402", ":9402" (every
// interface, as 0.0.0.0), "localhost:0" (any free port).
struct ListenAddress {
  std::string host;
  int port = 0;
};
Result<ListenAddress> ParseListenAddress(const std::string& text);

// Parses a GPU declaration: "8xH200" or "8xH200:141312" (count x model [:memory MiB]),
// several separated by commas ("4xA100,4xH100"). Indices follow in order.
Result<std::vector<GpuInventory>> ParseGpuDeclaration(const std::string& text,
                                                      const std::string& node_name);

// GPUs found through NVML (libnvidia-ml.so.1, loaded at run time); an empty
// list when no driver is present.
std::vector<GpuInventory> DiscoverNvmlGpus();

// Runs until `stop` or SIGINT/SIGTERM; kills its tasks' process groups on the way out.
Status RunAgent(const AgentOptions& options, std::atomic<bool>* stop = nullptr,
                bool handle_signals = true);

}  // namespace ferry::fleet
