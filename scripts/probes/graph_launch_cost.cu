// What does one cudaGraphLaunch cost the host, by what the graph holds? The wire's
// reduce-scatter launched as one graph (NOTE [wire replays]) cost the host 40-108 µs a
// launch inside FSDP2 (4x H200, 2026-11-27), far more than the fraction of a microsecond
// a kernel node is said to cost. Each case below is captured from streams, as lowcon
// captures (fork and join by events, a side stream of higher priority), instantiated,
// uploaded, launched 10 times, then launched `CALLS` times, each launch timed on the
// host, the stream synchronised every 4 launches outside the timed calls. Median and
// p90 µs per launch, and the same work enqueued eagerly for comparison.
// Build: nvcc -O2 -o graph_launch_cost graph_launch_cost.cu -lcuda
// Run:   ./graph_launch_cost [peer-device]   (a second device gives the peer copies;
//        PROBE_COLD=1: the host's caches flushed before every timed call)
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(ck_)); exit(1); } } while (0)
#define DK(x) do { CUresult dk_ = (x); if (dk_ != CUDA_SUCCESS) { const char *s_; cuGetErrorString(dk_, &s_); printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); exit(1); } } while (0)

// About the size of lowcon's WireReduceArgs.
struct Args { unsigned long long w[20]; };

__global__ void work(Args a) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && a.w[0] == 12345) *(int *)a.w[1] = 1;
}
__global__ void wait_kernel(volatile unsigned *flag, unsigned v) {
  if (threadIdx.x == 0) while (*flag < v) { }
}

static const int CALLS = 200;
static cudaStream_t s_main, s_pack, s_copy;
static cudaEvent_t ev[256];
static unsigned *flag;  // device word, 0: every wait on >= 0 is met
static void *bufs[2], *peer;
static size_t copy_bytes = 1 << 16;

static void kern(cudaStream_t s, int ctas = 64) {
  Args a{};
  a.w[0] = 1;
  work<<<ctas, 512, 0, s>>>(a);
  CK(cudaGetLastError());
}
static void memop(cudaStream_t s) { DK(cuStreamWaitValue32((CUstream)s, (CUdeviceptr)flag, 0, CU_STREAM_WAIT_VALUE_GEQ)); }
static void kwait(cudaStream_t s) { wait_kernel<<<1, 32, 0, s>>>(flag, 0); CK(cudaGetLastError()); }

// The wire read directly (sm-direct, as at 4 ranks): pack stream packs every piece (the
// pieces past the ring wait for a "read" word first), the caller's stream waits for each
// piece and reduces it; join; exit barrier (a wait).
static void wire_like(int pieces, bool memops) {
  auto w = [&](cudaStream_t s) { memops ? memop(s) : kwait(s); };
  CK(cudaEventRecord(ev[0], s_main));
  CK(cudaStreamWaitEvent(s_pack, ev[0], 0));
  for (int i = 0; i < pieces; i++) {
    if (i >= 3) w(s_pack);
    kern(s_pack);
  }
  CK(cudaEventRecord(ev[1], s_pack));
  for (int i = 0; i < pieces; i++) {
    w(s_main);
    kern(s_main);
  }
  CK(cudaStreamWaitEvent(s_main, ev[1], 0));
  w(s_main);
  kern(s_main, 1);  // the exit's signal
}

// ce-reduce as at 2 ranks: per piece, the copy stream waits for the peer's signal,
// copies, records; the caller waits for it and reduces; the pack stream packs.
static void ce_like(int pieces, bool memops) {
  CK(cudaEventRecord(ev[0], s_main));
  CK(cudaStreamWaitEvent(s_pack, ev[0], 0));
  CK(cudaStreamWaitEvent(s_copy, ev[0], 0));
  for (int i = 0; i < pieces; i++) kern(s_pack);
  CK(cudaEventRecord(ev[1], s_pack));
  for (int i = 0; i < pieces; i++) {
    if (i >= 2) CK(cudaStreamWaitEvent(s_copy, ev[2 + 2 * (i - 2) + 1], 0));
    memops ? memop(s_copy) : kwait(s_copy);
    CK(cudaMemcpyAsync(bufs[1], peer ? peer : bufs[0], copy_bytes, cudaMemcpyDefault, s_copy));
    CK(cudaEventRecord(ev[2 + 2 * i], s_copy));
    CK(cudaStreamWaitEvent(s_main, ev[2 + 2 * i], 0));
    kern(s_main);
    CK(cudaEventRecord(ev[2 + 2 * i + 1], s_main));
  }
  CK(cudaStreamWaitEvent(s_main, ev[1], 0));
  memops ? memop(s_main) : kwait(s_main);
  kern(s_main, 1);
}

struct Case { std::string name; std::function<void()> enqueue; };

static void stats(std::vector<double> &us, double *med, double *p90) {
  std::sort(us.begin(), us.end());
  *med = us[us.size() / 2];
  *p90 = us[us.size() * 9 / 10];
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Cold: before each timed call the host walks 64 MiB (outside the timing), so the
// driver's structures are out of the caches, as between FSDP2's hook calls.
static bool cold = false;
static std::vector<char> thrash;
static void evict() {
  if (!cold) return;
  if (thrash.empty()) thrash.assign(64 << 20, 1);
  volatile char sink = 0;
  for (size_t i = 0; i < thrash.size(); i += 64) { thrash[i] += 1; sink += thrash[i]; }
}

static void run(const Case &c, unsigned long long flags) {
  // Eager: the enqueue sequence itself, timed as a whole.
  std::vector<double> eager;
  for (int i = 0; i < CALLS; i++) {
    if (i % 4 == 0) CK(cudaDeviceSynchronize());
    evict();
    double t0 = now_us();
    c.enqueue();
    eager.push_back(now_us() - t0);
  }
  CK(cudaDeviceSynchronize());
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s_main, cudaStreamCaptureModeThreadLocal));
  c.enqueue();
  CK(cudaStreamEndCapture(s_main, &g));
  size_t nodes = 0;
  CK(cudaGraphGetNodes(g, nullptr, &nodes));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiateWithFlags(&e, g, flags));
  CK(cudaGraphUpload(e, s_main));
  for (int i = 0; i < 10; i++) CK(cudaGraphLaunch(e, s_main));
  CK(cudaDeviceSynchronize());
  std::vector<double> us;
  for (int i = 0; i < CALLS; i++) {
    if (i % 4 == 0) CK(cudaDeviceSynchronize());
    evict();
    double t0 = now_us();
    CK(cudaGraphLaunch(e, s_main));
    us.push_back(now_us() - t0);
  }
  CK(cudaDeviceSynchronize());
  double m, p, em, ep;
  stats(us, &m, &p);
  stats(eager, &em, &ep);
  printf("%s%-44s flags %llu nodes %3zu  graph launch %7.1f us (p90 %7.1f)  eager %7.1f us (p90 %7.1f)\n", cold ? "cold " : "", c.name.c_str(),
         flags, nodes, m, p, em, ep);
  CK(cudaGraphExecDestroy(e));
  CK(cudaGraphDestroy(g));
}

int main(int argc, char **argv) {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  int lo, hi;
  CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CK(cudaStreamCreateWithFlags(&s_main, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithPriority(&s_pack, cudaStreamNonBlocking, hi));
  CK(cudaStreamCreateWithFlags(&s_copy, cudaStreamNonBlocking));
  for (auto &e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CK(cudaMalloc(&flag, 4));
  CK(cudaMemset(flag, 0, 4));
  CK(cudaMalloc(&bufs[0], copy_bytes));
  CK(cudaMalloc(&bufs[1], copy_bytes));
  if (argc > 1) {
    int p = atoi(argv[1]);
    CK(cudaDeviceEnablePeerAccess(p, 0));
    CK(cudaSetDevice(p));
    CK(cudaMalloc(&peer, copy_bytes));
    CK(cudaSetDevice(0));
  }
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("CUDA_DEVICE_MAX_CONNECTIONS=%s, peer copies: %s\n", conn ? conn : "(unset)", peer ? "yes" : "no (local)");
  std::vector<Case> cases;
  for (int k : {1, 8, 32}) {
    cases.push_back({"kernels x" + std::to_string(k), [k] { for (int i = 0; i < k; i++) kern(s_main); }});
    cases.push_back({"memop waits x" + std::to_string(k), [k] { for (int i = 0; i < k; i++) memop(s_main); }});
    cases.push_back({"wait kernels x" + std::to_string(k), [k] { for (int i = 0; i < k; i++) kwait(s_main); }});
    cases.push_back({"copies x" + std::to_string(k),
                     [k] { for (int i = 0; i < k; i++) CK(cudaMemcpyAsync(bufs[1], peer ? peer : bufs[0], copy_bytes, cudaMemcpyDefault, s_main)); }});
    cases.push_back({"kernels x" + std::to_string(k) + " on 2 streams", [k] {
      CK(cudaEventRecord(ev[0], s_main));
      CK(cudaStreamWaitEvent(s_pack, ev[0], 0));
      for (int i = 0; i < k; i++) kern(i % 2 ? s_pack : s_main);
      CK(cudaEventRecord(ev[1], s_pack));
      CK(cudaStreamWaitEvent(s_main, ev[1], 0));
    }});
  }
  for (int p : {4, 8}) {
    cases.push_back({"wire direct, memop, " + std::to_string(p) + " pieces", [p] { wire_like(p, true); }});
    cases.push_back({"wire direct, wait kernels, " + std::to_string(p) + " pieces", [p] { wire_like(p, false); }});
  }
  for (int p : {2, 6}) {
    cases.push_back({"ce-reduce wire, memop, " + std::to_string(p) + " pieces", [p] { ce_like(p, true); }});
    cases.push_back({"ce-reduce wire, wait kernels, " + std::to_string(p) + " pieces", [p] { ce_like(p, false); }});
  }
  cold = getenv("PROBE_COLD") != nullptr;
  for (auto &c : cases) {
    // Cold: the cases lowcon's graphs are made of, and the plain ones beside.
    bool wanted = c.name == "kernels x32" || c.name == "memop waits x8" || c.name == "copies x8" ||
                  c.name.rfind("wire direct", 0) == 0 || c.name.rfind("ce-reduce wire", 0) == 0;
    if (!cold || wanted) run(c, 0);
  }
  if (cold) {
    printf("done\n");
    return 0;
  }
  // Node priorities honoured (the pack stream's), and a device-side upload per launch.
  for (auto &c : cases)
    if (c.name.rfind("wire", 0) == 0) run(c, cudaGraphInstantiateFlagUseNodePriority);
  printf("done\n");
  return 0;
}
