"""One rank of the honest floor's GPU check (NOTE [honest floor]): traffic calls run the
plan's copies without sync, and leave the group as they found it. Started on GPUs by
`lowcon launch` (real GPUs, or ranks sharing one under MPS):

    lowcon launch --nproc-per-node 4 -- python traffic_gpu_worker.py

For each copy-engine path that pulls (ce-pull from torch memory and from the pool,
ce-reduce from torch memory per piece and once per call, the bf16 wire on ce-reduce),
three traffic calls on the collective's channel, then the real call on fresh data, checked
exactly against a torch reference (small odd integers: every sum is exact in f32); after
the last traffic calls, a real ce-push and a real wire call read by sm-direct on the same
channels, checked too. Traffic calls of ce-push (it writes into the peers' memory) and of
the kernel algorithms (ll, sm-direct) are refused with an error naming the rank. Prints
"rank R: traffic ok".
"""

import os
import sys

import torch

import lowcon

RANK = int(os.environ.get("RANK", "0"))


def fail(msg):
    print(f"rank {RANK}: traffic FAILED: {msg}", flush=True)
    sys.exit(1)


def data(seed, p, n, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed * 1000 + p)
    return (torch.randint(-15, 16, (n,), generator=gen) * 2 + 1).to(dtype)


def main():
    g = lowcon.init("gpu")
    w, dev = g.world_size, torch.device("cuda", g.device)
    torch.cuda.set_device(dev)
    n = (1 << 22) + 192  # 16 MiB of f32 and a ragged tail: several pieces
    seed = 10
    ag_cases = (("ce-pull torch", dict(algorithm="ce-pull", map_ordinary=True), False, None),
                ("ce-pull pool", dict(algorithm="ce-pull"), True, None),
                ("ce-push after traffic", dict(algorithm="ce-pull"), True, dict(algorithm="ce-push")))
    for name, opts, pool, real in ag_cases:
        seed += 1
        out = g.empty([w * n], torch.float32, framework="torch") if pool else torch.empty(w * n, device=dev)
        inp = data(seed, RANK, n).to(dev)
        for _ in range(3):
            g.all_gather(out, inp, traffic=True, **opts)
        inp.copy_(data(seed + 100, RANK, n).to(dev))
        out.fill_(float("nan"))
        g.all_gather(out, inp, **(real or opts))
        torch.cuda.synchronize(dev)
        want = torch.cat([data(seed + 100, p, n) for p in range(w)])
        if not torch.equal(out.cpu(), want):
            fail(f"all-gather {name} after traffic calls: wrong result")
    wire = dict(algorithm="ce-reduce", wire="bf16", pipeline=4)
    rs_cases = (("ce-reduce torch", dict(algorithm="ce-reduce", map_ordinary=True, pipeline=4), None),
                ("ce-reduce once", dict(algorithm="ce-reduce", reduce_launch="once", pipeline=4), None),
                ("bf16 wire", wire, None),
                ("the wire read directly after traffic", wire, dict(wire, algorithm="sm-direct")))
    for name, opts, real in rs_cases:
        seed += 1
        inp = data(seed, RANK, w * n).to(dev)
        out = torch.empty(n, device=dev)
        for _ in range(3):
            g.reduce_scatter(out, inp, traffic=True, **opts)
        inp.copy_(data(seed + 100, RANK, w * n).to(dev))
        out.fill_(float("nan"))
        g.reduce_scatter(out, inp, **(real or opts))
        torch.cuda.synchronize(dev)
        want = sum(data(seed + 100, p, w * n)[RANK * n:(RANK + 1) * n] for p in range(w))
        if not torch.equal(out.cpu(), want):
            fail(f"reduce-scatter {name} after traffic calls: wrong result")
    big, small = torch.ones(w * 1024, device=dev), torch.ones(1024, device=dev)
    for what, call in (("ll", lambda: g.all_gather(big, small, algorithm="ll", traffic=True)),
                       ("ce-push", lambda: g.all_gather(big, small, algorithm="ce-push", traffic=True)),
                       ("sm-direct", lambda: g.reduce_scatter(small, big, algorithm="sm-direct", traffic=True))):
        try:
            call()
        except lowcon.InvalidArgument as e:
            if f"rank {RANK}" not in str(e) or what not in str(e):
                fail(f"traffic with {what}: the error names neither the rank nor the algorithm: {e}")
        else:
            fail(f"a traffic call with {what} (kernels) was accepted")
    g.synchronize()
    g.close()
    print(f"rank {RANK}: traffic ok", flush=True)


if __name__ == "__main__":
    main()
