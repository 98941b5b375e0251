"""One fused all-gather-matmul (and torch.ops.symm_mem's) under torch.profiler on 2 GPUs,
rank 0's device timeline: every kernel, copy and memset with its stream, start and
duration in µs from the first; the 3rd of 3 back-to-back calls of each.

    torchrun --nproc-per-node 2 agmm_trace.py [tokens]
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import lowcon
import lowcon.tp as tp

dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
rank, world = dist.get_rank(), dist.get_world_size()
g = lowcon.from_process_group(dist.group.WORLD, backend="gpu")
T = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
D, F = 8192, 28672
bf = torch.bfloat16
x = torch.randn(T // world, D, device=dev, dtype=bf)
w = torch.randn(D, F // world, device=dev, dtype=bf)
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402

symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)
cases = {
    "lowcon": lambda: tp.fused_all_gather_matmul(x, [w], 0, g, return_A=False),
    "symm-mem": lambda: torch.ops.symm_mem.fused_all_gather_matmul(x, [w], 0, dist.group.WORLD.group_name),
}
for name, f in cases.items():
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            f()
        torch.cuda.synchronize()
    if rank == 0:
        evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        evs.sort(key=lambda e: e.time_range.start)
        # the last third: the 3rd call's events
        n = len(evs)
        t0 = evs[0].time_range.start
        print(f"== {name}: {n} device events over 3 calls, from the first")
        for e in evs:
            st = getattr(e, "device_resource_id", None)
            print(f"  stream {st!s:>4} {e.time_range.start - t0:9.1f} +{e.time_range.elapsed_us():8.1f}  {e.name[:70]}")
    dist.barrier()
dist.destroy_process_group()
