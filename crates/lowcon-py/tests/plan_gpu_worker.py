"""One rank of the planner's GPU check (NOTE [one planner]): what only a GPU plans, the
CTAs, the sync, map_ordinary and the released reduce-scatter of lowcon.tp, comes from the
tuning table. Started on GPUs by `lowcon launch`, twice:

    LOWCON_TUNING=... python plan_gpu_worker.py ours      # the table written below: its rules
    python plan_gpu_worker.py shipped                       # the shipped table's

Each run makes lowcon.fsdp's reduce-scatter hook calls (bf16-exact fp32 gradients, then
fp32 ones from torch's memory) and a lowcon.tp matmul-reduce-scatter on fresh data,
checked against a torch reference, with LOWCON_DEBUG=1 set before lowcon loads: every
distinct plan is logged once with its context and rule, to this process's stderr, which
the worker reads back (fd 2 goes to a file). Prints "rank R: plan-gpu MODE ok".
"""

import os
import sys
import tempfile

MODE = sys.argv[1]
RANK = int(os.environ.get("RANK", "0"))
os.environ["LOWCON_DEBUG"] = "1"

# The table of `ours` (every rule differs from the shipped h200 tables).
TABLE = """lowcon-tuning 1
machine gpu=H world=*
source plan_gpu_worker.py
reduce-scatter context=fsdp exact=yes dtype=f32 algorithm=ce-reduce wire=bf16 ctas=7 sync=memop
reduce-scatter context=fsdp algorithm=ce-reduce map=no ctas=9
reduce-scatter context=tp algorithm=ce-reduce ctas=5
all-gather algorithm=ce-pull
reduce-scatter algorithm=sm-direct ctas=3
"""

if MODE == "write-table":
    open(sys.argv[2], "w").write(TABLE)
    sys.exit(0)
log = tempfile.NamedTemporaryFile("w+", prefix=f"plan-gpu-r{RANK}-", suffix=".log", delete=False)
saved = os.dup(2)
os.dup2(log.fileno(), 2)

import torch  # noqa: E402

import lowcon  # noqa: E402
import lowcon.fsdp  # noqa: E402
import lowcon.tp  # noqa: E402


def fail(msg):
    os.dup2(saved, 2)
    print(f"rank {RANK}: plan-gpu {MODE} FAILED: {msg}", flush=True)
    sys.exit(1)


def data(seed, p, n, dtype):
    gen = torch.Generator().manual_seed(seed * 1000 + p)
    return (torch.randint(-15, 16, (n,), generator=gen) * 2 + 1).to(dtype)


def main():
    g = lowcon.init("gpu")
    w, dev = g.world_size, torch.device("cuda", g.device)
    torch.cuda.set_device(dev)
    n = 1 << 22  # 16 MiB of f32 per rank: past every small-message rule
    rs = lowcon.fsdp.LowconReduceScatter(g, wire="bf16")
    for seed, exact in ((1, True), (2, False)):
        rs._exact = exact  # as install's post_backward wrapper says
        rs.wire = "bf16" if exact else None
        inp = rs.allocate([w * n], dtype=torch.float32, device=dev)
        inp.copy_(data(seed, RANK, w * n, torch.float32).to(dev))
        out = rs.allocate([n], dtype=torch.float32, device=dev)
        out.fill_(float("nan"))
        rs(out, inp)
        torch.cuda.synchronize(dev)
        want = sum(data(seed, p, w * n, torch.float32)[RANK * n:(RANK + 1) * n] for p in range(w))
        if not torch.equal(out.cpu(), want):
            fail(f"fsdp reduce-scatter (exact={exact}): {out[:4]} != {want[:4]}")
    mapped = g.pool_stats()["mapped_allocations"]
    m, k, f = 4 * w, 64, 32
    A = data(3, RANK, m * k, torch.float32).view(m, k).to(dev)
    B = data(4, 0, k * f, torch.float32).view(k, f).to(dev)
    got = lowcon.tp.fused_matmul_reduce_scatter(A, B, "sum", 0, g)
    torch.cuda.synchronize(dev)
    want = sum(data(3, p, m * k, torch.float32).view(m, k) @ B.cpu() for p in range(w))[RANK * 4:(RANK + 1) * 4]
    if not torch.equal(got.cpu(), want):
        fail("tp matmul-reduce-scatter")
    g.synchronize()
    sys.stderr.flush()
    log.flush()
    text = open(log.name).read()
    table = os.environ.get("LOWCON_TUNING", "")
    line = {r: i + 1 for i, r in enumerate(TABLE.splitlines())}

    def logged(what, ctx, *words):
        hits = [ln for ln in text.splitlines() if f"plan: {what} ({ctx}):" in ln]
        if not any(all(wd in ln for wd in words) for ln in hits):
            fail(f"no plan of {what} ({ctx}) with {words} was logged; logged: {hits}")

    if MODE == "ours":
        rules = TABLE.splitlines()
        logged("reduce-scatter", "fsdp", "algorithm=ce-reduce ctas=7 sync=memop", "wire=bf16",
               f"origin={table}:{line[rules[3]]}")
        logged("reduce-scatter", "fsdp", "algorithm=ce-reduce ctas=9", "wire=none", "map_ordinary=false",
               f"origin={table}:{line[rules[4]]}")
        logged("released reduce-scatter", "tp", "algorithm=ce-reduce ctas=5", f"origin={table}:{line[rules[5]]}")
        if mapped != 0:
            fail(f"map=no, yet {mapped} peer allocations were mapped")
    else:
        # The shipped table's rule for this world (4x H200: the wire read directly, 2x H200:
        # on ce-reduce), as g.plan reads it.
        p = g.plan("reduce-scatter", n, "float32", context="fsdp", bf16_exact=True, wire="bf16")
        logged("reduce-scatter", "fsdp", f"algorithm={p['algorithm']} ctas=64", "wire=bf16", "origin=shipped:")
        logged("reduce-scatter", "fsdp", "algorithm=ce-reduce", "wire=none", "map_ordinary=true", "origin=shipped:")
        logged("released reduce-scatter", "tp", "algorithm=ce-reduce ctas=64")
        if mapped == 0:
            fail("the shipped table maps FSDP2's torch memory, yet nothing was mapped")
    g.close()
    os.dup2(saved, 2)
    print(f"rank {RANK}: plan-gpu {MODE} ok ({mapped} peer allocations mapped)", flush=True)


if __name__ == "__main__":
    main()
