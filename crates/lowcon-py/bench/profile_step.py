"""Where an FSDP2 step's time goes, NCCL against lowcon (issue 18's "profile where a
target is missed"): one configuration of fsdp2_step.py's model, a few steps under
torch.profiler per mode, and the time inside each hook on the host.

    torchrun --nproc-per-node 2 profile_step.py [--sweep 2048x8:256] [--lowcon-rs ALGO]

Prints, per mode (rank 0): the step time (CUDA events, median of the profiled steps),
the host time spent inside the collective hooks per step, and the top GPU kernels and
copies by device time (torch.profiler's key_averages), which shows how long the
collectives' kernels and peer copies ran and what else the GPU did.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsdp2_step as fb  # noqa: E402


def run(mode, cfg, args, dev, rank, world):
    torch.manual_seed(1)
    model = fb.build_model(cfg, dev)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mesh = fb._mesh(world)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    acc = {}
    group = None
    if mode == "lowcon":
        import lowcon
        import lowcon.fsdp

        group = lowcon.init()
        ag = lowcon.fsdp.LowconAllGather(group, args.lowcon_ag, args.lowcon_sync)
        rs = lowcon.fsdp.LowconReduceScatter(group, args.lowcon_rs, args.lowcon_sync)
        # Instance-level wrappers: FSDP2 calls comm(...) -> type(comm).__call__, so wrap
        # through a subclass per instance.
        calls = {}
        for c, kind in ((ag, "all-gather"), (rs, "reduce-scatter")):
            base = type(c)

            def make(base, kind):
                class Timed(base):
                    def __call__(self, *a, **k):
                        t0 = time.perf_counter()
                        try:
                            return base.__call__(self, *a, **k)
                        finally:
                            acc[kind] = acc.get(kind, 0.0) + time.perf_counter() - t0
                            calls[kind] = calls.get(kind, 0) + 1

                    def allocate(self, *a, **k):
                        t0 = time.perf_counter()
                        try:
                            return base.allocate(self, *a, **k)
                        finally:
                            acc[kind + " allocate"] = acc.get(kind + " allocate", 0.0) + time.perf_counter() - t0

                return Timed

            c.__class__ = make(base, kind)
        for m in model.modules():
            if isinstance(m, torch.distributed.fsdp.FSDPModule):
                m.set_custom_all_gather(ag)
                m.set_custom_reduce_scatter(rs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()).backward()
        opt.step()

    gen = torch.Generator(device=dev).manual_seed(7 + rank)
    batches = [torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), device=dev, generator=gen) for _ in range(8)]
    for b in batches[:3]:
        step(b)
    torch.cuda.synchronize()
    dist.barrier()
    acc.clear()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in batches[3:]]
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for (s, e), b in zip(ev, batches[3:]):
            s.record()
            step(b)
            e.record()
        torch.cuda.synchronize()
    n = len(ev)
    times = [s.elapsed_time(e) for s, e in ev]
    if rank == 0:
        print(f"\n==== {mode}: {cfg.key}, {n} profiled steps, step median {statistics.median(times):.2f} ms "
              f"(all: {', '.join(f'{t:.1f}' for t in times)})")
        if acc:
            print("host time inside the hooks per step: " + ", ".join(f"{k} {1e3 * v / n:.2f} ms" for k, v in acc.items()))
            print("hook calls per step: " + ", ".join(f"{k} {v / (n + 3):.0f}" for k, v in calls.items()))
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=60))
    if group is not None and rank == 0:
        print(f"lowcon pool after the run: {group.pool_stats()}")
    sys.stdout.flush()
    dist.barrier()
    if group is not None:
        group.close()
    del model, opt


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sweep", default="2048x8:256")
    p.add_argument("--modes", default="nccl,lowcon")
    p.add_argument("--lowcon-ag", default="auto")
    p.add_argument("--lowcon-rs", default="auto")
    p.add_argument("--lowcon-sync", default="kernel")
    args = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    world = dist.get_world_size()
    for cfg in fb.parse_sweep(args.sweep):
        for mode in args.modes.split(","):
            run(mode, cfg, args, dev, rank, world)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
