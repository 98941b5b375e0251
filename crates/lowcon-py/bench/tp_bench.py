"""Fused tensor-parallel ops, paired: lowcon.tp against the unfused paths, PyTorch's
torch.ops.symm_mem fused ops and the GEMM alone, in one job.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 crates/lowcon-py/bench/tp_bench.py \\
        [--tokens 8192 --hidden 8192 --ffn 28672] [--rounds 20] [--modes ...] [--json out.json] \\
        [--profile DIR [--profile-calls 3]]

Llama-style MLP shapes split over the ranks (sequence parallel):
- all-gather-matmul: x [tokens / world, d] gathered along dim 0, times w_up [d, f / world];
- matmul-reduce-scatter: h [tokens, f / world] times w_down [f / world, d], reduce-scattered
  along dim 0 into [tokens / world, d].

Modes (each op): `gemm` (the matmul alone, on the gathered / unreduced operand),
`lowcon` (lowcon.tp's fused op), `lowcon-twin` (the same again: the A/A noise),
`lowcon-memop` (the all-gather-matmul with `sync="memop"`: its first GEMM does not wait
for the entry barrier, NOTE [memop start] in lowcon/tp.py), `lowcon-c128` (the
matmul-reduce-scatter's final reduction on 128 CTAs),
`lowcon-each` (the all-gather-matmul with `gemms="each"`: one GEMM per peer's piece as it
lands, instead of the default's at most two after the last arrival, NOTE [merged GEMMs]),
`lowcon-merged` (the all-gather-matmul as `lowcon`; the matmul-reduce-scatter's probe
`_gemms="merged"`: the chunks in at most three GEMMs, each chunk released when its GEMM
is done),
`lowcon-unfused` (lowcon's all-gather or reduce-scatter, then / after the matmul),
`nccl-unfused` (NCCL's), `symm-mem` (torch.ops.symm_mem's fused op; skipped where it
cannot run, with the reason printed). Each round times every mode `--iters` times with
CUDA events after `--warmup` calls, in a rotated order; a mode's round value is its
median. Ratios to `gemm` are per round, summarised by their median and a 95% interval
(2.5th-97.5th percentile of the rounds). bfloat16.

`--profile DIR`: after the timed rounds (and after `--json` is written, so the timings
are those of a run without it), every op and mode runs `--profile-calls` (3) more calls
back to back under torch.profiler (CUDA activities), a marker kernel (a fill of one
int16) between calls to tell them apart. Rank 0 writes, per op and mode,
`DIR/tp_trace_<op>_<mode>.json.gz` (its chrome trace) and `DIR/tp_kernels_<op>_<mode>.txt`
(its GPU kernels, copies and memsets by name: calls, total device µs, the top 20); for
every mode but `gemm`, the overlap of each call: its span (first to last device activity),
the GEMM kernels' summed and wall time, the span over their sum and over the `gemm`
mode's GEMM time per call, the peer copies' (`Memcpy PtoP`) wall time and
the share of it under a GEMM, and the time from the first GEMM's start to the last peer
copy's end; every rank's medians are gathered. `DIR/tp_profile.txt` has all of it,
`DIR/tp_profile.json` the numbers. The helpers above `main` need no torch.
"""

import gc
import argparse
import json
import os
import re
import statistics
import sys
from collections import namedtuple


def pct(xs, q):
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


# --- profile analysis (torch-free: device events as plain tuples) ---------------------

# One device activity: name, start and duration in µs, and its stream.
Ev = namedtuple("Ev", "name start dur stream")

# cuBLAS / cuBLASLt / CUTLASS GEMM kernels by name (Hopper's nvjet_*, sm90_xmma_gemm_*,
# cutlass::Kernel*, ampere_*_s16816gemm_*).
GEMM_MARKS = ("gemm", "nvjet", "cutlass", "xmma", "wgmma")
# The marker between profiled calls: the fill of a one-element int16 tensor (not
# torch.cuda._sleep's spin_kernel: torch.ops.symm_mem's matmul-reduce-scatter launches
# that one itself).
MARKER = "FillFunctor<short>"
FUSED_MODES = ("lowcon", "lowcon-twin", "lowcon-memop", "lowcon-c128", "lowcon-each", "lowcon-merged", "symm-mem")


def is_gemm(name):
    n = name.lower()
    return any(k in n for k in GEMM_MARKS)


def is_peer_copy(name):
    """A copy between two GPUs (CUPTI's `Memcpy PtoP`): lowcon's and symm_mem's traffic
    over the copy engines. A rank's copy of its own piece is `Memcpy DtoD`, not counted."""
    return name.startswith("Memcpy") and "PtoP" in name


def is_marker(name):
    return MARKER in name


def split_calls(events, n):
    """The device events of each of n profiled calls, each call preceded by a marker and
    the last one followed by one: the events that start between two markers, in start
    order. Returns (calls, True), or ([every non-marker event], False) when the markers
    are not the n + 1 expected (then the window holds everything profiled)."""
    evs = sorted(events, key=lambda e: e.start)
    marks = [e.start for e in evs if is_marker(e.name)]
    rest = [e for e in evs if not is_marker(e.name)]
    if len(marks) != n + 1:
        return [rest], False
    calls = [[] for _ in range(n)]
    for e in rest:
        for i in range(n):
            if marks[i] <= e.start < marks[i + 1]:
                calls[i].append(e)
                break
    return calls, True


def kernel_table(events, calls=1, limit=20):
    """The device activities by name (first 120 characters), longest total first: calls,
    total device µs and µs per profiled call of the op; the top `limit`."""
    acc = {}
    for e in events:
        if is_marker(e.name):
            continue
        a = acc.setdefault(e.name[:120], [0, 0.0])
        a[0] += 1
        a[1] += e.dur
    rows = [{"name": k, "calls": v[0], "device_us": v[1], "us_per_call": v[1] / max(calls, 1)}
            for k, v in acc.items()]
    rows.sort(key=lambda r: -r["device_us"])
    return rows[:limit]


def union(intervals):
    """Sorted, disjoint [start, end) intervals covering the given ones."""
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(ivs):
    return sum(b - a for a, b in ivs)


def intersect(xs, ys):
    """Length of the intersection of two sorted, disjoint interval lists."""
    i = j = 0
    tot = 0.0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            tot += b - a
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return tot


def overlap(events):
    """Whether one call's peer copies hide behind its GEMMs, from its device events:
    span_us (first start to last end), gemm_us (the GEMM kernels' durations summed),
    gemm_wall_us (their union), copy_wall_us (the union of the peer copies), hidden_us
    (the part of it under a GEMM) and hidden (that share), first_gemm_to_last_copy_us,
    head_us (op start to the first GEMM's start), tail_us (the last GEMM's end to the op's
    end), exposed_us (span less GEMM wall: device time with no GEMM running) and
    span_over_gemm (span / gemm_us, comparable with the timed ratio to `gemm`). Peer
    copies are `Memcpy PtoP`; where there is none but there are `Memcpy DtoD`, those are
    used and copy_kind says so. None for no events."""
    evs = [e for e in events if not is_marker(e.name)]
    if not evs:
        return None
    t0 = min(e.start for e in evs)
    t1 = max(e.start + e.dur for e in evs)
    gemms = [e for e in evs if is_gemm(e.name)]
    copies = [e for e in evs if is_peer_copy(e.name)]
    kind = "PtoP"
    if not copies:
        copies = [e for e in evs if e.name.startswith("Memcpy") and "DtoD" in e.name]
        kind = "DtoD (no PtoP seen)" if copies else "none"
    g = union([(e.start, e.start + e.dur) for e in gemms])
    c = union([(e.start, e.start + e.dur) for e in copies])
    r = {
        "span_us": t1 - t0,
        "gemm_kernels": len(gemms),
        "gemm_us": sum(e.dur for e in gemms),
        "gemm_wall_us": length(g),
        "copy_kind": kind,
        "copies": len(copies),
        "copy_us": sum(e.dur for e in copies),
        "copy_wall_us": length(c),
        "hidden_us": intersect(c, g),
        "exposed_us": (t1 - t0) - length(g),
    }
    r["hidden"] = r["hidden_us"] / r["copy_wall_us"] if r["copy_wall_us"] > 0 else None
    r["span_over_gemm"] = r["span_us"] / r["gemm_us"] if r["gemm_us"] > 0 else None
    if gemms:
        first = min(e.start for e in gemms)
        last_end = max(e.start + e.dur for e in gemms)
        r["head_us"] = first - t0
        r["tail_us"] = t1 - last_end
        r["first_gemm_to_last_copy_us"] = (max(e.start + e.dur for e in copies) - first) if copies else None
    else:
        r["head_us"] = r["tail_us"] = r["first_gemm_to_last_copy_us"] = None
    return r


def median_overlap(per_call):
    """The median over calls of each numeric field of `overlap` (None where no call has it)."""
    per_call = [r for r in per_call if r]
    if not per_call:
        return None
    out = {}
    for k, v in per_call[0].items():
        if isinstance(v, str):
            out[k] = v
            continue
        xs = [r[k] for r in per_call if r.get(k) is not None]
        out[k] = statistics.median(xs) if xs else None
    return out


def _f(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)


def _pct100(x):
    return None if x is None else 100 * x


def format_kernel_table(rows, calls):
    lines = [f"  {'total µs':>11} {'calls':>6} {'µs/call':>10}  name (per call: of {calls} profiled calls of the op)"]
    for r in rows:
        lines.append(f"  {r['device_us']:11.1f} {r['calls']:6d} {r['us_per_call']:10.1f}  {r['name'][:100]}")
    return "\n".join(lines)


def format_overlap(m, label="median over calls"):
    """A few lines on one overlap summary (`overlap` or `median_overlap`)."""
    if not m:
        return "  no device events"
    return "\n".join([
        f"  {label}: span {_f(m['span_us'])} µs; GEMMs {_f(m['gemm_kernels'], '{:.0f}')} kernels, "
        f"{_f(m['gemm_us'])} µs summed, {_f(m['gemm_wall_us'])} µs wall; span / GEMM sum "
        f"{_f(m['span_over_gemm'], '{:.3f}')}"
        + (f", span / the GEMM alone's {_f(m['gemm_alone_us'])} µs {_f(m['span_over_gemm_alone'], '{:.3f}')}"
           if m.get("span_over_gemm_alone") is not None else "")
        + f"; no GEMM running {_f(m['exposed_us'])} µs",
        f"    peer copies ({m['copy_kind']}): {_f(m['copies'], '{:.0f}')}, {_f(m['copy_wall_us'])} µs wall, "
        f"{_f(m['hidden_us'])} µs under a GEMM ({_f(_pct100(m['hidden']), '{:.1f}')}%)",
        f"    first GEMM start -> last peer copy end {_f(m['first_gemm_to_last_copy_us'])} µs; "
        f"head (op start -> first GEMM) {_f(m['head_us'])} µs; tail (last GEMM end -> op end) {_f(m['tail_us'])} µs",
    ])


def cell_file(op, mode):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{op}_{mode}")


def profile_cells(cells, fns, calls, out_dir, rank, world, header):
    """After the timed rounds: each cell's `calls` calls under torch.profiler on every rank
    (a call and a barrier first, outside the analysed window, to absorb the profilers'
    start-up skew between ranks); rank 0 writes the traces, tables and overlaps."""
    import warnings

    import torch
    import torch.distributed as dist
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    warnings.filterwarnings("ignore", message=".*Profiler clears events")
    if rank == 0:
        os.makedirs(out_dir, exist_ok=True)
    marker = torch.zeros(1, dtype=torch.int16, device=torch.cuda.current_device())
    doc = {"calls": calls, "cells": {}}
    text = [header, ""]
    # Each op's `gemm` first: its GEMM time per call is the yardstick of the others' spans.
    ops = list(dict.fromkeys(op for op, _ in cells))
    alone = {}
    for op, mode in sorted(cells, key=lambda c: (ops.index(c[0]), c[1] != "gemm")):
        fn = fns[(op, mode)]
        torch.cuda.synchronize()
        dist.barrier()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
            dist.barrier()
            for _ in range(calls):
                marker.fill_(1)
                fn()
            marker.fill_(1)
            torch.cuda.synchronize()
        evs = [Ev(e.name, e.time_range.start, e.time_range.elapsed_us(), getattr(e, "device_resource_id", None))
               for e in prof.events()
               if getattr(e, "device_type", None) == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
        windows, split = split_calls(evs, calls)
        per_call = [overlap(w) for w in windows]
        med = median_overlap(per_call)
        if mode == "gemm":
            alone[op] = med["gemm_us"] if med and split else None
            med = None
        elif med and alone.get(op) and split:
            med["gemm_alone_us"] = alone[op]
            med["span_over_gemm_alone"] = med["span_us"] / alone[op]
        every = [None] * world
        dist.all_gather_object(every, med)
        if rank == 0:
            name = cell_file(op, mode)
            trace = os.path.join(out_dir, f"tp_trace_{name}.json.gz")
            prof.export_chrome_trace(trace)
            table = kernel_table([e for w in windows for e in w], calls if split else 1)
            kind = "fused" if mode in FUSED_MODES else ("the GEMM alone" if mode == "gemm" else "unfused")
            lines = [f"== {op}/{mode} ({kind}): rank 0, {calls} calls back to back"
                     + ("" if split else " (markers not found: the window holds every profiled event, "
                        "the untimed first call and the barrier too)"),
                     f"trace: {os.path.basename(trace)}", "", format_kernel_table(table, calls if split else 1)]
            if mode == "gemm":
                lines += ["", f"GEMM kernels per call (rank 0, median): {_f(alone[op])} µs: the yardstick of "
                          f"the other modes' spans"]
            else:
                lines += ["", "overlap (rank 0):"]
                lines += [format_overlap(r, f"call {i}") for i, r in enumerate(per_call)]
                lines.append(format_overlap(med))
                lines.append("  every rank's median: " + "; ".join(
                    f"r{i} span / GEMM sum {_f(m and m['span_over_gemm'], '{:.3f}')}, "
                    f"/ GEMM alone {_f(m and m.get('span_over_gemm_alone'), '{:.3f}')}, copies under a GEMM "
                    f"{_f(_pct100(m and m['hidden']), '{:.1f}')}%"
                    for i, m in enumerate(every)))
            block = "\n".join(lines)
            with open(os.path.join(out_dir, f"tp_kernels_{name}.txt"), "w") as f:
                f.write(header + "\n\n" + block + "\n")
            text += [block, ""]
            doc["cells"][f"{op}/{mode}"] = {"trace": os.path.basename(trace), "split": split, "kernels": table,
                                           "overlap_rank0": per_call, "overlap_median_by_rank": every}
            if mode == "gemm":
                doc["cells"][f"{op}/{mode}"]["gemm_us_per_call"] = alone[op]
            else:
                print(f"  {op}/{mode}:\n{format_overlap(med, 'rank 0, median')}", flush=True)
        dist.barrier()
    if rank == 0:
        with open(os.path.join(out_dir, "tp_profile.txt"), "w") as f:
            f.write("\n".join(text))
        with open(os.path.join(out_dir, "tp_profile.json"), "w") as f:
            json.dump(doc, f, indent=1)
    return doc


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
    ap.add_argument("--profile", metavar="DIR",
                    help="after timing, profile every op and mode (torch.profiler) into DIR on rank 0")
    ap.add_argument("--profile-calls", type=int, default=3, help="calls per op and mode under the profiler")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    import lowcon
    import lowcon.distributed  # noqa: F401
    import lowcon.tp as tp

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
            if mode in ("lowcon", "lowcon-twin", "lowcon-c128", "lowcon-merged"):
                return lambda: tp.fused_all_gather_matmul(x, [w_up], 0, g, return_A=False)
            if mode == "lowcon-memop":
                return lambda: tp.fused_all_gather_matmul(x, [w_up], 0, g, return_A=False, sync="memop")
            if mode == "lowcon-each":
                return lambda: tp.fused_all_gather_matmul(x, [w_up], 0, g, return_A=False, gemms="each")
            if mode == "lowcon-unfused":
                return lambda: (g.all_gather(x_full, x), torch.matmul(x_full, w_up))
            if mode == "nccl-unfused":
                return lambda: (dist.all_gather_into_tensor(x_full, x), torch.matmul(x_full, w_up))
            if mode == "symm-mem":
                return lambda: symm.fused_all_gather_matmul(x, [w_up], 0, pg.group_name)
        else:
            if mode == "gemm":
                return lambda: torch.matmul(h, w_down)
            if mode in ("lowcon", "lowcon-twin", "lowcon-memop", "lowcon-each"):
                return lambda: tp.fused_matmul_reduce_scatter(h, w_down, "sum", 0, g)
            if mode == "lowcon-merged":
                return lambda: tp.fused_matmul_reduce_scatter(h, w_down, "sum", 0, g, _gemms="merged")
            if mode == "lowcon-c128":
                return lambda: tp.fused_matmul_reduce_scatter(h, w_down, "sum", 0, g, ctas=128)
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
    if args.profile:
        header = (f"tp_bench profile: {world} ranks, {torch.cuda.get_device_name(dev)}, tokens {T}, d {D}, f {F} "
                  f"(bf16), {args.profile_calls} calls per op and mode")
        if rank == 0:
            print(f"\nprofile ({args.profile}): overlap of the peer copies with the GEMMs", flush=True)
        profile_cells(cells, fns, args.profile_calls, args.profile, rank, world, header)
    dist.barrier()
    dist.destroy_process_group()
    gc.collect()  # groups kept by cycles go before the interpreter does (python.md: Shutdown)


if __name__ == "__main__":
    main()
