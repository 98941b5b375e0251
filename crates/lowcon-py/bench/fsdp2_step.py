"""FSDP2 training steps on lowcon against NCCL: the end-to-end benchmark of issue 18.

A Llama-style decoder stack (RMSNorm, rotary attention through
`scaled_dot_product_attention`, gated SiLU MLP; random weights and tokens; bf16
parameters through `MixedPrecisionPolicy`) is sharded with FSDP2 (`fully_shard` per
block, then the root) and trained with AdamW, in one of these modes:

- `nccl`, `nccl-rerun`: FSDP2's defaults. The rerun is the same mode in a fresh
  process; its loss difference to `nccl` calibrates the loss tolerance.
- `nccl-ce`: the copy-engine recipe of PyTorch #176613 built from torch 2.11's
  public pieces: a zero-CTA NCCL group for the all-gather, whose output comes from
  torch's NCCL symmetric memory; the reduce-scatter stays on FSDP's own (default)
  group. When torch or NCCL cannot do it, the mode reports why and leaves no rows.
- `lowcon`: lowcon's all-gather and reduce-scatter through `lowcon.fsdp.install`.

Three ways to run it (see README.md next to this file):

    python3 fsdp2_step.py --modes nccl,nccl-rerun,nccl-ce,lowcon --out DIR   # driver
    torchrun --nproc-per-node 2 fsdp2_step.py --mode lowcon --json x.json    # one mode
    python3 fsdp2_step.py --merge DIR/*.json --json all.json --plot all.png  # merge

The driver starts one torchrun per mode (every configuration of a mode runs in that
one process), then merges the modes' JSON into one table, one JSON and one PNG.

The pure parts (model arithmetic, statistics, the loss rule, merging, the table) need
no torch and are tested by `test_fsdp2_stats.py`; torch is imported inside the
functions that need it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

SCHEMA = "lowcon-fsdp2-step/1"
MODES = ("nccl", "nccl-rerun", "nccl-ce", "lowcon")
REFERENCE_MODE = "nccl"
RERUN_MODE = "nccl-rerun"

# NOTE [peak FLOP/s]
# H100/H200 SXM dense bf16 tensor-core peak, without sparsity: 989.4 TFLOP/s. The
# issue fixes 989; MFU is model FLOPs (below) over this peak times the GPU count.
PEAK_FLOPS = 989e12

# Default sweep. Where the step turns from communication-bound to compute-bound:
# per parameter and step, FSDP moves 2 x 2 bytes of bf16 all-gather output (forward
# and backward) and 4 bytes of fp32 reduce-scatter input, ~12 ps at NVLink speeds on
# 2 H200s, against 6 FLOP per token, ~0.009 ps per token at ~700 TFLOP/s: the two
# meet near ~1300 tokens per rank. 256 and 1024 tokens are communication-bound,
# 4096 is near the middle, 16384 is compute-bound.
DEFAULT_SWEEP = "2048x8:256,1024,4096,16384;4096x8:256,1024,4096,16384;2048x16:1024,8192"
QUICK_SWEEP = "1024x2:512,2048"
MAX_SEQ = 2048  # sequence length is min(tokens per rank, MAX_SEQ); batch makes up the rest
HEAD_DIM = 128
VOCAB = 32768


# --------------------------------------------------------------------------------------
# Model arithmetic (pure)
# --------------------------------------------------------------------------------------


def ffn_dim(width: int, multiple_of: int = 256) -> int:
    """Llama's hidden size of the gated MLP: 2/3 of 4 x width, rounded up to 256."""
    hidden = int(2 * (4 * width) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@dataclass(frozen=True)
class ModelConfig:
    """One point of the sweep: the model's shape and this rank's tokens per step."""

    width: int
    depth: int
    seq: int
    batch: int
    vocab: int = VOCAB
    head_dim: int = HEAD_DIM

    @property
    def heads(self) -> int:
        return self.width // self.head_dim

    @property
    def ffn(self) -> int:
        return ffn_dim(self.width)

    @property
    def tokens_per_rank(self) -> int:
        return self.seq * self.batch

    @property
    def shape(self) -> str:
        return f"{self.width}x{self.depth}"

    @property
    def key(self) -> str:
        """Identifies the configuration across modes (rows are matched on it)."""
        return f"w{self.width}-d{self.depth}-s{self.seq}-b{self.batch}"

    @classmethod
    def for_tokens(cls, width: int, depth: int, tokens: int, max_seq: int = MAX_SEQ) -> "ModelConfig":
        seq = min(tokens, max_seq)
        if tokens % seq:
            raise ValueError(f"tokens per rank {tokens} is not a multiple of the sequence length {seq}")
        if width % HEAD_DIM:
            raise ValueError(f"width {width} is not a multiple of the head size {HEAD_DIM}")
        return cls(width=width, depth=depth, seq=seq, batch=tokens // seq)


def parse_sweep(text: str, max_seq: int = MAX_SEQ) -> List[ModelConfig]:
    """`"WIDTHxDEPTH:T1,T2;WIDTHxDEPTH:T3"` -> configurations, in the order given."""
    configs = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        shape, _, tokens = part.partition(":")
        if not tokens:
            raise ValueError(f"sweep part {part!r}: expected WIDTHxDEPTH:TOKENS[,TOKENS...]")
        width, _, depth = shape.lower().partition("x")
        for t in tokens.split(","):
            configs.append(ModelConfig.for_tokens(int(width), int(depth), int(t), max_seq))
    if not configs:
        raise ValueError("empty sweep")
    return configs


def param_counts(cfg: ModelConfig) -> Dict[str, int]:
    """Parameter counts of the model `build_model` makes (untied embedding and head).

    `matmul` is what enters the 6·N FLOP term: every weight used in a matrix
    multiplication (all blocks' projections and the output head), not the embedding
    (a lookup) and not the norms (negligible, elementwise).
    """
    d, f, v, depth = cfg.width, cfg.ffn, cfg.vocab, cfg.depth
    per_block_matmul = 4 * d * d + 3 * d * f  # wq, wk, wv, wo; w1, w3, w2
    per_block = per_block_matmul + 2 * d  # two RMSNorm weights
    embedding, head, final_norm = v * d, v * d, d
    return {
        "embedding": embedding,
        "per_block": per_block,
        "head": head,
        "total": embedding + depth * per_block + final_norm + head,
        "matmul": depth * per_block_matmul + head,
    }


def step_flops(cfg: ModelConfig, world: int) -> float:
    """Model FLOPs of one training step over all ranks (PaLM's appendix B convention).

        FLOPs = 6 · N_matmul · T  +  12 · L · S · d · T

    T = world × tokens per rank, N_matmul from `param_counts` (forward 2 FLOP per
    weight and token, backward 4), S the sequence length, d the width, L the depth.
    The second term is attention's QKᵀ and AV (4·S·d per token and layer forward,
    times 3 with backward). It is counted in full although the attention is causal
    (flash attention skips about half): the usual MFU convention (PaLM, torchtitan),
    so the numbers compare with theirs. Recomputation is not counted (there is none).
    """
    tokens = world * cfg.tokens_per_rank
    dense = 6 * param_counts(cfg)["matmul"] * tokens
    attention = 12 * cfg.depth * cfg.seq * cfg.width * tokens
    return float(dense + attention)


def mfu(flops_per_step: float, step_seconds: float, world: int, peak: float = PEAK_FLOPS) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak of `world` GPUs."""
    if step_seconds <= 0:
        return float("nan")
    return flops_per_step / step_seconds / (world * peak)


# --------------------------------------------------------------------------------------
# Statistics and the loss rule (pure)
# --------------------------------------------------------------------------------------


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), of already sorted data."""
    if not sorted_xs:
        return float("nan")
    pos = (len(sorted_xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize_times(times_ms: Sequence[float]) -> Dict[str, float]:
    """Median and spread of the timed steps: min, max, quartiles, IQR, mean."""
    xs = sorted(float(x) for x in times_ms)
    if not xs:
        raise ValueError("no timed steps")
    q1, q3 = _quantile(xs, 0.25), _quantile(xs, 0.75)
    return {
        "n": len(xs),
        "median_ms": statistics.median(xs),
        "mean_ms": statistics.fmean(xs),
        "min_ms": xs[0],
        "max_ms": xs[-1],
        "q1_ms": q1,
        "q3_ms": q3,
        "iqr_ms": q3 - q1,
    }


def max_abs_diff(a: Sequence[float], b: Sequence[float]) -> float:
    """Largest |a_i - b_i| over the steps both have; inf when the lengths differ or a
    value is not finite (a diverged run must never pass)."""
    if len(a) != len(b) or not a:
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            return float("inf")
        worst = max(worst, abs(x - y))
    return worst


def max_rel_diff(a: Sequence[float], b: Sequence[float]) -> float:
    """Largest |a_i - b_i| / max(|b_i|, tiny), inf as in `max_abs_diff`."""
    if len(a) != len(b) or not a:
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            return float("inf")
        worst = max(worst, abs(x - y) / max(abs(y), 1e-30))
    return worst


# NOTE [loss tolerance]
# Every mode trains from the same seeds: the same initial weights and, per rank and
# step, the same tokens. Runs still differ a little between processes even with the
# same library (flash attention's backward accumulates dQ with atomics, cuBLAS may
# pick other kernels), so the tolerance is measured, not guessed: `nccl` and
# `nccl-rerun` are two runs of the same mode, and a mode is wrong for a configuration
# when its largest per-step loss difference to `nccl` exceeds K times the NCCL-vs-NCCL
# difference. When NCCL reproduces itself bitwise (difference 0), K x 0 would demand
# bitwise equality of different reduction orders, so an absolute floor applies: the
# tolerance is max(K x ref, FLOOR). The loss starts near ln(32768) = 10.4 and moves by
# ~1e-2 per step; a wrong gradient (wrong shard, wrong op) moves it by far more than
# 1e-3 within 10 steps. Adam is blind to a uniform gradient scale, so the global
# gradient norm is compared as well, relatively, with the same rule (floor 1e-2): it
# catches a missing or doubled average.
LOSS_K = 10.0
LOSS_FLOOR = 1e-3
GRAD_NORM_REL_FLOOR = 1e-2


def tolerance(reference_diff: Optional[float], k: float, floor: float) -> float:
    """max(k x reference_diff, floor); the floor alone when there is no reference."""
    if reference_diff is None or not math.isfinite(reference_diff):
        return floor
    return max(k * reference_diff, floor)


def judge_rows(
    rows: List[Dict[str, Any]],
    k: float = LOSS_K,
    floor: float = LOSS_FLOOR,
    grad_floor: float = GRAD_NORM_REL_FLOOR,
) -> None:
    """Adds `check` (and the numbers behind it) to every row, in place.

    Rows are matched across modes by `key`. `nccl` rows are the reference ("ref"),
    `nccl-rerun` rows calibrate ("calib"), every other row is "ok" or "wrong", or
    "no-ref" when the `nccl` row of its configuration is missing.
    """
    by = {(r["mode"], r["key"]): r for r in rows if "losses" in r}
    for row in rows:
        if "losses" not in row:
            row.setdefault("check", "error" if row.get("error") else "skipped")
            continue
        ref = by.get((REFERENCE_MODE, row["key"]))
        rerun = by.get((RERUN_MODE, row["key"]))
        ref_loss_diff = ref_gn_diff = None
        if ref is not None and rerun is not None:
            ref_loss_diff = max_abs_diff(rerun["losses"], ref["losses"])
            ref_gn_diff = max_rel_diff(rerun.get("grad_norms", []), ref.get("grad_norms", []))
        row["loss_tol"] = tolerance(ref_loss_diff, k, floor)
        row["grad_norm_tol"] = tolerance(ref_gn_diff, k, grad_floor)
        row["calibrated"] = ref_loss_diff is not None
        if row["mode"] == REFERENCE_MODE:
            row["check"] = "ref"
            row["loss_diff"] = 0.0
            continue
        if ref is None:
            row["check"] = "no-ref"
            continue
        row["loss_diff"] = max_abs_diff(row["losses"], ref["losses"])
        row["grad_norm_diff"] = max_rel_diff(row.get("grad_norms", []), ref.get("grad_norms", []))
        if row["mode"] == RERUN_MODE:
            row["check"] = "calib"
            continue
        bad = row["loss_diff"] > row["loss_tol"] or row["grad_norm_diff"] > row["grad_norm_tol"]
        row["check"] = "wrong" if bad else "ok"


def compare_speed(rows: List[Dict[str, Any]]) -> None:
    """Adds `vs_nccl` (median over NCCL's median) and `speed` to every timed row.

    "No slower" in the issue: the difference of the medians lies within the measured
    spread; the spread used is the larger of the two rows' interquartile ranges.
    `speed` is "faster", "same" or "slower" on that rule.
    """
    ref = {r["key"]: r for r in rows if r["mode"] == REFERENCE_MODE and "median_ms" in r}
    for row in rows:
        base = ref.get(row["key"])
        if base is None or "median_ms" not in row:
            continue
        row["vs_nccl"] = row["median_ms"] / base["median_ms"]
        diff = row["median_ms"] - base["median_ms"]
        spread = max(row["iqr_ms"], base["iqr_ms"])
        row["speed"] = "same" if abs(diff) <= spread else ("faster" if diff < 0 else "slower")


# --------------------------------------------------------------------------------------
# Merging, the table, the plot (pure, except matplotlib)
# --------------------------------------------------------------------------------------


def merge_results(docs: Sequence[Dict[str, Any]], k: float = LOSS_K, floor: float = LOSS_FLOOR) -> Dict[str, Any]:
    """One document from the per-mode documents: all rows, judged and compared."""
    modes: Dict[str, Any] = {}
    rows: List[Dict[str, Any]] = []
    for doc in docs:
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document: schema {doc.get('schema')!r}")
        if "modes" in doc:  # an already merged document: take its modes apart again
            for mode, info in doc["modes"].items():
                modes[mode] = info
            rows.extend(dict(r) for r in doc["rows"])
            continue
        mode = doc["mode"]
        modes[mode] = {k2: doc.get(k2) for k2 in ("env", "args", "skipped", "notes")}
        rows.extend(dict(r, mode=mode) for r in doc.get("rows", []))
    # A later document for the same (mode, key) replaces an earlier one.
    unique: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for r in rows:
        unique[(r["mode"], r["key"])] = r
    rows = list(unique.values())
    order = {m: i for i, m in enumerate(MODES)}
    rows.sort(key=lambda r: (r.get("width", 0), r.get("depth", 0), r.get("tokens_per_rank", 0),
                             order.get(r["mode"], len(order)), r["mode"]))
    judge_rows(rows, k=k, floor=floor)
    compare_speed(rows)
    return {"schema": SCHEMA, "modes": modes, "rows": rows, "loss_rule": {"k": k, "floor": floor}}


def _fmt(x: Any, spec: str, missing: str = "-") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return missing
    return format(x, spec)


TABLE_COLUMNS = ("mode", "shape", "seq x b", "tok/rank", "median ms", "min-max ms", "IQR ms",
                 "tok/s", "MFU %", "peak GiB", "pool GiB", "vs nccl", "loss |d|", "check")


def format_table(rows: Sequence[Dict[str, Any]], modes: Optional[Dict[str, Any]] = None) -> str:
    """A fixed-width text table, one line per (configuration, mode)."""
    lines = []
    for row in rows:
        if "median_ms" not in row:
            lines.append((row["mode"], row.get("shape", "?"), "", str(row.get("tokens_per_rank", "")),
                          str(row.get("error", "not run"))[:48], "", "", "", "", "", "", "", "",
                          row.get("check", "")))
            continue
        vs = ""
        if "vs_nccl" in row and row["mode"] != REFERENCE_MODE:
            vs = f"{row['vs_nccl']:.3f} {row['speed']}"
        lines.append((
            row["mode"],
            row["shape"],
            f"{row['seq']}x{row['batch']}",
            str(row["tokens_per_rank"]),
            _fmt(row["median_ms"], ".2f"),
            f"{row['min_ms']:.2f}-{row['max_ms']:.2f}",
            _fmt(row["iqr_ms"], ".2f"),
            _fmt(row.get("tokens_per_s"), ".0f"),
            _fmt(100 * row["mfu"] if row.get("mfu") is not None else None, ".1f"),
            _fmt(row.get("peak_used_gib"), ".2f"),
            _fmt(row.get("pool_gib"), ".2f"),
            vs,
            _fmt(row.get("loss_diff"), ".1e"),
            row.get("check", ""),
        ))
    widths = [max(len(TABLE_COLUMNS[i]), *(len(str(l[i])) for l in lines)) for i in range(len(TABLE_COLUMNS))] \
        if lines else [len(c) for c in TABLE_COLUMNS]
    out = ["  ".join(c.ljust(w) for c, w in zip(TABLE_COLUMNS, widths))]
    out.append("  ".join("-" * w for w in widths))
    out.extend("  ".join(str(c).ljust(w) for c, w in zip(l, widths)) for l in lines)
    for mode, info in (modes or {}).items():
        if info and info.get("skipped"):
            out.append(f"{mode}: skipped: {info['skipped']}")
        elif info and info.get("notes"):
            out.append(f"{mode}: " + ", ".join(f"{k}={v}" for k, v in info["notes"].items()))
    return "\n".join(out)


def write_plot(doc: Dict[str, Any], path: str) -> str:
    """Step time against tokens per rank, one line per mode, one panel per model shape.
    Returns a line saying what was written, or why nothing was."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"plot: matplotlib is not importable; no {path} (pip install matplotlib, then --merge again)"
    rows = [r for r in doc["rows"] if "median_ms" in r]
    shapes = sorted({(r["width"], r["depth"]) for r in rows})
    if not shapes:
        return "plot: no timed rows"
    modes = [m for m in MODES if any(r["mode"] == m for r in rows)] + sorted({r["mode"] for r in rows} - set(MODES))
    # Top: step time (median, bars min-max). Bottom: median over NCCL's, with the
    # issue's 0.85 target where communication dominates.
    fig, axes = plt.subplots(2, len(shapes), figsize=(5 * len(shapes), 7.5), squeeze=False,
                             gridspec_kw={"height_ratios": [2, 1]}, sharex="col")
    for col, (w, d) in enumerate(shapes):
        top, bottom = axes[0][col], axes[1][col]
        for mode in modes:
            pts = sorted((r["tokens_per_rank"], r) for r in rows
                         if r["mode"] == mode and r["width"] == w and r["depth"] == d)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1]["median_ms"] for p in pts]
            lo = [p[1]["median_ms"] - p[1]["min_ms"] for p in pts]
            hi = [p[1]["max_ms"] - p[1]["median_ms"] for p in pts]
            wrong = any(p[1].get("check") == "wrong" for p in pts)
            style = {"linestyle": "--", "alpha": 0.6} if mode == RERUN_MODE else {}
            line = top.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3,
                                label=mode + (" (WRONG loss)" if wrong else ""), **style)
            ratio = [(x, p[1]["vs_nccl"]) for x, p in zip(xs, pts) if "vs_nccl" in p[1]]
            if ratio and mode != REFERENCE_MODE:
                bottom.plot(*zip(*ratio), marker="o", color=line[0].get_color(), **style)
        top.set_xscale("log", base=2)
        top.set_yscale("log")
        top.set_ylabel("step time, ms (median; bars: min-max)")
        top.set_title(f"width {w}, depth {d}")
        top.grid(True, which="both", alpha=0.3)
        top.legend()
        bottom.axhline(1.0, color="grey", linewidth=1)
        bottom.axhline(0.85, color="grey", linewidth=1, linestyle=":")
        bottom.set_xlabel("tokens per rank")
        bottom.set_ylabel("median / NCCL's")
        bottom.grid(True, which="both", alpha=0.3)
    env = next((m.get("env") for m in doc.get("modes", {}).values() if m and m.get("env")), None) or {}
    fig.suptitle(f"FSDP2 step time, {env.get('world_size', '?')}x {env.get('device_name', 'GPU')}, "
                 f"torch {env.get('torch', '?')}, NCCL {env.get('nccl', '?')}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


# --------------------------------------------------------------------------------------
# The model (torch)
# --------------------------------------------------------------------------------------


def build_model(cfg: ModelConfig, device: Any) -> Any:
    """The decoder stack, built on `device` from the current torch RNG state."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # Rotary embedding, the "rotate half" form; x: (B, H, S, hd), cos/sin: (S, hd).
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = cfg.width
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = (w(x).view(b, s, cfg.heads, cfg.head_dim).transpose(1, 2)
                       for w in (self.wq, self.wk, self.wv))
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, s, d))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = nn.Linear(cfg.width, cfg.ffn, bias=False)
            self.w3 = nn.Linear(cfg.width, cfg.ffn, bias=False)
            self.w2 = nn.Linear(cfg.ffn, cfg.width, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn_norm = nn.RMSNorm(cfg.width, eps=1e-5)
            self.attn = Attention()
            self.mlp_norm = nn.RMSNorm(cfg.width, eps=1e-5)
            self.mlp = MLP()

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.attn_norm(x), cos, sin)
            return x + self.mlp(self.mlp_norm(x))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.width)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.depth))
            self.norm = nn.RMSNorm(cfg.width, eps=1e-5)
            self.output = nn.Linear(cfg.width, cfg.vocab, bias=False)
            inv = 1.0 / (10000.0 ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
            ang = torch.outer(torch.arange(cfg.seq, dtype=torch.float32), inv)
            ang = torch.cat((ang, ang), dim=-1)
            # Not parameters: FSDP leaves buffers alone; the root casts them to bf16
            # with the other floating-point inputs of the blocks.
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            h = self.embed(tokens)
            s = tokens.shape[1]
            cos, sin = self.cos[:s], self.sin[:s]
            for layer in self.layers:
                h = layer(h, cos, sin)
            return self.output(self.norm(h))

    with torch.device(device):
        model = Decoder()
    # Llama-like scales (std 0.02) so that the loss starts near ln(vocab).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    return model


# --------------------------------------------------------------------------------------
# Modes (torch)
# --------------------------------------------------------------------------------------


class Skip(Exception):
    """The mode cannot run here; the message says why."""


class Mode:
    """What a mode adds to FSDP2: custom comms per model, and its own memory."""

    name = "nccl"

    def apply(self, model: Any) -> None:
        """Called after `fully_shard`, before the first forward."""

    def pool_bytes(self) -> Optional[int]:
        return None

    def notes(self) -> Dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class LowconMode(Mode):
    name = "lowcon"

    def __init__(self, args: argparse.Namespace) -> None:
        try:
            import lowcon
            import lowcon.fsdp  # noqa: F401  (the hooks live in the submodule)
        except ImportError as e:
            raise Skip(f"lowcon (with lowcon.fsdp) is not importable: {e}")

        self.lowcon = lowcon
        self.args = args
        # Under torchrun, rank 0 hosts lowcon's store at MASTER_PORT + 1; collective.
        self.group = lowcon.init()

    def apply(self, model: Any) -> None:
        self.lowcon.fsdp.install(model, self.group, all_gather=self.args.lowcon_ag,
                                 reduce_scatter=self.args.lowcon_rs, sync=self.args.lowcon_sync)

    def pool_bytes(self) -> Optional[int]:
        return int(self.lowcon.memory_stats(self.group)["pool_bytes"])

    def notes(self) -> Dict[str, Any]:
        return {"lowcon": getattr(self.lowcon, "__version__", "?"), "all_gather": self.args.lowcon_ag,
                "reduce_scatter": self.args.lowcon_rs, "sync": self.args.lowcon_sync}

    def close(self) -> None:
        import torch.distributed as dist

        # Rank 0 hosts the store: nobody may still need it when it closes.
        dist.barrier()
        self.group.close()


class NcclCopyEngineMode(Mode):
    """PyTorch #176613's recipe from 2.11's public pieces (TORCH_2_11_NOTES.md):
    a zero-CTA NCCL group for the all-gather only, whose output FSDP allocates through
    `allocate` from torch's NCCL symmetric-memory pool, registered by `rendezvous`."""

    name = "nccl-ce"

    def __init__(self, args: argparse.Namespace, device: Any) -> None:
        import torch
        import torch.distributed as dist

        self.device = device
        pg = getattr(dist, "ProcessGroupNCCL", None)
        if pg is None or not hasattr(pg, "NCCL_CTA_POLICY_ZERO"):
            raise Skip(f"torch {torch.__version__} has no ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO "
                       "(the binding came with torch 2.10, and needs a build against NCCL >= 2.28)")
        nccl = tuple(torch.cuda.nccl.version())
        if nccl < (2, 28):
            raise Skip(f"NCCL {'.'.join(map(str, nccl))} has no CTA policies (needs >= 2.28)")
        try:
            import torch.distributed._symmetric_memory as symm_mem
        except ImportError as e:
            raise Skip(f"torch.distributed._symmetric_memory is not importable: {e}")
        for name in ("set_backend", "rendezvous"):
            if not hasattr(symm_mem, name):
                raise Skip(f"torch.distributed._symmetric_memory has no {name}()")
        opts = pg.Options()
        if not hasattr(opts.config, "cta_policy"):
            raise Skip("ProcessGroupNCCL.Options().config has no cta_policy")
        opts.config.cta_policy = pg.NCCL_CTA_POLICY_ZERO
        # Collective over every rank, decided identically everywhere (same torch).
        self.group = dist.new_group(list(range(dist.get_world_size())), pg_options=opts)
        symm_mem.set_backend("NCCL")
        if hasattr(symm_mem, "get_mem_pool"):  # 2.11: cached, use_on_oom=False, no_split=True
            self.pool = symm_mem.get_mem_pool(device)
        else:
            self.pool = torch.cuda.MemPool(symm_mem.get_mempool_allocator(device))
        self.symm_mem = symm_mem
        dist.barrier(group=self.group)  # the communicator exists before any rendezvous
        self._notes = {"nccl": ".".join(map(str, nccl)), "ce_group": self.group.group_name}
        self._probe()
        self.comm = self._make_comm()

    def _probe(self) -> None:
        """One 32 MiB all-gather through the recipe on a side stream: checked against
        the expected data, and profiled to see whether NCCL ran a kernel (then the
        copy engines were not used and the notes say so)."""
        import torch
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        n = (32 << 20) // 2 // world
        ok, kernels, error = 1, None, ""
        try:
            stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(stream):
                with torch.cuda.use_mem_pool(self.pool):
                    out = torch.empty(n * world, dtype=torch.bfloat16, device=self.device)
                inp = out.narrow(0, n * rank, n)
                inp.fill_(rank + 1)
                self.symm_mem.rendezvous(out, group=self.group.group_name)
                dist.all_gather_into_tensor(out, inp, group=self.group)  # warm-up
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    dist.all_gather_into_tensor(out, inp, group=self.group)
                    stream.synchronize()
                want = torch.arange(1, world + 1, device=self.device, dtype=torch.bfloat16).repeat_interleave(n)
                ok = int(torch.equal(out, want))
            # NCCL's kernels are named like ncclDevKernel_AllGather_RING_LL or
            # ncclSymkDevKernel_AllGather_LL; the copy engines show as memcpy only.
            kernels = sorted({e.name for e in prof.events()
                              if e.name.lower().startswith("nccl") and "kernel" in e.name.lower()
                              and "allgather" in e.name.lower().replace("_", "")})
            del out, inp
        except Exception as e:  # noqa: BLE001  (reported and agreed on below)
            ok, error = 0, f"{type(e).__name__}: {e}"
        flag = torch.tensor([ok], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if not flag.item():
            raise Skip(f"the copy-engine all-gather probe failed on some rank ({error or 'wrong data'})")
        self._notes["probe_nccl_kernels"] = kernels
        self._notes["copy_engine_seen"] = None if kernels is None else not kernels

    def _make_comm(self) -> Any:
        import torch
        import torch.distributed as dist

        try:
            from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather
        except ImportError:
            AllGather = object  # FSDP duck-types the comm

        mode = self

        class SymmMemAllGather(AllGather):  # type: ignore[misc, valid-type]
            """allocate: the output from the symmetric pool (FSDP calls it on its
            all-gather copy-in stream); __call__: register the output (the input is a
            view of it) and gather on the zero-CTA group, ignoring FSDP's group."""

            def allocate(self, size, *, dtype, device):  # noqa: ANN001
                with torch.cuda.use_mem_pool(mode.pool):
                    return torch.empty(*size, dtype=dtype, device=device)

            def __call__(self, output_tensor, input_tensor, group, async_op=False):  # noqa: ANN001
                mode.symm_mem.rendezvous(output_tensor, group=mode.group.group_name)
                return dist.all_gather_into_tensor(output_tensor, input_tensor, group=mode.group,
                                                   async_op=async_op)

        return SymmMemAllGather()

    def apply(self, model: Any) -> None:
        from torch.distributed.fsdp import FSDPModule

        # Per module: set_custom_all_gather does not recurse.
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_custom_all_gather(self.comm)

    def notes(self) -> Dict[str, Any]:
        return dict(self._notes)


# --------------------------------------------------------------------------------------
# One configuration (torch)
# --------------------------------------------------------------------------------------


_MESH: Dict[int, Any] = {}


def _mesh(world: int) -> Any:
    """One 1-D device mesh per process (over the default group), for every config."""
    if world not in _MESH:
        from torch.distributed.device_mesh import init_device_mesh

        _MESH[world] = init_device_mesh("cuda", (world,))
    return _MESH[world]


def device_used_bytes(device: Any) -> int:
    """Device memory in use as the driver reports it (cudaMemGetInfo: total - free),
    which sees every allocation of the process: torch's caching allocator, NCCL's
    buffers and symmetric windows, lowcon's pool and signal pads, CUDA contexts."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return int(total - free)


def run_config(cfg: ModelConfig, mode: Mode, args: argparse.Namespace, device: Any,
               baseline_used: int) -> Dict[str, Any]:
    """Builds, shards and trains one configuration; returns its row."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = _mesh(world)
    torch.manual_seed(args.seed)  # the same initial weights in every mode
    torch.cuda.manual_seed(args.seed)
    model = build_model(cfg, device)
    reduce_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.reduce_dtype]
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    mode.apply(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, foreach=True)

    # Tokens: per rank and step from a seeded generator, made before timing starts.
    steps = args.warmup + args.steps
    gen = torch.Generator(device=device)
    batches = []
    for i in range(steps):
        gen.manual_seed(args.seed * 1_000_003 + rank * 10_007 + i)
        batches.append(torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), device=device, generator=gen))

    def train_step(tokens: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        return loss.detach()

    def grad_norm_sq() -> torch.Tensor:
        # Sum of squares of this rank's gradient shards, all-reduced below.
        total = torch.zeros((), dtype=torch.float32, device=device)
        for p in model.parameters():
            if p.grad is not None:
                g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                total += g.float().pow(2).sum()
        return total

    # NOTE [what a step's time is]
    # CUDA events on the compute stream, recorded before zero_grad and after
    # opt.step(). FSDP's first all-gather waits on the compute stream, and the end of
    # backward makes the compute stream wait for the last reduce-scatter, so the
    # interval holds the whole step. No synchronisation per step (the CPU may run
    # ahead, as in training); the gradient norm for the loss check is computed after
    # the end event and before the next start event, so it is in no step's time.
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    losses, gnorms = [], []
    torch.cuda.reset_peak_memory_stats(device)
    peak_used = device_used_bytes(device)
    torch.cuda.synchronize(device)
    dist.barrier()
    wall0 = time.perf_counter()
    for i in range(steps):
        if i == args.warmup:
            torch.cuda.synchronize(device)
            dist.barrier()
            wall0 = time.perf_counter()
        starts[i].record()
        losses.append(train_step(batches[i]))
        ends[i].record()
        gnorms.append(grad_norm_sq())
        # Sampled every step. The caching allocator keeps what it has reserved, so the
        # driver's figure at the end of a step is the high-water mark so far.
        peak_used = max(peak_used, device_used_bytes(device))
    torch.cuda.synchronize(device)
    wall = time.perf_counter() - wall0
    peak_used = max(peak_used, device_used_bytes(device))

    times = [starts[i].elapsed_time(ends[i]) for i in range(args.warmup, steps)]
    # Loss: the mean over ranks (each rank trains on its own tokens); one all-reduce.
    loss_t = torch.stack(losses)
    dist.all_reduce(loss_t)
    loss_t /= world
    gn_t = torch.stack(gnorms)
    dist.all_reduce(gn_t)
    peak_t = torch.tensor([peak_used - baseline_used], dtype=torch.float64, device=device)
    dist.all_reduce(peak_t, op=dist.ReduceOp.MAX)

    stats = summarize_times(times)
    flops = step_flops(cfg, world)
    counts = param_counts(cfg)
    pool = mode.pool_bytes()
    row: Dict[str, Any] = {
        "key": cfg.key, "shape": cfg.shape, **asdict(cfg), "heads": cfg.heads, "ffn": cfg.ffn,
        "tokens_per_rank": cfg.tokens_per_rank, "params": counts["total"], "params_matmul": counts["matmul"],
        **stats,
        "step_times_ms": times,
        "wall_ms_per_step": 1e3 * wall / args.steps,
        "tokens_per_s": world * cfg.tokens_per_rank / (stats["median_ms"] / 1e3),
        "flops_per_step": flops,
        "mfu": mfu(flops, stats["median_ms"] / 1e3, world),
        "peak_used_gib": peak_t.item() / 2**30,
        "torch_max_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30,
        "pool_gib": None if pool is None else pool / 2**30,
        "losses": [float(x) for x in loss_t.tolist()],
        "grad_norms": [math.sqrt(max(float(x), 0.0)) for x in gn_t.tolist()],
        "warmup": args.warmup,
    }
    del model, opt, batches, losses, gnorms
    return row


# --------------------------------------------------------------------------------------
# The torchrun worker
# --------------------------------------------------------------------------------------


def environment(device: Any) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist

    env = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "device_name": torch.cuda.get_device_name(device),
        "world_size": dist.get_world_size(),
        "host": socket.gethostname(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
        "memory_method": "cudaMemGetInfo (torch.cuda.mem_get_info) total-free, sampled after every "
                         "step; peak = max over the configuration's steps minus the value after "
                         "process-group init, max over ranks",
    }
    return env


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    t_start = time.perf_counter()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank = dist.get_rank()
    dist.barrier()  # NCCL's communicator exists: part of the baseline
    torch.cuda.synchronize(device)
    baseline_used = device_used_bytes(device)
    configs = parse_sweep(args.sweep, args.max_seq)
    doc: Dict[str, Any] = {"schema": SCHEMA, "mode": args.mode, "env": environment(device),
                           "args": vars(args), "rows": [], "skipped": None, "notes": {}}
    doc["env"]["baseline_used_gib"] = baseline_used / 2**30

    def say(msg: str) -> None:
        if rank == 0:
            print(f"[{args.mode}] {msg}", flush=True)

    def save() -> None:
        # After every configuration, so a mode that dies later keeps its earlier rows.
        if rank == 0 and args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(args.json + ".tmp", args.json)

    mode: Mode
    try:
        if args.mode in ("nccl", "nccl-rerun"):
            mode = Mode()
        elif args.mode == "nccl-ce":
            mode = NcclCopyEngineMode(args, device)
        elif args.mode == "lowcon":
            mode = LowconMode(args)
        else:
            raise SystemExit(f"unknown mode {args.mode!r}")
    except Skip as e:
        doc["skipped"] = str(e)
        say(f"skipped: {e}")
        save()
        dist.destroy_process_group()
        return 0
    doc["notes"] = mode.notes()
    say(f"torch {doc['env']['torch']}, NCCL {doc['env']['nccl']}, {doc['env']['world_size']} x "
        f"{doc['env']['device_name']}; {len(configs)} configurations; notes {doc['notes']}")

    for cfg in configs:
        # Stop cleanly when the time budget is spent: decided on rank 0's clock,
        # shared, so every rank skips the same configurations.
        over = torch.tensor([1.0 if args.time_budget and time.perf_counter() - t_start > args.time_budget else 0.0],
                            device=device)
        dist.broadcast(over, src=0)
        if over.item():
            doc["rows"].append({"key": cfg.key, "shape": cfg.shape, **asdict(cfg),
                                "tokens_per_rank": cfg.tokens_per_rank, "error": "time budget spent"})
            continue
        torch.cuda.empty_cache()
        dist.barrier()
        t0 = time.perf_counter()
        try:
            row = run_config(cfg, mode, args, device, baseline_used)
        except torch.cuda.OutOfMemoryError as e:
            # The same on every rank (same shapes), so the ranks stay in step.
            say(f"{cfg.key}: out of memory: {str(e).splitlines()[0]}")
            row = {"key": cfg.key, "shape": cfg.shape, **asdict(cfg), "tokens_per_rank": cfg.tokens_per_rank,
                   "error": "out of memory"}
        except Exception as e:
            # Anything else may leave a collective half done: record it and stop the mode.
            doc["rows"].append({"key": cfg.key, "shape": cfg.shape, **asdict(cfg),
                                "tokens_per_rank": cfg.tokens_per_rank,
                                "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]})
            save()
            raise
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        doc["rows"].append(row)
        save()
        if "median_ms" in row:
            say(f"{cfg.key}: median {row['median_ms']:.2f} ms [{row['min_ms']:.2f}, {row['max_ms']:.2f}] "
                f"MFU {100 * row['mfu']:.1f}% peak {row['peak_used_gib']:.2f} GiB "
                f"loss {row['losses'][0]:.4f} -> {row['losses'][-1]:.4f} ({time.perf_counter() - t0:.1f} s)")

    if rank == 0:
        rows = [dict(r, mode=args.mode) for r in doc["rows"]]
        print(format_table(rows), flush=True)
        save()
        if args.json:
            print(f"[{args.mode}] wrote {args.json}", flush=True)
    mode.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


# --------------------------------------------------------------------------------------
# The driver: one torchrun per mode, then the merge
# --------------------------------------------------------------------------------------


def free_port_pair() -> int:
    """A port P with P and P+1 free (torchrun's master and lowcon's store)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65535:
            continue
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


# Options the driver passes on to every mode's worker.
FORWARDED = ("sweep", "max_seq", "warmup", "steps", "seed", "lr", "reduce_dtype", "time_budget",
             "lowcon_ag", "lowcon_rs", "lowcon_sync")


def driver(args: argparse.Namespace) -> int:
    os.makedirs(args.out, exist_ok=True)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r} (modes: {', '.join(MODES)})")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")  # never NVLink multicast (KINDS.md)
    paths, failed = [], []
    for m in modes:
        path = os.path.join(args.out, f"{m}.json")
        if os.path.exists(path):
            os.remove(path)
        port = free_port_pair()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={args.nproc}",
               "--master-addr=127.0.0.1", f"--master-port={port}", os.path.abspath(__file__),
               "--mode", m, "--json", path]
        for name in FORWARDED:
            value = getattr(args, name)
            if name == "time_budget" and not value:
                # Leave the rank start-up (~30 s) and the last configuration room.
                value = max(args.mode_timeout - 50, 30)
            cmd += [f"--{name.replace('_', '-')}", str(value)]
        print(f"== {m}: {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        # Own session, so a timeout can stop torchrun and its ranks together.
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.mode_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            rc = "timeout"
        print(f"== {m}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(f"{m} ({rc})")
        if os.path.exists(path):
            paths.append(path)
    merged = os.path.join(args.out, "fsdp2.json")
    plot = os.path.join(args.out, "fsdp2.png")
    if paths:
        merge_main(paths, merged, plot, args.loss_k, args.loss_floor)
    if failed:
        print(f"failed modes: {', '.join(failed)}", flush=True)
        return 1
    return 0


def merge_main(paths: Sequence[str], json_out: Optional[str], plot_out: Optional[str],
               k: float = LOSS_K, floor: float = LOSS_FLOOR) -> Dict[str, Any]:
    docs = []
    for p in paths:
        with open(p) as f:
            docs.append(json.load(f))
    doc = merge_results(docs, k=k, floor=floor)
    print(format_table(doc["rows"], doc["modes"]))
    calib = [r for r in doc["rows"] if r.get("check") == "calib"]
    if calib:
        print(f"loss rule: wrong when max|loss - nccl| > max({k:g} x |nccl-rerun - nccl|, {floor:g}) "
              "or the gradient norm differs likewise (relative, floor 1e-2)")
    else:
        print(f"loss rule: no nccl-rerun rows: uncalibrated, absolute floor {floor:g} only")
    wrong = [f"{r['mode']} {r['key']}" for r in doc["rows"] if r.get("check") == "wrong"]
    if wrong:
        print(f"WRONG: {', '.join(wrong)}")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {json_out}")
    if plot_out:
        print(write_plot(doc, plot_out))
    return doc


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    what = p.add_argument_group("what to run (exactly one)")
    what.add_argument("--mode", choices=MODES, help="run one mode (under torchrun)")
    what.add_argument("--modes", help="driver: run these modes, each in its own torchrun, then merge "
                                      "(e.g. nccl,nccl-rerun,nccl-ce,lowcon)")
    what.add_argument("--merge", nargs="+", metavar="JSON", help="merge per-mode JSON files")
    p.add_argument("--json", help="write the results here (per mode, or the merge)")
    p.add_argument("--plot", help="--merge: write the PNG here")
    p.add_argument("--out", default="fsdp2-out", help="driver: folder for every mode's JSON, fsdp2.json, fsdp2.png")
    p.add_argument("--nproc", type=int, default=2, help="driver: ranks (GPUs)")
    p.add_argument("--mode-timeout", type=float, default=140,
                   help="driver: seconds before a mode is stopped (4 modes x 140 s fit 10 minutes)")
    p.add_argument("--quick", action="store_true", help=f"smoke run: sweep {QUICK_SWEEP!r}, 2 warm-up steps")
    p.add_argument("--sweep", default=None, help=f"WIDTHxDEPTH:TOKENS,...;... (default {DEFAULT_SWEEP!r})")
    p.add_argument("--max-seq", type=int, default=MAX_SEQ, help="longest sequence; more tokens go into the batch")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per configuration (default 3; quick 2)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per configuration (at least 10)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--reduce-dtype", choices=("fp32", "bf16"), default="fp32",
                   help="MixedPrecisionPolicy.reduce_dtype (parameters are bf16)")
    p.add_argument("--time-budget", type=float, default=0,
                   help="per mode: skip the remaining configurations after this many seconds "
                        "(0: none; the driver then passes --mode-timeout minus 50)")
    p.add_argument("--lowcon-ag", default="auto", help="lowcon all-gather algorithm")
    p.add_argument("--lowcon-rs", default="auto", help="lowcon reduce-scatter algorithm")
    p.add_argument("--lowcon-sync", choices=("kernel", "memop"), default="kernel", help="lowcon sync method")
    p.add_argument("--loss-k", type=float, default=LOSS_K, help="merge: K of the loss rule")
    p.add_argument("--loss-floor", type=float, default=LOSS_FLOOR, help="merge: absolute floor of the loss rule")
    args = p.parse_args(argv)
    if sum(x is not None for x in (args.mode, args.modes, args.merge)) != 1:
        p.error("give exactly one of --mode, --modes, --merge")
    if args.sweep is None:
        args.sweep = QUICK_SWEEP if args.quick else DEFAULT_SWEEP
    if args.warmup is None:
        args.warmup = 2 if args.quick else 3
    if args.steps < 10:
        p.error("--steps must be at least 10")
    try:
        parse_sweep(args.sweep, args.max_seq)  # fail here, not under torchrun
    except ValueError as e:
        p.error(f"--sweep: {e}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.merge:
        merge_main(args.merge, args.json, args.plot, args.loss_k, args.loss_floor)
        return 0
    if args.modes:
        return driver(args)
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
