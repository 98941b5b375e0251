// Does cuIpcOpenMemHandle / cuIpcCloseMemHandle wait for the device? One process
// exports allocations; another opens one, parks a stream on a flag in pinned host
// memory (a spinning kernel), then times open and close of a second allocation while
// the stream is parked, and releases it. A call that waits for the device would time
// out (we release the flag after 3 s from a helper thread and report the call's time).
// Build: nvcc -o ipc_close_blocks ipc_close_blocks.cu -lcuda -lpthread
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>
#include <sys/wait.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void park(volatile int *flag) { while (*flag == 0) { } }

int main() {
  int fds[2];
  if (pipe(fds)) return 1;
  pid_t child = fork();
  if (child == 0) {  // exporter
    CK(cudaSetDevice(0));
    void *a, *b;
    CK(cudaMalloc(&a, 64 << 20));
    CK(cudaMalloc(&b, 64 << 20));
    cudaIpcMemHandle_t h[2];
    CK(cudaIpcGetMemHandle(&h[0], a));
    CK(cudaIpcGetMemHandle(&h[1], b));
    if (write(fds[1], h, sizeof h) != sizeof h) return 1;
    sleep(20);
    return 0;
  }
  cudaIpcMemHandle_t h[2];
  if (read(fds[0], h, sizeof h) != sizeof h) return 1;
  CK(cudaSetDevice(0));
  void *pa, *pb;
  CK(cudaIpcOpenMemHandle(&pa, h[0], cudaIpcMemLazyEnablePeerAccess));
  int *flag;
  CK(cudaHostAlloc((void **)&flag, 4, cudaHostAllocMapped));
  *flag = 0;
  int *dflag;
  CK(cudaHostGetDevicePointer((void **)&dflag, flag, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  park<<<1, 1, 0, s>>>(dflag);
  CK(cudaGetLastError());
  std::thread release([&] { std::this_thread::sleep_for(std::chrono::seconds(3)); *(volatile int *)flag = 1; });
  auto t0 = std::chrono::steady_clock::now();
  cudaError_t eo = cudaIpcOpenMemHandle(&pb, h[1], cudaIpcMemLazyEnablePeerAccess);
  auto t1 = std::chrono::steady_clock::now();
  cudaError_t ec = cudaIpcCloseMemHandle(pa);
  auto t2 = std::chrono::steady_clock::now();
  bool parked_after = (*(volatile int *)flag == 0);
  printf("open while parked: %s in %.1f ms; close while parked: %s in %.1f ms; stream still parked after both: %s\n",
         cudaGetErrorString(eo), std::chrono::duration<double, std::milli>(t1 - t0).count(), cudaGetErrorString(ec),
         std::chrono::duration<double, std::milli>(t2 - t1).count(), parked_after ? "yes (neither waited)" : "no (one waited for the device)");
  release.join();
  CK(cudaStreamSynchronize(s));
  kill(child, SIGTERM);
  waitpid(child, nullptr, 0);
  return 0;
}
