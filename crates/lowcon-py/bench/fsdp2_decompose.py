"""Where an FSDP2 step's excess goes, from the profiled step's chrome traces (one per mode,
what `fsdp2_paired.py --profile --out DIR` keeps for rank 0), without torch:

    python3 fsdp2_decompose.py DIR [--base nocomm]

Each mode's step (one profiled step, on one rank) is split against the base mode's (the
same model with no communication) into the compute stream's extra idle and extra busy
time (NOTE [step decomposition]). Tested on synthetic traces in `test_fsdp2_stats.py`.

NOTE [step decomposition]
The compute stream is the stream with the most kernel time outside communication
kernels (NCCL's and lowcon's: where the step waits on its all-gathers, NCCL's spinning
kernels can outlast the model's, 4x H200 2026-11-28). Its kernels are the same sequence
in every mode (the model's), so the i-th kernel of a mode is the i-th of the base: the
decomposition refuses traces where the names differ. Names are compared without their
template arguments: lowcon's in-place reduce-scatter leaves FSDP2's `chunk_cat` copying
bf16 bytes (`chunk_cat_cuda_kernel<char, char>`) where the others cast to f32
(`<float, c10::BFloat16>`), the same kernel of the same step, whose time difference is
part of the busy split.

- *Idle*: every gap between two compute-stream operations inside the step (from its first
  GPU operation to its last, any stream). A gap before kernel k is split at the moment
  the host finished launching k (the launch call with k's correlation id): before it the
  GPU waited for the host (`host`); after it for a dependency, named by the last
  operation of another stream to end in the gap (its stream's class: `all-gather` or
  `reduce-scatter`, else `other`). The gap after the last compute kernel is `end` (the
  last reduce-scatter, the optimizer's side stream). Each gap counts in the phase of the
  kernel after it: forward (launched before the first `FSDP::pre_backward`), backward,
  or final (from `Optimizer.step` on).
- *Busy*: kernel i's extra time is its duration minus the base's i-th. It is shared out
  by what ran beside it on other streams, exclusively in this order: SM collectives
  (NCCL's and lowcon's kernels that move or reduce data), copies (copy-engine
  transfers), waits (lowcon's spinning signal kernels), other streams' kernels (FSDP's
  copy-in and casts, the optimizer's), nothing. A kernel half under a reduction and half
  alone gives half its extra time to each.
- *Streams* are classed by FSDP2's GPU annotations of its collectives (`FSDP::all_gather`,
  `FSDP::post_backward_reduce`, NCCL's `nccl:_reduce_scatter_base`) where a stream has
  one kind only; else by their kernels: `reduce-scatter` if one is a reduce-scatter's
  (NCCL's `ReduceScatter`, lowcon's `rs_`, `reduce`, `wire_`, `tma_`, `release`),
  `all-gather` if one is an all-gather's (or, in a trace without annotations, a
  peer-to-peer copy), else `other`.
- *Tail*: from the end of the last GEMM before the optimizer's first kernel to that
  kernel: the end of backward that no collective overlaps (the last modules' gradient
  casts and reduce-scatters; on 4x H100 at 8192x4, 2026-11-28, lowcon's excess
  reduce-scatter waits were all there: `design.md`, "The step's tail").

Under the profiler the host runs about 2x slower (traces of 2026-11-27, 4x H100), so host
gaps are inflated: trust the dependency waits and the busy split more than `host`.
"""

from __future__ import annotations

import argparse
import bisect
import glob
import gzip
import json
import os
import re
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from fsdp2_stats import table

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# Communication kernels: NCCL's and lowcon's (gpu-kernels/abi/src/kernel_names.rs); of
# those, the ones that only wait (a signal, a word, a piece, a release).
COMM_KERNEL = re.compile(r"^(nccl|lowcon_)", re.I)
WAIT_KERNEL = re.compile(r"^lowcon_(barrier|wait_|wire_wait|release_wait|spin|flag_)", re.I)
# Without FSDP's annotations, a stream's kernels name its collective.
RS_KERNEL = re.compile(r"ReduceScatter|^lowcon_(rs_|ll_rs|reduce|wire_|tma_|release)", re.I)
AG_KERNEL = re.compile(r"AllGather|^lowcon_(allgather|ll_allgather)", re.I)
# FSDP2's (and torch's) GPU annotations of its collectives' streams.
AG_RANGE = re.compile(r"all_gather(?!_copy_out)", re.I)
RS_RANGE = re.compile(r"reduce_scatter|post_backward_reduce", re.I)
BESIDE = ("sm-collective", "copy", "wait", "other-stream", "nothing")
FAMILIES = (
    ("gemm", re.compile(r"nvjet|gemm|cutlass|xmma|cublas", re.I)),
    ("attention", re.compile(r"sdpa|flash|fmha|attention|cudnn", re.I)),
    ("fsdp-copy-cast", re.compile(r"chunk_cat|split_with_sizes|CatArray|Memcpy|Memset", re.I)),
    ("optimizer", re.compile(r"multi_tensor_apply", re.I)),
)


def load(path: str) -> List[Dict[str, Any]]:
    """A chrome trace's events (gzip or plain)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc.get("traceEvents", []) if isinstance(doc, dict) else doc


def family(name: str) -> str:
    for fam, pat in FAMILIES:
        if pat.search(name):
            return fam
    return "other"


def kernel_name(name: str) -> str:
    """A kernel's name without its template arguments and its parameter list (NOTE [step
    decomposition]): `void f<float, c10::BFloat16>(float*)` -> `void f`; parentheses
    inside the name (`at::native::(anonymous namespace)::g<...>(...)`) stay."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    if s.endswith(")"):  # the trailing parameter list, balanced
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i].strip()
                break
    return s


def _stream(e: Dict[str, Any]) -> Any:
    return e.get("args", {}).get("stream")


def _union(intervals: Iterable[Tuple[float, float]]) -> List[Tuple[float, float]]:
    out: List[Tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _covered(merged: List[Tuple[float, float]], a: float, b: float) -> List[Tuple[float, float]]:
    """The parts of [a, b] that `merged` (disjoint, sorted) covers."""
    out = []
    i = max(0, bisect.bisect_right(merged, (a, float("inf"))) - 1)
    while i < len(merged) and merged[i][0] < b:
        lo, hi = max(a, merged[i][0]), min(b, merged[i][1])
        if hi > lo:
            out.append((lo, hi))
        i += 1
    return out


def _length(intervals: Iterable[Tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def _minus(parts: List[Tuple[float, float]], merged: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """`parts` (disjoint) without what `merged` covers."""
    out = []
    for a, b in parts:
        cur = a
        for lo, hi in _covered(merged, a, b):
            if lo > cur:
                out.append((cur, lo))
            cur = max(cur, hi)
        if b > cur:
            out.append((cur, b))
    return out


def stream_classes(events: Sequence[Dict[str, Any]], compute: Any) -> Dict[Any, str]:
    """NOTE [step decomposition]: each non-compute stream's class, from FSDP2's GPU
    annotations of its collectives where the trace has them, else from its kernels'
    names (a stream of peer copies alone is an all-gather's then)."""
    annotated: Dict[Any, set] = {}
    for e in events:
        if e.get("cat") == "gpu_user_annotation" and e.get("tid") != compute:
            name = e.get("name", "")
            kind = "reduce-scatter" if RS_RANGE.search(name) else "all-gather" if AG_RANGE.search(name) else None
            if kind:
                annotated.setdefault(e.get("tid"), set()).add(kind)
    seen: Dict[Any, str] = {}
    for e in events:
        if e.get("cat") not in GPU_CATS or _stream(e) == compute:
            continue
        s, name = _stream(e), e.get("name", "")
        kinds = annotated.get(s, set())
        if len(kinds) == 1:
            seen[s] = next(iter(kinds))
            continue
        cls = seen.get(s, "other")
        if e["cat"] == "kernel" and RS_KERNEL.search(name):
            cls = "reduce-scatter"
        elif cls == "other" and (AG_KERNEL.search(name) or (not annotated and "PtoP" in name)):
            cls = "all-gather"
        seen[s] = cls
    return seen


def decompose(events: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """One trace's compute stream: its operations (name, start, duration, phase), its idle
    gaps by cause and phase, and the other streams' intervals by kind (NOTE [step
    decomposition]). Times in microseconds."""
    gpu = [e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    if not gpu:
        raise ValueError("no GPU operations in the trace (was it profiled with CUDA activities?)")
    busy: Dict[Any, float] = {}
    for e in gpu:
        if e["cat"] == "kernel" and not COMM_KERNEL.search(e.get("name", "")):
            busy[_stream(e)] = busy.get(_stream(e), 0.0) + e["dur"]
    if not busy:
        raise ValueError("no kernels but communication ones in the trace: no compute stream")
    compute = max(busy, key=lambda s: busy[s])
    classes = stream_classes(gpu, compute)
    ops = sorted((e for e in gpu if _stream(e) == compute), key=lambda e: e["ts"])
    others = [e for e in gpu if _stream(e) != compute]
    launch_end = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in events
                  if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    marks = {}
    for e in events:
        if e.get("cat") == "user_annotation":
            for key, pat in (("backward", "FSDP::pre_backward"), ("final", "Optimizer.step")):
                if e["name"].startswith(pat):
                    marks[key] = min(marks.get(key, float("inf")), e["ts"])

    def phase(e: Dict[str, Any]) -> str:
        t = launch_end.get(e["args"].get("correlation"), e["ts"])
        if t >= marks.get("final", float("inf")):
            return "final"
        return "backward" if t >= marks.get("backward", float("inf")) else "forward"

    start = min(e["ts"] for e in gpu)
    stop = max(e["ts"] + e["dur"] for e in gpu)
    ends = sorted((e["ts"] + e["dur"], classes.get(_stream(e), "other")) for e in others)
    idle: Dict[str, float] = {}

    def add(key: str, us: float) -> None:
        if us > 0:
            idle[key] = idle.get(key, 0.0) + us

    prev_end = start
    for e in ops:
        a, b = prev_end, e["ts"]
        if b > a:
            launched = launch_end.get(e["args"].get("correlation"), a)
            ph = phase(e)
            add(f"host/{ph}", min(b, launched) - a)
            dep_from = max(a, launched)
            if b > dep_from:
                i = bisect.bisect_right(ends, (b + 2.0, "~")) - 1
                cause = ends[i][1] if i >= 0 and ends[i][0] >= dep_from - 2.0 else "other"
                add(f"{cause}/{ph}", b - dep_from)
        prev_end = max(prev_end, e["ts"] + e["dur"])
    add("end/final", stop - prev_end)
    kinds: Dict[str, List[Tuple[float, float]]] = {k: [] for k in BESIDE[:-1]}
    for e in others:
        name = e.get("name", "")
        if e["cat"] == "gpu_memcpy":
            kind = "copy"
        elif e["cat"] == "kernel" and WAIT_KERNEL.search(name):
            kind = "wait"
        elif e["cat"] == "kernel" and COMM_KERNEL.search(name):
            kind = "sm-collective"
        else:
            kind = "other-stream"  # FSDP's copy-in and casts, the optimizer's foreach
        kinds[kind].append((e["ts"], e["ts"] + e["dur"]))
    # The step's tail (NOTE [step decomposition]): from the end of the last GEMM before the
    # optimizer's first kernel to that kernel (0 without an optimizer or a GEMM).
    opt = next((e["ts"] for e in ops if family(e.get("name", "")) == "optimizer"), None)
    gemm_ends = [e["ts"] + e["dur"] for e in ops
                 if family(e.get("name", "")) == "gemm" and opt is not None and e["ts"] < opt]
    tail = opt - max(gemm_ends) if gemm_ends else 0.0
    return {
        "span_us": stop - start,
        "tail_us": max(tail, 0.0),
        "busy_us": sum(e["dur"] for e in ops),
        "idle_us": idle,
        "ops": [(e.get("name", ""), e["ts"], e["dur"], phase(e)) for e in ops],
        "beside": {k: _union(v) for k, v in kinds.items()},
    }


def compare(mode: Dict[str, Any], base: Dict[str, Any], name: str = "mode") -> Dict[str, Any]:
    """The mode's excess over the base: span, idle by cause, and the compute kernels' extra
    time by family and by what ran beside them (NOTE [step decomposition])."""
    if len(mode["ops"]) != len(base["ops"]):
        raise ValueError(f"{name}: its compute stream runs {len(mode['ops'])} operations, the base's "
                         f"{len(base['ops'])}: not the same model's step")
    for i, (a, b) in enumerate(zip(mode["ops"], base["ops"])):
        if kernel_name(a[0]) != kernel_name(b[0]):
            raise ValueError(f"{name}: its compute stream's operation {i} is {a[0][:60]!r}, the base's "
                             f"{b[0][:60]!r}: not the same model's step")
    extra: Dict[str, Dict[str, float]] = {}
    for (nm, ts, dur, _), (_, _, bdur, _) in zip(mode["ops"], base["ops"]):
        more = dur - bdur
        fam = extra.setdefault(family(nm), {k: 0.0 for k in BESIDE})
        if dur <= 0:
            fam["nothing"] += more
            continue
        left = [(ts, ts + dur)]
        for kind in BESIDE[:-1]:
            under = [p for a, b in left for p in _covered(mode["beside"][kind], a, b)]
            fam[kind] += more * _length(under) / dur
            left = _minus(left, mode["beside"][kind])
        fam["nothing"] += more * _length(left) / dur
    keys = set(mode["idle_us"]) | set(base["idle_us"])
    return {
        "span_ms": mode["span_us"] / 1e3,
        "excess_ms": (mode["span_us"] - base["span_us"]) / 1e3,
        "tail_ms": mode["tail_us"] / 1e3,
        "extra_tail_ms": (mode["tail_us"] - base["tail_us"]) / 1e3,
        "busy_ms": mode["busy_us"] / 1e3,
        "extra_busy_ms": (mode["busy_us"] - base["busy_us"]) / 1e3,
        "extra_idle_ms": {k: (mode["idle_us"].get(k, 0.0) - base["idle_us"].get(k, 0.0)) / 1e3 for k in sorted(keys)},
        "idle_ms": {k: v / 1e3 for k, v in sorted(mode["idle_us"].items())},
        "extra_by_family_ms": {f: {k: v / 1e3 for k, v in d.items()} for f, d in sorted(extra.items())},
    }


IDLE_COLUMNS = ("all-gather", "reduce-scatter", "other", "host", "end")


def format_decomposition(results: Dict[str, Dict[str, Any]], base: str) -> str:
    """Two tables: the step's excess split into idle (by cause, summed over phases, the
    all-gather's forward part apart) and busy; the busy part by kernel family and what ran
    beside it."""
    rows = []
    for name, r in results.items():
        idle = r["extra_idle_ms"]

        def cause(c: str, ph: Optional[str] = None) -> float:
            return sum(v for k, v in idle.items() if k.split("/")[0] == c and (ph is None or k.endswith("/" + ph)))

        rows.append([name, f"{r['span_ms']:.1f}", f"{r['excess_ms']:+.1f}", f"{sum(idle.values()):+.1f}",
                     f"{cause('all-gather', 'forward'):+.1f} / {cause('all-gather') - cause('all-gather', 'forward'):+.1f}",
                     *(f"{cause(c):+.1f}" for c in IDLE_COLUMNS[1:]), f"{r['extra_busy_ms']:+.1f}",
                     f"{r['tail_ms']:.1f} ({r['extra_tail_ms']:+.1f})"])
    head = ["mode", "span ms", f"excess over {base}", "idle", "waits: all-gather fwd / bwd+final",
            "reduce-scatter", "other dependency", "host", "end", "busy", "tail ms (over base)"]
    out = [table(head, rows, f"the step's excess over {base} (ms, one profiled step, rank 0; NOTE [step "
                             "decomposition]):"), ""]
    rows = []
    for name, r in results.items():
        for fam, d in r["extra_by_family_ms"].items():
            if abs(sum(d.values())) < 0.05:
                continue
            rows.append([name, fam, f"{sum(d.values()):+.2f}", *(f"{d[k]:+.2f}" for k in BESIDE)])
    out.append(table(["mode", "family", "extra", *BESIDE], rows,
                     f"the compute kernels' extra time over the same kernels in {base} (ms), by what ran beside them:"))
    return "\n".join(out)


def format_profiled(docs: Sequence[Dict[str, Any]], base: str = "nocomm") -> str:
    """The decomposition of each profiled config of `fsdp2_paired.py`'s result documents
    whose traces lie beside them (its `--profile --out`), "" where none do."""
    out = []
    for d in docs:
        prof, folder = d.get("profile") or {}, d.get("_dir", "")
        # Beside the document (where --out writes them), or in its traces/ folder (a run's).
        traces = {m: next((p for p in (os.path.join(folder, e["trace"]), os.path.join(folder, "traces", e["trace"]))
                           if os.path.exists(p)), "") for m, e in prof.items() if e.get("trace")}
        if base not in traces or not all(traces.values()):
            continue
        ref = decompose(load(traces[base]))
        try:
            results = {m: compare(decompose(load(t)), ref, m) for m, t in traces.items()}
        except ValueError as e:
            out.append(f"{d.get('shape')} {d.get('tokens_per_rank')}: no decomposition: {e}")
            continue
        out.append(f"{d.get('shape')}, {d.get('tokens_per_rank')} tokens/rank, {d.get('reduce_dtype')} reduce: "
                   + format_decomposition(results, base))
    return "\n\n".join(out)


def config_and_mode(path: str) -> Tuple[str, str, int]:
    """trace-<shape key>-<dtype>-<mode>[.rank<R>].json(.gz) -> (shape key and dtype, mode,
    rank: 0 without the suffix, as `fsdp2_paired.py --profile-ranks all` names them)."""
    stem = os.path.basename(path).split(".json")[0]
    stem, rank = (stem.rsplit(".rank", 1) + ["0"])[:2] if re.search(r"\.rank\d+$", stem) else (stem, "0")
    m = re.match(r"trace-(.*-(?:fp32|bf16))-(.+)$", stem)
    return (m.group(1), m.group(2), int(rank)) if m else ("", stem, int(rank))


def rank_waits(events: Sequence[Dict[str, Any]]) -> Dict[str, float]:
    """One rank's waiting in a profiled step (ms): its compute stream's idle time inside the
    step, and the time its wait kernels spun (lowcon's signal waits: for peers). Across a
    job's ranks (`--ranks`), the rank that waits least is the one the others wait for."""
    d = decompose(events)
    waits = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"
             and WAIT_KERNEL.search(e.get("name", ""))]
    return {"span": d["span_us"] / 1e3, "idle": sum(d["idle_us"].values()) / 1e3,
            "spin": sum(e["dur"] for e in waits) / 1e3, "tail": d["tail_us"] / 1e3}


def format_ranks(by_rank: Dict[int, Dict[str, str]]) -> str:
    """Per mode, each rank's waiting (`rank_waits`), from every rank's traces."""
    rows = []
    for mode in sorted({m for t in by_rank.values() for m in t}):
        for rank in sorted(by_rank):
            if mode in by_rank[rank]:
                w = rank_waits(load(by_rank[rank][mode]))
                rows.append([mode, str(rank), f"{w['span']:.2f}", f"{w['idle']:.2f}", f"{w['spin']:.2f}",
                             f"{w['tail']:.2f}"])
    return table(["mode", "rank", "span ms", "compute idle ms", "wait kernels ms", "tail ms"], rows,
                 "each rank's waiting (one profiled step; the rank that waits least is the one waited for):")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", help="folders of trace-*.json.gz, or trace files")
    p.add_argument("--base", default="nocomm", help="the mode the others are compared with")
    p.add_argument("--rank", type=int, default=0,
                   help="whose traces in a folder (fsdp2_paired.py --profile-ranks all keeps every rank's)")
    p.add_argument("--ranks", action="store_true",
                   help="instead, each rank's waiting from every rank's traces in the folders (which rank is late)")
    args = p.parse_args(argv)
    if args.ranks:
        by_cfg: Dict[str, Dict[int, Dict[str, str]]] = {}
        for t in args.traces:
            if not os.path.exists(t):
                print(f"fsdp2_decompose: {t}: no such folder or trace", file=sys.stderr)
                return 2
            for x in sorted(glob.glob(os.path.join(t, "trace-*.json*"))) if os.path.isdir(t) else [t]:
                cfg, mode, rank = config_and_mode(x)
                by_cfg.setdefault(cfg, {}).setdefault(rank, {})[mode] = x
        if not by_cfg:
            print("fsdp2_decompose: no traces", file=sys.stderr)
            return 2
        print("\n\n".join((f"{c}: " if len(by_cfg) > 1 else "") + format_ranks(r) for c, r in by_cfg.items()))
        return 0
    paths: List[str] = []
    for t in args.traces:
        if os.path.isdir(t):
            paths += [x for x in sorted(glob.glob(os.path.join(t, "trace-*.json*")))
                      if config_and_mode(x)[2] == args.rank]
        else:
            paths.append(t)
    configs: Dict[str, Dict[str, str]] = {}
    for path in paths:
        cfg, mode, _ = config_and_mode(path)
        if mode in configs.setdefault(cfg, {}):
            print(f"fsdp2_decompose: two traces of {mode} at {cfg or 'one configuration'}: "
                  f"{configs[cfg][mode]} and {path}", file=sys.stderr)
            return 2
        configs[cfg][mode] = path
    out = []
    for cfg, by_mode in configs.items():
        if args.base not in by_mode:
            print(f"fsdp2_decompose: {cfg}: no {args.base} trace among {sorted(by_mode)}", file=sys.stderr)
            return 2
        base = decompose(load(by_mode[args.base]))
        results = {}
        for name in sorted(by_mode, key=lambda n: (n == args.base, n)):
            try:
                results[name] = compare(decompose(load(by_mode[name])), base, name)
            except ValueError as e:
                print(f"fsdp2_decompose: {by_mode[name]}: {e}", file=sys.stderr)
                return 1
        out.append((f"{cfg}: " if len(configs) > 1 else "") + format_decomposition(results, args.base))
    print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
