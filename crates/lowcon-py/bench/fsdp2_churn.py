"""FSDP2 under allocator churn: does the device memory in use stay near NCCL's, and stop
growing? (issue: memory under churn). One mode per process, so that the device memory in
use is that mode's alone:

    torchrun --nproc-per-node 4 fsdp2_churn.py --mode lowcon --out DIR
    torchrun --nproc-per-node 4 fsdp2_churn.py --mode nccl --out DIR
    python3 fsdp2_churn.py --report DIR/churn-nccl.json DIR/churn-lowcon.json

Each step draws a new sequence length (the same on every rank, from a seeded generator),
and every `--empty-every` steps each rank calls `torch.cuda.empty_cache()`, so torch's
caching allocator hands FSDP2's buffers new segments at new addresses all the time.
Every `--sample-every` steps it records, max over ranks: the device memory in use
(`cudaMemGetInfo`: everything on the GPU, lowcon's and NCCL's own buffers and peer
mappings included), torch's reserved memory, the step's ms, the loss, and with lowcon
`stats()` (host rendezvous, predicted and mispredicted calls) and the mapped peer
allocations. `--report` prints both runs side by side, the ratio of lowcon's device
memory in use to NCCL's, and whether lowcon's last samples still grow.
"""

import gc
import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List


def run(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fsdp2_model as fm

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    group = None
    if args.mode == "lowcon":
        import lowcon
        import lowcon.fsdp

        group = lowcon.init("gpu", timeout=120)
    # One sequence of up to --max-tokens a step (the rotary tables cover that length).
    cfg = fm.ModelConfig.for_tokens(args.width, args.depth, args.max_tokens, max_seq=args.max_tokens)
    torch.manual_seed(1234)
    model = fm.build_model(cfg, device)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for blk in model.layers:
        fully_shard(blk, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    if group is not None:
        lowcon.fsdp.install(model, group)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = torch.Generator().manual_seed(99)
    data = torch.Generator(device=device).manual_seed(1000 + rank)
    samples: List[Dict[str, Any]] = []
    t_last, steps_since = time.perf_counter(), 0
    for step in range(args.steps):
        # Multiples of --length-step: every step another length, from a set small enough
        # that cuBLAS and attention find their kernels once (every length of 64..1024 made
        # steps of 180-230 ms on 4x H200, 2026-11-26).
        k = int(torch.randint(args.min_tokens // args.length_step, args.max_tokens // args.length_step + 1, (1,),
                              generator=lengths).item())
        seq = max(args.length_step, k * args.length_step)
        tokens = torch.randint(0, cfg.vocab, (1, seq + 1), device=device, generator=data)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps_since += 1
        if args.empty_every and (step + 1) % args.empty_every == 0:
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        if (step + 1) % args.sample_every == 0 or step + 1 == args.steps:
            torch.cuda.synchronize(device)
            now = time.perf_counter()
            free, total = torch.cuda.mem_get_info(device)
            row = [float(total - free), float(torch.cuda.memory_reserved(device)),
                   1e3 * (now - t_last) / steps_since, float(loss.item())]
            extra = {}
            if group is not None:
                s = group.stats()
                extra = {"host_rendezvous": s["host_rendezvous"], "predicted_calls": s["predicted_calls"],
                         "mispredicted_calls": s["mispredicted_calls"],
                         "mapped_allocations": group.pool_stats().get("mapped_allocations", 0)}
            t = torch.tensor(row + [float(v) for v in extra.values()], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            v = t.tolist()
            sample = {"step": step + 1, "in_use_gib": v[0] / 2**30, "reserved_gib": v[1] / 2**30,
                      "step_ms": v[2], "loss": v[3], **{k: v[4 + i] for i, k in enumerate(extra)}}
            samples.append(sample)
            if rank == 0:
                print(json.dumps(sample), flush=True)
                # Written at every sample: a run cut short by a deadline keeps what it saw.
                save(args, world, samples)
            t_last, steps_since = time.perf_counter(), 0
    dist.barrier()
    if group is not None:
        group.close()
    dist.destroy_process_group()
    gc.collect()  # groups kept by cycles go before the interpreter does (python.md: Shutdown)


def save(args: argparse.Namespace, world: int, samples: List[Dict[str, Any]]) -> None:
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"churn-{args.mode}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"mode": args.mode, "world": world, "args": vars(args), "samples": samples}, f, indent=1)
    os.replace(path + ".tmp", path)


def report(paths: List[str]) -> int:
    runs = {}
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        runs[d["mode"]] = d["samples"]
    ref, ours = runs.get("nccl"), runs.get("lowcon")
    print(f"{'step':>6} " + "".join(f"{m + ' in use GiB':>20}{m + ' ms':>12}" for m in runs))
    steps = sorted({s["step"] for v in runs.values() for s in v})
    for st in steps:
        cells = []
        for v in runs.values():
            s = next((x for x in v if x["step"] == st), None)
            cells.append(f"{s['in_use_gib']:>20.2f}{s['step_ms']:>12.1f}" if s else " " * 32)
        print(f"{st:>6} " + "".join(cells))
    if ref and ours:
        peak_ref = max(s["in_use_gib"] for s in ref)
        peak = max(s["in_use_gib"] for s in ours)
        half = len(ours) // 2
        late_growth = max(s["in_use_gib"] for s in ours[half:]) - max(s["in_use_gib"] for s in ours[:half])
        last = ours[-1]
        # The same steps see the same lengths and data in both runs: their losses must agree
        # (to the summation order's noise), or lowcon read something stale.
        ref_loss = {s["step"]: s["loss"] for s in ref}
        diffs = [abs(s["loss"] - ref_loss[s["step"]]) for s in ours if s["step"] in ref_loss]
        if diffs:
            print(f"losses at {len(diffs)} common samples: largest |lowcon - NCCL| {max(diffs):.2e}")
        print(f"peak device memory in use: lowcon {peak:.2f} GiB, NCCL {peak_ref:.2f} GiB, ratio {peak / peak_ref:.3f} "
              f"(target 1.05); lowcon's second half minus its first: {late_growth:+.2f} GiB "
              f"({'still growing' if late_growth > 0.05 else 'not growing'})")
        print(f"lowcon at the end: {int(last.get('mapped_allocations', 0))} peer allocations mapped, "
              f"{int(last.get('host_rendezvous', 0))} host rendezvous, {int(last.get('predicted_calls', 0))} predicted "
              f"calls ({int(last.get('mispredicted_calls', 0))} mispredicted)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("nccl", "lowcon"), default="lowcon")
    p.add_argument("--out", default="churn")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--min-tokens", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--length-step", type=int, default=64, help="sequence lengths are multiples of this")
    p.add_argument("--empty-every", type=int, default=37)
    p.add_argument("--sample-every", type=int, default=100)
    p.add_argument("--report", nargs="+", metavar="JSON", help="print runs side by side (no torch, no GPU)")
    args = p.parse_args()
    if args.report:
        return report(args.report)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
