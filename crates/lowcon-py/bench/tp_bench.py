"""Fused tensor-parallel ops, paired: lowcon.tp against the unfused paths, PyTorch's
torch.ops.symm_mem fused ops and the GEMM alone, in one job.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 crates/lowcon-py/bench/tp_bench.py \\
        [--tokens 8192 --hidden 8192 --ffn 28672] [--rounds 20] [--modes ...] [--json out.json]

Llama-style MLP shapes split over the ranks (sequence parallel):
- all-gather-matmul: x [tokens / world, d] gathered along dim 0, times w_up [d, f / world];
- matmul-reduce-scatter: h [tokens, f / world] times w_down [f / world, d], reduce-scattered
  along dim 0 into [tokens / world, d].

Modes (each op): `gemm` (the matmul alone, on the gathered / unreduced operand),
`lowcon` (lowcon.tp's fused op), `lowcon-twin` (the same again: the A/A noise),
`lowcon-unfused` (lowcon's all-gather or reduce-scatter, then / after the matmul),
`nccl-unfused` (NCCL's), `symm-mem` (torch.ops.symm_mem's fused op; skipped where it
cannot run, with the reason printed). Each round times every mode `--iters` times with
CUDA events after `--warmup` calls, in a rotated order; a mode's round value is its
median. Ratios to `gemm` are per round, summarised by their median and a 95% interval
(2.5th-97.5th percentile of the rounds). bfloat16.
"""

import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist

import lowcon
import lowcon.distributed  # noqa: F401
import lowcon.tp as tp


def pct(xs, q):
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--ffn", type=int, default=28672)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="gemm,lowcon,lowcon-twin,lowcon-unfused,nccl-unfused,symm-mem")
    ap.add_argument("--ops", default="ag-mm,mm-rs")
    ap.add_argument("--json")
    args = ap.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    share = os.environ.get("LOWCON_SHARE_GPU") == "1"
    dev = torch.device("cuda", 0 if share else local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    g = lowcon.from_process_group(pg, backend="gpu")
    modes = args.modes.split(",")
    T, D, F = args.tokens, args.hidden, args.ffn
    if T % world or F % world:
        sys.exit(f"tokens {T} and f {F} must divide by the world of {world}")
    bf = torch.bfloat16
    torch.manual_seed(rank)
    x = torch.randn(T // world, D, device=dev, dtype=bf)
    w_up = torch.randn(D, F // world, device=dev, dtype=bf) / D ** 0.5
    h = torch.randn(T, F // world, device=dev, dtype=bf)
    w_down = torch.randn(F // world, D, device=dev, dtype=bf) / F ** 0.5
    x_full = torch.empty(T, D, device=dev, dtype=bf)
    mm_full = torch.empty(T, D, device=dev, dtype=bf)
    rs_out = torch.empty(T // world, D, device=dev, dtype=bf)

    skipped = {}
    symm = None
    if "symm-mem" in modes:
        try:
            import torch.distributed._symmetric_memory as symm_mem

            symm_mem.enable_symm_mem_for_group(pg.group_name)
            symm = torch.ops.symm_mem
            symm.fused_all_gather_matmul(x, [w_up], 0, pg.group_name)
            symm.fused_matmul_reduce_scatter(h, w_down, "sum", 0, pg.group_name)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (reported, then the mode is left out)
            skipped["symm-mem"] = f"{type(e).__name__}: {e}"
            modes.remove("symm-mem")

    def cell(op, mode):
        if op == "ag-mm":
            if mode == "gemm":
                return lambda: torch.matmul(x_full, w_up)
            if mode in ("lowcon", "lowcon-twin"):
                return lambda: tp.fused_all_gather_matmul(x, [w_up], 0, g, return_A=False)
            if mode == "lowcon-unfused":
                return lambda: (g.all_gather(x_full, x), torch.matmul(x_full, w_up))
            if mode == "nccl-unfused":
                return lambda: (dist.all_gather_into_tensor(x_full, x), torch.matmul(x_full, w_up))
            if mode == "symm-mem":
                return lambda: symm.fused_all_gather_matmul(x, [w_up], 0, pg.group_name)
        else:
            if mode == "gemm":
                return lambda: torch.matmul(h, w_down)
            if mode in ("lowcon", "lowcon-twin"):
                return lambda: tp.fused_matmul_reduce_scatter(h, w_down, "sum", 0, g)
            if mode == "lowcon-unfused":
                return lambda: (torch.matmul(h, w_down, out=mm_full), g.reduce_scatter(rs_out, mm_full))
            if mode == "nccl-unfused":
                return lambda: (torch.matmul(h, w_down, out=mm_full), dist.reduce_scatter_tensor(rs_out, mm_full))
            if mode == "symm-mem":
                return lambda: symm.fused_matmul_reduce_scatter(h, w_down, "sum", 0, pg.group_name)
        raise SystemExit(f"unknown mode {mode}")

    ops = args.ops.split(",")
    cells = [(op, m) for op in ops for m in modes]
    fns = {c: cell(*c) for c in cells}
    for c in cells:  # warm-up, and workspaces / channels made before timing
        for _ in range(args.warmup):
            fns[c]()
    torch.cuda.synchronize()
    dist.barrier()
    times = {c: [] for c in cells}
    for rnd in range(args.rounds):
        order = cells[rnd % len(cells):] + cells[:rnd % len(cells)]
        for c in order:
            evs = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters + 1)]
            evs[0].record()
            for i in range(args.iters):
                fns[c]()
                evs[i + 1].record()
            torch.cuda.synchronize()
            ms = [evs[i].elapsed_time(evs[i + 1]) for i in range(args.iters)]
            # Every rank's value of the round: the slowest rank's (a collective ends on all).
            t = torch.tensor([statistics.median(ms)], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times[c].append(t.item())
    if rank == 0:
        print(f"tp_bench: {world} ranks, {torch.cuda.get_device_name(dev)}, tokens {T}, d {D}, f {F} (bf16), "
              f"{args.rounds} rounds x {args.iters} calls")
        for k, why in skipped.items():
            print(f"  {k}: skipped: {why}")
        out = {"world": world, "tokens": T, "d": D, "f": F, "rounds": args.rounds, "skipped": skipped, "cells": {}}
        for op in ops:
            print(f"\n{op}: ms per call (median of rounds [min, max]); ratio to gemm per round, median [95%]")
            base = times[(op, "gemm")] if (op, "gemm") in times else None
            for m in modes:
                ts = times[(op, m)]
                row = {"ms": ts}
                line = f"  {m:16s} {statistics.median(ts):8.3f} [{min(ts):.3f}, {max(ts):.3f}]"
                if base:
                    ratios = [a / b for a, b in zip(ts, base)]
                    row["ratio_to_gemm"] = ratios
                    line += (f"   x{statistics.median(ratios):.3f} [{pct(ratios, 0.025):.3f}, "
                             f"{pct(ratios, 0.975):.3f}]")
                print(line)
                out["cells"][f"{op}/{m}"] = row
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
