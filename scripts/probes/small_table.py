#!/usr/bin/env python3
"""The small-message table of docs/benchmarks.md from the `small` part's sweeps.

    python3 scripts/probes/small_table.py DIR [DIR...]

reads every `small-*.json` under the folders (gpu-planner.sh's `small` part: one `lowcon
bench` sweep per file, JSON lines), takes for each collective, dtype, eager or replayed,
and size the median over sweeps of lowcon `auto`'s time, NCCL's and NCCL-CE's, and prints
one Markdown table per rank count and lowcon sync method, of `auto / NCCL / NCCL-CE` in µs,
`*` where `auto` is slower than NCCL and `+` where slower than NCCL-CE, with a count of
those cells. Each sweep's own time is already a median (docs/benchmarks.md says how).
Where the sweeps kept their batches' spread (`time_us_min`, `time_us_max`, since
2026-11-28), a second table gives `auto`'s: the fastest batch and the slowest over every
sweep, so a cell's noise shows beside its median. Where they kept each batch
(`batches_us`, since 4d54bbc, 2026-11-28), a third gives `auto`'s slow batches: how
many took over SLOW (1.5) times their sweep's fastest, of how many, and in how many
sweeps the first batch was one of them: one slow batch a sweep, or half of them.
"""
import glob
import json
import os
import statistics
import sys
from collections import defaultdict


def load(dirs):
    """(ranks, sync) -> {(bench, dtype, graph, size, impl): [µs, one per sweep]}: lowcon's
    `auto` rows under the sync they ran with, NCCL's and NCCL-CE's under every sync of
    their rank count (they have none of their own). `auto`'s batches' spread goes under
    impl "spread", as (fastest, slowest) per sweep."""
    lowcon, nccl = defaultdict(lambda: defaultdict(list)), defaultdict(lambda: defaultdict(list))
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, "**", "small-*.json"), recursive=True)):
            for line in open(f):
                r = json.loads(line)
                impl = r["implementation"]
                key = (r["bench"], r["dtype"], r["graph"], r["size"], impl)
                if impl == "lowcon" and r["algorithm"] == "auto":
                    lowcon[(r["ranks"], r["sync"])][key].append(r["time_us"])
                    if r.get("time_us_min") is not None and r.get("time_us_max") is not None:
                        lowcon[(r["ranks"], r["sync"])][key[:4] + ("spread",)].append(
                            (r["time_us_min"], r["time_us_max"]))
                    if r.get("batches_us"):
                        lowcon[(r["ranks"], r["sync"])][key[:4] + ("batches",)].append(
                            [float(x) for x in r["batches_us"].split()])
                elif impl in ("nccl", "nccl-ce"):
                    nccl[r["ranks"]][key].append(r["time_us"])
    return {g: {**nccl[g[0]], **t} for g, t in lowcon.items()}


def size_label(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def table(t):
    """The Markdown table of one (ranks, sync) group, and its counts."""
    sizes = sorted({k[3] for k in t})
    rows = sorted({k[:3] for k in t})
    sweeps = sorted({len(v) for k, v in t.items() if k[4] not in ("spread", "batches")})
    lines = [f"µs, `auto` / NCCL / NCCL-CE, median of {'/'.join(map(str, sweeps))} sweeps (* where `auto` is "
             "slower than NCCL, + where slower than NCCL-CE):", "",
             "| | " + " | ".join(size_label(s) for s in sizes) + " |", "|---|" + "---:|" * len(sizes)]
    counts = {"nccl": [0, 0], "nccl-ce": [0, 0]}  # impl -> [auto slower, cells]
    for bench, dtype, graph in rows:
        out = []
        for s in sizes:
            a = t.get((bench, dtype, graph, s, "lowcon"))
            if not a:
                out.append("-")
                continue
            ma = statistics.median(a)
            cell, marks = [f"{ma:.1f}"], ""
            for impl, mark in (("nccl", "*"), ("nccl-ce", "+")):
                o = t.get((bench, dtype, graph, s, impl))
                if not o:
                    cell.append("-")
                    continue
                mo = statistics.median(o)
                cell.append(f"{mo:.1f}")
                counts[impl][1] += 1
                if ma > mo:
                    counts[impl][0] += 1
                    marks += mark
            out.append(" / ".join(cell) + (f" {marks}" if marks else ""))
        mode = "replayed" if graph else "eager"
        lines.append(f"| {bench} {dtype}, {mode} | " + " | ".join(out) + " |")
    lines.append("")
    for impl, name in (("nccl", "NCCL"), ("nccl-ce", "NCCL-CE")):
        if counts[impl][1]:
            lines.append(f"`auto` slower than {name} in {counts[impl][0]} of {counts[impl][1]} cells")
    if any(k[4] == "spread" for k in t):
        lines += side_table(t, rows, sizes, "spread", "`auto`'s batches, µs: the fastest - the slowest over every "
                            "sweep (the max over ranks of each rank's fastest batch, the slowest batch of any rank):",
                            lambda sp: f"{min(lo for lo, _ in sp):.1f}-{max(hi for _, hi in sp):.1f}")
    if any(k[4] == "batches" for k in t):
        lines += side_table(t, rows, sizes, "batches", f"`auto`'s slow batches (over {SLOW}x their sweep's fastest): "
                            "slow / all, and `first k` where the first batch was slow in k sweeps:", slow_cell)
    return lines


def side_table(t, rows, sizes, kind, title, cell):
    """A table of `auto`'s `kind` entries (one per sweep) per row and size, each cell
    `cell(entries)`, "-" where none."""
    lines = ["", title, "", "| | " + " | ".join(size_label(s) for s in sizes) + " |", "|---|" + "---:|" * len(sizes)]
    for bench, dtype, graph in rows:
        out = [cell(e) if (e := t.get((bench, dtype, graph, s, kind))) else "-" for s in sizes]
        mode = "replayed" if graph else "eager"
        lines.append(f"| {bench} {dtype}, {mode} | " + " | ".join(out) + " |")
    return lines


SLOW = 1.5


def slow_cell(sweeps):
    """`slow/all[, first k]` over the sweeps' batch lists (NOTE in the module docs)."""
    slow = total = first = 0
    for b in sweeps:
        fast = min(b)
        marks = [x > SLOW * fast for x in b]
        slow, total, first = slow + sum(marks), total + len(b), first + marks[0]
    return f"{slow}/{total}" + (f", first {first}" if first else "")


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    groups = load(argv)
    if not groups:
        print(f"small_table: no small-*.json under {' '.join(argv)}", file=sys.stderr)
        return 1
    for (ranks, sync), t in sorted(groups.items()):
        print(f"## {ranks} ranks, lowcon with {sync} sync\n")
        print("\n".join(table(t)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
