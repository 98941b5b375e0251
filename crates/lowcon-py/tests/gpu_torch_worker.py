"""One rank of the Python package's GPU check with torch tensors (the GPU machine; CI
has no GPU): `lowcon launch --nproc-per-node 2 -- python gpu_torch_worker.py`.

Every algorithm, both sync methods, f32 / bf16 / f16, odd counts and 4 Mi elements (at 2
ranks; the largest count shrinks with the square of the world, whose CPU reference grows so),
against torch's own result on the CPU; outputs poisoned (NaN) before every call; calls
on torch's current stream, one pass on a side stream; in-place all-gather.
Tolerances: exact (the data are small integers, exact in every dtype; avg is not used).
"""

import sys

import time

import torch

import lowcon

g = lowcon.init("gpu", timeout=30)
r, w = g.rank, g.world_size
dev = torch.device("cuda", g.device)
torch.cuda.set_device(dev)


def data(seed, p, n, dtype):
    gen = torch.Generator().manual_seed(seed * 1000 + p)
    return (torch.randint(-15, 16, (n,), generator=gen) * 2 + 1).to(dtype)


def fail(msg):
    print(f"rank {r}: torch-gpu FAILED: {msg}", flush=True)
    sys.exit(1)


checks, seed = 0, 0
side = torch.cuda.Stream(dev)
t0 = time.monotonic()
for n in (1, 1023, 70001, max(1 << 18, (1 << 24) // (w * w))):
    if r == 0:
        print(f"rank {r}: torch-gpu: n={n} ({checks} checks so far, {time.monotonic() - t0:.0f} s)", flush=True)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for sync in ("kernel", "memop"):
            for algo in ("auto", "ce-pull", "ce-push", "sm-oneshot", "ll"):
                seed += 1
                inp = data(seed, r, n, dtype).to(dev)
                out = torch.full((n * w,), float("nan"), dtype=dtype, device=dev)
                g.all_gather(out, inp, algorithm=algo, sync=sync)
                g.synchronize()
                want = torch.cat([data(seed, p, n, dtype) for p in range(w)])
                if not torch.equal(out.cpu(), want):
                    fail(f"all-gather n={n} {dtype} {sync} {algo}")
                checks += 1
            for algo in ("auto", "ce-reduce", "sm-direct", "tma-reduce"):
                for op in ("sum", "max"):
                    seed += 1
                    inp = data(seed, r, n * w, dtype).to(dev)
                    out = torch.full((n,), float("nan"), dtype=dtype, device=dev)
                    g.reduce_scatter(out, inp, op, algorithm=algo, sync=sync)
                    g.synchronize()
                    parts = [data(seed, p, n * w, dtype)[r * n:(r + 1) * n].float() for p in range(w)]
                    acc = parts[0]
                    for x in parts[1:]:
                        acc = acc + x if op == "sum" else torch.maximum(acc, x)
                    if not torch.equal(out.cpu(), acc.to(dtype)):
                        fail(f"reduce-scatter n={n} {dtype} {op} {sync} {algo}")
                    checks += 1
# In place, and on a side stream (torch's current stream inside the context).
seed += 1
n = 4097
out = torch.full((n * w,), float("nan"), device=dev)
with torch.cuda.stream(side):
    out[r * n:(r + 1) * n] = data(seed, r, n, torch.float32).to(dev)
    g.all_gather(out, out[r * n:(r + 1) * n], algorithm="ce-pull")
    g.synchronize()
if not torch.equal(out.cpu(), torch.cat([data(seed, p, n, torch.float32) for p in range(w)])):
    fail("in-place all-gather on a side stream")
checks += 1
# The bf16 wire (NOTE [bf16 wire]): float32 in torch's own memory over bf16, bit for bit
# against the float32 call, bf16-exact (no fallback) and with one inexact value per chunk
# (a fallback piece per peer, counted by the GPU); a bfloat16 input into a float32 output.
for sync in ("kernel", "memop"):
    for n, inexact in ((1, False), (70001, True), (1 << 20, False), (1 << 20, True)):
        seed += 1
        inp = data(seed, r, n * w, torch.float32).to(dev) / 64
        if inexact:
            inp[::n] += 2.0 ** -20
        got = torch.full((n,), float("nan"), device=dev)
        before = g.stats()
        g.reduce_scatter(got, inp, "avg", wire=torch.bfloat16, sync=sync)
        g.synchronize()
        after = g.stats()
        want = torch.full((n,), float("nan"), device=dev)
        g.reduce_scatter(want, inp, "avg", algorithm="ce-reduce", sync=sync)
        g.synchronize()
        if not torch.equal(got.view(torch.int32), want.view(torch.int32)):
            fail(f"wire bf16 n={n} inexact={inexact} {sync}: not the float32 result bit for bit")
        moved = {k: after[k] - before[k] for k in after}
        if moved["wire_bytes"] != (w - 1) * n * 2 or moved["fallback_pieces"] != ((w - 1) if inexact else 0):
            fail(f"wire bf16 n={n} inexact={inexact} {sync}: counters moved by {moved}")
        checks += 1
        bf = data(seed, r, n * w, torch.bfloat16).to(dev)
        out32 = torch.full((n,), float("nan"), device=dev)
        g.reduce_scatter(out32, bf, "sum", sync=sync)
        g.synchronize()
        ref = torch.stack([data(seed, p, n * w, torch.float32)[r * n:(r + 1) * n] for p in range(w)]).sum(0)
        if not torch.equal(out32.cpu(), ref):
            fail(f"bfloat16 into float32 n={n} {sync}")
        checks += 1
# CUDA graphs (NOTE [graph flags]): an FSDP-like layer loop (all-gather the weight
# shards from the pool, GEMM, reduce-scatter the product; 12 layers, kernel and memop sync
# alternating) captured with torch.cuda.graph, replayed with fresh data before every
# replay (g.replay registers each with the watchdog), checked against torch run eagerly on
# the gathered weights (small integers: every result exact). The host cost per replay is
# printed beside the eager calls'.
seed += 1
L, d, T = 12, 256, 64
ch = g.channel("graph")
g.reserve_workspace(ch, 16 << 20)
shards = [g.empty(d * d // w, torch.float32) for _ in range(L)]
fulls = [g.empty(d * d, torch.float32) for _ in range(L)]
x = torch.empty(T, d, device=dev)
rs_out = [torch.empty(T * d // w, device=dev) for _ in range(L)]


def layers():
    for i in range(L):
        sync = ("kernel", "memop")[i % 2]
        # graph_sync: the memop layers keep memop waits when captured (kernel is the default).
        g.all_gather(fulls[i], shards[i], algorithm="ce-pull", sync=sync, graph_sync=sync, channel=ch)
        y = x @ fulls[i].view(d, d)
        g.reduce_scatter(rs_out[i], y.view(-1), "sum", algorithm=("ce-reduce", "sm-direct")[i % 2], sync=sync,
                         graph_sync=sync, channel=ch)


def small(seed, p, n):
    gen = torch.Generator().manual_seed(seed * 1000 + p)
    return torch.randint(-3, 4, (n,), generator=gen).float()


def refill(k):
    for i in range(L):
        shards[i].copy_(small(k * 100 + i, r, d * d // w).to(dev))
        fulls[i].fill_(float("nan"))
        rs_out[i].fill_(float("nan"))
    x.copy_(small(k * 100 + 99, r, T * d).view(T, d).to(dev))


refill(0)
layers()  # warm-up, outside the capture (cuBLAS's handle, the channel's streams)
g.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    layers()
host_replay, host_eager = [], []
for k in range(1, 201):
    refill(seed + k)
    t0 = time.perf_counter()
    g.replay(graph)
    host_replay.append(time.perf_counter() - t0)
    g.synchronize()
    xs = [small((seed + k) * 100 + 99, p, T * d).view(T, d).to(dev) for p in range(w)]
    for i in range(L):
        W = torch.cat([small((seed + k) * 100 + i, p, d * d // w) for p in range(w)]).to(dev)
        if not torch.equal(fulls[i], W):
            fail(f"replay {k}: layer {i}: the all-gathered weights differ")
        want = sum(xp @ W.view(d, d) for xp in xs).view(-1)[r * T * d // w:(r + 1) * T * d // w]
        if not torch.equal(rs_out[i], want):
            fail(f"replay {k}: layer {i}: the reduce-scatter differs from torch's eager result")
    checks += 2 * L
for k in range(20):
    t0 = time.perf_counter()
    layers()
    host_eager.append(time.perf_counter() - t0)
    g.synchronize()
med = lambda v: sorted(v)[len(v) // 2] * 1e6  # noqa: E731
print(f"rank {r}: graph: 200 replays of {2 * L} captured calls checked; host us per replay {med(host_replay):.0f} "
      f"(eager: {med(host_eager):.0f} us for the same {2 * L} calls and GEMMs)", flush=True)


def timed_graph(sync, graph_sync):
    """The layer loop with one sync method (ce-pull, GEMM, ce-reduce), captured; host time
    of graph.replay() and of track_replay() apart, medians of 300 replays (NOTE [memop
    batches], NOTE [captured sync])."""
    kw = {} if graph_sync is None else {"graph_sync": graph_sync}

    def one_sync():
        for i in range(L):
            g.all_gather(fulls[i], shards[i], algorithm="ce-pull", sync=sync, channel=ch, **kw)
            y = x @ fulls[i].view(d, d)
            g.reduce_scatter(rs_out[i], y.view(-1), "sum", algorithm="ce-reduce", sync=sync, channel=ch, **kw)

    one_sync()
    g.synchronize()
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        one_sync()
    rep, track, given = [], [], []
    cur = torch.cuda.current_stream(dev)
    for k in range(300):
        t0 = time.perf_counter()
        gr.replay()
        t1 = time.perf_counter()
        if k % 2:
            g.track_replay()
        else:
            g.track_replay(cur)  # the stream given: no lookup of torch's current one
        t2 = time.perf_counter()
        rep.append(t1 - t0)
        (track if k % 2 else given).append(t2 - t1)
        g.synchronize()
    return med(rep), med(track), med(given), gr


# NOTE [captured sync]: memop sync captures kernel waits unless graph_sync says memop
# (coll-graph checks the node types; these lines show the host time).
graphs = {}
for sync, graph_sync in (("kernel", None), ("memop", None), ("memop", "memop")):
    rep_us, track_us, given_us, graphs[(sync, graph_sync)] = timed_graph(sync, graph_sync)
    gs = "default" if graph_sync is None else graph_sync
    print(f"rank {r}: graph, {sync} sync, graph_sync {gs}, {L} x (ce-pull, GEMM, ce-reduce): host us per replay "
          f"{rep_us:.1f}, track_replay {track_us:.1f} ({given_us:.1f} with the stream given)", flush=True)


def track_parts(gr):
    """Where Python's track_replay time goes: after each replay of `gr`, one of the
    wrapper with the stream given, the native method with the raw pointer, a native
    getter (the binding's floor), torch's raw current stream; medians of 100 each."""
    cur = torch.cuda.current_stream(dev)
    ptr = int(torch._C._cuda_getCurrentRawStream(g.device))
    parts = {
        "g.track_replay(stream)": lambda: g.track_replay(cur),
        "native track_replay(ptr)": lambda: g._g.track_replay(ptr),
        "native getter": lambda: g._g.rank,
        "raw current stream": lambda: torch._C._cuda_getCurrentRawStream(g.device),
    }
    out = {}
    for name, f in parts.items():
        ts = []
        for _ in range(100):
            gr.replay()
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
            g.track_replay(cur)
            g.synchronize()
        out[name] = med(ts)
    return ", ".join(f"{k} {v:.1f}" for k, v in out.items())


print(f"rank {r}: track_replay's parts, us after a replay of the kernel graph: {track_parts(graphs[('kernel', None)])}",
      flush=True)
# An unrelated capture in torch's default global mode succeeds while lowcon's calls are in
# flight (lowcon's threads are relaxed).
seed += 1
n = 1 << 22
src = data(seed, r, n, torch.float32).to(dev)
outs = [torch.full((n * w,), float("nan"), device=dev) for _ in range(8)]
a = torch.randn(512, 512, device=dev)
static = torch.empty(512, 512, device=dev)
graph = torch.cuda.CUDAGraph()
cs = torch.cuda.Stream(dev)
cs.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(cs):
    static.copy_(a @ a)  # warm-up: cuBLAS makes its handle outside the capture
cs.synchronize()


def enqueue_all_gathers():
    with torch.cuda.stream(side):
        for o in outs:
            g.all_gather(o, src, algorithm="ce-pull")


def capture_unrelated():
    # capture_begin directly: torch.cuda.graph would first synchronise the device,
    # draining lowcon's calls. Global mode (torch's default): another thread's unsafe
    # call, such as an event query of lowcon's watchdog, would invalidate the capture.
    with torch.cuda.stream(cs):
        graph.capture_begin(capture_error_mode="global")
        static.copy_(a @ a)
        time.sleep(0.2)  # the watchdog polls the calls in flight meanwhile
        graph.capture_end()


# Rank 0 captures first, so the other ranks' calls wait for it, in flight, while they
# capture.
if r == 0:
    capture_unrelated()
    enqueue_all_gathers()
else:
    enqueue_all_gathers()
    capture_unrelated()
graph.replay()
torch.cuda.synchronize()
if not torch.allclose(static, a @ a):
    fail("an unrelated graph captured beside lowcon's calls replayed wrongly")
want = torch.cat([data(seed, p, n, torch.float32) for p in range(w)])
for o in outs:
    if not torch.equal(o.cpu(), want):
        fail("all-gathers in flight during an unrelated capture")
checks += 1
g.check()
print(f"rank {r}: torch-gpu ok: {checks} checks, {w} ranks, torch {torch.__version__}", flush=True)
g.close()
