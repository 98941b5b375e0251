"""The FSDP2 profile's tables, without torch: the copy rate of a chrome trace, and the
per-mode profile table (waits, host time per hook call, copies).

NOTE [copy rate]
A step's peer copies are what the copy engines carry. For one GPU and one kind of call
(the all-gathers, the reduce-scatters), the copy rate is the bytes its peer copies moved
divided by the union of their intervals on that GPU: time when at least one of them was
running. Copies that run at once share the engines (one GPU's copy engines move about
395 GB/s out however many peers they serve), so many small copies side by side do not
raise it, and gaps between them inside one call do not lower it. `overlap_ms` is the time
when the all-gather's and the reduce-scatter's copies ran at once: they compete for the
same engines there (FSDP2's backward prefetches the next layer's parameters while this
layer's gradients are reduced).

A copy's kind is the FSDP2 call that enqueued it: the host launch lies inside an
`FSDP::all_gather` or an `FSDP::post_backward_reduce` range (FSDP2's own annotations,
around every hook call, in every mode). The launch is joined to the copy by CUPTI's
correlation id. torch's profiler records the runtime's calls and some of the driver's,
but not `cuMemcpyAsync` (lowcon's copies), so where the copy's own launch is missing the
host time of the recorded call with the next lower correlation id stands in for it
(ids count every API call in order: that call came just before, in the same hook call
when the hook launched anything before its copies, else in FSDP's copy-in inside the
same range). Copies launched elsewhere count as "other".

`test_fsdp2_stats.py` checks it on synthetic traces.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from fsdp2_stats import _fmt, table

KINDS = ("all-gather", "reduce-scatter")
# The kinds of enqueue (NOTE [enqueue clock]), as `lowcon.enqueue_clock()` names them.
ENQUEUES = ("launch", "memop", "copy", "event")
# The compute stream's waits by phase (fsdp2_modes.FsdpWaits: "phase layer" keys): the
# all-gathers in forward and backward, the reduce-scatter before the next is issued, the
# last one.
PHASES = ("forward", "backward", "reduce-scatter", "final")
_RANGES = (("FSDP::all_gather_copy_out", None), ("FSDP::all_gather", "all-gather"),
           ("FSDP::post_backward_reduce", "reduce-scatter"))


def union_us(intervals: Iterable[Tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals."""
    total, cur = 0.0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def _kind_of(name: str) -> Optional[str]:
    for prefix, kind in _RANGES:
        if name.startswith(prefix):
            return kind or "skip"
    return None


def copy_rates(events: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """NOTE [copy rate] for one GPU's chrome trace (torch.profiler's `traceEvents`):
    per kind, the peer copies' count, GB, union ms and GB/s, and `overlap_ms`."""
    ranges: List[Tuple[float, float, str]] = []
    launches: Dict[Any, float] = {}
    copies = []
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if e.get("ph") != "X":
            continue
        if cat == "user_annotation":
            kind = _kind_of(e.get("name", ""))
            if kind is not None:
                ranges.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), kind))
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = float(e["ts"])
        elif cat == "gpu_memcpy" and "PtoP" in e.get("name", ""):
            copies.append(e)
    ranges.sort()
    starts = [r[0] for r in ranges]
    ids = sorted(launches)

    def launched(corr: Any) -> Optional[float]:
        if corr in launches:
            return launches[corr]
        i = bisect.bisect_left(ids, corr) if corr is not None else 0
        return launches[ids[i - 1]] if i > 0 else None

    def kind_at(ts: Optional[float]) -> str:
        if ts is None:
            return "other"
        # The innermost range holding ts: the latest start at or before ts that ends after it.
        i = bisect.bisect_right(starts, ts)
        while i > 0:
            i -= 1
            s, end, kind = ranges[i]
            if end >= ts:
                return "other" if kind == "skip" else kind
        return "other"

    by_kind: Dict[str, List[Tuple[float, float, int]]] = {}
    for e in copies:
        kind = kind_at(launched((e.get("args") or {}).get("correlation")))
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        by_kind.setdefault(kind, []).append((ts, ts + dur, int(e["args"].get("bytes", 0))))
    out: Dict[str, Any] = {}
    for kind, cs in by_kind.items():
        u = union_us((s, t) for s, t, _ in cs)
        b = sum(n for _, _, n in cs)
        out[kind] = {"copies": len(cs), "gb": b / 1e9, "union_ms": u / 1e3, "gbps": b / u / 1e3 if u > 0 else None}
    ag, rs = by_kind.get("all-gather", []), by_kind.get("reduce-scatter", [])
    if ag and rs:
        both = union_us([(s, t) for s, t, _ in ag + rs])
        out["overlap_ms"] = (out["all-gather"]["union_ms"] + out["reduce-scatter"]["union_ms"]) - both / 1e3
    return out


def _rate(c: Optional[Dict[str, Any]]) -> str:
    if not c:
        return "-"
    return f"{_fmt(c.get('gbps'), '.0f')} ({c['copies']}, {c['gb']:.2f} GB, {c['union_ms']:.1f} ms)"


def format_profile(docs: Sequence[Dict[str, Any]]) -> str:
    """Per configuration and mode: the compute stream's waits per step (`PHASES`), host
    µs per hook call (median, p90), and per GPU's copy rates (NOTE [copy
    rate]: GB/s (copies, GB, union ms) of the all-gather and the reduce-scatter, and their
    overlap), the slowest rank's all-gather rate shown."""
    head = ("shape", "tok/rank", "mode", "waits ms fwd/bwd/rs/final", "host µs AG", "host µs RS",
            "AG / RS: library (rendezvous) µs", "AG / RS rendezvous p90 (mailbox p90) µs", "AG copy GB/s (n, GB, ms)", "RS copy GB/s (n, GB, ms)",
            "AG|RS overlap ms")
    lines = []
    for d in docs:
        for m, p in (d.get("profile") or {}).items():
            w = p.get("waits_ms", {})
            waits = "/".join(_fmt(sum(v for k, v in w.items() if k.split(" ")[0] == phase), ".1f")
                             for phase in PHASES)
            h = p.get("host_us", {})
            host = [f"{_fmt(h[k]['median_us'], '.0f')} ({_fmt(h[k]['p90_us'], '.0f')})" if k in h else "-"
                    for k in KINDS]
            # NOTE [host time]: medians of the library's part of each call and of its
            # host rendezvous; the hook's own Python is the rest of its host time.
            split = " / ".join(f"{_fmt(h[k + ' library']['median_us'], '.0f')} "
                               f"({_fmt(h[k + ' rendezvous']['median_us'], '.0f')})"
                               if k + " library" in h and k + " rendezvous" in h else "-" for k in KINDS)
            # The tail: a rendezvous' p90, and of it the address mailbox's post waits
            # (a rank 8 calls of a channel ahead of a peer's host).
            tail = " / ".join(f"{_fmt(h[k + ' rendezvous']['p90_us'], '.0f')} "
                              f"({_fmt(h[k + ' mailbox']['p90_us'], '.0f') if k + ' mailbox' in h else '-'})"
                              if k + " rendezvous" in h else "-" for k in KINDS)
            ranks = [r for r in p.get("copies", []) if r]
            slow = min(ranks, key=lambda r: (r.get("all-gather") or {}).get("gbps") or 0.0) if ranks else {}
            lines.append((d["shape"], str(d["tokens_per_rank"]), m, waits, host[0], host[1], split, tail,
                          _rate(slow.get("all-gather")), _rate(slow.get("reduce-scatter")),
                          _fmt(slow.get("overlap_ms"), ".1f")))
    if not lines:
        return ""
    text = table(head, lines, "profile per step (copies: the rank with the slowest all-gather rate; NOTE [copy rate]):")
    enq = format_enqueues(docs)
    return text + ("\n" + enq if enq else "")


def format_enqueues(docs: Sequence[Dict[str, Any]]) -> str:
    """Per configuration and mode with a lowcon group: what one hook call handed the driver
    (NOTE [enqueue clock]), medians: host µs and calls per kind of enqueue."""
    head = ("shape", "tok/rank", "mode", "hook") + tuple(f"{q} µs (calls)" for q in ENQUEUES)
    lines = []
    for d in docs:
        for m, p in (d.get("profile") or {}).items():
            h = p.get("host_us", {})
            for k in KINDS:
                if f"{k} launch" not in h:
                    continue
                cells = tuple(f"{_fmt(h[f'{k} {q}']['median_us'], '.1f')} ({_fmt(h[f'{k} {q} calls']['median_us'], '.0f')})"
                              for q in ENQUEUES)
                lines.append((d["shape"], str(d["tokens_per_rank"]), m, k) + cells)
    if not lines:
        return ""
    return table(head, lines, "what one hook call enqueues, median (NOTE [enqueue clock]):")
