"""One rank of the GPU checks of the symmetric pool, CuPy and concurrent groups (the GPU
machine; CI has no GPU): `lowcon launch --nproc-per-node 2 -- python gpu_pool_worker.py`,
or the same under torchrun.

- Pool tensors (`g.empty`) with torch: in-place all-gather (as FSDP2 calls it) and
  reduce-scatter from pool memory, every algorithm, both sync methods, f32 / bf16, on
  fresh random data against torch's CPU result, outputs poisoned (NaN) before each call.
- Reuse: a block freed on one stream and allocated on another (the pool makes the new
  stream wait for the free's event) after a long kernel on the first: the data must
  not be overwritten early.
- CuPy arrays (ordinary and from the pool) with CuPy's current stream.
- Two groups at once over the same GPUs, driven from two streams, interleaved: each must
  get its own results (groups never share signal pads).
Tolerances: exact (small integers, exact in every dtype; f32 accumulation).
"""

import sys

import torch

import lowcon

g = lowcon.init("gpu", timeout=30)
r, w = g.rank, g.world_size
dev = torch.device("cuda", g.device)
torch.cuda.set_device(dev)
checks = 0


def fail(msg):
    print(f"rank {r}: gpu-pool FAILED: {msg}", flush=True)
    sys.exit(1)


def data(seed, p, n, dtype):
    gen = torch.Generator().manual_seed(seed * 1000 + p)
    return (torch.randint(-15, 16, (n,), generator=gen) * 2 + 1).to(dtype)


seed = 0
# The largest count: 6 Mi at 2 ranks, shrinking with the square of the world (the CPU
# reference of a reduce-scatter makes every rank's whole input).
for n in (1, 4097, 1 << 20, max(1 << 18, (3 << 23) // (w * w))):
    for dtype in (torch.float32, torch.bfloat16):
        for sync in ("kernel", "memop"):
            for algo in ("auto", "ce-pull", "ce-push", "sm-oneshot", "ll"):
                seed += 1
                out = g.empty(n * w, dtype)
                if out.device != dev or out.dtype != dtype or out.shape != (n * w,):
                    fail(f"g.empty gave {out.device} {out.dtype} {tuple(out.shape)}")
                out.fill_(float("nan"))
                out[r * n:(r + 1) * n] = data(seed, r, n, dtype).to(dev)
                g.all_gather(out, out[r * n:(r + 1) * n], algorithm=algo, sync=sync)
                g.synchronize()
                if not torch.equal(out.cpu(), torch.cat([data(seed, p, n, dtype) for p in range(w)])):
                    fail(f"in-place all-gather on pool memory n={n} {dtype} {sync} {algo}")
                checks += 1
                del out
            for algo in ("auto", "ce-reduce", "sm-direct", "ll"):
                for op in ("sum", "avg"):
                    seed += 1
                    inp = g.empty(n * w, dtype)
                    inp.copy_(data(seed, r, n * w, dtype).to(dev))
                    res = torch.full((n,), float("nan"), dtype=dtype, device=dev)
                    g.reduce_scatter(res, inp, op, algorithm=algo, sync=sync)
                    g.synchronize()
                    acc = sum(data(seed, p, n * w, dtype)[r * n:(r + 1) * n].float() for p in range(w))
                    if op == "avg":
                        acc = acc / w
                    if not torch.equal(res.cpu(), acc.to(dtype)):
                        fail(f"reduce-scatter from pool memory n={n} {dtype} {op} {sync} {algo}")
                    checks += 1
                    del inp

# Cross-stream reuse must wait for the free's event: stream A writes the block after a
# long sleep kernel, the block is freed, stream B (no blocks of its own) gets it back and
# reads it at once. Without the wait B would read before A's write.
a, b = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
# Larger than the pool's segments (64 MiB), so x gets a segment of its own; freed, it is
# a whole free segment, the only memory another stream may take, and the only one that fits.
n = 20_000_003
with torch.cuda.stream(a):
    x = g.empty(n, torch.float32)
    addr = x.data_ptr()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on stream A
    x.fill_(7.0)
    del x  # freed on A: the pool records an event there
with torch.cuda.stream(b):
    y = g.empty(n, torch.float32)
    seen = y.clone()
torch.cuda.synchronize()
if y.data_ptr() != addr:
    fail(f"setup: stream B did not get stream A's freed block ({y.data_ptr():#x} vs {addr:#x})")
if not torch.all(seen == 7.0):
    fail("a block reused on another stream was read before the freeing stream's work finished")
checks += 1
del y, seen

# Pool stats and reuse on one stream: the same size comes back at the same address.
st = g.pool_stats()
z = g.empty(12345, torch.float32)
p1 = z.data_ptr()
del z
z = g.empty(12345, torch.float32)
if z.data_ptr() != p1 or g.pool_stats()["pool_bytes"] != st["pool_bytes"]:
    fail(f"no reuse on one stream: {g.pool_stats()} vs {st}")
del z
checks += 1

# Trim: a block of its own segment (bigger than LOWCON_POOL_SEGMENT_MB's default 64 MiB),
# used by an all-gather whose copies are still queued when the tensor is freed: the trim
# waits for the device before any rank drops the segment, and the pool grows again after.
for round_ in range(2):
    big_n = (96 << 20) // 4 // w
    big = g.empty(big_n * w, torch.float32)
    big.fill_(float("nan"))
    big[r * big_n:(r + 1) * big_n] = data(500 + round_, r, big_n, torch.float32).to(dev)
    g.all_gather(big, big[r * big_n:(r + 1) * big_n])
    host = big.cpu()
    want = torch.cat([data(500 + round_, p, big_n, torch.float32) for p in range(w)])
    if not torch.equal(host, want):
        fail(f"all-gather on a {big_n * w * 4 >> 20} MiB pool block, round {round_}")
    g.all_gather(big, big[r * big_n:(r + 1) * big_n])  # queued, then freed at once
    before = g.pool_stats()["pool_bytes"]
    del big
    released = g.pool_trim()
    after = g.pool_stats()["pool_bytes"]
    if released < big_n * w * 4 or after != before - released:
        fail(f"trim round {round_}: released {released} of {before}, {after} left")
checks += 1

# The traffic floor (a benchmark instrument, no sync): once every rank's stream is done
# and the ranks met, the bytes are where the collective would put them. All-gather: peer
# p's shard in this rank's slot p of the pool output. Reduce-scatter: some peer's chunk
# `r` (each copy overwrites the last; at 2 ranks, the one peer's).
n = 70001
seed += 1
out = g.empty(n * w, torch.float32)
out.fill_(float("nan"))
out[r * n:(r + 1) * n] = data(seed, r, n, torch.float32).to(dev)
torch.cuda.synchronize()
g.all_gather(torch.empty(w, device=dev), torch.zeros(1, device=dev))  # every rank's slot is written
torch.cuda.synchronize()
g.traffic(out, out[r * n:(r + 1) * n], "all-gather")
torch.cuda.synchronize()
g.all_gather(torch.empty(w, device=dev), torch.zeros(1, device=dev))  # every rank's copies are done
torch.cuda.synchronize()
if not torch.equal(out.cpu(), torch.cat([data(seed, p, n, torch.float32) for p in range(w)])):
    fail("traffic all-gather: the peers' shards are not in their slots")
inp = g.empty(n * w, torch.float32)
inp.copy_(data(seed + 1, r, n * w, torch.float32).to(dev))
res = torch.full((n,), float("nan"), device=dev)
torch.cuda.synchronize()
g.all_gather(torch.empty(w, device=dev), torch.zeros(1, device=dev))
g.traffic(res, inp, "reduce-scatter")
torch.cuda.synchronize()
got = res.cpu()
if not any(torch.equal(got, data(seed + 1, p, n * w, torch.float32)[r * n:(r + 1) * n]) for p in range(w) if p != r):
    fail("traffic reduce-scatter: the output is no peer's chunk")
try:
    g.traffic(torch.empty(n * w, device=dev), torch.empty(n, device=dev), "all-gather")
except lowcon.InvalidArgument as e:
    if "pool" not in str(e) or f"rank {r}" not in str(e):
        fail(f"traffic on ordinary memory: {e}")
else:
    fail("the traffic floor took an ordinary output")
g.all_gather(torch.empty(w, device=dev), torch.zeros(1, device=dev))
torch.cuda.synchronize()
del out, inp, res
checks += 1

# CuPy, when installed: ordinary arrays and pool arrays, on CuPy's current stream.
try:
    import cupy
except ImportError:
    cupy = None
if cupy is not None:
    with cupy.cuda.Device(g.device):
        for pool in (False, True):
            seed += 1
            n = 70001
            src = cupy.asarray(data(seed, r, n, torch.float32).numpy())
            out = g.empty(n * w, "float32", framework="cupy") if pool else cupy.empty(n * w, cupy.float32)
            out.fill(cupy.nan)
            g.all_gather(out, src)
            cupy.cuda.get_current_stream().synchronize()
            want = torch.cat([data(seed, p, n, torch.float32) for p in range(w)]).numpy()
            if not (cupy.asnumpy(out) == want).all():
                fail(f"CuPy all-gather (pool={pool})")
            checks += 1
            del out

# Two groups at once over the same GPUs, from two streams, interleaved.
g2 = lowcon.init("gpu", name="second", timeout=30)
s1, s2 = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
n = 1 << 18
outs = []
for i in range(50):
    for grp, st_, k in ((g, s1, 1), (g2, s2, 2)):
        with torch.cuda.stream(st_):
            inp = torch.full((n,), float(k * 1000 + i * 10 + r), device=dev)
            out = torch.full((n * w,), float("nan"), device=dev)
            grp.all_gather(out, inp, algorithm="ce-pull" if k == 1 else "ce-push")
            outs.append((k, i, out, inp))
torch.cuda.synchronize()
for k, i, out, _ in outs:
    want = torch.cat([torch.full((n,), float(k * 1000 + i * 10 + p)) for p in range(w)])
    if not torch.equal(out.cpu(), want):
        fail(f"group {k} call {i}: results mixed up between concurrent groups")
checks += 1
g.check()
g2.check()
torch.cuda.synchronize()
print(f"rank {r}: gpu-pool ok: {checks} checks, {w} ranks, cupy={'yes' if cupy else 'absent'}, "
      f"pool {g.pool_stats()['pool_bytes'] >> 20} MiB", flush=True)
g2.close()
g.close()
