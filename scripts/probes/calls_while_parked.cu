// Which driver calls wait for the device while a kernel spins? A stream is parked on a
// flag in pinned host memory (a one-thread kernel, as lowcon_wait_word); the main thread
// then times a list of calls; a helper thread releases the flag after 2 s. A call that
// took about 2 s waited for the parked kernel. Each call is timed once with the kernel
// parked and once more after it finished (the reference).
// Build: nvcc -o calls_while_parked calls_while_parked.cu -lcuda -lpthread
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(ck_)); exit(1); } } while (0)
#define DK(x) do { CUresult dk_ = (x); if (dk_ != CUDA_SUCCESS) { const char *s_; cuGetErrorString(dk_, &s_); printf("%s: %s\n", #x, s_); exit(1); } } while (0)

__global__ void park(volatile int *flag) { while (*flag == 0) { } }
__global__ void noop() {}

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main() {
  CK(cudaSetDevice(0));
  int *flag_h, *flag_d;
  CK(cudaHostAlloc(&flag_h, 4, cudaHostAllocMapped));
  CK(cudaHostGetDevicePointer(&flag_d, flag_h, 0));
  cudaStream_t parked, other;
  CK(cudaStreamCreateWithFlags(&parked, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  void *src, *dst;
  CK(cudaMalloc(&src, 8 << 20));
  CK(cudaMalloc(&dst, 8 << 20));
  std::vector<void *> frees;
  std::vector<std::pair<const char *, std::function<void()>>> calls = {
      {"cudaEventCreate", [] { cudaEvent_t e; CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); }},
      {"cudaEventRecord (other stream)", [&] { cudaEvent_t e; CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); CK(cudaEventRecord(e, other)); }},
      {"cudaEventQuery (parked stream's event)", [&] { cudaEvent_t e; CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); CK(cudaEventRecord(e, parked)); cudaEventQuery(e); }},
      {"cudaStreamCreate", [] { cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }},
      {"cudaStreamCreateWithPriority", [] { cudaStream_t s; int lo, hi; CK(cudaDeviceGetStreamPriorityRange(&lo, &hi)); CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi)); }},
      {"cudaMalloc 1 MiB", [&] { void *p; CK(cudaMalloc(&p, 1 << 20)); frees.push_back(p); }},
      {"cudaMalloc 256 MiB", [&] { void *p; CK(cudaMalloc(&p, 256 << 20)); frees.push_back(p); }},
      {"cudaFree (one of the above)", [&] { if (!frees.empty()) { CK(cudaFree(frees.back())); frees.pop_back(); } }},
      {"cudaMemcpyAsync D2D (other stream)", [&] { CK(cudaMemcpyAsync(dst, src, 8 << 20, cudaMemcpyDeviceToDevice, other)); }},
      {"kernel launch (other stream)", [&] { noop<<<1, 1, 0, other>>>(); CK(cudaGetLastError()); }},
      {"cuStreamWaitValue32 enqueue (other stream)", [&] { DK(cuStreamWaitValue32(other, (CUdeviceptr)flag_d, 0, CU_STREAM_WAIT_VALUE_GEQ)); }},
      {"cudaHostAlloc 4 KiB", [] { void *p; CK(cudaHostAlloc(&p, 4096, cudaHostAllocMapped)); }},
      {"cudaMemcpyAsync H2D pageable (other stream)", [&] { static char host[1 << 20]; CK(cudaMemcpyAsync(dst, host, sizeof host, cudaMemcpyHostToDevice, other)); }},
      {"cudaMemcpyAsync D2H pageable (other stream)", [&] { static char host[1 << 20]; CK(cudaMemcpyAsync(host, src, sizeof host, cudaMemcpyDeviceToHost, other)); }},
      {"cudaStreamSynchronize (other stream)", [&] { CK(cudaStreamSynchronize(other)); }},
      {"cudaMemset (legacy stream)", [&] { CK(cudaMemset(dst, 0, 4096)); }},
      {"cudaIpcGetMemHandle", [&] { cudaIpcMemHandle_t h; CK(cudaIpcGetMemHandle(&h, src)); }},
  };
  for (int pass = 0; pass < 2; pass++) {
    *flag_h = 0;
    std::atomic<bool> released{false};
    std::thread helper;
    if (pass == 0) {
      park<<<1, 1, 0, parked>>>(flag_d);
      CK(cudaGetLastError());
      helper = std::thread([&] { std::this_thread::sleep_for(std::chrono::seconds(2)); *(volatile int *)flag_h = 1; released = true; });
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } else {
      *flag_h = 1;
    }
    printf("%s\n", pass == 0 ? "== with a kernel parked (released after 2000 ms)" : "== nothing parked");
    auto t_all = std::chrono::steady_clock::now();
    for (auto &c : calls) {
      auto t0 = std::chrono::steady_clock::now();
      c.second();
      double ms = ms_since(t0);
      printf("  %-48s %9.3f ms%s\n", c.first, ms, (pass == 0 && ms > 1000) ? "   <- waited for the parked kernel" : "");
    }
    printf("  (all calls: %.1f ms after the first)\n", ms_since(t_all));
    if (helper.joinable()) helper.join();
    CK(cudaStreamSynchronize(parked));
    CK(cudaStreamSynchronize(other));
  }
  return 0;
}
