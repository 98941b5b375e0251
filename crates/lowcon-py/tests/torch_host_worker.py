"""One rank of the torch-tensor check on the host backend (CPU torch tensors), started by
`lowcon launch`: torch tensors take the native fast path (their own accessors, no
DLPack export) and must give what DLPack gave.

    python torch_host_worker.py

Fresh random data per call, outputs poisoned (NaN) before every call, a torch reference:
all-gather exact; reduce-scatter of small odd integers exact for sum/min/max in f32, bf16
and f16, avg within 1e-6 relative in f32. Plain tensors and pool tensors
(g.empty(..., framework="torch")), in place included. Bad input (non-contiguous, float64,
a CUDA-less device mismatch is not testable here) raises lowcon.InvalidArgument naming
the tensor. Prints "rank R: torch ok".
"""

import os
import sys

import torch

import lowcon

RANK = int(os.environ["RANK"])


def fail(msg):
    print(f"rank {RANK}: torch FAILED: {msg}", flush=True)
    sys.exit(1)


def data(seed, rank, n, dtype):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return (torch.randint(-15, 16, (n,), generator=g) * 2 + 1).to(dtype)


def main():
    g = lowcon.init(backend="host")
    w, r = g.world_size, g.rank
    seed = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (1, 7, 4096 + 3):
            for pool in (False, True):
                seed += 1
                inp = data(seed, r, n, dtype)
                out = g.empty([w * n], dtype, framework="torch") if pool else torch.empty(w * n, dtype=dtype)
                out.fill_(float("nan"))
                g.all_gather(out, inp)
                want = torch.cat([data(seed, p, n, dtype) for p in range(w)])
                if not torch.equal(out, want):
                    fail(f"all-gather {dtype} n={n} pool={pool}: {out[:8]} != {want[:8]}")
                # in place: the input is this rank's slice of the output
                out.fill_(float("nan"))
                out[r * n:(r + 1) * n] = inp
                g.all_gather(out, out[r * n:(r + 1) * n])
                if not torch.equal(out, want):
                    fail(f"in-place all-gather {dtype} n={n} pool={pool}")
                for op in ("sum", "min", "max", "avg"):
                    if op == "avg" and dtype != torch.float32:
                        continue
                    seed += 1
                    rin = g.empty([w * n], dtype, framework="torch") if pool else torch.empty(w * n, dtype=dtype)
                    rin.copy_(data(seed, r, w * n, dtype))
                    rout = torch.full((n,), float("nan"), dtype=dtype)
                    g.reduce_scatter(rout, rin, op)
                    allin = torch.stack([data(seed, p, w * n, dtype).float() for p in range(w)])
                    ref = {"sum": allin.sum(0), "min": allin.min(0).values, "max": allin.max(0).values,
                           "avg": allin.mean(0)}[op][r * n:(r + 1) * n]
                    tol = 1e-6 if op == "avg" else 0.0
                    if not torch.allclose(rout.float(), ref, rtol=tol, atol=0.0):
                        fail(f"reduce-scatter {op} {dtype} n={n} pool={pool}: {rout[:8]} != {ref[:8]}")
    # The bf16 wire: float32 over bf16 equals the float32 call bit for bit; a bfloat16
    # input reduces into a float32 output exactly (small integers).
    for n in (1, 7, 4096 + 3):
        seed += 1
        inp = data(seed, r, w * n, torch.float32) / 8
        inp[n // 2] += 2.0 ** -20  # one inexact value: its piece falls back
        got, want = torch.full((n,), float("nan")), torch.full((n,), float("nan"))
        g.reduce_scatter(got, inp, "sum", wire="bf16")
        g.reduce_scatter(want, inp, "sum", algorithm="ce-reduce")
        if not torch.equal(got.view(torch.int32), want.view(torch.int32)):
            fail(f"wire bf16 n={n}: not the float32 result bit for bit")
        out32 = torch.full((n,), float("nan"))
        g.reduce_scatter(out32, data(seed, r, w * n, torch.bfloat16), "sum")
        ref = torch.stack([data(seed, p, w * n, torch.float32) for p in range(w)]).sum(0)[r * n:(r + 1) * n]
        if not torch.equal(out32, ref):
            fail(f"bfloat16 into float32 n={n}: {out32[:4]} != {ref[:4]}")
    if g.stats()["wire_bytes"] != 2 * (w - 1) * (1 + 7 + 4096 + 3):
        fail(f"stats after the wire calls: {g.stats()}")
    # Bad input names the tensor and what is wrong; the group still works after.
    x = torch.ones(w * 8)
    checks = [
        (lambda: g.all_gather(torch.empty(w * 8, 2).t(), torch.ones(2 * 8)), "output: not contiguous"),
        (lambda: g.all_gather(torch.empty(w * 8, dtype=torch.float64), torch.ones(8, dtype=torch.float64)),
         "dtype torch.float64"),
        (lambda: g.all_gather(x, torch.ones(9)), "9"),
    ]
    for call, needle in checks:
        try:
            call()
        except lowcon.InvalidArgument as e:
            if needle not in str(e):
                fail(f"error {e!r} does not say {needle!r}")
        else:
            fail(f"no error for {needle!r}")
    g.all_gather(x, torch.full((8,), float(r)))
    if not torch.equal(x, torch.arange(w, dtype=torch.float32).repeat_interleave(8)):
        fail("the group does not work after the bad calls")
    g.close()
    print(f"rank {r}: torch ok", flush=True)


if __name__ == "__main__":
    main()
