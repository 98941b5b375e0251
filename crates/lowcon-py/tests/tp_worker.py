"""One rank of the fused tensor-parallel ops' check (`lowcon.tp`), started by
`lowcon launch`:

    python tp_worker.py check host|gpu     # outputs and gradients against a reference; bad input
    python tp_worker.py overlap            # GPU: piece 0's matmul starts before the last piece lands
    python tp_worker.py fresh [CALLS]      # GPU: CALLS back-to-back calls, eager and replayed
    python tp_worker.py dead               # GPU: the last rank dies; the others are told, not hung
    python tp_worker.py reenter            # GPU: a producer that calls the group is refused

Data: fresh random values per call (seeded by call and rank, so that every rank can
rebuild its peers' inputs for the reference); the reference is float64 on the CPU.
Tolerances (relative to the output's scale, sqrt(K)): float32 1e-5, bfloat16 2e-2 (the
output is rounded to bf16 once; accumulation is f32). `fresh` uses small integers in
float32, exact, so every call is compared bit for bit. Outputs poisoned: the op's
workspaces are filled with NaN, and a NaN-filled block is freed to torch's allocator
before every call, so a piece that was never written shows. Prints "rank R: tp <mode> ok".
"""

import math
import os
import sys
import time

import torch

import lowcon
import lowcon.tp as tp

MODE = sys.argv[1]
RANK = int(os.environ["RANK"])


def fail(msg):
    print(f"rank {RANK}: tp {MODE} FAILED: {msg}", flush=True)
    sys.exit(1)


def rand(seed, shape, dtype, ints=False):
    gen = torch.Generator().manual_seed(seed)
    if ints:
        return torch.randint(-3, 4, shape, generator=gen).to(dtype)
    return torch.randn(shape, generator=gen).to(dtype)


def poison(g, dev):
    if dev.type != "cuda":
        return
    junk = torch.full((1 << 22,), float("nan"), device=dev)
    del junk
    for ws in getattr(g, "_tp", {}).get("ws", {}).values():
        ws.fill_(float("nan"))


def close(got, want, dtype, k, what):
    got = got.detach().double().cpu()
    if got.shape != want.shape:
        fail(f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    tol = (1e-5 if dtype == torch.float32 else 2e-2) * math.sqrt(k) * max(1.0, want.abs().max().item() / k)
    err = (got - want).abs().max().item() if got.numel() else 0.0
    if not err <= tol:  # NaN fails too
        fail(f"{what}: max error {err} > {tol}")


def check(g, dev):
    r, w = g.rank, g.world_size
    seed, n = 0, 0
    for dtype in (torch.float32, torch.bfloat16):
        for gd, shard_shape, ks in ((0, (8, 32), (48,)), (1, (2, 5, 32), (24, 40)), (-3, (3, 4, 32), (16,))):
            # all-gather-matmul: every rank's shard, gathered along gd, times this rank's Bs.
            seed += 1
            shards = [rand(seed * 100 + p, shard_shape, dtype) for p in range(w)]
            Bs = [rand(seed * 100 + 50 + r * 7 + i, (shard_shape[-1], kn), dtype) for i, kn in enumerate(ks)]
            poison(g, dev)
            A, outs = tp.fused_all_gather_matmul(shards[r].to(dev), [B.to(dev) for B in Bs], gd, g)
            A_ref = torch.cat([s.double() for s in shards], dim=gd)
            if not torch.equal(A.cpu().double(), A_ref):
                fail(f"all-gather-matmul A, {dtype}, gather_dim {gd}")
            for i, (o, B) in enumerate(zip(outs, Bs)):
                close(o, A_ref @ B.double(), dtype, shard_shape[-1], f"all-gather-matmul out {i}, {dtype}, dim {gd}")
            none, _ = tp.fused_all_gather_matmul(shards[r].to(dev), Bs[:1] and [Bs[0].to(dev)], gd, g, return_A=False)
            if none is not None:
                fail("return_A=False returned A")
            # One GEMM per arriving piece (tp_bench's `lowcon-each`), not the default's merged ones.
            poison(g, dev)
            _, outs = tp.fused_all_gather_matmul(shards[r].to(dev), [B.to(dev) for B in Bs], gd, g, gemms="each")
            for i, (o, B) in enumerate(zip(outs, Bs)):
                close(o, A_ref @ B.double(), dtype, shard_shape[-1],
                      f"all-gather-matmul (gemms=each) out {i}, {dtype}, dim {gd}")
            n += 1
        for sd, a_shape in ((0, (4 * w, 32)), (1, (3, 2 * w, 32)), (0, (w, 5, 16))):
            for op in ("sum", "avg"):
                seed += 1
                As = [rand(seed * 100 + p, a_shape, dtype) for p in range(w)]
                Bs = [rand(seed * 100 + 50 + p, (a_shape[-1], 24), dtype) for p in range(w)]
                poison(g, dev)
                out = tp.fused_matmul_reduce_scatter(As[r].to(dev), Bs[r].to(dev), op, sd, g)
                full = sum(a.double() @ b.double() for a, b in zip(As, Bs))
                if op == "avg":
                    full = full / w
                want = full.chunk(w, dim=sd)[r]
                close(out, want, dtype, a_shape[-1] * w, f"matmul-reduce-scatter {op}, {dtype}, dim {sd}")
                # tp_bench's `lowcon-merged` probe: the chunks in at most three GEMMs.
                poison(g, dev)
                out = tp.fused_matmul_reduce_scatter(As[r].to(dev), Bs[r].to(dev), op, sd, g, _gemms="merged")
                close(out, want, dtype, a_shape[-1] * w, f"matmul-reduce-scatter (_gemms=merged) {op}, {dtype}, dim {sd}")
                n += 1
    # A non-contiguous shard is copied.
    seed += 1
    shards = [rand(seed * 100 + p, (32, 8), torch.float32).t() for p in range(w)]
    B = rand(seed, (32, 16), torch.float32)
    _, (o,) = tp.fused_all_gather_matmul(shards[r].to(dev), [B.to(dev)], 0, g)
    close(o, torch.cat([s.double() for s in shards]) @ B.double(), torch.float32, 32, "non-contiguous shard")
    # Weights that require grad, in grad mode: the fused ops are not differentiable, and
    # must still run (torch's `out=` refuses autograd; a refusal inside the reduce-scatter's
    # producer would abort the group).
    w_param = torch.nn.Parameter(rand(seed + 1, (32, 16), torch.float32).to(dev))
    x_in = rand(seed + 2, (2 * w, 32), torch.float32).to(dev)
    _, (y,) = tp.fused_all_gather_matmul(x_in[:2], [w_param], 0, g)
    z = tp.fused_matmul_reduce_scatter(x_in, w_param, "sum", 0, g)
    if y.requires_grad or z.requires_grad:
        fail("a fused op returned a tensor that requires grad")
    autograd(g, dev)
    bad(g, dev)
    print(f"rank {r}: tp check ok ({n} shapes, gradients, bad input; {dev.type})", flush=True)


def autograd(g, dev):
    """Gradients through both autograd forms, against torch's on the whole problem."""
    r, w = g.rank, g.world_size
    for dtype in (torch.float32, torch.bfloat16):
        t, d, f = 4 * w, 16, 8 * w
        xs = [rand(900 + p, (t // w, d), dtype) for p in range(w)]
        ups = [rand(910 + p, (d, f // w), dtype) for p in range(w)]
        downs = [rand(920 + p, (f // w, d), dtype) for p in range(w)]
        gys = [rand(930 + p, (t // w, d), dtype) for p in range(w)]
        # Reference: every rank's part in float64, one process.
        X = torch.cat(xs).double().requires_grad_()
        U = [u.double().requires_grad_() for u in ups]
        D = [v.double().requires_grad_() for v in downs]
        Y = sum(torch.nn.functional.gelu(X @ u) @ v for u, v in zip(U, D))
        (Y * torch.cat(gys).double()).sum().backward()
        x = xs[r].to(dev).requires_grad_()
        up = ups[r].to(dev).requires_grad_()
        down = downs[r].to(dev).requires_grad_()
        h = tp.all_gather_matmul(x, up, 0, g)
        y = tp.matmul_reduce_scatter(torch.nn.functional.gelu(h), down, "sum", 0, g)
        close(y, Y.detach().chunk(w)[r], dtype, d * f, f"TP MLP output, {dtype}")
        (y * gys[r].to(dev)).sum().backward()
        close(x.grad, X.grad.chunk(w)[r], dtype, d * f, f"dx, {dtype}")
        close(up.grad, U[r].grad, dtype, d * f, f"d(up), {dtype}")
        close(down.grad, D[r].grad, dtype, d * f, f"d(down), {dtype}")


def expect(what, fn, *words):
    try:
        fn()
    except lowcon.InvalidArgument as e:
        msg = str(e)
        for word in (f"rank {RANK}",) + words:
            if word not in msg:
                fail(f"{what}: the error does not name {word!r}: {msg}")
        return
    except Exception as e:  # noqa: BLE001
        fail(f"{what}: raised {type(e).__name__}, not InvalidArgument: {e}")
    fail(f"{what}: no error")


def bad(g, dev):
    a = torch.ones(8, 16, device=dev)
    b = torch.ones(16, 4, device=dev)
    expect("B rows", lambda: tp.fused_all_gather_matmul(a, [torch.ones(15, 4, device=dev)], 0, g), "B[0]", "15")
    expect("gather_dim out of range", lambda: tp.fused_all_gather_matmul(a, [b], 2, g), "gather_dim", "2")
    expect("gather_dim last", lambda: tp.fused_all_gather_matmul(a, [b], 1, g), "gather_dim", "last dim")
    expect("dtypes", lambda: tp.fused_all_gather_matmul(a, [b.bfloat16()], 0, g), "B[0]", "dtypes")
    expect("float16", lambda: tp.fused_all_gather_matmul(a.half(), [b.half()], 0, g), "float16")
    expect("gemms", lambda: tp.fused_all_gather_matmul(a, [b], 0, g, gemms="pairs"), "gemms", "pairs", "each")
    expect("scatter_dim", lambda: tp.fused_matmul_reduce_scatter(a, b, "sum", -3, g), "scatter_dim", "-3")
    expect("B shape", lambda: tp.fused_matmul_reduce_scatter(a, torch.ones(4, 4, device=dev), "sum", 0, g), "B[0]")
    expect("reduce_op", lambda: tp.fused_matmul_reduce_scatter(a, b, "max", 0, g), "reduce_op")
    expect("_gemms", lambda: tp.fused_matmul_reduce_scatter(a, b, "sum", 0, g, _gemms="x"), "_gemms", "'x'")
    if g.world_size > 1:
        odd = torch.ones(g.world_size + 1, 16, device=dev)
        expect("rows", lambda: tp.fused_matmul_reduce_scatter(odd, b, "sum", 0, g), "divisible", "scatter_dim")
    expect("group", lambda: tp.fused_all_gather_matmul(a, [b], 0, "no-such-group"), "no-such-group")
    if dev.type == "cuda":
        arr = g.arrivals()
        expect("a negative piece", lambda: arr.wait(-1), "piece -1")
        expect("a piece out of range", lambda: arr.wait(g.world_size), "out of range")
        out, ws = torch.empty(4, device=dev), g.empty((4 * g.world_size,), torch.float32)
        expect("an ordinary input", lambda: g.reduce_scatter_released(out, torch.empty_like(ws), lambda d: None),
               "symmetric")


LEAD_MS = 0.03


def overlap(g, dev):
    """Piece 0's matmul (this rank's own piece) starts before the last piece has landed;
    the serial form (all pieces, then the matmuls) must fail the same test."""
    r, w = g.rank, g.world_size
    # 128 MiB pieces: the first matmul waits for the entry barrier (Arrivals.wait_started),
    # so its lead over the last piece is about one piece's copy (~80 us between ranks
    # sharing an H200, ~350 us over NVLink).
    shard = torch.randn(8192, 4096, device=dev)
    B = torch.randn(4096, 256, device=dev)
    for _ in range(3):
        tp.fused_all_gather_matmul(shard, [B], 0, g)
    torch.cuda.synchronize()
    results = {}
    for serial in (False, True):
        leads = []
        for _ in range(5):
            ev = {}
            tp.fused_all_gather_matmul(shard, [B], 0, g, _events=ev, _serial=serial)
            torch.cuda.synchronize()
            leads.append(ev["first_matmul"].elapsed_time(ev["last_arrival"]))
        results[serial] = sorted(leads)[len(leads) // 2]
    # Events resolve to about a microsecond and two streams pass the same point within a
    # few: the serial form came out within +-0.02 ms of 0, an overlapping one well above.
    if not results[False] > LEAD_MS:
        fail(f"fused: the first matmul started only {results[False]:.3f} ms before the last piece landed "
             f"(at least {LEAD_MS} ms expected)")
    if results[True] > LEAD_MS:
        fail(f"the serial control started its first matmul {results[True]:.3f} ms before the last piece landed: "
             "the test cannot tell overlap from none")
    print(f"rank {r}: tp overlap ok (first matmul {results[False]:.3f} ms before the last piece lands; serial "
          f"{-results[True]:.3f} ms after)", flush=True)


def fresh(g, dev, calls):
    """Back-to-back calls with fresh data: every piece a consumer sees is the current
    call's, eager and replayed from a CUDA graph."""
    r, w = g.rank, g.world_size
    s0, k, nn = 32, 64, 16

    def inputs(i, p):
        gen = torch.Generator(device=dev).manual_seed(i * 64 + p)
        a = torch.randint(-3, 4, (s0, k), generator=gen, device=dev).float()
        b = torch.randint(-3, 4, (k, nn), generator=gen, device=dev).float()
        a2 = torch.randint(-3, 4, (w * s0, k), generator=gen, device=dev).float()
        return a, b, a2

    def want(i):
        ins = [inputs(i, p) for p in range(w)]
        A = torch.cat([x[0] for x in ins])
        ag = A @ ins[r][1]
        rs = sum(x[2] @ x[1] for x in ins).chunk(w)[r]
        return ag, rs

    a_buf, b_buf, a2_buf = (torch.empty_like(x) for x in inputs(0, r))

    def step():
        _, (ag,) = tp.fused_all_gather_matmul(a_buf, [b_buf], 0, g, return_A=False)
        rs = tp.fused_matmul_reduce_scatter(a2_buf, b_buf, "sum", 0, g)
        return ag, rs

    def load(i):
        for buf, x in zip((a_buf, b_buf, a2_buf), inputs(i, r)):
            buf.copy_(x)

    for i in range(calls):
        load(i)
        poison(g, dev)
        ag, rs = step()
        wag, wrs = want(i)
        if not (torch.equal(ag, wag) and torch.equal(rs, wrs)):
            fail(f"eager call {i}: a stale or wrong piece")
    torch.cuda.synchronize()
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        step()  # warm-up on the capture stream: channels and workspaces exist before capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=side):
            ag_g, rs_g = step()
    torch.cuda.synchronize()
    for i in range(calls):
        load(calls + i)
        ag_g.fill_(float("nan"))
        rs_g.fill_(float("nan"))
        g.replay(graph)
        wag, wrs = want(calls + i)
        if not (torch.equal(ag_g, wag) and torch.equal(rs_g, wrs)):
            fail(f"replay {i}: a stale or wrong piece")
    g.synchronize()
    print(f"rank {r}: tp fresh ok ({calls} eager calls, {calls} replays, every piece current)", flush=True)


def dead(g, dev):
    """The last rank exits after one good call; the others' next fused calls are enqueued
    and must end in a named PeerError, with their streams drained (no hang)."""
    r, w = g.rank, g.world_size
    a = torch.randn(64, 32, device=dev)
    b = torch.randn(32, 16, device=dev)
    tp.fused_all_gather_matmul(a, [b], 0, g)
    tp.fused_matmul_reduce_scatter(torch.randn(8 * w, 32, device=dev), b, "sum", 0, g)
    g.synchronize()
    if r == w - 1:
        os._exit(0)
    time.sleep(0.5)
    t0 = time.monotonic()
    try:
        for _ in range(2):
            tp.fused_all_gather_matmul(a, [b], 0, g)
            tp.fused_matmul_reduce_scatter(torch.randn(8 * w, 32, device=dev), b, "sum", 0, g)
        g.synchronize()
    except lowcon.PeerError as e:
        msg = str(e)
        if f"rank {w - 1}" not in msg:
            fail(f"the error does not name rank {w - 1}: {msg}")
    else:
        fail("no error after the peer died")
    torch.cuda.synchronize()  # the consumer streams were released
    print(f"rank {r}: tp dead ok ({time.monotonic() - t0:.1f} s to the named error, streams drained)", flush=True)


def reenter(g, dev):
    """A released reduce-scatter whose producer calls the group: the inner call is refused
    with InvalidArgument (it would wait for the channel the outer call holds), the
    producer's exception comes out of the outer call as it is, and the group is aborted
    (its peers wait for this rank's chunks), on every rank, within the timeout."""
    r, w = g.rank, g.world_size
    out, ws = torch.empty(8, device=dev), g.empty((8 * w,), torch.float32)
    t0 = time.monotonic()
    try:
        g.reduce_scatter_released(out, ws, lambda d: g.all_gather(torch.empty(w, device=dev), torch.ones(1, device=dev)))
    except lowcon.InvalidArgument as e:
        if "producer" not in str(e) or f"rank {r}" not in str(e):
            fail(f"the inner call's error does not say what happened: {e}")
    else:
        fail("a call of the group from inside the producer was not refused")
    try:
        g.synchronize()
        g.check()
    except lowcon.Error:
        pass
    else:
        fail("the group is not aborted after its producer failed")
    print(f"rank {r}: tp reenter ok (refused, the group aborted, {time.monotonic() - t0:.1f} s)", flush=True)


def main():
    if MODE == "check" and sys.argv[2] == "host":
        g = lowcon.init("host", timeout=30)
        check(g, torch.device("cpu"))
        return
    g = lowcon.init("gpu", timeout=10 if MODE in ("dead", "reenter") else 30)
    dev = torch.device("cuda", g.device)
    torch.cuda.set_device(dev)
    if MODE == "check":
        check(g, dev)
    elif MODE == "overlap":
        overlap(g, dev)
    elif MODE == "fresh":
        fresh(g, dev, int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
    elif MODE == "dead":
        dead(g, dev)
    elif MODE == "reenter":
        reenter(g, dev)
    else:
        fail(f"unknown mode {MODE}")


if __name__ == "__main__":
    main()
