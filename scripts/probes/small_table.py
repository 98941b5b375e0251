#!/usr/bin/env python3
"""The small-message table of docs/benchmarks.md from the `small` part's sweeps.

    python3 scripts/probes/small_table.py DIR [DIR...]

reads every `small-*.json` under the folders (gpu-planner.sh's `small` part: one `lowcon
bench` sweep per file, JSON lines), takes for each collective, dtype, eager or replayed,
and size the median over sweeps of lowcon `auto`'s time and of NCCL's, and prints a
Markdown table of `auto / NCCL` in µs, with `*` where `auto` is slower, and a count of
those cells. Each sweep's own time is already a median (docs/benchmarks.md says how).
"""
import glob
import json
import os
import statistics
import sys
from collections import defaultdict


def load(dirs):
    t = defaultdict(list)  # (bench, dtype, graph, size, impl) -> [us], one per sweep
    ranks = set()
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, "**", "small-*.json"), recursive=True)):
            for line in open(f):
                r = json.loads(line)
                impl = r["implementation"]
                if impl == "lowcon" and r["algorithm"] != "auto":
                    continue
                if impl not in ("lowcon", "nccl"):
                    continue
                ranks.add(r["ranks"])
                t[(r["bench"], r["dtype"], r["graph"], r["size"], impl)].append(r["time_us"])
    return t, ranks


def size_label(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    t, ranks = load(argv)
    if not t:
        print(f"small_table: no small-*.json under {' '.join(argv)}", file=sys.stderr)
        return 1
    sizes = sorted({k[3] for k in t})
    rows = sorted({k[:3] for k in t}, key=lambda k: (k[0], k[1], k[2]))
    sweeps = {len(v) for v in t.values()}
    print(f"ranks {sorted(ranks)}, µs, `auto` / NCCL, median of {'/'.join(map(str, sorted(sweeps)))} sweeps (* where `auto` is slower):\n")
    print("| | " + " | ".join(size_label(s) for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    slower = cells = 0
    for bench, dtype, graph in rows:
        out = []
        for s in sizes:
            a, n = t.get((bench, dtype, graph, s, "lowcon")), t.get((bench, dtype, graph, s, "nccl"))
            if not a or not n:
                out.append("-")
                continue
            ma, mn = statistics.median(a), statistics.median(n)
            cells += 1
            star = " *" if ma > mn else ""
            slower += ma > mn
            out.append(f"{ma:.1f} / {mn:.1f}{star}")
        mode = "replayed" if graph else "eager"
        print(f"| {bench} {dtype}, {mode} | " + " | ".join(out) + " |")
    print(f"\n`auto` slower than NCCL in {slower} of {cells} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
