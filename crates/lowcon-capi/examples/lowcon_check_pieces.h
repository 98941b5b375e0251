/*
 * lowcon_check_pieces.h: the per-piece signals' part of lowcon_check.c, which includes it
 * after its helpers (CHECK, LC, CU, plain_alloc, plain_free, put, get, poison, value,
 * expect_code): all-gather arrivals (lowconArrivalsCreate/Wait/Destroy,
 * lowconAllGatherArrivals) and the released reduce-scatter (lowconReduceScatterReleased).
 * Not a header of the library: part of the example.
 */

/* The per-piece signals. Host backend: both refused, naming the GPU. GPU: a ce-pull
 * all-gather with arrivals, whose pieces a second stream copies out one by one, each
 * after its own wait; a released reduce-scatter whose producer writes each chunk with
 * an asynchronous copy on the call's stream; bad input (ordinary send buffer, NULL
 * producer, a piece out of range). */
struct produce_ctx {
  float *send;
  const float *host;
  size_t n;
};

/* A producer that writes nothing: for the refusals, which come before any call of it. */
static lowconResult_t produce_nothing(int dest, void *user) {
  (void)dest;
  (void)user;
  return lowconSuccess;
}

#ifdef LOWCON_EXAMPLE_CUDA
static lowconResult_t produce_chunk(int dest, void *user) {
  struct produce_ctx *c = (struct produce_ctx *)user;
  cudaError_t e = cudaMemcpyAsync(c->send + (size_t)dest * c->n, c->host + (size_t)dest * c->n, c->n * sizeof(float),
                                  cudaMemcpyHostToDevice, (cudaStream_t)g_stream);
  return e == cudaSuccess ? lowconSuccess : lowconUnhandledCudaError;
}
#endif

static void check_pieces(lowconComm_t comm, unsigned seed) {
  lowconArrivals_t arr = NULL;
  (void)seed;
  if (!g_gpu) {
    expect_code("arrivals on the host backend", lowconArrivalsCreate(comm, &arr), lowconInvalidArgument, "GPU");
    float in[4 * 8] = {0}, out[4] = {0};
    expect_code("a released reduce-scatter on the host backend",
                lowconReduceScatterReleased(in, out, 1, lowconFloat32, lowconSum, comm, NULL, NULL, produce_nothing,
                                            NULL),
                lowconInvalidArgument, "GPU communicators");
    return;
  }
#ifdef LOWCON_EXAMPLE_CUDA
  const size_t n = 70001;
  size_t bytes = n * sizeof(float) * (size_t)g_world;
  LC(lowconArrivalsCreate(comm, &arr));
  float *host_in = (float *)malloc(n * sizeof(float)), *host_out = (float *)malloc(bytes);
  for (size_t i = 0; i < n; i++) host_in[i] = (float)value(seed, g_rank, i, 95);
  float *in = (float *)plain_alloc(n * sizeof(float)), *out = (float *)plain_alloc(bytes);
  float *copy = (float *)plain_alloc(bytes);
  put(in, host_in, n * sizeof(float));
  poison(out, bytes);
  poison(copy, bytes);
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  o.algorithm = "ce-pull";
  cudaStream_t s2;
  CU(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  LC(lowconAllGatherArrivals(in, out, n, lowconFloat32, comm, g_stream, &o, arr));
  LC(lowconArrivalsWaitStarted(arr, s2));
  for (int p = 0; p < g_world; p++) {
    LC(lowconArrivalsWait(arr, p, s2));
    CU(cudaMemcpyAsync(copy + (size_t)p * n, out + (size_t)p * n, n * sizeof(float), cudaMemcpyDeviceToDevice, s2));
  }
  CU(cudaStreamSynchronize(s2));
  LC(lowconStreamSynchronize(comm, g_stream));
  CU(cudaMemcpy(host_out, copy, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (int p = 0; p < g_world; p++)
    for (size_t i = 0; i < n; i++) wrong += host_out[(size_t)p * n + i] != (float)value(seed, p, i, 95);
  CHECK(wrong == 0, "all-gather with arrivals: %zu elements wrong in the pieces copied after their waits", wrong);
  expect_code("a piece out of range", lowconArrivalsWait(arr, g_world, s2), lowconInvalidArgument, "out of range");
  LC(lowconArrivalsDestroy(arr));
  expect_code("destroyed arrivals (no comm: no rank to name)", lowconArrivalsWait(arr, 0, s2), lowconInvalidArgument, "not a live");

  /* Released reduce-scatter: chunk d of rank p holds value(seed + 1, p, d * n + i). */
  void *send_mem = NULL;
  LC(lowconMemAlloc(comm, bytes, &send_mem));
  float *send = (float *)send_mem, *rs_out = (float *)plain_alloc(n * sizeof(float));
  float *host_send = (float *)malloc(bytes);
  for (size_t k = 0; k < n * (size_t)g_world; k++) host_send[k] = (float)value(seed + 1, g_rank, k, 95);
  poison(send, bytes);
  poison(rs_out, n * sizeof(float));
  struct produce_ctx ctx = {send, host_send, n};
  LC(lowconReduceScatterReleased(send, rs_out, n, lowconFloat32, lowconSum, comm, g_stream, NULL, produce_chunk, &ctx));
  get(host_out, rs_out, n * sizeof(float), comm);
  wrong = 0;
  for (size_t i = 0; i < n; i++) {
    double want = 0;
    for (int p = 0; p < g_world; p++) want += value(seed + 1, p, (size_t)g_rank * n + i, 95);
    wrong += host_out[i] != (float)want;
  }
  CHECK(wrong == 0, "released reduce-scatter: %zu elements wrong", wrong);
  expect_code("a released reduce-scatter of ordinary memory",
              lowconReduceScatterReleased(in, rs_out, n / (size_t)g_world, lowconFloat32, lowconSum, comm, g_stream,
                                          NULL, produce_chunk, &ctx),
              lowconInvalidArgument, "symmetric");
  lowconCollOptions po;
  LC(lowconCollOptionsInit(&po));
  po.pipeline = 4;
  expect_code("a released reduce-scatter with a pipeline",
              lowconReduceScatterReleased(send, rs_out, n, lowconFloat32, lowconSum, comm, g_stream, &po, produce_chunk,
                                          &ctx),
              lowconInvalidArgument, "pipeline");
  expect_code("a released reduce-scatter without a producer",
              lowconReduceScatterReleased(send, rs_out, n, lowconFloat32, lowconSum, comm, g_stream, NULL, NULL, NULL),
              lowconInvalidArgument, "produce");
  LC(lowconMemFree(comm, send));
  CU(cudaStreamDestroy(s2));
  plain_free(in);
  plain_free(out);
  plain_free(copy);
  plain_free(rs_out);
  free(host_in);
  free(host_out);
  free(host_send);
#endif
}
