"""Two builds of lowcon, one FSDP2 step: did a change move it?

A paired FSDP2 run (`fsdp2_paired.py`) times lowcon against NCCL round by round in one
process; two builds of lowcon cannot share a process, so `scripts/gpu-builds.sh` runs the
same paired benchmark once per build, alternating, in one job on one box. NCCL is the
common reference: each build's statistic is the median over its rounds of lowcon's step
over NCCL's in the same round, and the question is whether that ratio moved between the
builds by more than the A/A noise (`nccl-b` over `nccl`, NCCL against itself in the same
runs).

    python3 fsdp2_builds.py base=RUN_DIR new=RUN_DIR [base=RUN_DIR new=RUN_DIR ...] [--mode lowcon]

Each RUN_DIR holds a `paired.json`; a label may repeat (its runs are pooled). One table per
configuration: per build its rounds, the lowcon/NCCL median ratio with its 95% paired
bootstrap interval and the A/A ratio's; then the difference of the last build over the
first, with its interval (resampling each build's rounds), and the verdict: "moved" where
the interval of the difference lies beyond the A/A interval's half-width on either side,
else "within the A/A noise". Torch-free (`test_fsdp2_stats.py` checks it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from typing import Dict, List, Sequence, Tuple

import fsdp2_stats as st

Round = Dict[str, float]


def load_runs(specs: Sequence[str]) -> Dict[str, Dict[str, List[Round]]]:
    """{label: {config key: rounds}} from `label=dir` specs (a label's runs pooled, in order)."""
    out: Dict[str, Dict[str, List[Round]]] = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"fsdp2_builds: {spec!r}: expected LABEL=RUN_DIR")
        f = path if path.endswith(".json") else os.path.join(path, "paired.json")
        try:
            with open(f) as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as e:
            raise SystemExit(f"fsdp2_builds: {label}: cannot read {f}: {e}")
        per = out.setdefault(label, {})
        for c in doc.get("configs", []):
            if c.get("rounds"):
                per.setdefault(c["key"], []).extend(c["rounds"])
    return out


def ratio(mode: str, ref: str = st.REFERENCE):
    return st.median_ratio(mode, ref)


def difference(a: Sequence[Round], b: Sequence[Round], mode: str, samples: int = st.BOOT_SAMPLES,
               seed: int = 12345) -> Tuple[float, float, float]:
    """median ratio of `b` minus `a`'s (mode over NCCL), with the 95% interval from
    resampling each build's rounds independently."""
    f = ratio(mode)
    point = f(b) - f(a)
    rng = random.Random(seed)
    vals = []
    for _ in range(samples):
        ra = [a[rng.randrange(len(a))] for _ in range(len(a))]
        rb = [b[rng.randrange(len(b))] for _ in range(len(b))]
        vals.append(f(rb) - f(ra))
    tail = (1 - st.CONFIDENCE) / 2
    return point, st.quantile(vals, tail), st.quantile(vals, 1 - tail)


def verdict(diff: Tuple[float, float, float], aa_half: float) -> str:
    """"moved" (slower or faster) where the difference's interval lies beyond the A/A
    half-width, else "within the A/A noise"."""
    _, lo, hi = diff
    if lo > aa_half:
        return "moved: slower"
    if hi < -aa_half:
        return "moved: faster"
    return "within the A/A noise"


def report(runs: Dict[str, Dict[str, List[Round]]], mode: str = "lowcon") -> str:
    labels = list(runs)
    if len(labels) < 2:
        raise SystemExit(f"fsdp2_builds: two builds needed, got {labels}")
    first, last = labels[0], labels[-1]
    keys = [k for k in runs[first] if all(k in runs[lb] for lb in labels)]
    if not keys:
        raise SystemExit("fsdp2_builds: no configuration every build ran")
    lines = []
    for key in keys:
        lines.append(f"{key}: {mode} over NCCL's step, median of per-round ratios [95% interval]")
        lines.append(f"  {'build':<8} {'rounds':>6} {mode + '/nccl':>26} {'A/A nccl-b/nccl':>26}")
        halves = []
        for lb in labels:
            rs = [r for r in runs[lb][key] if mode in r and st.REFERENCE in r]
            if not rs:
                raise SystemExit(f"fsdp2_builds: {lb} has no {mode} and {st.REFERENCE} rounds for {key}")
            p, lo, hi = st.bootstrap(rs, ratio(mode))
            aa = [r for r in rs if st.TWIN in r]
            if aa:
                ap, alo, ahi = st.bootstrap(aa, ratio(st.TWIN))
                halves.append((ahi - alo) / 2)
                aa_s = f"{ap:.4f} [{alo:.4f}, {ahi:.4f}]"
            else:
                aa_s = "-"
            lines.append(f"  {lb:<8} {len(rs):>6} {f'{p:.4f} [{lo:.4f}, {hi:.4f}]':>26} {aa_s:>26}")
        a = [r for r in runs[first][key] if mode in r and st.REFERENCE in r]
        b = [r for r in runs[last][key] if mode in r and st.REFERENCE in r]
        d = difference(a, b, mode)
        half = max(halves) if halves else 0.0
        lines.append(f"  {last} - {first}: {d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}], A/A half-width {half:.4f}: "
                     f"{verdict(d, half)}")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR (a dir with paired.json, or the file)")
    ap.add_argument("--mode", default="lowcon", help="the mode compared between builds (default lowcon)")
    a = ap.parse_args(argv)
    print(report(load_runs(a.runs), a.mode))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
