"""The paired FSDP2 benchmark's statistics, without torch: per-round ratios, bootstrap
intervals, the no-communication bound, the loss rule and the targets.

A run is a list of rounds. In each round every mode trains one step (in a shuffled
order), so a round is `{mode: step ms}`; slow drifts of the machine (clocks, other
processes, the allocator) hit every mode of a round alike, and ratios within a round
cancel them. Every statistic here is a function of the rounds, and its 95% interval
comes from resampling whole rounds (the paired bootstrap).

`test_fsdp2_stats.py` checks all of it on synthetic rounds.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Round = Dict[str, float]

REFERENCE = "nccl"  # every ratio is against FSDP2's default
TWIN = "nccl-b"  # the same as REFERENCE, run as a separate mode: the A/A noise floor
BOUND = "nocomm"  # the same step with no communication at all

BOOT_SAMPLES = 2000
CONFIDENCE = 0.95


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(xs: Sequence[float]) -> Dict[str, float]:
    """Median and spread: min, max, quartiles, IQR, n."""
    if not xs:
        raise ValueError("no values")
    q1, q3 = quantile(xs, 0.25), quantile(xs, 0.75)
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs),
            "q1": q1, "q3": q3, "iqr": q3 - q1}


def bootstrap(rounds: Sequence[Round], stat: Callable[[Sequence[Round]], float],
              samples: int = BOOT_SAMPLES, confidence: float = CONFIDENCE, seed: int = 12345) -> Tuple[float, float, float]:
    """`stat` of the rounds, and its percentile-bootstrap interval from resampling whole
    rounds with replacement. Deterministic for a seed. Resamples where `stat` is not
    finite (a bound above a median, say) are dropped; if more than half are, the
    interval is (nan, nan)."""
    if not rounds:
        raise ValueError("no rounds")
    point = stat(rounds)
    rng = random.Random(seed)
    n = len(rounds)
    values = []
    for _ in range(samples):
        v = stat([rounds[rng.randrange(n)] for _ in range(n)])
        if math.isfinite(v):
            values.append(v)
    if len(values) < samples / 2:
        return point, float("nan"), float("nan")
    tail = (1 - confidence) / 2
    return point, quantile(values, tail), quantile(values, 1 - tail)


def median_ratio(mode: str, ref: str = REFERENCE) -> Callable[[Sequence[Round]], float]:
    """The median over rounds of mode's step time over ref's in the same round."""
    return lambda rs: statistics.median(r[mode] / r[ref] for r in rs)


def median_of(mode: str) -> Callable[[Sequence[Round]], float]:
    return lambda rs: statistics.median(r[mode] for r in rs)


def removed_share(mode: str, bound: float, correction: float,
                  ref: str = REFERENCE) -> Callable[[Sequence[Round]], float]:
    """The share of ref's excess over the bound that mode removes, from paired ratios:
    1 - (R(mode) - Rb) / (1 - Rb), where R(x) is the median over rounds of x's step over
    ref's in the same round (`median_ratio`) and Rb the bound's. 1 means mode reaches the
    bound, 0 means it is no better than ref, negative means worse; nan when ref has no
    excess.

    NOTE [removed, paired]: where the rounds hold the bound's own mode (`nocomm`), Rb is
    paired too: R(nocomm), less `correction` over ref's median step. `correction` is what
    `bound_ms` took off the median `nocomm` step of all the run's rounds (a world-1
    bound's optimizer share; 0 for a bound measured at the run's world), fixed for every
    bootstrap resample: recomputed per resample, it would add each resample's jitter of
    the median `nocomm` and undo the pairing. Else Rb = bound / median(ref).
    Until 2026-11-28 the share came from each mode's own median step, which pairs
    nothing. Where host spikes fall unevenly on the modes (4096x12 at 1024 tokens, 2x
    H200), that made the A/A twin "remove" 15% and NCCL-CE 2% while its paired ratio was
    0.948; the paired share gives 1% and 28%. On the rows of docs/benchmarks.md's first
    table the two agree within 3 points (docs/runs/2026-11-28-ce7ebe5-2xh200)."""
    def stat(rs: Sequence[Round]) -> float:
        ref_med = statistics.median(r[ref] for r in rs)
        if all(BOUND in r for r in rs):
            rb = statistics.median(r[BOUND] / r[ref] for r in rs) - correction / ref_med
        else:
            rb = bound / ref_med
        if rb >= 1.0:
            return float("nan")
        return 1.0 - (median_ratio(mode, ref)(rs) - rb) / (1.0 - rb)
    return stat


def bound_ms(rounds: Sequence[Round], opt_ms: Optional[Sequence[Round]] = None, world: int = 2,
             bound_world: Optional[int] = None) -> Optional[float]:
    """The no-communication bound of a run, in ms: the median `nocomm` step.

    Measured at the run's own world size (the same shards, the same optimizer work) it
    needs no correction. Measured at world 1 (`bound_world` = 1) for a run of `world`
    ranks, each rank's optimizer updated all parameters instead of 1/world of them: the
    surplus, (1 - 1/world) of the median optimizer time `opt_ms[BOUND]`, comes off.
    None when the run has no `nocomm` steps.
    """
    xs = [r[BOUND] for r in rounds if BOUND in r]
    if not xs:
        return None
    b = statistics.median(xs)
    if bound_world is not None and bound_world != world:
        if not opt_ms:
            raise ValueError("a bound measured at another world size needs the optimizer's times")
        opt = statistics.median(r[BOUND] for r in opt_ms if BOUND in r)
        b -= opt * (1 - bound_world / world)
    return b


def pair_stats(rounds: Sequence[Round], modes: Sequence[str], bound: Optional[float] = None,
               ref: str = REFERENCE, seed: int = 12345) -> Dict[str, Dict[str, Any]]:
    """Per mode: the median step, its ratio to ref (median of per-round ratios) with the
    95% interval, and against the bound its excess and (but for ref) the share of
    ref's excess it removes (from paired ratios: NOTE [removed, paired]), with its interval."""
    out: Dict[str, Dict[str, Any]] = {}
    for m in modes:
        rs = [r for r in rounds if m in r and ref in r]
        if not rs:
            continue
        s = summarize([r[m] for r in rs])
        row: Dict[str, Any] = {"median_ms": s["median"], "iqr_ms": s["iqr"], "min_ms": s["min"],
                               "max_ms": s["max"], "pairs": len(rs)}
        if m != ref:
            row["ratio"], row["ratio_lo"], row["ratio_hi"] = bootstrap(rs, median_ratio(m, ref), seed=seed)
        if bound is not None:
            row["excess_ms"] = s["median"] - bound
            if m not in (ref, BOUND):
                # The bound's correction, fixed over the resamples (NOTE [removed, paired]).
                corr = statistics.median(r[BOUND] for r in rs) - bound if all(BOUND in r for r in rs) else 0.0
                row["removed"], row["removed_lo"], row["removed_hi"] = bootstrap(
                    rs, removed_share(m, bound, corr, ref), seed=seed)
        out[m] = row
    return out


def noise_floor(stats: Dict[str, Dict[str, Any]]) -> Optional[float]:
    """How far from 1 the A/A pair (TWIN over REFERENCE) strays: the larger distance of
    its median ratio's interval ends from 1. None without a twin."""
    t = stats.get(TWIN)
    if not t or "ratio_lo" not in t or not math.isfinite(t["ratio_lo"]):
        return None
    return max(abs(t["ratio_hi"] - 1.0), abs(1.0 - t["ratio_lo"]), abs(t["ratio"] - 1.0))


def verdict(row: Dict[str, Any], noise: Optional[float]) -> str:
    """"faster" when the ratio's interval lies below 1 and its median below 1 - noise,
    "slower" when its median is above 1 + noise (the A/A floor; with no twin, when the
    interval lies above 1), else "same"."""
    lo, hi, r = row.get("ratio_lo"), row.get("ratio_hi"), row.get("ratio")
    if r is None or lo is None or not math.isfinite(lo):
        return "?"
    n = noise or 0.0
    if hi < 1.0 and r < 1.0 - n:
        return "faster"
    if (r > 1.0 + n) if noise is not None else (lo > 1.0):
        return "slower"
    return "same"


# Targets (fsdp2_model's NOTE [communication against compute] for the regimes). In a
# balanced or compute-bound row, a lowcon mode must remove at least CE_MARGIN more of
# NCCL's excess than NCCL's own copy-engine recipe (`nccl-ce`) does in the same row;
# NOISE_TARGET bounds the A/A interval a row needs for that to be resolved. Every mode
# must not be slower than NCCL beyond the A/A noise, and its peak memory, pool included,
# stays within MEMORY_SLACK of NCCL's.
CE = "nccl-ce"
CE_MARGIN = 0.20
TARGET_REGIMES = ("balanced", "compute-bound")
NOISE_TARGET = 0.02
MEMORY_SLACK = 1.05


def check_targets(row: Dict[str, Any], mode: str, regime: str) -> List[str]:
    """What `mode` misses of the targets in one configuration's result (empty: all met).
    `row` is a configuration's document: `stats`, `noise`, `memory`, `pool_growth`."""
    missed = []
    s = row["stats"].get(mode)
    if s is None:
        return [f"{mode}: no timed steps"]
    if verdict(s, row.get("noise")) == "slower":
        missed.append(f"{mode}: slower than {REFERENCE} beyond the A/A noise "
                      f"(ratio {s['ratio']:.3f}, noise {row.get('noise') or 0:.3f})")
    ce = row["stats"].get(CE, {}).get("removed")
    if mode.startswith("lowcon") and regime in TARGET_REGIMES and ce is not None and math.isfinite(ce):
        got = s.get("removed", float("nan"))
        if not (math.isfinite(got) and got >= ce + CE_MARGIN):
            missed.append(f"{mode}: removes {got:.0%} of {REFERENCE}'s excess, {CE} {ce:.0%}: the target is "
                          f"{CE} + {CE_MARGIN:.0%} ({regime})")
    mem = row.get("memory", {})
    if mode in mem and REFERENCE in mem and mem[mode] > MEMORY_SLACK * mem[REFERENCE]:
        missed.append(f"{mode}: peak {mem[mode] / 2**30:.2f} GiB > {MEMORY_SLACK:g} x {REFERENCE}'s "
                      f"{mem[REFERENCE] / 2**30:.2f} GiB")
    if row.get("pool_growth", {}).get(mode):
        missed.append(f"{mode}: the pool grew after the first step ({row['pool_growth'][mode]})")
    return missed


# NOTE [loss tolerance]
# With one model per mode, every model starts from the same seeds and sees, per rank and
# round, the same tokens. Runs still differ a little (flash attention's backward
# accumulates with atomics, cuBLAS may pick other kernels), so the tolerance is
# measured: `nccl` and `nccl-b` are two models of the same mode, and a mode is wrong
# when its largest per-step loss difference to `nccl` exceeds K times the A/A
# difference, with an absolute floor (the A/A pair may agree bitwise). A wrong
# gradient (wrong shard, wrong op) moves the loss by far more than 1e-3 in 10 steps.
# Only the first LOSS_ROUNDS rounds are judged: a reduction that adds in another order
# is as right as NCCL's, yet once one sum rounds differently the curves drift apart
# chaotically. Seen on 4x H200 (2026-11-26, 2048x8 at 256 tokens, 150 rounds): NCCL, its
# twin and NCCL-CE agreed bit for bit throughout; four lowcon plans (prediction off,
# the f32 wire, kernel sync) agreed with each other bit for bit and with NCCL until
# round 49 (bf16 gradients summed in f32 are exact until two exponents differ enough),
# then drifted up to 2.1e-3 by round 150. Without a twin (profile runs) nothing
# calibrates the tolerance, so the floor is wider (flash attention's own drift reached
# 1.6e-3 in 15 rounds at 4096x12).
LOSS_K = 10.0
LOSS_FLOOR = 1e-3
LOSS_FLOOR_UNCALIBRATED = 5e-3
LOSS_ROUNDS = 20


def max_abs_diff(a: Sequence[float], b: Sequence[float]) -> float:
    """Largest |a_i - b_i|; inf when the lengths differ or a value is not finite (a
    diverged run must never pass)."""
    if len(a) != len(b) or not a:
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            return float("inf")
        worst = max(worst, abs(x - y))
    return worst


def judge_losses(losses: Dict[str, Sequence[float]], k: float = LOSS_K, floor: float = LOSS_FLOOR) -> Dict[str, Any]:
    """Per mode (but the reference, the twin and the bound): its largest loss difference
    to the reference over the first LOSS_ROUNDS rounds, the tolerance, and "ok" or
    "wrong" (NOTE [loss tolerance]); `drift`: the largest difference over every round."""
    ref = losses.get(REFERENCE)
    if ref is None:
        return {"tolerance": None, "modes": {}}
    head = {m: list(xs)[:LOSS_ROUNDS] for m, xs in losses.items()}
    aa = max_abs_diff(head[TWIN], head[REFERENCE]) if TWIN in losses else None
    if aa is None:
        tol = max(floor, LOSS_FLOOR_UNCALIBRATED)
    else:
        tol = floor if not math.isfinite(aa) else max(k * aa, floor)
    modes = {}
    for m, xs in losses.items():
        if m in (REFERENCE, BOUND):
            continue
        d = max_abs_diff(head[m], head[REFERENCE])
        modes[m] = {"diff": d, "drift": max_abs_diff(xs, ref),
                    "check": "calib" if m == TWIN else ("ok" if d <= tol else "wrong")}
    return {"aa_diff": aa, "tolerance": tol, "rounds": LOSS_ROUNDS, "modes": modes}


def pool_growth(pool_after_step: Sequence[int]) -> Optional[str]:
    """None when the pool holds the same bytes after every step from the first on, else
    where it grew ("step 3: 1.0 -> 1.5 GiB")."""
    for i in range(1, len(pool_after_step)):
        a, b = pool_after_step[i - 1], pool_after_step[i]
        if b > a:
            return f"step {i + 1}: {a / 2**30:.3f} -> {b / 2**30:.3f} GiB"
    return None


def table(head: Sequence[str], lines: List[Sequence[str]], title: str) -> str:
    """`title`, then `lines` under `head` in aligned columns."""
    widths = [max([len(h), *(len(str(l[i])) for l in lines)]) for i, h in enumerate(head)]
    out = [title, "  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    out.extend("  ".join(str(c).ljust(w) for c, w in zip(l, widths)) for l in lines)
    return "\n".join(out)


def _fmt(x: Any, spec: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


def format_rows(docs: Sequence[Dict[str, Any]]) -> str:
    """The paired table: one line per configuration and mode."""
    head = ("shape", "tok/rank", "rdtype", "regime", "mode", "median ms", "vs nccl [95%]", "excess ms",
            "removed [95%]", "peak GiB", "loss")
    lines = []
    for d in docs:
        if "stats" not in d:
            lines.append((d.get("shape", "?"), str(d.get("tokens_per_rank", "")), d.get("reduce_dtype", ""),
                          "", "", str(d.get("error", "not run"))[:60], "", "", "", "", ""))
            continue
        losses = d.get("losses", {}).get("modes", {})
        for m, s in d["stats"].items():
            vs = ""
            if "ratio" in s:
                vs = f"{s['ratio']:.3f} [{_fmt(s['ratio_lo'], '.3f')}, {_fmt(s['ratio_hi'], '.3f')}] " \
                     f"{verdict(s, d.get('noise'))}"
            rem = ""
            if "removed" in s:
                rem = f"{_fmt(s['removed'], '.0%')} [{_fmt(s['removed_lo'], '.0%')}, {_fmt(s['removed_hi'], '.0%')}]"
            mem = d.get("memory", {}).get(m)
            lines.append((d["shape"], str(d["tokens_per_rank"]), d["reduce_dtype"], d["regime"], m,
                          _fmt(s["median_ms"], ".2f"), vs, _fmt(s.get("excess_ms"), ".2f"), rem,
                          _fmt(None if mem is None else mem / 2**30, ".2f"), losses.get(m, {}).get("check", "")))
    widths = [max(len(h), *(len(str(l[i])) for l in lines)) if lines else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    out.extend("  ".join(str(c).ljust(w) for c, w in zip(l, widths)) for l in lines)
    return "\n".join(out)


def host_stats(doc: Dict[str, Any]) -> Dict[str, Dict[str, float]]:
    """NOTE [host per step]: per mode, the median host ms to issue a step (`host_rounds`,
    the slowest rank's), its median over the step's GPU time (`rounds`, paired by round:
    near 1 or above, the host sets the step's pace; well below, the GPU does), and its
    median excess over the no-communication mode's in the same round (the host time the
    mode's collectives add). Empty for runs before host times were kept."""
    host, gpu = doc.get("host_rounds"), doc.get("rounds")
    if not host or not gpu:
        return {}
    bound = next((m for m in host[0] if m.startswith(BOUND)), None)
    out = {}
    for m in host[0]:
        row = {"host_ms": quantile([r[m] for r in host], 0.5),
               "host_over_step": quantile([h[m] / g[m] for h, g in zip(host, gpu) if g[m] > 0], 0.5)}
        if bound is not None and m != bound:
            row["host_excess_ms"] = quantile([r[m] - r[bound] for r in host], 0.5)
        out[m] = row
    return out


def format_host(docs: Sequence[Dict[str, Any]]) -> str:
    """The host's time to issue a step, per configuration and mode (`host_stats`)."""
    head = ("shape", "tok/rank", "rdtype", "mode", "host ms/step", "host / step", f"host over {BOUND}")
    lines = []
    for d in docs:
        for m, h in host_stats(d).items():
            lines.append((d["shape"], str(d["tokens_per_rank"]), d["reduce_dtype"], m, _fmt(h["host_ms"], ".2f"),
                          _fmt(h["host_over_step"], ".3f"), _fmt(h.get("host_excess_ms"), "+.2f")))
    if not lines:
        return ""
    return table(head, lines, "the host's time to issue a step, median, the slowest rank's (NOTE [host per step]):")


def format_bytes(docs: Sequence[Dict[str, Any]]) -> str:
    """Bytes per step to and from peers, per rank, as lowcon's counters saw them
    (`bytes_per_step`): every byte, the bf16 wire's top halves, its fallbacks."""
    head = ("shape", "tok/rank", "rdtype", "mode", "GB/step", "all-gather GB", "reduce-scatter GB", "wire GB",
            "fallback GB", "fallback pieces", "rendezvous", "predicted (missed)")
    lines = []
    for d in docs:
        for m, b in d.get("bytes_per_step", {}).items():
            gb = lambda k: f"{b.get(k, 0) / 1e9:.3f}"  # noqa: E731
            pieces = f"{b.get('fallback_pieces', 0)} / {b.get('wire_pieces', 0)}"
            # Host rendezvous and predicted map_ordinary calls in the step (NOTE
            # [addresses predicted]); absent from runs before they were counted.
            meets = str(b["host_rendezvous"]) if "host_rendezvous" in b else "-"
            pred = f"{b['predicted_calls']} ({b.get('mispredicted_calls', 0)})" if "predicted_calls" in b else "-"
            lines.append((d["shape"], str(d["tokens_per_rank"]), d["reduce_dtype"], m, gb("total_bytes"),
                          gb("all_gather_bytes"), gb("reduce_scatter_bytes"), gb("wire_bytes"), gb("fallback_bytes"),
                          pieces, meets, pred))
    if not lines:
        return ""
    return table(head, lines, "bytes per step to and from peers, one rank (lowcon's counters):")


def format_own_memory(docs: Sequence[Dict[str, Any]]) -> str:
    """lowcon's own memory per configuration, rank 0 (`lowcon_memory`): its pool and each
    channel's workspace (the bf16 wire's planes are its channel's), in GiB."""
    lines = []
    for d in docs:
        own = d.get("lowcon_memory")
        if not own:
            continue
        chans = own.get("workspace_channels", {})
        split = ", ".join(f"channel {c}: {b / 2**30:.2f}" for c, b in sorted(chans.items(), key=lambda kv: -kv[1]))
        total = (own.get("pool_bytes", 0) + sum(chans.values())) / 2**30
        lines.append(f"{d['shape']} {d['tokens_per_rank']} {d['reduce_dtype']}: {total:.2f} GiB = pool "
                     f"{own.get('pool_bytes', 0) / 2**30:.2f} + workspaces ({split or 'none'})")
    if not lines:
        return ""
    return "\n".join(["lowcon's own memory, rank 0 (GiB; in every lowcon mode's peak above):", *lines])


TORCH_MEMORY = "nocomm-torch"  # no communication, buffers from torch: NCCL's memory without NCCL


def format_memory(docs: Sequence[Dict[str, Any]], ref: str = TORCH_MEMORY) -> str:
    """The memory-only table (`--memory-only`): per configuration and mode, the peak and
    its ratio to `ref`'s (NCCL's allocation pattern when NCCL cannot run), and whether
    it meets MEMORY_SLACK."""
    head = ("shape", "tok/rank", "rdtype", "mode", "peak GiB", f"vs {ref}", "lowcon GiB", "target")
    lines = []
    for d in docs:
        mem, sym = d.get("memory", {}), d.get("symmetric", {})
        if not mem:
            lines.append((d.get("shape", "?"), str(d.get("tokens_per_rank", "")), d.get("reduce_dtype", ""),
                          str(d.get("error", "not run"))[:60], "", "", "", ""))
            continue
        base = mem.get(ref)
        for m, v in mem.items():
            ratio = v / base if base else None
            verdict = "" if ratio is None or m == ref else ("ok" if ratio <= MEMORY_SLACK else "missed")
            lines.append((d["shape"], str(d["tokens_per_rank"]), d["reduce_dtype"], m, f"{v / 2**30:.2f}",
                          "" if ratio is None else f"{ratio:.3f}",
                          "" if sym.get(m) is None else f"{sym[m] / 2**30:.2f}", verdict))
    widths = [max(len(h), *(len(str(l[i])) for l in lines)) if lines else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    out.extend("  ".join(str(c).ljust(w) for c, w in zip(l, widths)) for l in lines)
    return "\n".join(out)


def analyse(doc: Dict[str, Any], world: int) -> Dict[str, Any]:
    """Fills one configuration's document from its raw rounds, in place: the bound, the
    paired stats, the noise floor, the loss check and each mode's missed targets."""
    rounds = doc["rounds"]
    modes = doc["modes"]
    doc["analysed_world"] = world  # what a later reading analyses it for (reanalyse)
    b = bound_ms(rounds, doc.get("opt_rounds"), world, doc.get("bound_world"))
    doc["bound_ms"] = b
    doc["stats"] = pair_stats(rounds, modes, b, seed=doc.get("seed", 12345))
    doc["noise"] = noise_floor(doc["stats"])
    if "loss_curves" in doc:
        doc["losses"] = judge_losses(doc["loss_curves"])
    doc["missed"] = {m: check_targets(doc, m, doc["regime"]) for m in modes if m not in (REFERENCE, TWIN, BOUND)}
    if b and doc.get("comm_ms") is not None:
        doc["comm_over_bound"] = doc["comm_ms"] / b
    if doc["noise"] is not None and doc["noise"] > NOISE_TARGET:
        # A row whose A/A twin strays this far resolves no target: say so, once.
        doc["missed"][TWIN] = [f"A/A noise {doc['noise']:.3f} > {NOISE_TARGET}: this row resolves nothing "
                               "(more rounds, --sync-each-step, or drop it)"]
    return doc


def reanalyse(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A results file's configurations, each analysed again from its raw rounds and
    curves with today's rules (NOTE [removed, paired], NOTE [loss tolerance]), so that
    older files read the same way, for the world it was analysed for when it ran: its
    `analysed_world`; in files older than that field, the world of a `--bound-for-world`
    run (args), else the run's own. Memory-only and failed configurations, and files that
    name no world, keep what they recorded (their loss check judged again)."""
    env_world = doc.get("env", {}).get("world_size")
    bound_for = (doc.get("args") or {}).get("bound_for_world")
    out = []
    for c in doc.get("configs", []):
        world = c.get("analysed_world") or (bound_for if bound_for and c.get("bound_world") else None) or env_world
        if world and "stats" in c and c.get("rounds") and c.get("modes") and "regime" in c:
            analyse(c, world)
        elif "loss_curves" in c:
            c["losses"] = judge_losses(c["loss_curves"])
        out.append(c)
    return out
