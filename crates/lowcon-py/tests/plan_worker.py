"""One rank of the planner's check (NOTE [one planner]) on the host backend, started by
torchrun with LOWCON_DEBUG=1 (every distinct plan is logged once, with its context and
the tuning-table rule it came from):

    python plan_worker.py direct     # auto calls, lowcon.fsdp's hooks, lowcon.tp's ops
    python plan_worker.py backend    # the torch.distributed backend (FSDP2's entry points)

Each entry point's calls run for real on fresh data and are checked against a torch
reference; then the rank prints `g.plan(...)` for the same calls as JSON and the bytes
its group moved (`stats()`: wire bytes show whether the bf16 wire ran), and
"rank R: plan MODE ok". The test (test_plan.py) reads which rules decided.
"""

import gc
import json
import os
import sys

import torch
import torch.distributed as dist

import lowcon

MODE = sys.argv[1]
RANK = int(os.environ["RANK"])
N = 1 << 12


def fail(msg):
    print(f"rank {RANK}: plan {MODE} FAILED: {msg}", flush=True)
    sys.exit(1)


def data(seed, rank, n, dtype):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return (torch.randint(-15, 16, (n,), generator=g) * 2 + 1).to(dtype)


def check_rs(out, seed, world, dtype, what):
    want = sum(data(seed, p, world * N, dtype)[RANK * N:(RANK + 1) * N].float() for p in range(world))
    if not torch.equal(out.float(), want):
        fail(f"{what}: {out[:4]} != {want[:4]}")


def check_ag(out, seed, world, dtype, what):
    want = torch.cat([data(seed, p, N, dtype) for p in range(world)])
    if not torch.equal(out, want):
        fail(f"{what}: {out[:4]} != {want[:4]}")


def show(label, plan):
    print(f"rank {RANK}: plan {label} {json.dumps(plan, sort_keys=True)}", flush=True)


def direct():
    import lowcon.fsdp
    import lowcon.tp

    g = lowcon.init(backend="host")
    w = g.world_size
    # Auto calls, no hint.
    out = torch.full((w * N,), float("nan"), dtype=torch.bfloat16)
    g.all_gather(out, data(1, RANK, N, torch.bfloat16))
    check_ag(out, 1, w, torch.bfloat16, "auto all-gather")
    out = torch.full((N,), float("nan"))
    g.reduce_scatter(out, data(2, RANK, w * N, torch.float32))
    check_rs(out, 2, w, torch.float32, "auto reduce-scatter")
    # The all-gather's arrival (NOTE [arrival-driven all-gather]): the host backend's
    # ce-pull reads each peer after waiting for it alone; the plan says so, a bad name raises.
    for arrival in ("in-order", "any-order", "barrier"):
        out = torch.full((w * N,), float("nan"), dtype=torch.bfloat16)
        g.all_gather(out, data(7, RANK, N, torch.bfloat16), algorithm="ce-pull", arrival=arrival)
        check_ag(out, 7, w, torch.bfloat16, f"arrival={arrival} all-gather")
        got = g.plan("all-gather", N, "bfloat16", algorithm="ce-pull", arrival=arrival)["arrival"]
        if got != arrival:
            fail(f"plan of arrival={arrival}: {got}")
    if g.plan("all-gather", N, "bfloat16")["arrival"] != "barrier":
        fail("the default arrival is not barrier")
    try:
        g.all_gather(out, data(7, RANK, N, torch.bfloat16), arrival="soon")
        fail("arrival='soon' was accepted")
    except Exception as e:  # lowcon.InvalidArgument
        if "barrier, in-order or any-order" not in str(e):
            fail(f"arrival='soon': {e}")
    show("auto-ag", g.plan("all-gather", N, "bfloat16"))
    show("auto-rs", g.plan("reduce-scatter", N, "float32"))
    # FSDP2's hooks (called as FSDP2 calls them), fp32 gradients of bf16 parameters.
    ag, rs = lowcon.fsdp.LowconAllGather(g), lowcon.fsdp.LowconReduceScatter(g, wire="auto")
    rs._exact = True  # as install's post_backward wrapper says for bf16 gradients: the hint
    out = torch.full((w * N,), float("nan"), dtype=torch.bfloat16)
    ag(out, data(3, RANK, N, torch.bfloat16))
    check_ag(out, 3, w, torch.bfloat16, "fsdp all-gather")
    before = g.stats()["wire_bytes"]
    out = torch.full((N,), float("nan"))
    rs(out, data(4, RANK, w * N, torch.float32))
    check_rs(out, 4, w, torch.float32, "fsdp reduce-scatter")
    print(f"rank {RANK}: plan fsdp-wire-bytes {g.stats()['wire_bytes'] - before}", flush=True)
    show("fsdp-ag", g.plan("all-gather", N, "bfloat16", context="fsdp"))
    show("fsdp-rs", g.plan("reduce-scatter", N, "float32", context="fsdp", bf16_exact=True))
    # lowcon.tp on the host backend: the plain sequence, hinted "tp".
    A, B = data(5, RANK, w * 8 * 16, torch.float32).view(w * 8, 16), data(6, 0, 16 * 4, torch.float32).view(16, 4)
    full = lowcon.tp.fused_matmul_reduce_scatter(A, B, "sum", 0, g)
    want = sum(data(5, p, w * 8 * 16, torch.float32).view(w * 8, 16) @ B for p in range(w))[RANK * 8:(RANK + 1) * 8]
    if not torch.allclose(full, want):
        fail("tp matmul-reduce-scatter")
    _, (Y,) = lowcon.tp.fused_all_gather_matmul(A[:8], [B], 0, g)
    if Y.shape != (w * 8, 4):
        fail(f"tp all-gather-matmul shape {tuple(Y.shape)}")
    show("tp-ag", g.plan("all-gather", 8 * 16, "float32", context="tp"))
    show("tp-rs", g.plan("reduce-scatter", 8 * 4, "float32", context="tp"))


def backend():
    import lowcon.distributed  # noqa: F401  (registers the backend)

    dist.init_process_group("lowcon")
    w = dist.get_world_size()
    out = torch.full((w * N,), float("nan"), dtype=torch.bfloat16)
    dist.all_gather_into_tensor(out, data(7, RANK, N, torch.bfloat16))
    check_ag(out, 7, w, torch.bfloat16, "backend all-gather")
    out = torch.full((N,), float("nan"))
    dist.reduce_scatter_tensor(out, data(8, RANK, w * N, torch.float32))
    check_rs(out, 8, w, torch.float32, "backend reduce-scatter")
    stats = dist.group.WORLD.lowcon_group.stats()
    print(f"rank {RANK}: plan backend-wire-bytes {stats['wire_bytes']}", flush=True)
    dist.destroy_process_group()
    gc.collect()  # groups kept by cycles go before the interpreter does (python.md: Shutdown)


def main():
    {"direct": direct, "backend": backend}[MODE]()
    print(f"rank {RANK}: plan {MODE} ok", flush=True)


if __name__ == "__main__":
    main()
