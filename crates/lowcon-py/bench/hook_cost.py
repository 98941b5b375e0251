"""Host time per FSDP2 hook call, lowcon against NCCL, outside FSDP: what one
`allocate` and one collective call cost the calling thread.

    torchrun --nproc-per-node 2 hook_cost.py [--calls 400] [--numel 25165824]

Per mode and operation: the median and 90th percentile of the host time (µs) of one
call, over `--calls` calls after warm-up. Calls run in groups of 4 with the stream
synchronised between groups, outside the timed calls, so the driver's queue never
fills (a full queue would time the GPU, not the host). Sizes are one FSDP unit of the
2048x8 model by default (25M bf16 parameters gathered, fp32 gradients reduced). The
modes are the objects FSDP2 calls: lowcon's hooks (lowcon.fsdp) with kernel and memop
sync (torch's memory, the default: one host exchange per call) and with the pool, and
FSDP2's defaults (NCCL; not with LOWCON_SHARE_GPU=1, where ranks share a GPU and NCCL
refuses them: host costs there include waiting for the other rank's host).
"""

import gc
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter


# lowcon's host phases, in the order a call passes them (NOTE [host phases]).
PHASES = ("binding", "checks", "plan", "exchange", "prepare", "verify", "finish")


def timed(fn, calls, sync, group=4, clock=None):
    """Host µs of each of `calls` calls of fn(i), synchronising between groups. With
    `clock` (a function returning {kind: (calls, ns)}: lowcon's enqueue clock and host
    phases), also each kind's µs per call, read outside the timed window: {kind: [µs]}
    (NOTE [enqueue clock], NOTE [host phases])."""
    us = []
    enq = {}
    for i in range(calls):
        if i % group == 0:
            sync()
        before = clock() if clock else None
        t0 = time.perf_counter()
        fn(i)
        us.append(1e6 * (time.perf_counter() - t0))
        if clock:
            after = clock()
            for k, (_, ns) in after.items():
                enq.setdefault(k, []).append((ns - before[k][1]) / 1e3)
    sync()
    return (us, enq) if clock else us


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--numel", type=int, default=25_165_824, help="all-gather output elements (bf16)")
    p.add_argument("--passes", type=int, default=1,
                   help="run the modes in turn this many times (a mode measured first can pay for what it warms)")
    p.add_argument("--json", default="")
    p.add_argument("--cpu", action="store_true", help="gloo and lowcon's host backend: a smoke test of the script")
    args = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.cpu:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
        sync = lambda: None  # noqa: E731
    else:
        shared = os.environ.get("LOWCON_SHARE_GPU") == "1"
        dev = torch.device("cuda", 0 if shared else local)
        torch.cuda.set_device(dev)
        # Ranks sharing a GPU (a correctness machine): NCCL refuses them, so no NCCL row.
        dist.init_process_group("gloo" if shared else "nccl", **({} if shared else {"device_id": dev}))
        sync = torch.cuda.synchronize
    world, rank = dist.get_world_size(), dist.get_rank()
    import lowcon
    import lowcon.fsdp

    g = lowcon.from_process_group(backend="host" if args.cpu else "gpu")
    n = args.numel - args.numel % world
    modes = {
        "nccl": (DefaultAllGather(), DefaultReduceScatter()),
        # The default: torch's memory, read in place by the peers (a host exchange per call).
        "lowcon": (lowcon.fsdp.LowconAllGather(g), lowcon.fsdp.LowconReduceScatter(g)),
        "lowcon@memop": (lowcon.fsdp.LowconAllGather(g, sync="memop"),
                         lowcon.fsdp.LowconReduceScatter(g, sync="memop")),
        "lowcon@mem=pool": (lowcon.fsdp.LowconAllGather(g, memory="pool"),
                            lowcon.fsdp.LowconReduceScatter(g, memory="pool")),
    }
    if args.cpu or os.environ.get("LOWCON_SHARE_GPU") == "1":
        # gloo's reduce_scatter_tensor hangs under FSDP2's default (torch 2.11, CPU).
        del modes["nccl"]
    pg = dist.group.WORLD
    results = {}
    runs = [(name if args.passes == 1 else f"{name} #{k + 1}", ag, rs)
            for k in range(args.passes) for name, (ag, rs) in modes.items()]
    for name, ag, rs in runs:
        # FSDP's shapes: the all-gather output (the input is its rank's slice), the
        # reduce-scatter input (fp32) and its output.
        outs = [ag.allocate((n,), dtype=torch.bfloat16, device=dev) for _ in range(2)]
        rin = [rs.allocate((2 * n,), dtype=torch.float32, device=dev) for _ in range(2)]
        rout = [rs.allocate((2 * n // world,), dtype=torch.float32, device=dev) for _ in range(2)]
        for t in outs + rin:
            t.normal_()

        def ag_call(i):
            o = outs[i % 2]
            ag(output_tensor=o, input_tensor=o.narrow(0, rank * (n // world), n // world), group=pg)

        def rs_call(i):
            rs(output_tensor=rout[i % 2], input_tensor=rin[i % 2], group=pg, op=dist.ReduceOp.AVG)

        # FSDP2's reduce-scatter as lowcon.fsdp hands it on with its bf16 copy-in (NOTE
        # [bf16 copy-in]): a bf16 input reduced into the fp32 output.
        rin16 = [t.to(torch.bfloat16) for t in rin] if not name.startswith("nccl") else []

        def rs16_call(i):
            rs.group.reduce_scatter(rout[i % 2], rin16[i % 2], "avg", **rs.options)

        def ag_alloc(i):
            ag.allocate((n,), dtype=torch.bfloat16, device=dev)

        def rs_alloc(i):
            rs.allocate((2 * n,), dtype=torch.float32, device=dev)

        res = {}
        ops = [("all-gather", ag_call), ("reduce-scatter", rs_call), ("all-gather allocate", ag_alloc),
               ("reduce-scatter allocate", rs_alloc)]
        if rin16:
            ops.insert(2, ("reduce-scatter bf16 in", rs16_call))
        for op, fn in ops:
            timed(fn, 20, sync)  # warm-up
            us = timed(fn, args.calls, sync)
            us.sort()
            res[op] = {"median_us": statistics.median(us), "p90_us": us[int(0.9 * len(us))], "calls": len(us)}
            if not name.startswith("nccl") and "allocate" not in op:
                # A second pass, for the driver's share (the clock's reads stay out of the
                # first pass's times).
                _, enq = timed(fn, args.calls // 4, sync, clock=lowcon.enqueue_clock)
                res[op]["enqueue_us"] = {k: statistics.median(v) for k, v in enq.items()}
                _, ph = timed(fn, args.calls // 4, sync, clock=lowcon.host_phases)
                res[op]["phase_us"] = {k: statistics.median(v) for k, v in ph.items()}
        results[name] = res
        del outs, rin, rout, rin16
        dist.barrier()
    if rank == 0:
        name = "cpu" if args.cpu else torch.cuda.get_device_name(dev)
        print(f"host µs per call, {world} x {name}, torch {torch.__version__}, "
              f"lowcon {lowcon.__version__}, all-gather {n} bf16, reduce-scatter {2 * n} fp32")
        ops = list(dict.fromkeys(op for res in results.values() for op in res))
        print(f"{'mode':<19}" + "".join(f"{op:>26}" for op in ops))
        for name, res in results.items():
            print(f"{name:<19}" + "".join(f"{res[op]['median_us']:>14.1f} (p90 {res[op]['p90_us']:>6.1f})"
                                          if op in res else f"{'-':>26}" for op in ops))
        print("where one lowcon call's host time goes, median µs: what it hands the driver (NOTE [enqueue "
              "clock]), then the library's phases less those (NOTE [host phases]), of the call's median:")
        for name, res in results.items():
            for op, r in res.items():
                if "enqueue_us" in r:
                    e, p = r["enqueue_us"], r.get("phase_us", {})
                    print(f"  {name:<19} {op:<24} " + "  ".join(f"{k} {v:.1f}" for k, v in sorted(e.items()))
                          + f"  (driver {sum(e.values()):.1f})  |  "
                          + "  ".join(f"{k} {p[k]:.1f}" for k in PHASES if k in p)
                          + f"  (phases {sum(p.values()):.1f}) of {r['median_us']:.1f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"world": world, "results": results}, f, indent=1)
    dist.barrier()
    g.close()
    dist.destroy_process_group()
    gc.collect()  # groups kept by cycles go before the interpreter does (python.md: Shutdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
