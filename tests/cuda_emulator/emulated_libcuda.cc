// An emulated libcuda.so.1 that runs Ferry's CUDA backend on the CPU, to check
// the backend's logic (context push/pop balance, allocation kinds, events,
// kernel argument marshalling) in CI, where no GPU exists. It complements,
// never replaces, the real-GPU run of scripts/gpu-check. At exit it fails the
// process (exit code 86) if the backend misused the driver: a call without a
// current context, unbalanced context pushes and pops, a free of unknown
// memory or with the wrong call, or allocations left behind. Data operations happen
// at once; "delay" kernels make a stream busy until a wall-clock time, and
// events/waits follow that time.
//
// Interprocess handles work across processes of one machine: device memory
// is a memfd mapping whose 64-byte handle carries {magic, pid, fd, size,
// serial}; cuIpcOpenMemHandle maps /proc/<pid>/fd/<fd>. An interprocess
// event keeps its state (recorded, ready time on CLOCK_MONOTONIC) in a small
// shared memfd page opened the same way. Each shared page records which
// processes have it open, so these count as misuse too: freeing memory or
// destroying an event that a live process still has open, closing what was
// never opened, opening a handle in the process that exported it (CUDA
// refuses that), and handles still open at exit. FAKE_CUDA_IPC=0 makes the
// GPU report no IPC support.
#include <cuda.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

struct FakeContext {
  int dummy;
};
FakeContext g_context;

// ---- Shared pages of interprocess memory and events ---------------------------

constexpr uint32_t kMemoryHandleMagic = 0x4D504946;  // "FIPM"
constexpr uint32_t kEventHandleMagic = 0x45504946;   // "FIPE"
constexpr int kImporterSlots = 16;

// Which processes have a shared page open (memory or event), so that the
// exporter can tell a premature free from a legitimate one.
struct Importers {
  std::atomic<int32_t> pid[kImporterSlots];
  std::atomic<int32_t> count[kImporterSlots];

  bool Add(int32_t self) {
    for (int slot = 0; slot < kImporterSlots; ++slot) {
      if (pid[slot].load() == self) {
        ++count[slot];
        return true;
      }
    }
    for (int slot = 0; slot < kImporterSlots; ++slot) {
      int32_t expected = 0;
      if (pid[slot].compare_exchange_strong(expected, self)) {
        ++count[slot];
        return true;
      }
    }
    return false;
  }
  void Remove(int32_t self) {
    for (int slot = 0; slot < kImporterSlots; ++slot) {
      if (pid[slot].load() == self && --count[slot] == 0) pid[slot].store(0);
    }
  }
  // A process that died with the page open does not count.
  bool AnyAlive() const {
    for (int slot = 0; slot < kImporterSlots; ++slot) {
      const int32_t owner = pid[slot].load();
      if (owner == 0 || count[slot].load() <= 0 || kill(owner, 0) != 0) continue;
      char path[64];
      snprintf(path, sizeof(path), "/proc/%d/stat", owner);
      FILE* stat = fopen(path, "r");
      if (stat == nullptr) continue;
      char state = 'R';
      if (fscanf(stat, "%*d %*s %c", &state) != 1) state = 'R';
      fclose(stat);
      if (state != 'Z' && state != 'X') return true;
    }
    return false;
  }
};

// The last page of a device allocation's memfd.
struct MemoryTrailer {
  uint32_t magic;
  uint64_t serial;
  Importers importers;
};

// An interprocess event's whole memfd.
struct SharedEvent {
  uint32_t magic;
  uint64_t serial;
  std::atomic<int64_t> ready_at_ns;  // CLOCK_MONOTONIC, as steady_clock
  std::atomic<uint32_t> recorded;
  Importers importers;
};

// What travels in CUipcMemHandle / CUipcEventHandle.
struct WireHandle {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  uint32_t reserved;
  uint64_t size;
  uint64_t serial;
};
static_assert(sizeof(WireHandle) <= CU_IPC_HANDLE_SIZE);

struct FakeStream {
  Clock::time_point busy_until;
};
struct FakeEvent {
  Clock::time_point ready_at;
  bool recorded = false;
  SharedEvent* shared = nullptr;  // interprocess events keep their state here
  int fd = -1;                    // the exporter's memfd
  bool imported = false;
};
struct FakeModule {
  int dummy;
};
enum Kernel { kFill = 1, kSum, kSumBytes, kDelay };
struct FakeFunction {
  Kernel kernel;
};

struct Allocation {
  char kind;  // 'd' device, 'h' host, 'm' managed
  size_t size;
  int fd = -1;        // device memory: its memfd
  size_t mapped = 0;  // device memory: bytes mapped, trailer page included
  MemoryTrailer* trailer = nullptr;
};

// Memory this process opened with cuIpcOpenMemHandle.
struct OpenedMemory {
  size_t size;
  size_t mapped;
  int32_t exporter;
  uint64_t serial;
  int references;
  MemoryTrailer* trailer;
};

std::mutex g_mutex;
std::map<void*, Allocation> g_allocations;  // ordered: address-range lookups
std::map<void*, OpenedMemory> g_opened;
long g_opened_events = 0;
std::atomic<uint64_t> g_serial{1};
std::vector<FakeStream*> g_streams;
thread_local std::vector<CUcontext> t_stack;
std::atomic<long> g_pushes{0}, g_pops{0}, g_bad{0};
bool g_initialized = false;

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t RoundToPage(size_t size) { return (size + PageSize() - 1) / PageSize() * PageSize(); }

int64_t ToNanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
Clock::time_point FromNanos(int64_t nanos) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(nanos)));
}

bool EventRecorded(const FakeEvent* e) {
  return e->shared ? e->shared->recorded.load() != 0 : e->recorded;
}
Clock::time_point EventReadyAt(const FakeEvent* e) {
  return e->shared ? FromNanos(e->shared->ready_at_ns.load()) : e->ready_at;
}
void RecordEventAt(FakeEvent* e, Clock::time_point t) {
  if (e->shared) {
    e->shared->ready_at_ns.store(ToNanos(t));
    e->shared->recorded.store(1);
  } else {
    e->ready_at = t;
    e->recorded = true;
  }
}

// Maps another process's memfd named by a handle; -1 on failure.
void* MapPeerFile(int32_t pid, int32_t fd, size_t expected_size) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
  const int opened = open(path, O_RDWR | O_CLOEXEC);
  if (opened < 0) return nullptr;
  struct stat info {};
  void* mapping = nullptr;
  if (fstat(opened, &info) == 0 && static_cast<size_t>(info.st_size) == expected_size) {
    mapping = mmap(nullptr, expected_size, PROT_READ | PROT_WRITE, MAP_SHARED, opened, 0);
    if (mapping == MAP_FAILED) mapping = nullptr;
  }
  close(opened);
  return mapping;
}

int Env(const char* name, int fallback) {
  const char* value = getenv(name);
  return value ? atoi(value) : fallback;
}

bool HaveContext() {
  if (t_stack.empty()) {
    ++g_bad;
    fprintf(stderr, "FAKE CUDA: call without a current context\n");
    return false;
  }
  return true;
}

struct Report {
  ~Report() {
    fprintf(stderr,
            "FAKE CUDA report: pushes=%ld pops=%ld bad=%ld outstanding allocations=%zu "
            "streams=%zu open IPC memory=%zu open IPC events=%ld\n",
            g_pushes.load(), g_pops.load(), g_bad.load(), g_allocations.size(), g_streams.size(),
            g_opened.size(), g_opened_events);
    // Streams may remain: each device's default queue lives as long as the
    // process-wide registry, which is never destroyed.
    if (g_bad.load() != 0 || g_pushes.load() != g_pops.load() || !g_allocations.empty() ||
        !g_opened.empty() || g_opened_events != 0) {
      std::fflush(nullptr);
      std::_Exit(86);
    }
  }
} g_report;

// Device memory is a memfd mapping (so that other processes can open it),
// followed by one trailer page; host and managed memory come from the heap.
CUresult Allocate(void** out, size_t size, char kind) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > (size_t{16} << 30)) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation allocation{kind, size};
  void* p = nullptr;
  if (kind == 'd') {
    const size_t mapped = RoundToPage(size) + PageSize();
    const int fd = memfd_create("fake-cuda-memory", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, static_cast<off_t>(mapped)) != 0 ||
        (p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    allocation.fd = fd;
    allocation.mapped = mapped;
    allocation.trailer = new (static_cast<char*>(p) + RoundToPage(size)) MemoryTrailer{};
    allocation.trailer->magic = kMemoryHandleMagic;
    allocation.trailer->serial = g_serial++;
  } else {
    p = aligned_alloc(256, (size + 255) / 256 * 256);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_allocations[p] = allocation;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult Free(void* p, const char* kinds) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.find(p);
  if (it == g_allocations.end() || !strchr(kinds, it->second.kind)) {
    ++g_bad;
    fprintf(stderr, "FAKE CUDA: bad free %p\n", p);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const Allocation& allocation = it->second;
  if (allocation.kind == 'd') {
    // CUDA leaves this undefined: the importer must close first.
    if (allocation.trailer->importers.AnyAlive()) {
      ++g_bad;
      fprintf(stderr, "FAKE CUDA: cuMemFree of %p while another process has it open\n", p);
    }
    munmap(p, allocation.mapped);
    close(allocation.fd);
  } else {
    free(p);
  }
  g_allocations.erase(it);
  return CUDA_SUCCESS;
}

// The allocation (own or opened) holding `address`: its base and size.
bool FindRange(void* address, void** base, size_t* size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto own = g_allocations.upper_bound(address);
  if (own != g_allocations.begin()) {
    --own;
    auto* start = static_cast<char*>(own->first);
    if (own->second.kind != 'h' && static_cast<char*>(address) < start + own->second.size) {
      *base = own->first;
      *size = own->second.size;
      return true;
    }
  }
  auto opened = g_opened.upper_bound(address);
  if (opened != g_opened.begin()) {
    --opened;
    auto* start = static_cast<char*>(opened->first);
    if (static_cast<char*>(address) < start + opened->second.size) {
      *base = opened->first;
      *size = opened->second.size;
      return true;
    }
  }
  return false;
}

void SleepUntil(Clock::time_point t) {
  auto now = Clock::now();
  if (t > now) std::this_thread::sleep_until(t);
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case CUDA_SUCCESS:
      *name = "CUDA_SUCCESS";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
      *name = "CUDA_ERROR_NO_DEVICE";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT:
      *name = "CUDA_ERROR_INVALID_CONTEXT";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY:
      *name = "CUDA_ERROR_NOT_READY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      *name = "CUDA_ERROR_ILLEGAL_ADDRESS";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
      *name = "CUDA_ERROR_NOT_FOUND";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_IMAGE:
      *name = "CUDA_ERROR_INVALID_IMAGE";
      return CUDA_SUCCESS;
    default:
      *name = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
}
CUresult cuGetErrorString(CUresult error, const char** text) {
  *text = "fake driver error text";
  return CUDA_SUCCESS;
}
CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (Env("FAKE_CUDA_INIT_ERROR", 0)) return static_cast<CUresult>(Env("FAKE_CUDA_INIT_ERROR", 0));
  g_initialized = true;
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* count) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = Env("FAKE_CUDA_DEVICES", 1);
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= Env("FAKE_CUDA_DEVICES", 1)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  snprintf(name, len, "Fake GPU");
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *value = Env("FAKE_CUDA_MANAGED", 1);
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = 1500000;
      break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED:
      *value = Env("FAKE_CUDA_IPC", 1);
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  *ctx = reinterpret_cast<CUcontext>(&g_context);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx != reinterpret_cast<CUcontext>(&g_context)) return CUDA_ERROR_INVALID_CONTEXT;
  t_stack.push_back(ctx);
  ++g_pushes;
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (t_stack.empty()) {
    ++g_bad;
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (ctx) *ctx = t_stack.back();
  t_stack.pop_back();
  ++g_pops;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  Clock::time_point latest = Clock::now();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto* s : g_streams) latest = std::max(latest, s->busy_until);
  }
  SleepUntil(latest);
  return CUDA_SUCCESS;
}
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  *free_bytes = size_t{16} << 30;
  *total = size_t{16} << 30;
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
  void* out = nullptr;
  CUresult r = Allocate(&out, size, 'd');
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<CUdeviceptr>(out);
  return r;
}
CUresult cuMemFree_v2(CUdeviceptr p) { return Free(reinterpret_cast<void*>(p), "dm"); }
CUresult cuMemAllocHost_v2(void** p, size_t size) { return Allocate(p, size, 'h'); }
CUresult cuMemHostAlloc(void** p, size_t size, unsigned int flags) {
  if (flags &
      ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  return Allocate(p, size, 'h');
}
CUresult cuMemFreeHost(void* p) { return Free(p, "h"); }
CUresult cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL) return CUDA_ERROR_INVALID_VALUE;
  void* out = nullptr;
  CUresult r = Allocate(&out, size, 'm');
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<CUdeviceptr>(out);
  return r;
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), size);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  memset(reinterpret_cast<void*>(dst), value, n);
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  auto* s = new FakeStream{Clock::now()};
  std::lock_guard<std::mutex> lock(g_mutex);
  g_streams.push_back(s);
  *stream = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto* s = reinterpret_cast<FakeStream*>(stream);
  auto it = std::find(g_streams.begin(), g_streams.end(), s);
  if (it == g_streams.end()) {
    ++g_bad;
    return CUDA_ERROR_INVALID_HANDLE;
  }
  g_streams.erase(it);
  delete s;
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  SleepUntil(reinterpret_cast<FakeStream*>(stream)->busy_until);
  return CUDA_SUCCESS;
}
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  auto* s = reinterpret_cast<FakeStream*>(stream);
  auto* e = reinterpret_cast<FakeEvent*>(event);
  if (!EventRecorded(e)) return CUDA_SUCCESS;
  s->busy_until = std::max(s->busy_until, EventReadyAt(e));
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags & ~(CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS | CU_EVENT_BLOCKING_SYNC))
    return CUDA_ERROR_INVALID_VALUE;
  auto* e = new FakeEvent{};
  if (flags & CU_EVENT_INTERPROCESS) {
    if (!(flags & CU_EVENT_DISABLE_TIMING)) {
      delete e;
      return CUDA_ERROR_INVALID_VALUE;
    }
    const int fd = memfd_create("fake-cuda-event", MFD_CLOEXEC);
    void* page = MAP_FAILED;
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(PageSize())) != 0 ||
        (page = mmap(nullptr, PageSize(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
            MAP_FAILED) {
      if (fd >= 0) close(fd);
      delete e;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->shared = new (page) SharedEvent{};
    e->shared->magic = kEventHandleMagic;
    e->shared->serial = g_serial++;
    e->fd = fd;
  }
  *event = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  auto* e = reinterpret_cast<FakeEvent*>(event);
  RecordEventAt(e, std::max(Clock::now(), reinterpret_cast<FakeStream*>(stream)->busy_until));
  return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent event) {
  if (Env("FAKE_CUDA_QUERY_ERROR", 0))
    return static_cast<CUresult>(Env("FAKE_CUDA_QUERY_ERROR", 0));
  auto* e = reinterpret_cast<FakeEvent*>(event);
  return Clock::now() >= EventReadyAt(e) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventDestroy_v2(CUevent event) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  auto* e = reinterpret_cast<FakeEvent*>(event);
  if (e->shared != nullptr) {
    if (e->imported) {
      e->shared->importers.Remove(getpid());
      std::lock_guard<std::mutex> lock(g_mutex);
      --g_opened_events;
    } else if (e->shared->importers.AnyAlive()) {
      ++g_bad;
      fprintf(stderr,
              "FAKE CUDA: interprocess event destroyed while another process has it open\n");
    }
    munmap(e->shared, PageSize());
    if (e->fd >= 0) close(e->fd);
  }
  delete e;
  return CUDA_SUCCESS;
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr pointer) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  void* found = nullptr;
  size_t found_size = 0;
  if (!FindRange(reinterpret_cast<void*>(pointer), &found, &found_size))
    return CUDA_ERROR_NOT_FOUND;
  if (base) *base = reinterpret_cast<CUdeviceptr>(found);
  if (size) *size = found_size;
  return CUDA_SUCCESS;
}
CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr pointer) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.find(reinterpret_cast<void*>(pointer));
  // Only the base of plain device memory has a handle.
  if (it == g_allocations.end() || it->second.kind != 'd') return CUDA_ERROR_INVALID_VALUE;
  WireHandle wire{kMemoryHandleMagic,        getpid(), it->second.fd, 0, it->second.size,
                  it->second.trailer->serial};
  memset(handle, 0, sizeof(*handle));
  memcpy(handle, &wire, sizeof(wire));
  return CUDA_SUCCESS;
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pointer, CUipcMemHandle handle, unsigned int flags) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
  WireHandle wire;
  memcpy(&wire, &handle, sizeof(wire));
  if (wire.magic != kMemoryHandleMagic || wire.size == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (wire.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // CUDA refuses its own handles
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [address, opened] : g_opened) {
    if (opened.exporter == wire.pid && opened.serial == wire.serial) {
      ++opened.references;  // CUDA counts repeated opens
      *pointer = reinterpret_cast<CUdeviceptr>(address);
      return CUDA_SUCCESS;
    }
  }
  const size_t mapped = RoundToPage(wire.size) + PageSize();
  void* base = MapPeerFile(wire.pid, wire.fd, mapped);
  if (base == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* trailer =
      reinterpret_cast<MemoryTrailer*>(static_cast<char*>(base) + RoundToPage(wire.size));
  if (trailer->magic != kMemoryHandleMagic || trailer->serial != wire.serial) {
    munmap(base, mapped);  // the descriptor now names other memory: a stale handle
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!trailer->importers.Add(getpid())) {
    munmap(base, mapped);
    return CUDA_ERROR_TOO_MANY_PEERS;
  }
  g_opened[base] = OpenedMemory{wire.size, mapped, wire.pid, wire.serial, 1, trailer};
  *pointer = reinterpret_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr pointer) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_opened.find(reinterpret_cast<void*>(pointer));
  if (it == g_opened.end()) {
    ++g_bad;
    fprintf(stderr, "FAKE CUDA: cuIpcCloseMemHandle of %p, which is not open\n",
            reinterpret_cast<void*>(pointer));
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (--it->second.references == 0) {
    it->second.trailer->importers.Remove(getpid());
    munmap(it->first, it->second.mapped);
    g_opened.erase(it);
  }
  return CUDA_SUCCESS;
}
CUresult cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent event) {
  auto* e = reinterpret_cast<FakeEvent*>(event);
  if (e == nullptr || e->shared == nullptr || e->imported) return CUDA_ERROR_INVALID_HANDLE;
  WireHandle wire{kEventHandleMagic, getpid(), e->fd, 0, PageSize(), e->shared->serial};
  memset(handle, 0, sizeof(*handle));
  memcpy(handle, &wire, sizeof(wire));
  return CUDA_SUCCESS;
}
CUresult cuIpcOpenEventHandle(CUevent* event, CUipcEventHandle handle) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  WireHandle wire;
  memcpy(&wire, &handle, sizeof(wire));
  if (wire.magic != kEventHandleMagic || wire.size != PageSize()) return CUDA_ERROR_INVALID_HANDLE;
  if (wire.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  void* page = MapPeerFile(wire.pid, wire.fd, PageSize());
  if (page == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* shared = static_cast<SharedEvent*>(page);
  if (shared->magic != kEventHandleMagic || shared->serial != wire.serial ||
      !shared->importers.Add(getpid())) {
    munmap(page, PageSize());
    return CUDA_ERROR_INVALID_HANDLE;
  }
  auto* e = new FakeEvent{};
  e->shared = shared;
  e->imported = true;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    ++g_opened_events;
  }
  *event = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}
CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  uint32_t magic;
  memcpy(&magic, image, 4);
  if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE;
  if (reinterpret_cast<uintptr_t>(image) % 8) return CUDA_ERROR_INVALID_IMAGE;
  *module = reinterpret_cast<CUmodule>(new FakeModule{});
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* function, CUmodule, const char* name) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  Kernel k;
  if (!strcmp(name, "ferry_fill_sequence"))
    k = kFill;
  else if (!strcmp(name, "ferry_sum"))
    k = kSum;
  else if (!strcmp(name, "ferry_sum_bytes"))
    k = kSumBytes;
  else if (!strcmp(name, "ferry_delay"))
    k = kDelay;
  else
    return CUDA_ERROR_NOT_FOUND;
  static FakeFunction functions[5] = {{kFill}, {kFill}, {kSum}, {kSumBytes}, {kDelay}};
  *function = reinterpret_cast<CUfunction>(&functions[k]);
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule module) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  delete reinterpret_cast<FakeModule*>(module);
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void** params, void** extra) {
  if (!HaveContext()) return CUDA_ERROR_INVALID_CONTEXT;
  if (Env("FAKE_CUDA_LAUNCH_ERROR", 0))
    return static_cast<CUresult>(Env("FAKE_CUDA_LAUNCH_ERROR", 0));
  if (gx == 0 || gx > 2147483647u || gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 ||
      bx > 1024 || extra != nullptr || stream == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  auto* s = reinterpret_cast<FakeStream*>(stream);
  switch (reinterpret_cast<FakeFunction*>(f)->kernel) {
    case kFill: {
      auto* dst = reinterpret_cast<long long*>(*static_cast<CUdeviceptr*>(params[0]));
      long long n = *static_cast<long long*>(params[1]);
      long long start = *static_cast<long long*>(params[2]);
      for (long long i = 0; i < n; ++i) dst[i] = start + i;
      break;
    }
    case kSum:
    case kSumBytes: {
      if (bx != 256) return CUDA_ERROR_INVALID_VALUE;
      auto src = *static_cast<CUdeviceptr*>(params[0]);
      long long n = *static_cast<long long*>(params[1]);
      auto* out = reinterpret_cast<unsigned long long*>(*static_cast<CUdeviceptr*>(params[2]));
      unsigned long long total = 0;
      for (long long i = 0; i < n; ++i) {
        total += reinterpret_cast<FakeFunction*>(f)->kernel == kSum
                     ? static_cast<unsigned long long>(reinterpret_cast<long long*>(src)[i])
                     : reinterpret_cast<unsigned char*>(src)[i];
      }
      *out += total;
      break;
    }
    case kDelay: {
      if (gx != 1 || bx != 1) return CUDA_ERROR_INVALID_VALUE;
      auto ns = *static_cast<unsigned long long*>(params[0]);
      long long cycles = *static_cast<long long*>(params[1]);
      if (cycles <= 0) return CUDA_ERROR_INVALID_VALUE;
      s->busy_until = std::max(s->busy_until, Clock::now()) + std::chrono::nanoseconds(ns);
      break;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
