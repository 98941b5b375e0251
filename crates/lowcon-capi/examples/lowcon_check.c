/*
 * lowcon_check.c: lowcon's C API checked from C (and, compiled with -x c++, from C++).
 * One rank of a job started by `lowcon launch` (or by hand, with the torchrun
 * environment and LOWCON_STORE_ADDR):
 *
 *     lowcon_check host|gpu [dead]
 *
 * Without "dead": bad-input codes and messages, then all-gather and reduce-scatter on
 * fresh pseudo-random data against a CPU reference, with outputs poisoned before each
 * call: every algorithm, plain and symmetric (lowconMemAlloc) buffers, odd counts,
 * in-place all-gather. Tolerance: exact for all-gather, for sum/min/max over small
 * integers (exact in f32 and bf16), and 1e-6 relative for avg. The bf16 wire: f32 over
 * bf16 bit for bit against the plain f32 call, bf16 data into an f32 output, their
 * refusals, the counters, and the options struct's ABI (an older, smaller struct keeps
 * working; an unfilled or newer one is refused).
 * With "dead": the last rank SIGKILLs itself; the others must get lowconRemoteError
 * naming it, from a call or from lowconCommGetAsyncError. Run it without a launcher
 * (a launcher stops the job when a rank dies).
 *
 * Build for the GPU backend with -DLOWCON_EXAMPLE_CUDA and the CUDA runtime (the
 * header itself needs no CUDA).
 */
#include "lowcon.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef LOWCON_EXAMPLE_CUDA
#include <cuda_runtime.h>
#endif

static int g_rank = -1, g_world = 0, g_gpu = 0, g_checks = 0, g_failures = 0;
static int g_arrival = lowconArrivalAuto; /* the all-gathers' arrival (check_all_gather) */
static void *g_stream = NULL;

#define CHECK(cond, ...)                                                             \
  do {                                                                               \
    g_checks++;                                                                      \
    if (!(cond)) {                                                                   \
      g_failures++;                                                                  \
      fprintf(stderr, "rank %d: FAILED at %s:%d: ", g_rank, __FILE__, __LINE__);     \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fprintf(stderr, "\n");                                                         \
    }                                                                                \
  } while (0)

#define LC(call)                                                                     \
  do {                                                                               \
    lowconResult_t r_ = (call);                                                      \
    if (r_ != lowconSuccess) {                                                       \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call,                 \
              lowconGetErrorString(r_), lowconGetLastError(NULL));                   \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

#ifdef LOWCON_EXAMPLE_CUDA
#define CU(call)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "rank %d: %s failed: %s\n", g_rank, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
#endif

/* Memory on the backend's side: device memory (GPU) or host memory (host). */
static void *plain_alloc(size_t bytes) {
#ifdef LOWCON_EXAMPLE_CUDA
  if (g_gpu) {
    void *p = NULL;
    CU(cudaMalloc(&p, bytes));
    return p;
  }
#endif
  return malloc(bytes);
}

static void plain_free(void *p) {
#ifdef LOWCON_EXAMPLE_CUDA
  if (g_gpu) {
    CU(cudaFree(p));
    return;
  }
#endif
  free(p);
}

static void put(void *dst, const void *src, size_t bytes) {
#ifdef LOWCON_EXAMPLE_CUDA
  if (g_gpu) {
    CU(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    CU(cudaDeviceSynchronize());
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

static void poison(void *dst, size_t bytes) {
#ifdef LOWCON_EXAMPLE_CUDA
  if (g_gpu) {
    CU(cudaMemset(dst, 0xFF, bytes));
    CU(cudaDeviceSynchronize());
    return;
  }
#endif
  memset(dst, 0xFF, bytes);
}

static void get(void *dst, const void *src, size_t bytes, lowconComm_t comm) {
  LC(lowconStreamSynchronize(comm, g_stream));
#ifdef LOWCON_EXAMPLE_CUDA
  if (g_gpu) {
    CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return;
  }
#endif
  (void)comm;
  memcpy(dst, src, bytes);
}

/* Element i of rank p's data for test `seed`: odd integers in [-m, m]. */
static int value(unsigned seed, int p, size_t i, int m) {
  uint64_t h = (uint64_t)seed * 0x9E3779B97F4A7C15ull + (uint64_t)p * 0xBF58476D1CE4E5B9ull + (uint64_t)i * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return (int)(h % (uint64_t)(m + 1)) * 2 - m;
}

static size_t dsize(lowconDataType_t d) {
  return d == lowconInt64 ? 8 : d == lowconFloat32 || d == lowconInt32 ? 4 : d == lowconUint8 ? 1 : 2;
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16); /* exact for the small integers used here */
}

static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Writes element i of rank p's input, as dtype d, into host buffer `b`. */
static void store_elem(void *b, lowconDataType_t d, size_t i, int v) {
  if (d == lowconFloat32) ((float *)b)[i] = (float)v;
  else if (d == lowconInt32) ((int32_t *)b)[i] = v * 65537;
  else if (d == lowconUint8) ((uint8_t *)b)[i] = (uint8_t)(v & 0xFF);
  else ((uint16_t *)b)[i] = to_bf16((float)v);
}

static double load_elem(const void *b, lowconDataType_t d, size_t i) {
  if (d == lowconFloat32) return ((const float *)b)[i];
  if (d == lowconInt32) return ((const int32_t *)b)[i];
  if (d == lowconUint8) return ((const uint8_t *)b)[i];
  return from_bf16(((const uint16_t *)b)[i]);
}

static const char *dname(lowconDataType_t d) {
  return d == lowconFloat32 ? "f32" : d == lowconInt32 ? "i32" : d == lowconUint8 ? "u8" : d == lowconInt64 ? "i64" : "bf16";
}

/* Poisons `out`, uploads `host_in` into `in`, runs one reduce-scatter of `n` elements per
 * rank with `algo` and `sync`, and downloads the result into `host_out`. */
static void reduce_scatter_once(lowconComm_t comm, void *in, void *out, const void *host_in, size_t in_bytes,
                                void *host_out, size_t n, lowconDataType_t d, lowconRedOp_t op, const char *algo,
                                int sync) {
  size_t es = dsize(d);
  poison(out, n * es);
  put(in, host_in, in_bytes);
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  o.algorithm = algo;
  o.sync = sync;
  LC(lowconReduceScatterEx(in, out, n, d, op, comm, g_stream, &o));
  get(host_out, out, n * es, comm);
}

/* Element i of rank p's integer input: spread over the type's range, so that sums wrap. */
static int64_t int_value(unsigned seed, int p, size_t i, lowconDataType_t d) {
  int64_t v = value(seed, p, i, 95);
  return d == lowconInt64 ? v * 0x0123456789ABLL : d == lowconInt32 ? v * 22605091 : (int64_t)(uint8_t)(v * 37);
}

/* The same as the type stores it (the reference wraps as the type does). */
static int64_t int_wrap(int64_t v, lowconDataType_t d) {
  return d == lowconInt32 ? (int64_t)(int32_t)(uint32_t)v : d == lowconUint8 ? (int64_t)(uint8_t)v : v;
}

/* An integer reduce-scatter (sum wraps, min, max), exact against the reference. */
static void check_int_reduce_scatter(lowconComm_t comm, unsigned seed, lowconDataType_t d, lowconRedOp_t op,
                                     size_t n, const char *algo, int sync) {
  size_t es = dsize(d), in_bytes = n * es * (size_t)g_world;
  unsigned char *host_in = (unsigned char *)malloc(in_bytes), *host_out = (unsigned char *)malloc(n * es);
  for (size_t i = 0; i < (size_t)g_world * n; i++) {
    int64_t v = int_value(seed, g_rank, i, d);
    memcpy(host_in + i * es, &v, es); /* little-endian: the low bytes */
  }
  void *in = plain_alloc(in_bytes), *out = plain_alloc(n * es);
  reduce_scatter_once(comm, in, out, host_in, in_bytes, host_out, n, d, op, algo, sync);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = (size_t)g_rank * n + i;
    int64_t acc = int_value(seed, 0, k, d);
    for (int p = 1; p < g_world; p++) {
      int64_t x = int_value(seed, p, k, d);
      acc = op == lowconMin ? (x < acc ? x : acc) : op == lowconMax ? (x > acc ? x : acc) : int_wrap((int64_t)((uint64_t)acc + (uint64_t)x), d);
    }
    int64_t got = 0;
    memcpy(&got, host_out + i * es, es);
    wrong += int_wrap(got, d) != int_wrap(acc, d);
  }
  CHECK(wrong == 0, "reduce-scatter %s op=%d n=%zu %s sync=%d: %zu wrong", dname(d), op, n, algo ? algo : "auto",
        sync, wrong);
  plain_free(in);
  plain_free(out);
  free(host_in);
  free(host_out);
}

/* One all-gather of `n` elements: symmetric (lowconMemAlloc) or plain buffers, in place
 * or not, checked against the reference. */
static void check_all_gather(lowconComm_t comm, unsigned seed, lowconDataType_t d, size_t n,
                             const char *algo, int sync, int symmetric, int in_place) {
  size_t es = dsize(d), out_bytes = n * es * (size_t)g_world;
  unsigned char *host_in = (unsigned char *)malloc(n * es);
  unsigned char *host_out = (unsigned char *)malloc(out_bytes);
  unsigned char *expect = (unsigned char *)malloc(out_bytes);
  for (size_t i = 0; i < n; i++) store_elem(host_in, d, i, value(seed, g_rank, i, 95));
  for (int p = 0; p < g_world; p++)
    for (size_t i = 0; i < n; i++) store_elem(expect, d, (size_t)p * n + i, value(seed, p, i, 95));
  void *in = NULL, *out = NULL;
  if (symmetric) {
    LC(lowconMemAlloc(comm, out_bytes, &out));
    in = in_place ? (void *)((unsigned char *)out + (size_t)g_rank * n * es) : NULL;
    if (!in_place) LC(lowconMemAlloc(comm, n * es, &in));
  } else {
    out = plain_alloc(out_bytes);
    in = in_place ? (void *)((unsigned char *)out + (size_t)g_rank * n * es) : plain_alloc(n * es);
  }
  poison(out, out_bytes);
  put(in, host_in, n * es);
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  o.algorithm = algo;
  o.sync = sync;
  o.arrival = g_arrival;
  LC(lowconAllGatherEx(in, out, n, d, comm, g_stream, &o));
  get(host_out, out, out_bytes, comm);
  size_t wrong = 0, first = 0;
  for (size_t k = 0; k < (size_t)g_world * n; k++)
    if (memcmp(host_out + k * es, expect + k * es, es) != 0 && wrong++ == 0) first = k;
  CHECK(wrong == 0, "all-gather %s n=%zu %s sync=%d arrival=%d sym=%d in_place=%d: %zu wrong, first at %zu", dname(d),
        n, algo ? algo : "auto", sync, g_arrival, symmetric, in_place, wrong, first);
  if (symmetric) {
    if (!in_place) LC(lowconMemFree(comm, in));
    LC(lowconMemFree(comm, out));
  } else {
    if (!in_place) plain_free(in);
    plain_free(out);
  }
  free(host_in);
  free(host_out);
  free(expect);
}

static void check_reduce_scatter(lowconComm_t comm, unsigned seed, lowconDataType_t d, lowconRedOp_t op, size_t n,
                                 const char *algo, int sync, int symmetric) {
  size_t es = dsize(d), in_bytes = n * es * (size_t)g_world;
  int m = d == lowconBfloat16 ? 15 : 95; /* sums of these stay exact in bf16 / f32 */
  unsigned char *host_in = (unsigned char *)malloc(in_bytes);
  unsigned char *host_out = (unsigned char *)malloc(n * es);
  for (size_t i = 0; i < (size_t)g_world * n; i++) store_elem(host_in, d, i, value(seed, g_rank, i, m));
  void *in = NULL, *out = plain_alloc(n * es);
  if (symmetric) LC(lowconMemAlloc(comm, in_bytes, &in));
  else in = plain_alloc(in_bytes);
  reduce_scatter_once(comm, in, out, host_in, in_bytes, host_out, n, d, op, algo, sync);
  size_t wrong = 0;
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = (size_t)g_rank * n + i;
    float acc = (float)value(seed, 0, k, m);
    for (int p = 1; p < g_world; p++) {
      float x = (float)value(seed, p, k, m);
      acc = op == lowconMin ? (x < acc ? x : acc) : op == lowconMax ? (x > acc ? x : acc) : acc + x;
    }
    if (op == lowconAvg) acc /= (float)g_world;
    double want = d == lowconBfloat16 ? from_bf16(to_bf16(acc)) : acc;
    double got = load_elem(host_out, d, i);
    double tol = op == lowconAvg ? 1e-6 * (want < 0 ? -want : want) + (d == lowconBfloat16 ? 0.125 : 1e-6) : 0;
    double err = got > want ? got - want : want - got;
    if (!(err <= tol)) wrong++;
    if (err > worst || got != got) worst = got != got ? 1e30 : err;
  }
  CHECK(wrong == 0, "reduce-scatter %s op=%d n=%zu %s sync=%d sym=%d: %zu wrong (worst error %g)", dname(d), op, n,
        algo ? algo : "auto", sync, symmetric, wrong, worst);
  if (symmetric) LC(lowconMemFree(comm, in));
  else plain_free(in);
  plain_free(out);
  free(host_in);
  free(host_out);
}

/* Expects `r` to be `want` with a last-error message containing `needle`, which does not
 * repeat the code's name (a program prints lowconGetErrorString, then the message) and,
 * for a call on a live communicator, begins with "rank N: ". */
static void expect_code(const char *what, lowconResult_t r, lowconResult_t want, const char *needle) {
  const char *msg = lowconGetLastError(NULL);
  const char *name = lowconGetErrorString(want);
  char ranked[32];
  snprintf(ranked, sizeof ranked, "rank %d: ", g_rank);
  CHECK(r == want, "%s: got %s, expected %s (%s)", what, lowconGetErrorString(r), name, msg);
  CHECK(needle == NULL || strstr(msg, needle) != NULL, "%s: message \"%s\" does not mention \"%s\"", what, msg, needle);
  CHECK(strncmp(msg, name, strlen(name)) != 0, "%s: message \"%s\" repeats the code's name", what, msg);
  CHECK(strstr(what, "comm") != NULL || strncmp(msg, ranked, strlen(ranked)) == 0,
        "%s: message \"%s\" does not begin with \"%s\"", what, msg, ranked);
}

static void check_bad_input(lowconComm_t comm) {
  char rank_s[32];
  snprintf(rank_s, sizeof rank_s, "rank %d", g_rank);
  void *a = plain_alloc(64 * (size_t)g_world), *b = plain_alloc(64 * (size_t)g_world);
  expect_code("NULL sendbuff", lowconAllGather(NULL, b, 4, lowconFloat32, comm, g_stream), lowconInvalidArgument,
              "sendbuff is NULL");
  expect_code("NULL recvbuff", lowconReduceScatter(a, NULL, 4, lowconFloat32, lowconSum, comm, g_stream),
              lowconInvalidArgument, "recvbuff is NULL");
  expect_code("datatype 99", lowconAllGather(a, b, 4, 99, comm, g_stream), lowconInvalidArgument, "datatype 99");
  expect_code("op 7", lowconReduceScatter(a, b, 4, lowconFloat32, 7, comm, g_stream), lowconInvalidArgument, "op 7");
  expect_code("i32 avg reduce-scatter", lowconReduceScatter(a, b, 4, lowconInt32, lowconAvg, comm, g_stream),
              lowconInvalidArgument, "reduce-scatter of i32 with avg");
  expect_code("foreign comm", lowconAllGather(a, b, 4, lowconFloat32, (lowconComm_t)(uintptr_t)0x1234, g_stream),
              lowconInvalidArgument, "not a live lowcon communicator");
  expect_code("NULL comm", lowconAllGather(a, b, 4, lowconFloat32, NULL, g_stream), lowconInvalidArgument,
              "comm is NULL");
  expect_code("NULL count", lowconCommCount(comm, NULL), lowconInvalidArgument, "count is NULL");
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  o.channel = 99;
  expect_code("channel 99", lowconAllGatherEx(a, b, 4, lowconFloat32, comm, g_stream, &o), lowconInvalidArgument,
              "channel 99: groups have channels 0 to 15");
  LC(lowconCollOptionsInit(&o));
  o.algorithm = "ring";
  expect_code("algorithm ring", lowconAllGatherEx(a, b, 4, lowconFloat32, comm, g_stream, &o),
              lowconInvalidArgument, "ring");
  LC(lowconCollOptionsInit(&o));
  o.arrival = 9;
  expect_code("arrival 9", lowconAllGatherEx(a, b, 4, lowconFloat32, comm, g_stream, &o), lowconInvalidArgument,
              "arrival 9: expected lowconArrivalAuto (0)");
  LC(lowconCollOptionsInit(&o));
  o.sync = 5;
  expect_code("sync 5", lowconReduceScatterEx(a, b, 4, lowconFloat32, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "sync 5");
  LC(lowconCollOptionsInit(&o));
  o.algorithm = "tma-reduce";
  expect_code("i64 tma-reduce", lowconReduceScatterEx(a, b, 4, lowconInt64, lowconMax, comm, g_stream, &o),
              lowconInvalidArgument, "integers reduce with ce-reduce or sm-direct");
  expect_code("free of a foreign pointer", lowconMemFree(comm, a), lowconInvalidArgument, rank_s);
  expect_code("destroy of a foreign comm", lowconCommDestroy((lowconComm_t)(uintptr_t)0x1c00001), lowconInvalidArgument,
              "not a live");
  for (int r = 0; r <= 6; r++) CHECK(lowconGetErrorString((lowconResult_t)r) != NULL, "no string for code %d", r);
  plain_free(a);
  plain_free(b);
}

/* The bf16 wire's checks (check_wire_f32, check_wire_bf16_in, check_wire_refusals) and
 * check_reduce_launch: a file of their own beside this one, using the helpers above. */
#include "lowcon_check_wire.h"

/* An environment variable as a non-negative number, or `dflt`. */
#ifdef LOWCON_EXAMPLE_CUDA
/* CUDA graphs: an all-gather and a reduce-scatter (plain memory, staged) captured with
 * cudaStreamBeginCapture on channel 2, replayed 50 times with fresh data, each replay
 * registered with lowconCommTrackReplay and checked; before that, a capture on a channel
 * with no reserved workspace is refused with a message saying what to reserve. */
static void check_graph(lowconComm_t comm, int sync, unsigned seed) {
  cudaStream_t s = (cudaStream_t)g_stream;
  const size_t n = 4099;
  size_t ag_out = n * 4 * (size_t)g_world, rs_in = n * 4 * (size_t)g_world;
  float *ag_in = (float *)plain_alloc(n * 4), *ag_o = (float *)plain_alloc(ag_out);
  float *rs_i = (float *)plain_alloc(rs_in), *rs_o = (float *)plain_alloc(n * 4);
  float *h = (float *)malloc(rs_in), *got = (float *)malloc(ag_out);
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  o.sync = sync;
  o.algorithm = "ce-pull";
  o.channel = 13 + sync; /* nothing reserved there */
  cudaGraph_t graph;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  lowconResult_t r = lowconAllGatherEx(ag_in, ag_o, n, lowconFloat32, comm, g_stream, &o);
  expect_code("a captured call without a reserved workspace", r, lowconInvalidArgument, "reserve_workspace");
  CU(cudaStreamEndCapture(s, &graph)); /* still valid: it ends with an empty graph */
  CU(cudaGraphDestroy(graph));
  LC(lowconCommReserveWorkspace(comm, 2, 16 << 20));
  o.channel = 2;
  CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  LC(lowconAllGatherEx(ag_in, ag_o, n, lowconFloat32, comm, g_stream, &o));
  o.algorithm = "ce-reduce";
  LC(lowconReduceScatterEx(rs_i, rs_o, n, lowconFloat32, lowconSum, comm, g_stream, &o));
  CU(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CU(cudaGraphInstantiate(&exec, graph, 0));
  size_t wrong = 0;
  for (int rep = 0; rep < 50; rep++, seed++) {
    for (size_t i = 0; i < (size_t)g_world * n; i++) h[i] = (float)value(seed, g_rank, i, 95);
    put(ag_in, h, n * 4);
    put(rs_i, h, rs_in);
    poison(ag_o, ag_out);
    poison(rs_o, n * 4);
    CU(cudaGraphLaunch(exec, s));
    LC(lowconCommTrackReplay(comm, g_stream));
    get(got, ag_o, ag_out, comm);
    for (int p = 0; p < g_world; p++)
      for (size_t i = 0; i < n; i++) wrong += got[(size_t)p * n + i] != (float)value(seed, p, i, 95);
    get(got, rs_o, n * 4, comm);
    for (size_t i = 0; i < n; i++) {
      float acc = 0;
      for (int p = 0; p < g_world; p++) acc += (float)value(seed, p, (size_t)g_rank * n + i, 95);
      wrong += got[i] != acc;
    }
  }
  CHECK(wrong == 0, "graph sync=%d: %zu wrong elements over 50 replays", sync, wrong);
  CU(cudaGraphExecDestroy(exec));
  CU(cudaGraphDestroy(graph));
  plain_free(ag_in);
  plain_free(ag_o);
  plain_free(rs_i);
  plain_free(rs_o);
  free(h);
  free(got);
}
#endif

#include "lowcon_check_pieces.h"

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : dflt;
}

/* The dead-peer run. LOWCON_CHECK_DEAD_ELEMS (float32 elements per rank, default 4096),
 * LOWCON_CHECK_DEAD_SYNC_EVERY (synchronise after every N calls, default 100; 0: never,
 * so calls pile up in the stream's queue) and LOWCON_CHECK_DEAD_EXIT ("sigkill", the
 * default, or "exit": _exit(0), a clean exit that no launcher sees as a failure). */
static int dead_peer(lowconComm_t comm) {
  int victim = g_world - 1;
  size_t n = (size_t)env_long("LOWCON_CHECK_DEAD_ELEMS", 4096);
  long sync_every = env_long("LOWCON_CHECK_DEAD_SYNC_EVERY", 100);
  const char *how = getenv("LOWCON_CHECK_DEAD_EXIT");
  float *in = (float *)plain_alloc(n * sizeof(float)), *out = (float *)plain_alloc(n * sizeof(float) * (size_t)g_world);
  LC(lowconAllGather(in, out, n, lowconFloat32, comm, g_stream));
  LC(lowconStreamSynchronize(comm, g_stream));
  if (g_rank == victim) {
    if (how && strcmp(how, "exit") == 0) _exit(0);
    raise(SIGKILL); /* like a crash: no goodbye */
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  lowconResult_t r = lowconSuccess;
  long i = 0;
  for (; i < 1000000 && r == lowconSuccess; i++) {
    r = lowconAllGather(in, out, n, lowconFloat32, comm, g_stream);
    if (r == lowconSuccess && sync_every > 0 && i % sync_every == sync_every - 1)
      r = lowconStreamSynchronize(comm, g_stream);
  }
  if (r == lowconSuccess) r = lowconStreamSynchronize(comm, g_stream);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  char needle[64];
  snprintf(needle, sizeof needle, "peer rank %d", victim);
  expect_code("a call after the peer died", r, lowconRemoteError, needle);
  lowconResult_t async = lowconSuccess;
  LC(lowconCommGetAsyncError(comm, &async));
  expect_code("lowconCommGetAsyncError", async, lowconRemoteError, needle);
  printf("rank %d: capi dead-peer ok: call %ld failed after %.0f ms: %s\n", g_rank, i, ms, lowconGetLastError(NULL));
  /* The survivors shrink the communicator (the victim was the last rank: the others keep
   * their numbers) and go on with checked collectives. */
  lowconComm_t small = NULL;
  int old_rank = g_rank, old_world = g_world;
  LC(lowconCommShrink(comm, &small));
  LC(lowconCommDestroy(comm));
  LC(lowconCommUserRank(small, &g_rank));
  LC(lowconCommCount(small, &g_world));
  CHECK(g_world == old_world - 1 && g_rank == old_rank, "after the shrink: rank %d of %d", g_rank, g_world);
  check_all_gather(small, 77, lowconFloat32, 1001, NULL, 0, 0, 0);
  check_int_reduce_scatter(small, 78, lowconInt32, lowconSum, 257, NULL, 0);
  printf("rank %d: capi shrink ok: rank %d of %d, collectives checked\n", old_rank, g_rank, g_world);
  LC(lowconCommDestroy(small));
  return g_failures == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "host") != 0 && strcmp(argv[1], "gpu") != 0)) {
    fprintf(stderr, "usage: %s host|gpu [dead]\n", argv[0]);
    return 2;
  }
  g_gpu = strcmp(argv[1], "gpu") == 0;
  int dead = argc > 2 && strcmp(argv[2], "dead") == 0;
  int version = 0;
  LC(lowconGetVersion(&version));
  lowconComm_t comm = NULL;
  LC(lowconCommInitFromEnv(&comm, g_gpu ? lowconBackendGpu : lowconBackendHost));
  LC(lowconCommUserRank(comm, &g_rank));
  LC(lowconCommCount(comm, &g_world));
#ifdef LOWCON_EXAMPLE_CUDA
  if (g_gpu) {
    int dev = -1;
    LC(lowconCommCuDevice(comm, &dev));
    CU(cudaSetDevice(dev));
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g_stream = (void *)s;
  }
#else
  if (g_gpu) {
    fprintf(stderr, "rank %d: built without LOWCON_EXAMPLE_CUDA: the gpu mode needs the CUDA runtime\n", g_rank);
    return 2;
  }
#endif
  if (dead) return dead_peer(comm);

  check_bad_input(comm);
  const size_t counts[] = {1, 1023, 70001};
  const char *ag_algos[] = {NULL, "ce-pull", "ce-push", "sm-oneshot"};
  const char *rs_algos[] = {NULL, "ce-reduce", "sm-direct", "tma-reduce"};
  const lowconDataType_t ag_types[] = {lowconFloat32, lowconInt32, lowconUint8, lowconBfloat16};
  unsigned seed = 1;
  for (int sync = 0; sync < (g_gpu ? 2 : 1); sync++) {
    for (size_t c = 0; c < 3; c++) {
      for (int a = 0; a < 4; a++) {
        check_all_gather(comm, seed++, ag_types[(c + (size_t)a) % 4], counts[c], ag_algos[a], sync, 0, 0);
        check_all_gather(comm, seed++, lowconFloat32, counts[c], ag_algos[a], sync, 1, 0);
        check_all_gather(comm, seed++, lowconBfloat16, counts[c], ag_algos[a], sync, 1, 1);
      }
      const char *int_algos[] = {NULL, "ce-reduce", "sm-direct"};
      const lowconDataType_t int_types[] = {lowconInt32, lowconInt64, lowconUint8};
      const lowconRedOp_t int_ops[] = {lowconSum, lowconMin, lowconMax};
      for (int a = 0; a < 3; a++)
        for (int t = 0; t < 3; t++) check_int_reduce_scatter(comm, seed++, int_types[t], int_ops[(a + t) % 3], counts[c], int_algos[a], sync);
      for (int a = 0; a < 4; a++) {
        check_reduce_scatter(comm, seed++, lowconFloat32, lowconSum, counts[c], rs_algos[a], sync, 0);
        check_reduce_scatter(comm, seed++, lowconFloat32, lowconAvg, counts[c], rs_algos[a], sync, 1);
        check_reduce_scatter(comm, seed++, lowconBfloat16, lowconMax, counts[c], rs_algos[a], sync, 1);
        check_reduce_scatter(comm, seed++, lowconBfloat16, lowconSum, counts[c], rs_algos[a], sync, 0);
      }
    }
  }
  /* Arrivals (NOTE [arrival-driven all-gather]): ce-pull waiting for its peers as one
   * barrier, one by one in order, or each on a stream of its own; each checked. The plan
   * says what ran: the host backend keeps a per-peer arrival, kernel sync a barrier. */
  for (g_arrival = lowconArrivalBarrier; g_arrival <= lowconArrivalAnyOrder; g_arrival++)
    for (int sync = 0; sync < (g_gpu ? 2 : 1); sync++)
      for (size_t c = 0; c < 3; c++) {
        check_all_gather(comm, seed++, lowconFloat32, counts[c], "ce-pull", sync, 0, 0);
        check_all_gather(comm, seed++, lowconBfloat16, counts[c], "ce-pull", sync, 1, 1);
      }
  g_arrival = lowconArrivalAuto;
  {
    lowconCollOptions o;
    char plan[512];
    LC(lowconCollOptionsInit(&o));
    o.algorithm = "ce-pull";
    o.sync = lowconSyncKernel;
    o.arrival = lowconArrivalInOrder;
    LC(lowconCommPlan(comm, lowconPlanAllGather, 1 << 20, lowconFloat32, lowconSum, 0, &o, plan, sizeof plan));
    const char *want = g_gpu ? "arrival=barrier" : "arrival=in-order";
    CHECK(strstr(plan, want) != NULL, "lowconCommPlan with arrival in-order: %s (want %s)", plan, want);
  }
  check_wire_refusals(comm);
  for (int sync = 0; sync < (g_gpu ? 2 : 1); sync++)
    for (size_t c = 0; c < 3; c++) {
      check_wire_f32(comm, seed++, counts[c], c == 1 ? lowconAvg : lowconSum, sync, 0);
      check_wire_f32(comm, seed++, counts[c], lowconSum, sync, 1);
      check_wire_bf16_in(comm, seed++, counts[c], sync);
      check_reduce_launch(comm, seed++, counts[c], c == 2 ? lowconBfloat16 : lowconFloat32, sync);
    }
#ifdef LOWCON_EXAMPLE_CUDA
  if (g_gpu)
    for (int sync = 0; sync < 2; sync++) check_graph(comm, sync, seed += 100);
#endif
  check_pieces(comm, seed += 10);
  /* After a failed call the communicator still works: one more checked call. */
  check_all_gather(comm, seed++, lowconFloat32, 5, NULL, 0, 0, 0);
  lowconResult_t async = lowconRemoteError;
  LC(lowconCommGetAsyncError(comm, &async));
  CHECK(async == lowconSuccess, "healthy communicator reports %s", lowconGetErrorString(async));
  LC(lowconCommDestroy(comm));
  expect_code("a destroyed comm", lowconCommCount(comm, &g_world), lowconInvalidArgument, "not a live");
  if (g_failures == 0)
    printf("rank %d: capi-check ok: %d checks (%s backend, %d ranks, lowcon %d)\n", g_rank, g_checks, argv[1], g_world,
           version);
  else
    printf("rank %d: capi-check FAILED: %d of %d checks\n", g_rank, g_failures, g_checks);
  return g_failures == 0 ? 0 : 1;
}
