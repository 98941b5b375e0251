/*
 * lowcon_check_wire.h: the bf16 wire's part of lowcon_check.c, which includes it after its
 * helpers (CHECK, LC, plain_alloc, put, get, poison, value, expect_code,
 * reduce_scatter_once, to_bf16): f32 over bf16 bit for bit against the plain f32 call,
 * bf16 data into an f32 output (recv_type), the counters (lowconCommGetStats), the wire's
 * refusals, the options struct's ABI (an older, smaller struct keeps working; an
 * unfilled or newer one is refused), and ce-reduce's reduce_launch (one launch per call
 * bit for bit against one per piece; its refusals). Not a header of the library: part
 * of the example.
 */

/* The bytes moved so far (lowconCommGetStats). */
static lowconCollStats stats_of(lowconComm_t comm) {
  lowconCollStats st;
  memset(&st, 0, sizeof st);
  st.size = sizeof st;
  LC(lowconCommGetStats(comm, &st));
  return st;
}

/* One f32 reduce-scatter of `n` elements per rank through the bf16 wire and once without,
 * on the same data (small integers: bf16-exact, plus 2^-10 on every chunk's first element
 * with `inexact`), poisoned outputs, compared bit for bit; the counters must show the top
 * halves and, with `inexact`, one fallback piece per peer (the chunk is one piece). */
static void check_wire_f32(lowconComm_t comm, unsigned seed, size_t n, lowconRedOp_t op, int sync, int inexact) {
  size_t in_bytes = n * 4 * (size_t)g_world;
  float *h = (float *)malloc(in_bytes), *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4);
  for (size_t i = 0; i < (size_t)g_world * n; i++)
    h[i] = (float)value(seed, g_rank, i, 95) + (inexact && i % n == 0 ? 1.0f / 1024 : 0.0f);
  void *in = plain_alloc(in_bytes), *out = plain_alloc(n * 4);
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  o.sync = sync;
  o.wire = lowconBfloat16;
  lowconCollStats before = stats_of(comm);
  poison(out, n * 4);
  put(in, h, in_bytes);
  LC(lowconReduceScatterEx(in, out, n, lowconFloat32, op, comm, g_stream, &o));
  get(a, out, n * 4, comm);
  lowconCollStats after = stats_of(comm);
  reduce_scatter_once(comm, in, out, h, in_bytes, b, n, lowconFloat32, op, "ce-reduce", sync);
  CHECK(memcmp(a, b, n * 4) == 0, "wire bf16 f32 op=%d n=%zu sync=%d inexact=%d: not the f32 result bit for bit", op, n,
        sync, inexact);
  unsigned long long peers = (unsigned long long)(g_world - 1);
  CHECK(after.wire_bytes - before.wire_bytes == peers * n * 2, "wire bytes moved by %llu, want %llu",
        after.wire_bytes - before.wire_bytes, peers * n * 2);
  CHECK(after.fallback_pieces - before.fallback_pieces == (inexact ? peers : 0), "fallback pieces moved by %llu",
        after.fallback_pieces - before.fallback_pieces);
  plain_free(in);
  plain_free(out);
  free(h);
  free(a);
  free(b);
}

/* bf16 data reduced into an f32 output (recv_type), against the exact f32 sums. */
static void check_wire_bf16_in(lowconComm_t comm, unsigned seed, size_t n, int sync) {
  size_t in_bytes = n * 2 * (size_t)g_world;
  uint16_t *h = (uint16_t *)malloc(in_bytes);
  float *got = (float *)malloc(n * 4);
  for (size_t i = 0; i < (size_t)g_world * n; i++) h[i] = to_bf16((float)value(seed, g_rank, i, 95));
  void *in = plain_alloc(in_bytes), *out = plain_alloc(n * 4);
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  o.sync = sync;
  o.recv_type = lowconFloat32;
  poison(out, n * 4);
  put(in, h, in_bytes);
  LC(lowconReduceScatterEx(in, out, n, lowconBfloat16, lowconSum, comm, g_stream, &o));
  get(got, out, n * 4, comm);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) {
    float acc = 0;
    for (int p = 0; p < g_world; p++) acc += (float)value(seed, p, (size_t)g_rank * n + i, 95);
    wrong += got[i] != acc;
  }
  CHECK(wrong == 0, "bf16 into f32 n=%zu sync=%d: %zu wrong", n, sync, wrong);
  plain_free(in);
  plain_free(out);
  free(h);
  free(got);
}

/* The wire's refusals, and the options struct's ABI. */
static void check_wire_refusals(lowconComm_t comm) {
  void *a = plain_alloc(4096 * (size_t)g_world), *b = plain_alloc(4096 * (size_t)g_world);
  lowconCollOptions o;
  LC(lowconCollOptionsInit(&o));
  CHECK(o.size == sizeof o && o.magic == lowconCollOptionsMagic && o.wire == lowconTypeDefault &&
            o.recv_type == lowconTypeDefault,
        "lowconCollOptionsInit: size %zu magic %#x wire %d recv_type %d", o.size, o.magic, o.wire, o.recv_type);
  o.wire = lowconBfloat16;
  expect_code("wire on an all-gather", lowconAllGatherEx(a, b, 4, lowconFloat32, comm, g_stream, &o),
              lowconInvalidArgument, "a wire applies to reduce-scatters only");
  o.wire = lowconFloat16;
  expect_code("wire f16 for f32", lowconReduceScatterEx(a, b, 4, lowconFloat32, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "only bf16");
  o.wire = lowconBfloat16;
  expect_code("wire on i32", lowconReduceScatterEx(a, b, 4, lowconInt32, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "float reduce-scatters only");
  o.algorithm = "tma-reduce"; /* the wire runs on ce-reduce or sm-direct (read directly) */
  expect_code("wire with tma-reduce", lowconReduceScatterEx(a, b, 4, lowconFloat32, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "runs on ce-reduce, sm-direct");
  LC(lowconCollOptionsInit(&o));
  o.wire = 42;
  expect_code("wire 42", lowconReduceScatterEx(a, b, 4, lowconFloat32, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "wire: datatype 42");
  LC(lowconCollOptionsInit(&o));
  o.recv_type = lowconBfloat16;
  expect_code("f32 into bf16", lowconReduceScatterEx(a, b, 4, lowconFloat32, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "the output must have the input's type");
  o.recv_type = lowconFloat32;
  expect_code("recv_type on an all-gather", lowconAllGatherEx(a, b, 4, lowconBfloat16, comm, g_stream, &o),
              lowconInvalidArgument, "recv_type is for reduce-scatters");
  /* graph_sync (0.2.2) and sync: the planner's choice by default since 0.3.0, checked. */
  LC(lowconCollOptionsInit(&o));
  CHECK(o.graph_sync == lowconSyncAuto && o.sync == lowconSyncAuto, "lowconCollOptionsInit: sync %d, graph_sync %d, "
        "not lowconSyncAuto", o.sync, o.graph_sync);
  CHECK(o.context == lowconContextAlone && o.bf16_exact == 0, "lowconCollOptionsInit: context %d, bf16_exact %d",
        o.context, o.bf16_exact);
  o.graph_sync = 5;
  expect_code("graph_sync 5", lowconAllGatherEx(a, b, 4, lowconFloat32, comm, g_stream, &o), lowconInvalidArgument,
              "graph_sync 5");
  LC(lowconCollOptionsInit(&o));
  o.context = 7;
  expect_code("context 7", lowconAllGatherEx(a, b, 4, lowconFloat32, comm, g_stream, &o), lowconInvalidArgument,
              "context 7");
  /* The plan (0.3.0): what the planner runs, as text; the options win over it. */
  {
    char plan[512];
    LC(lowconCollOptionsInit(&o));
    LC(lowconCommPlan(comm, lowconPlanReduceScatter, 1 << 22, lowconFloat32, lowconSum, 0, &o, plan, sizeof plan));
    CHECK(strstr(plan, "algorithm=") && strstr(plan, "origin="), "lowconCommPlan: %s", plan);
    o.context = lowconContextFsdp;
    o.bf16_exact = 1;
    LC(lowconCommPlan(comm, lowconPlanReduceScatter, 1 << 22, lowconFloat32, lowconSum, 0, &o, plan, sizeof plan));
    /* The wire, on whichever reduce-scatter the box's table names for FSDP2 (ce-reduce at
       2 ranks, sm-direct at 4 on H200, 2026-11-27). */
    CHECK(strstr(plan, "wire=bf16") && (strstr(plan, "algorithm=ce-reduce") || strstr(plan, "algorithm=sm-direct")),
          "lowconCommPlan, FSDP2 hints: %s", plan);
    o.ctas = 5;
    o.algorithm = "sm-direct";
    LC(lowconCommPlan(comm, lowconPlanReduceScatter, 4096, lowconBfloat16, lowconSum, 1, &o, plan, sizeof plan));
    CHECK(strstr(plan, "algorithm=sm-direct") && strstr(plan, "ctas=5") && strstr(plan, "origin="),
          "lowconCommPlan, explicit: %s", plan);
    expect_code("plan into 4 bytes", lowconCommPlan(comm, lowconPlanAllGather, 8, lowconFloat32, lowconSum, 0, NULL,
                plan, 4), lowconInvalidArgument, "bytes with its NUL");
    expect_code("plan kind 9", lowconCommPlan(comm, 9, 8, lowconFloat32, lowconSum, 0, NULL, plan, sizeof plan),
                lowconInvalidArgument, "plan kind 9");
  }
  /* The ABI: a struct as a header before `wire` declared it, with canaries where the
   * newer fields would be: Init writes only its size, the call reads only its size. */
  size_t old = offsetof(lowconCollOptions, wire);
  unsigned char buf[sizeof(lowconCollOptions) + 16];
  memset(buf, 0xAB, sizeof buf);
  LC(lowconCollOptionsInitSized((lowconCollOptions *)(void *)buf, old));
  size_t touched = 0;
  for (size_t i = old; i < sizeof buf; i++) touched += buf[i] != 0xAB;
  CHECK(touched == 0, "lowconCollOptionsInitSized(old size %zu) wrote %zu bytes past it", old, touched);
  float *h = (float *)malloc(4096 * (size_t)g_world), *got = (float *)malloc(4096);
  for (int i = 0; i < g_world * 1024; i++) h[i] = (float)(i % 7);
  put(a, h, 4096 * (size_t)g_world);
  lowconResult_t r = lowconReduceScatterEx(a, b, 1024, lowconFloat32, lowconSum, comm, g_stream,
                                           (const lowconCollOptions *)(const void *)buf);
  CHECK(r == lowconSuccess, "an old-size options struct: %s (%s)", lowconGetErrorString(r), lowconGetLastError(NULL));
  if (r == lowconSuccess) {
    get(got, b, 4096, comm);
    size_t wrong = 0;
    for (int i = 0; i < 1024; i++) wrong += got[i] != (float)(((g_rank * 1024 + i) % 7) * g_world);
    CHECK(wrong == 0, "an old-size options struct: %zu wrong", wrong);
  }
  LC(lowconCollOptionsInit(&o));
  o.magic = 0;
  expect_code("unfilled options", lowconReduceScatterEx(a, b, 4, lowconFloat32, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "fill it with lowconCollOptionsInit");
  LC(lowconCollOptionsInit(&o));
  o.size = sizeof o + 8;
  expect_code("options from a newer header",
              lowconReduceScatterEx(a, b, 4, lowconFloat32, lowconSum, comm, g_stream, &o), lowconInvalidArgument,
              "newer lowcon.h");
  expect_code("comm: lowconCollOptionsInitSized too small", lowconCollOptionsInitSized(&o, 4), lowconInvalidArgument,
              "below the smallest");
  lowconCollStats st;
  st.size = 3;
  expect_code("lowconCollStats.size 3", lowconCommGetStats(comm, &st), lowconInvalidArgument, "lowconCollStats.size is 3");
  free(h);
  free(got);
  plain_free(a);
  plain_free(b);
}


/* ce-reduce with one reduction launch per call against one per piece (3 pieces each), on
 * the same data, bit for bit; then reduce_launch's refusals. */
static void check_reduce_launch(lowconComm_t comm, unsigned seed, size_t n, lowconDataType_t d, int sync) {
  size_t es = d == lowconFloat32 ? 4 : 2, in_bytes = n * es * (size_t)g_world;
  unsigned char *h = (unsigned char *)malloc(in_bytes), *a = (unsigned char *)malloc(n * es),
                *b = (unsigned char *)malloc(n * es);
  for (size_t i = 0; i < (size_t)g_world * n; i++) {
    float v = (float)value(seed, g_rank, i, 95) / 7.0f;
    if (d == lowconFloat32)
      memcpy(h + 4 * i, &v, 4);
    else {
      uint16_t x = to_bf16(v);
      memcpy(h + 2 * i, &x, 2);
    }
  }
  void *in = plain_alloc(in_bytes), *out = plain_alloc(n * es);
  lowconCollOptions o;
  for (int launch = lowconReduceLaunchPieces; launch <= lowconReduceLaunchOnce; launch++) {
    LC(lowconCollOptionsInit(&o));
    o.algorithm = "ce-reduce";
    o.sync = sync;
    o.pipeline = 3;
    o.reduce_launch = launch;
    poison(out, n * es);
    put(in, h, in_bytes);
    LC(lowconReduceScatterEx(in, out, n, d, lowconAvg, comm, g_stream, &o));
    get(launch == lowconReduceLaunchOnce ? a : b, out, n * es, comm);
  }
  CHECK(memcmp(a, b, n * es) == 0, "reduce_launch once, type %d n=%zu sync=%d: not the per-piece result bit for bit",
        d, n, sync);
  o.reduce_launch = 7;
  expect_code("reduce_launch 7", lowconReduceScatterEx(in, out, n, d, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "reduce_launch 7");
  o.reduce_launch = lowconReduceLaunchOnce;
  o.algorithm = "sm-direct";
  expect_code("reduce_launch once with sm-direct", lowconReduceScatterEx(in, out, n, d, lowconSum, comm, g_stream, &o),
              lowconInvalidArgument, "ce-reduce only, not sm-direct");
  o.algorithm = NULL;
  expect_code("reduce_launch once on an all-gather", lowconAllGatherEx(in, out, n, d, comm, g_stream, &o),
              lowconInvalidArgument, "applies to reduce-scatters only");
  plain_free(in);
  plain_free(out);
  free(h);
  free(a);
  free(b);
}
