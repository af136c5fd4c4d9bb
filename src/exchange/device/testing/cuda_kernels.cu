// Test and benchmark kernels for the CUDA backend. Built at compile time with
// nvcc into a fat binary that is embedded in ferry_device_testing and loaded
// with cuModuleLoadData (see cuda_kernels.cc), so nothing here links the CUDA
// runtime. extern "C" keeps the names cuModuleGetFunction looks up plain.
//
// Every kernel uses a grid-stride loop, so any grid size covers any n.

// Must match kThreadsPerBlock in cuda_kernels.cc; a power of two for the
// tree reduction below.
#define FERRY_THREADS_PER_BLOCK 256

extern "C" __global__ void ferry_fill_sequence(long long* dst, long long n, long long start) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = start + i;
  }
}

// Adds the n values at src into *out. Unsigned arithmetic wraps like two's
// complement, so summing int64 values this way gives their int64 sum.
template <typename Value>
__device__ void SumInto(const Value* src, long long n, unsigned long long* out) {
  __shared__ unsigned long long partial[FERRY_THREADS_PER_BLOCK];
  unsigned long long local = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    local += static_cast<unsigned long long>(src[i]);
  }
  partial[threadIdx.x] = local;
  __syncthreads();
  for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}

extern "C" __global__ void ferry_sum(const long long* src, long long n, unsigned long long* out) {
  SumInto(src, n, out);
}

extern "C" __global__ void ferry_sum_bytes(const unsigned char* src, long long n,
                                           unsigned long long* out) {
  SumInto(src, n, out);
}

// Spins one thread for `nanoseconds` of wall-clock time, read from the
// global nanosecond timer (SM clocks change with load, so clock64 alone does
// not measure time). clock64 bounds the spin as well, so the kernel ends even
// if the timer did not advance (as it might under some virtualisation).
extern "C" __global__ void ferry_delay(unsigned long long nanoseconds, long long max_cycles) {
  unsigned long long start_ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start_ns));
  const long long start_cycles = clock64();
  for (;;) {
    unsigned long long now_ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now_ns));
    if (now_ns - start_ns >= nanoseconds) break;
    if (clock64() - start_cycles >= max_cycles) break;
  }
}
