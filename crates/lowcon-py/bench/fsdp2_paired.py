"""FSDP2 training steps, lowcon against NCCL, paired: every mode in one torchrun job,
steps alternating in a shuffled order per round, ratios taken within rounds.

    torchrun --nproc-per-node 2 fsdp2_paired.py --out DIR                 # the default sweep
    torchrun --nproc-per-node 2 fsdp2_paired.py --sweep 4096x12:1024 --rounds 40 --profile
    python3 fsdp2_paired.py --report DIR/*.json                           # table again, no torch
    torchrun --nproc-per-node 1 fsdp2_paired.py --modes nocomm --bound-for-world 2   # the world-1 bound
    torchrun --nproc-per-node 4 fsdp2_paired.py --model hf-llama --sweep 4096x8:2048,8192   # transformers' Llama

For each configuration (width x depth : tokens per rank, and the reduce dtype) every
rank builds the model from the same seed and shards it with FSDP2 (`fully_shard` per
block, then the root; bf16 parameters). Then, by `--method`:
- `models`: one model per mode, identical at the start; in round i every model trains
  on batch i, so losses compare step by step (the loss check);
- `switch`: one model whose collectives are switched between steps (fsdp2_modes.Switch),
  when one model per mode does not fit (`auto` decides from the parameter count and
  the free memory, and the output says which ran).
Each of `--warmup` rounds then `--rounds` timed rounds runs one step of every mode in a
shuffled order (the same on every rank). A step's time is CUDA events on the compute
stream around zero_grad .. optimizer step, the largest over ranks. The statistics are
in fsdp2_stats.py (torch-free, tested in CI); `--profile` adds, per mode, the host time
per hook call, the compute stream's time inside FSDP's waits layer by layer, and the
GPU's kernels (torch.profiler, one chrome trace per mode on rank 0).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import math
import os
import random
import socket
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsdp2_model as fm  # noqa: E402
import fsdp2_decompose as fdec  # noqa: E402
import fsdp2_profile as fprof  # noqa: E402
import fsdp2_stats as st  # noqa: E402

SCHEMA = "lowcon-fsdp2-paired/1"
DEFAULT_MODES = "nccl,nccl-b,lowcon,nccl-ce,nocomm"
DEFAULT_SWEEP = "2048x8:256,1024,4096,16384;4096x12:256,1024,4096,16384;8192x4:256,1024,4096,16384"


LOWCON_KEYS = ("ag", "rs", "sync", "agsync", "rssync", "rsgraph", "rsmap", "arrival", "ctas", "rs_ctas", "pieces", "launch",
               "mem", "agmem", "rsmem", "wire", "copyin", "traffic", "predict", "batch", "replays")
KINDS = ("nccl", "nccl-b", "lowcon", "nccl-ce", "floor", "lowcon-pg", "nocomm", "nocomm-torch")
# The modes `--hsdp` runs on its replicate x shard mesh (the others build groups of their own
# over the world).
HSDP_KINDS = ("nccl", "nccl-b", "lowcon", "nocomm")
NEEDS_NCCL = ("nccl", "nccl-b", "nccl-ce")


def parse_mode(spec: str) -> Tuple[str, str, Dict[str, str]]:
    """`"lowcon@sync=memop,rs=sm-direct"` -> (the spec, "lowcon", {"sync": "memop", "rs": "sm-direct"})."""
    kind, _, opts = spec.partition("@")
    options = {}
    for part in filter(None, opts.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not value or key not in LOWCON_KEYS:
            raise ValueError(f"mode {spec!r}: option {part!r} (lowcon takes {', '.join(LOWCON_KEYS)})")
        options[key] = value
    if kind not in KINDS or (opts and kind != "lowcon"):
        raise ValueError(f"mode {spec!r}: expected nccl, nccl-b, lowcon[@options], nccl-ce, floor, lowcon-pg, nocomm "
                         "or nocomm-torch")
    return spec, kind, options


def split_modes(text: str) -> List[str]:
    """`--modes`: modes separated by commas, where a part with `=` and no `@` is one more
    option of the mode before it ("nccl,lowcon@ag=ce-pull,sync=memop,nocomm" is three)."""
    out: List[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" in part and "@" not in part and out and "@" in out[-1]:
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def write_plot(docs: List[Dict[str, Any]], path: str, title: str = "") -> str:
    """Per model shape and reduce dtype, each mode's step time over NCCL's (median of
    per-round ratios, bars: 95% interval) against tokens per rank, with the bound's.
    Returns what was written, or why nothing was."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"plot: matplotlib is not importable; no {path}"
    docs = [d for d in docs if "stats" in d]
    panels = sorted({(d["width"], d["depth"], d["reduce_dtype"]) for d in docs})
    if not panels:
        return "plot: no timed configurations"
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
    for ax, (w, depth, rd) in zip(axes[0], panels):
        rows = sorted((d for d in docs if (d["width"], d["depth"], d["reduce_dtype"]) == (w, depth, rd)),
                      key=lambda d: d["tokens_per_rank"])
        modes = [m for m in rows[0]["modes"] if m != st.REFERENCE]
        for m in modes:
            pts = [(d["tokens_per_rank"], d["stats"][m]) for d in rows if m in d["stats"]]
            pts = [(t, s) for t, s in pts if "ratio" in s]
            if not pts:
                continue
            ys = [s["ratio"] for _, s in pts]
            lo = [max(0.0, s["ratio"] - s["ratio_lo"]) if math.isfinite(s["ratio_lo"]) else 0.0 for _, s in pts]
            hi = [max(0.0, s["ratio_hi"] - s["ratio"]) if math.isfinite(s["ratio_hi"]) else 0.0 for _, s in pts]
            style = {"linestyle": ":"} if m in (st.TWIN, st.BOUND) else {}
            ax.errorbar([t for t, _ in pts], ys, yerr=[lo, hi], marker="o", capsize=3, label=m, **style)
        ax.axhline(1.0, color="grey", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per rank")
        ax.set_ylabel("step time / NCCL's (paired median)")
        ax.set_title(f"{w}x{depth}, reduce {rd}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "FSDP2 step, paired against NCCL")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"


def load(paths: List[str]) -> List[Dict[str, Any]]:
    docs = []
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        if doc.get("schema") != SCHEMA:
            raise SystemExit(f"{p}: not a {SCHEMA} document (schema {doc.get('schema')!r})")
        for c in st.reanalyse(doc):
            c["_dir"] = os.path.dirname(os.path.abspath(p))  # where its traces lie
            docs.append(c)
    return docs


def report(paths: List[str], plot: Optional[str] = None) -> int:
    """Prints the paired table of result files, and plots them (no torch)."""
    docs = load(paths)
    mem = [d for d in docs if d.get("memory_only")]
    if mem:
        print(st.format_memory(mem))
    docs = [d for d in docs if not d.get("memory_only")]
    if docs or not mem:
        print(st.format_rows(docs))
    if plot:
        print(write_plot(docs, plot))
    for text in (st.format_host(docs), st.format_bytes(docs), st.format_own_memory(docs), fprof.format_profile(docs),
                 fdec.format_profiled(docs)):
        if text:
            print(text)
    for d in docs:
        for m, missed in d.get("missed", {}).items():
            for line in missed:
                print(f"{d['shape']} {d['tokens_per_rank']} {d['reduce_dtype']}: target missed: {line}")
    return 0


def model_state_bytes(model: Any, opt: Any) -> int:
    """This rank's parameter and optimizer-state shards, in bytes (not the gradients:
    with lowcon they live in its pool, which is counted whole)."""
    total = 0
    for p in model.parameters():
        t = p.to_local() if hasattr(p, "to_local") else p
        total += t.numel() * t.element_size()
    for s in opt.state.values():
        for t in s.values():
            if hasattr(t, "numel"):
                t = t.to_local() if hasattr(t, "to_local") else t
                total += t.numel() * t.element_size()
    return total


def choose_method(args: argparse.Namespace, cfg: fm.ModelConfig, n_modes: int, world: int, device: Any) -> str:
    if args.method != "auto":
        return args.method
    import torch

    if device.type != "cuda":
        return "models"
    free, _ = torch.cuda.mem_get_info(device)
    # fp32 weights, grads, two Adam moments, sharded over the shard dim only: with --hsdp R a
    # rank holds R times a plain FSDP rank's share (8192x4 on 2x2 filled four models into
    # 142 of 143 GB, and torch's allocator, freeing its cache to retry, then waited for
    # kernels that waited for peers: 4x H200, 2026-11-27).
    per_model = 16 * fm.param_counts(cfg)["total"] / (world // max(1, getattr(args, "hsdp", 1)))
    activations = cfg.tokens_per_rank * cfg.depth * (16 * cfg.width + 6 * cfg.ffn) * 2 + \
        cfg.tokens_per_rank * cfg.vocab * 10
    return "models" if n_modes * per_model + activations < 0.7 * free else "switch"


# Rounds between two checks of the time budget within a configuration (NOTE [budget within
# a configuration]).
DEADLINE_EVERY = 4


def run_config(cfg: fm.ModelConfig, reduce_dtype: str, modes: List[Any], args: argparse.Namespace,
               device: Any, index: int) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.device_mesh import init_device_mesh

    import fsdp2_modes as fmodes

    world, rank = dist.get_world_size(), dist.get_rank()
    mesh = args.mesh if getattr(args, "mesh", None) is not None else init_device_mesh(device.type, (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                              reduce_dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[reduce_dtype])
    method = choose_method(args, cfg, len(modes), world, device)

    def build(on: Any = None) -> Any:
        torch.manual_seed(args.seed)  # the same initial weights for every model
        model = fm.build_model(cfg, device)
        for block in fm.blocks(model):
            fully_shard(block, mesh=on or mesh, mp_policy=mp)
        fully_shard(model, mesh=on or mesh, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, foreach=True)
        return model, opt, fmodes.Switch(model)

    if method == "models":
        built = {m.name: build(m.mesh) for m in modes}
        for m in modes:
            built[m.name][2].set(m)
    else:
        # One model switched between the modes; a mode on a mesh of its own (lowcon-pg)
        # needs a model sharded there.
        shared = build()
        built = {m.name: shared if m.mesh is None else build(m.mesh) for m in modes}

    clock = fmodes.Clock(device)
    cuda = device.type == "cuda"
    gen = torch.Generator(device=device)

    def batch(i: int) -> Any:
        gen.manual_seed(args.seed * 1_000_003 + rank * 10_007 + i)
        return torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), device=device, generator=gen)

    def step(mode: Any, tokens: Any, wrap: Any = None) -> Dict[str, Any]:
        model, opt, switch = built[mode.name]
        if method == "switch" or wrap is not None:
            switch.set(mode, wrap)
        else:
            # Each mode has its model, but the lowcon modes share one group.
            fmodes.group_switches(mode)
        h0 = time.perf_counter()
        t0 = clock.mark()
        opt.zero_grad(set_to_none=True)
        if cuda:
            # Host-side allocator counters, no synchronisation. After zero_grad: the
            # baseline holds no gradients of this model (NCCL's are allocated again in
            # backward and so count in the peak above it; lowcon's come from its pool).
            torch.cuda.reset_peak_memory_stats(device)
            at_start = torch.cuda.memory_allocated(device)
        # NOTE [gradient accumulation]: with --grad-accum K, K forward and backward passes a
        # step, FSDP2 reducing only after the last (set_requires_gradient_sync): its
        # gradients accumulate unsharded in fp32 meanwhile, so the reduce that follows
        # carries no bf16 hint (lowcon.fsdp's accumulation watch) and goes as plain f32.
        for k in range(args.grad_accum):
            if args.grad_accum > 1:
                model.set_requires_gradient_sync(k == args.grad_accum - 1)
            logits = fm.logits(model, tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
            (loss / args.grad_accum if args.grad_accum > 1 else loss).backward()
        o0 = clock.mark()
        opt.step()
        t1 = clock.mark()
        # NOTE [host per step]: the host's time to issue the step (from its first mark to
        # its last, no synchronisation).
        rec = {"marks": (t0, o0, t1), "loss": loss.detach(), "host_ms": 1e3 * (time.perf_counter() - h0)}
        if cuda:
            rec["transient"] = torch.cuda.max_memory_allocated(device) - at_start
        return rec

    order_rng = random.Random(args.seed * 7919 + index)
    names = [m.name for m in modes]
    records: List[Dict[str, Dict[str, Any]]] = []
    pool_after: List[int] = []
    pools = [m for m in modes if m.pool is not None]
    wall0 = time.perf_counter()

    # The steps aligned, warm-up included (recorded): after a GPU synchronisation and the
    # barrier (asked for; on --cpu there is nothing to synchronise), or the barrier alone.
    aligned = {"sync_and_barrier": 0, "barrier": 0}

    def align(gpu: bool) -> None:
        """Every host past a barrier, outside any timed region, so that the next step starts
        level on every rank; with `gpu`, every rank's GPU idle first.

        NOTE [aligned steps]: `nocomm` runs no collective, so nothing keeps the ranks in
        step through it; where the step is host-bound they drift apart, and the next
        step's first collective waits for the last rank, on the clock of the others. In
        the 4096x12 runs at 1024 tokens with `--sync-each-step` (which synchronises each
        rank's GPU once per round, no barrier), the step right after `nocomm` took +30 ms at
        4 GPUs (4x H200, fd82cbc, 2026-11-28) and +7 ms at 2 (2x H200, ce7ebe5), and the
        round's first step +7-17 ms; on 2x H200 at 9534748 (2026-11-28), against each mode's
        other steps, +8 to +18 ms after `nocomm` and +16 to +26 first in the round, lowcon's
        the most (on the same 4x H200 box NCCL's step after `nocomm`
        also took +9 ms of 67 in HSDP 2048x8 and of 123 in transformers' Llama at 2048
        tokens; on 4x H100, b8eb879, nothing); since the order is shuffled, those fell on the
        modes unevenly, which is the spread that left these rows unresolved
        (scripts/probes/paired_order.py sizes it from a results file).

        `--align every-step` synchronises the GPU and passes the barrier before every step:
        no step then follows another. On 2x H200 (9534748, 2026-11-28, one lease, 300 rounds
        each) that took both effects out and narrowed the intervals (A/A noise 0.008 against
        0.011, lowcon's interval 0.017 wide against 0.055), but it measures another regime:
        every step starts from an idle GPU, which added 12 to 17 ms to each mode's median
        (NCCL's 101.5 -> 113.6, lowcon's 93.3 -> 110.2, NCCL-CE's +15), not a constant: it
        takes away part of what a mode gains from steps run back to back, so the shares move
        (lowcon's 80% -> 58%, NCCL-CE's 26% -> -12%). Training runs steps back to back, so
        it is not the default. `--align after-nocomm` passes the
        barrier alone (the GPU keeps `nocomm`'s tail queued, as after any step) before the
        step after `nocomm`, which takes the drift out and leaves the steps back to back.
        On 4x H200 (9fbdb43, 2026-11-28, one lease, 480 rounds each, `--sync-each-step`)
        the step after `nocomm` took +6.5 to +7.6 ms over each mode's steps after the other
        modes with it, against +26.6 to +32.9 without, the A/A noise was 0.010 against 0.026
        (the row resolved), and the shares stayed (lowcon's 37% [28, 45] against 37% [25,
        47], NCCL-CE's -20% against -19%); but `nocomm`'s median rose 3.3 ms (the other
        modes' -0.1 to +1.6), so one run does not make it the default: use it to resolve a
        host-bound row, and say so."""
        aligned["sync_and_barrier" if gpu else "barrier"] += 1
        if gpu and cuda:
            torch.cuda.synchronize(device)
        # A host barrier (gloo): a barrier on the default (NCCL) group would put a
        # collective of its own between the measured ones. With one, every-step at 2x H200
        # (9534748, 2026-11-28) had not finished 300 rounds in 245 s, where the same run
        # without it took 201 s (docs/runs/2026-11-28-9534748-2xh200).
        dist.barrier(group=args.align_group)

    after_bound = False  # the step before ran no collective (nocomm)
    cut = None  # the rounds done when the time budget stopped the configuration
    for r in range(args.warmup + args.rounds):
        tokens = batch(r)
        order = order_rng.sample(modes, len(modes))
        rnd = {}
        for m in order:
            if args.align == "every-step":
                align(gpu=True)
            elif args.align == "after-nocomm" and after_bound:
                align(gpu=False)
            rnd[m.name] = step(m, tokens)
            after_bound = m.name.startswith(st.BOUND)
            if pools:
                pool_after.append(pools[0].pool_bytes())
        if args.sync_each_step and cuda:
            torch.cuda.synchronize(device)
        if r >= args.warmup:
            records.append(rnd)
            # NOTE [budget within a configuration]: the time budget also ends a
            # configuration's rounds, at a round's end, every DEADLINE_EVERY rounds, from
            # 2 rounds on: rank 0's clock decides, through a gloo broadcast (host only, no
            # collective on the GPU between the measured steps), so every rank stops at
            # the same round and the rounds done are analysed and written. Before, a run
            # past its budget was killed mid-configuration by the caller's deadline and
            # left nothing (4x H200, 2026-11-28: 1000 rounds of 4096x12 in 270 s).
            done = len(records)
            if args.time_budget and done >= 2 and done % DEADLINE_EVERY == 0 and done < args.rounds:
                flag = torch.tensor([1.0 if time.perf_counter() - args.t_start > args.time_budget else 0.0])
                dist.broadcast(flag, src=0, group=args.deadline_group)
                if flag.item():
                    cut = done
                    break
        if r == args.warmup - 1:
            if cuda:
                torch.cuda.synchronize(device)
            dist.barrier()
            wall0 = time.perf_counter()
    if cuda:
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - wall0

    # Times, the largest over ranks; losses, the mean over ranks.
    step_ms = torch.tensor([[clock.ms(rec[n]["marks"][0], rec[n]["marks"][2]) for n in names] for rec in records],
                           dtype=torch.float64, device=device)
    opt_ms = torch.tensor([[clock.ms(rec[n]["marks"][1], rec[n]["marks"][2]) for n in names] for rec in records],
                          dtype=torch.float64, device=device)
    host_ms = torch.tensor([[rec[n]["host_ms"] for n in names] for rec in records], dtype=torch.float64, device=device)
    dist.all_reduce(step_ms, op=dist.ReduceOp.MAX)
    dist.all_reduce(opt_ms, op=dist.ReduceOp.MAX)
    dist.all_reduce(host_ms, op=dist.ReduceOp.MAX)
    losses = torch.stack([torch.stack([rec[n]["loss"].float() for n in names]) for rec in records]).double()
    dist.all_reduce(losses)
    losses /= world
    transient = {n: max(rec[n].get("transient", 0) for rec in records) for n in names}
    state = {n: model_state_bytes(built[n][0], built[n][1]) for n in names}
    memory = {}
    for m in modes:
        pool = m.pool_bytes() or 0
        # NCCL's modes: its internal buffers too (measured at start-up, `worker`).
        internal = getattr(args, "nccl_internal", 0) if m.name.startswith("nccl") else 0
        memory[m.name] = state[m.name] + transient[m.name] + pool + internal
    mem_t = torch.tensor([memory[n] for n in names], dtype=torch.float64, device=device)
    dist.all_reduce(mem_t, op=dist.ReduceOp.MAX)
    # Counted after the measured rounds (and their memory), in both kinds of run.
    bytes_per_step = fmodes.counted_bytes(modes, step, batch, device) if pools else {}
    if args.memory_only:
        # Ranks sharing a GPU: their times mean nothing, so only memory is reported.
        sym = {m.name: m.pool_bytes() for m in modes if m.pool is not None}
        sym_t = torch.tensor([float(sym.get(n) or 0) for n in names], dtype=torch.float64, device=device)
        dist.all_reduce(sym_t, op=dist.ReduceOp.MAX)
        del built, records
        return {"key": f"{cfg.key}-{reduce_dtype}", "shape": cfg.shape, "width": cfg.width, "depth": cfg.depth,
                "tokens_per_rank": cfg.tokens_per_rank, "reduce_dtype": reduce_dtype, "method": method,
                "modes": names, "memory_only": True, "memory": dict(zip(names, mem_t.tolist())),
                "symmetric": {n: v for n, v in zip(names, sym_t.tolist()) if n in sym},
                "bytes_per_step": bytes_per_step,
                "pool_growth": st.pool_growth(pool_after[len(modes) - 1:]) if pools else None}

    doc: Dict[str, Any] = {
        "key": f"{cfg.key}-{reduce_dtype}", "shape": cfg.shape, "width": cfg.width, "depth": cfg.depth,
        "seq": cfg.seq, "batch": cfg.batch, "tokens_per_rank": cfg.tokens_per_rank, "reduce_dtype": reduce_dtype,
        "params": fm.param_counts(cfg)["total"], "method": method, "modes": names, "seed": args.seed,
        "order": "shuffled per round", "warmup_rounds": args.warmup, "grad_accum": args.grad_accum,
        "rounds": [dict(zip(names, row)) for row in step_ms.tolist()],
        "opt_rounds": [dict(zip(names, row)) for row in opt_ms.tolist()],
        "host_rounds": [dict(zip(names, row)) for row in host_ms.tolist()],
        "wall_ms_per_round": 1e3 * wall / max(1, len(records)),
        "rounds_cut": None if cut is None else {"planned": args.rounds, "done": cut, "why": "time budget"},
        "aligned_steps": aligned,
        "memory": dict(zip(names, mem_t.tolist())),
        "memory_method": "this rank's parameter and optimizer-state shards + torch's peak allocation during the "
                         "step above its value after zero_grad (activations, gradients, NCCL's buffers from "
                         "torch's allocator) + lowcon's whole pool (its collective buffers; shared by every lowcon "
                         "mode of the configuration, trimmed between configurations); for NCCL's modes, NCCL's internal "
                         "buffers (env.nccl_internal_bytes: the device memory its set-up and first all-reduce, "
                         "all-gather and reduce-scatter took outside torch's allocator); max over ranks",
        **fm.comm_compute(cfg, world, 4 if reduce_dtype == "fp32" else 2),
        "mfu_nccl": None,
    }
    if pools and hasattr(pools[0].pool, "pool_stats"):
        # Where lowcon's own memory is (rank 0's): its pool and each channel's workspace.
        own = pools[0].pool.pool_stats()
        doc["lowcon_memory"] = {"pool_bytes": int(own["pool_bytes"]),
                                "workspace_channels": {str(c): int(b) for c, b in own.get("workspace_channels", {}).items()}}
    if args.bound_for_world and args.bound_for_world != world:
        doc["bound_world"] = world
        world_for = args.bound_for_world
    else:
        world_for = world
    if method == "models":
        # The traffic floor's results are garbage by design: its losses are not compared.
        doc["loss_curves"] = {n: [row[i] for row in losses.tolist()] for i, n in enumerate(names)
                              if modes[i].check_loss}
    if pools:
        # The pool is shared by the lowcon modes: after the first round (every mode has
        # run once, warm-up included) it must not grow.
        growth = st.pool_growth(pool_after[len(modes) - 1:])
        doc["pool_growth"] = {m.name: growth for m in pools if growth}
        doc["pool_bytes"] = pool_after[-1]
    if pools:
        doc["bytes_per_step"] = bytes_per_step
    if args.profile:
        doc["profile"] = profile(modes, step, batch, clock, device, args, rank, cfg, reduce_dtype)
    st.analyse(doc, world_for)
    if "nccl" in doc["stats"]:
        doc["mfu_nccl"] = fm.mfu(fm.step_flops(cfg, world), doc["stats"]["nccl"]["median_ms"] / 1e3, world)
    del built, records
    return doc


def profile(modes: List[Any], step: Any, batch: Any, clock: Any, device: Any, args: argparse.Namespace,
            rank: int, cfg: fm.ModelConfig, reduce_dtype: str) -> Dict[str, Any]:
    """Per mode: host µs per hook call, the compute stream's ms per step inside FSDP's
    waits (by layer and phase), and the kernel table of one profiled step."""
    import statistics

    import torch
    import torch.distributed as dist

    import fsdp2_modes as fmodes

    out: Dict[str, Any] = {}
    for m in modes:
        host = fmodes.HostTimes(m.pool)
        with fmodes.FsdpWaits(clock) as waits:
            for i in range(args.profile_steps):
                step(m, batch(10_000 + i), wrap=host.wrap)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        entry: Dict[str, Any] = {
            "host_us": {k: {"calls_per_step": len(v) / args.profile_steps, "median_us": statistics.median(v),
                            "p90_us": st.quantile(v, 0.9)} for k, v in host.us.items() if v},
            "waits_ms": waits.per_step(args.profile_steps),
        }
        if device.type == "cuda":
            from torch.profiler import ProfilerActivity, schedule
            from torch.profiler import profile as tprofile

            # Every rank reads its own trace for its copy rates (NOTE [copy rate]); rank 0
            # keeps its trace, and with --profile-ranks all every rank (`.rankR` before
            # `.json`: which rank is late shows only in the others' traces).
            name = f"trace-{cfg.key}-{reduce_dtype}-{m.name.replace('@', '_')}" + (f".rank{rank}" if rank else "")
            keep = (rank == 0 or args.profile_ranks == "all") and args.out
            path = os.path.join(args.out, name + ".json") if keep else os.path.join(
                tempfile.gettempdir(), f"lowcon-{os.getpid()}-{name}.json")

            def recorded(prof: Any) -> None:
                entry["kernels"] = fmodes.kernel_table(prof)
                prof.export_chrome_trace(path)

            # The recorded step is the second under the profiler: each rank starts its
            # profiler at its own pace, and the first step's all-gathers would also wait
            # for the last rank's start-up.
            with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                          schedule=schedule(wait=0, warmup=1, active=1, repeat=1), on_trace_ready=recorded) as prof:
                for i in range(2):
                    step(m, batch(20_000 + i))
                    torch.cuda.synchronize(device)
                    prof.step()
            if "kernels" not in entry:
                raise RuntimeError(f"rank {rank}: {m.name}: the profiler recorded no step")
            with open(path) as f:
                rates = fprof.copy_rates(json.load(f).get("traceEvents", []))
            if keep:
                with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
                    g.write(f.read())
            os.remove(path)
            per_rank: List[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(per_rank, rates)
            entry["copies"] = per_rank
            kept: List[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(kept, os.path.basename(path) + ".gz" if keep else None)
            if kept[0]:
                entry["trace"] = kept[0]
            if args.profile_ranks == "all":
                entry["rank_traces"] = kept
        out[m.name] = entry
        dist.barrier()
    base = out.get(st.BOUND, {}).get("waits_ms")
    if base:
        for m, entry in out.items():
            entry["exposed_ms"] = {k: v - base.get(k, 0.0) for k, v in entry["waits_ms"].items()}
            entry["exposed_ms_total"] = sum(entry["exposed_ms"].values())
    return out


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    elif args.memory_only:
        # NCCL refuses ranks sharing a GPU: gloo for the benchmark's own reductions.
        import lowcon

        device = torch.device("cuda", lowcon.device_index())
        torch.cuda.set_device(device)
        dist.init_process_group("gloo")
    else:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        # With device_id, torch 2.11's new_group asks every new group for a CUDA backend
        # to split, which the `lowcon` Python process group has none of: lowcon-pg's
        # group could not be made (2026-11-24, 2x H200). Without it NCCL starts lazily.
        bound = None if any(kind == "lowcon-pg" for _, kind, _ in args.mode_specs) else device
        torch.cuda.synchronize(device)
        free0, reserved0 = torch.cuda.mem_get_info(device)[0], torch.cuda.memory_reserved(device)
        dist.init_process_group("nccl", device_id=bound)
        # NCCL's internal buffers (its channels' FIFOs, outside torch's allocator): the
        # device memory its communicator's set-up and first collectives take, less what
        # torch's allocator reserved meanwhile. Added to the NCCL modes' memory.
        probe = torch.ones(1 << 20, device=device)
        dist.all_reduce(probe)
        dist.all_gather_into_tensor(torch.empty(probe.numel() * dist.get_world_size(), device=device), probe)
        dist.reduce_scatter_tensor(probe[: probe.numel() // dist.get_world_size()], probe)
        torch.cuda.synchronize(device)
        del probe
        nccl_internal = max(0, free0 - torch.cuda.mem_get_info(device)[0]
                            - (torch.cuda.memory_reserved(device) - reserved0))
    rank, world = dist.get_rank(), dist.get_world_size()
    import fsdp2_modes as fmodes

    specs = args.mode_specs
    # --align's barrier: a host group of its own (run_config's align()).
    args.align_group = dist.new_group(backend="gloo") if args.align != "none" else None
    # NOTE [budget within a configuration]: the host group that agrees on the deadline.
    args.deadline_group = dist.new_group(backend="gloo") if args.time_budget else None
    # HSDP: one replicate x shard mesh for every model; lowcon's group over the shard dim.
    args.mesh, shard_pg = None, None
    if args.hsdp > 1:
        from torch.distributed.device_mesh import init_device_mesh

        if world % args.hsdp:
            raise SystemExit(f"--hsdp {args.hsdp}: the world of {world} ranks does not split into {args.hsdp} replicas")
        args.mesh = init_device_mesh(device.type, (args.hsdp, world // args.hsdp),
                                     mesh_dim_names=("replicate", "shard"))
        shard_pg = args.mesh.get_group("shard")
    group = None
    if any(kind == "lowcon" for _, kind, _ in specs):
        try:
            import lowcon
            import lowcon.fsdp  # noqa: F401

            group = lowcon.from_process_group(shard_pg, backend="host" if args.cpu else "gpu")
        except ImportError as e:
            print(f"lowcon is not importable: {e}", flush=True)
    modes, skipped = fmodes.make_modes(specs, device, group)
    env = {"torch": torch.__version__, "world_size": world, "host": socket.gethostname(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "device": str(device),
           "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")}
    if device.type == "cuda":
        env.update(cuda=torch.version.cuda, nccl=".".join(map(str, torch.cuda.nccl.version())),
                   device_name=torch.cuda.get_device_name(device))
        if not args.memory_only:
            t = torch.tensor([float(nccl_internal)], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            env["nccl_internal_bytes"] = args.nccl_internal = int(t.item())
    doc: Dict[str, Any] = {"schema": SCHEMA, "env": env, "args": {k: v for k, v in vars(args).items() if k not in ("mesh", "align_group", "deadline_group", "t_start")},
                           "hsdp": args.hsdp, "skipped": skipped,
                           "notes": {m.name: m.notes for m in modes if m.notes}, "configs": []}
    if rank == 0:
        print(f"torch {env['torch']}, {world} x {env.get('device_name', device)}; modes "
              f"{[m.name for m in modes]}; skipped {skipped}", flush=True)
    t_start = args.t_start = time.perf_counter()
    json_path = os.path.join(args.out, "paired.json") if args.out else None
    configs = fm.parse_sweep(args.sweep, args.max_seq, args.model)
    index = 0
    for reduce_dtype in args.reduce_dtypes.split(","):
        for cfg in configs:
            index += 1
            over = torch.tensor([1.0 if args.time_budget and time.perf_counter() - t_start > args.time_budget
                                 else 0.0], device=device)
            dist.broadcast(over, src=0)
            base = {"key": f"{cfg.key}-{reduce_dtype}", "shape": cfg.shape, "tokens_per_rank": cfg.tokens_per_rank,
                    "reduce_dtype": reduce_dtype}
            if over.item():
                doc["configs"].append(dict(base, error="time budget spent"))
                continue
            t0 = time.perf_counter()
            try:
                c = run_config(cfg, reduce_dtype, modes, args, device, index)
            except torch.cuda.OutOfMemoryError as e:  # the same on every rank: they stay in step
                c = dict(base, error=f"out of memory: {str(e).splitlines()[0][:100]}")
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if group is not None:
                # Every configuration starts from an empty pool, as torch's cache does after
                # empty_cache: the next one's memory is its own (collective; nothing in flight).
                c["pool_trimmed_bytes"] = group.pool_trim()
            doc["configs"].append(c)
            if rank == 0:
                if c.get("memory_only"):
                    print(st.format_memory([c]), flush=True)
                    print(f"  method {c['method']}, pool growth {c['pool_growth']}, {time.perf_counter() - t0:.1f} s",
                          flush=True)
                elif "stats" in c:
                    print(st.format_rows([c]), flush=True)
                    if c.get("rounds_cut"):
                        print(f"  the time budget ended it after {c['rounds_cut']['done']} of "
                              f"{c['rounds_cut']['planned']} rounds", flush=True)
                    print(f"  method {c['method']}, bound {c['bound_ms'] if c['bound_ms'] is None else round(c['bound_ms'], 2)} ms, "
                          f"noise {c['noise']}, missed {c['missed']}, {time.perf_counter() - t0:.1f} s", flush=True)
                else:
                    print(f"{c['key']}: {c['error']}", flush=True)
                if json_path:
                    with open(json_path + ".tmp", "w") as f:
                        json.dump(doc, f, indent=1)
                    os.replace(json_path + ".tmp", json_path)
    if rank == 0:
        print(st.format_memory(doc["configs"]) if args.memory_only else st.format_rows(doc["configs"]), flush=True)
        for text in (st.format_host(doc["configs"]), st.format_bytes(doc["configs"])):
            if text:
                print(text, flush=True)
    dist.barrier()
    if group is not None:
        group.close()
    dist.destroy_process_group()
    gc.collect()  # groups kept by cycles go before the interpreter does (python.md: Shutdown)
    return 0


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report", nargs="+", metavar="JSON", help="print the table of result files and exit (no torch)")
    p.add_argument("--plot", metavar="PNG", help="with --report: also plot the results")
    p.add_argument("--modes", default=DEFAULT_MODES)
    p.add_argument("--sweep", default=DEFAULT_SWEEP, help="WIDTHxDEPTH:TOKENS,..;... (tokens per rank)")
    p.add_argument("--reduce-dtypes", default="fp32,bf16")
    p.add_argument("--method", choices=("auto", "models", "switch"), default="auto")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first")
    p.add_argument("--rounds", type=int, default=30, help="timed rounds (pairs)")
    p.add_argument("--profile", action="store_true", help="per mode: host time per hook call, FSDP waits, kernels")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--profile-ranks", choices=("0", "all"), default="0",
                   help="whose traces --profile keeps: rank 0's, or every rank's (trace-...-MODE.rankR.json.gz)")
    p.add_argument("--sync-each-step", action="store_true", help="synchronise after every round")
    p.add_argument("--align", choices=("none", "after-nocomm", "every-step"), default="none",
                   help="untimed, before each step that follows nocomm (no collective keeps the ranks in "
                        "step through it): a host barrier, the steps still back to back; or before every step: "
                        "the GPU synchronised and a host barrier, so every step starts from an idle GPU (another "
                        "regime: narrower intervals, each step 12-17 ms slower on 2x H200, by mode; NOTE [aligned "
                        "steps])")
    p.add_argument("--bound-for-world", type=int, default=0,
                   help="this run measures the nocomm bound for a run of this many ranks (optimizer-corrected)")
    p.add_argument("--max-seq", type=int, default=fm.MAX_SEQ)
    p.add_argument("--model", choices=fm.KINDS, default="blocks",
                   help="blocks: the stack written here; hf-llama: transformers' LlamaForCausalLM at Llama-3's "
                        "proportions (needs transformers)")
    p.add_argument("--grad-accum", type=int, default=1, metavar="K",
                   help="forward and backward passes a step, reducing after the last (NOTE [gradient accumulation]); "
                        "the regime and bound columns count one")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--time-budget", type=float, default=0.0,
                   help="seconds; a configuration's rounds stop at it (the rounds done are kept, checked every "
                        "4 rounds), and later configurations are skipped")
    p.add_argument("--cpu", action="store_true", help="gloo and lowcon's host backend (a smoke test)")
    p.add_argument("--hsdp", type=int, default=1, metavar="R",
                   help="HSDP: every model on a replicate x shard mesh of R replicas of world/R shards; FSDP2 "
                        "all-reduces across replicas with its default process group (NCCL, gloo on the CPU), and "
                        "lowcon's modes run on the shard dimension (nccl, nccl-b, lowcon and nocomm modes only)")
    p.add_argument("--memory-only", action="store_true",
                   help="report peak memory only, against nocomm-torch (allowed with ranks sharing a GPU, where NCCL "
                        "cannot run and times mean nothing)")
    p.add_argument("--out", default=os.environ.get("FSDP2_OUT", ""))
    args = p.parse_args(argv)
    if args.report:
        return args
    if args.grad_accum < 1:
        p.error("--grad-accum must be at least 1")
    if args.rounds < 2:
        p.error("--rounds must be at least 2")
    try:
        args.mode_specs = [parse_mode(s) for s in split_modes(args.modes)]
        fm.parse_sweep(args.sweep, args.max_seq, args.model)
    except ValueError as e:
        p.error(str(e))
    names = [s[0] for s in args.mode_specs]
    if args.memory_only:
        nccl = [s for s, kind, _ in args.mode_specs if kind in NEEDS_NCCL]
        if nccl:
            p.error(f"--memory-only runs without NCCL (ranks may share a GPU): drop {', '.join(nccl)}; "
                    "nocomm-torch stands for NCCL's memory")
        if "nocomm-torch" not in names:
            p.error("--memory-only compares with nocomm-torch: add it to --modes")
    if not names or len(set(names)) != len(names):
        p.error(f"--modes {args.modes!r}: give each mode once")
    if args.hsdp < 1:
        p.error(f"--hsdp {args.hsdp}: the replicas must be at least 1")
    if args.hsdp > 1:
        other = [s for s, kind, _ in args.mode_specs if kind not in HSDP_KINDS]
        if other:
            p.error(f"--hsdp runs the modes {', '.join(HSDP_KINDS)} on its mesh: drop {', '.join(other)}")
    for d in args.reduce_dtypes.split(","):
        if d not in ("fp32", "bf16"):
            p.error(f"--reduce-dtypes: {d!r} is not fp32 or bf16")
    return args


def shared_gpu_refusal(env=os.environ) -> Optional[str]:
    """Why the benchmark must not run: ranks allowed to share a GPU (LOWCON_SHARE_GPU,
    set by `lowcon launch --gpus` with more ranks than GPUs) make timings meaningless."""
    v = env.get("LOWCON_SHARE_GPU", "").strip()
    if v in ("", "0"):
        return None
    return (f"fsdp2_paired: LOWCON_SHARE_GPU={v!r} lets ranks share a GPU, for correctness checks only: timings of "
            "ranks sharing a GPU mean nothing (no NVLink, shared copy engines and SMs), so the benchmark does not "
            "run; unset it and run one rank per GPU (or --memory-only, which reports peak memory alone)")


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.report:
        return report(args.report, args.plot)
    why = None if args.memory_only else shared_gpu_refusal()
    if why:
        print(why, file=sys.stderr)
        return 2
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
