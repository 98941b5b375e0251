"""Where fused all-gather-matmul's time goes at tokens 8192, hidden 8192, ffn 28672 on 2
GPUs: the GEMM alone, the same GEMM as two row halves with no communication, lowcon's
fused op (memop and kernel barriers), with its pieces pre-gathered (the split GEMMs on
a stream that waits for nothing), and torch.ops.symm_mem's. Paired rounds; ratios to the
GEMM per round, median [min, max].

    torchrun --nproc-per-node 2 agmm_probe.py
"""

import os
import statistics

import torch
import torch.distributed as dist

import lowcon
import lowcon.tp as tp

dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
rank, world = dist.get_rank(), dist.get_world_size()
g = lowcon.from_process_group(dist.group.WORLD, backend="gpu")
T, D, F = 8192, 8192, 28672
bf = torch.bfloat16
x = torch.randn(T // world, D, device=dev, dtype=bf)
w = torch.randn(D, F // world, device=dev, dtype=bf)
full = torch.randn(T, D, device=dev, dtype=bf)
out = torch.empty(T, F // world, device=dev, dtype=bf)
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402

symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)
s0 = T // world


def split():
    for p in range(world):
        torch.matmul(full[p * s0:(p + 1) * s0], w, out=out[p * s0:(p + 1) * s0])


cells = {
    "gemm": lambda: torch.matmul(full, w, out=out),
    "gemm, row pieces": split,
    "lowcon memop": lambda: tp.fused_all_gather_matmul(x, [w], 0, g, return_A=False),
    "lowcon kernel": lambda: tp.fused_all_gather_matmul(x, [w], 0, g, return_A=False, sync="kernel"),
    "lowcon serial": lambda: tp.fused_all_gather_matmul(x, [w], 0, g, return_A=False, _serial=True),
    "all-gather alone": lambda: g.all_gather(full, x, sync="memop"),
    "symm-mem": lambda: torch.ops.symm_mem.fused_all_gather_matmul(x, [w], 0, dist.group.WORLD.group_name),
}
for f in cells.values():
    for _ in range(3):
        f()
torch.cuda.synchronize()
times = {k: [] for k in cells}
for r in range(20):
    for k, f in cells.items():
        e = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        e[0].record()
        for _ in range(5):
            f()
        e[1].record()
        torch.cuda.synchronize()
        t = torch.tensor([e[0].elapsed_time(e[1]) / 5], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times[k].append(t.item())
if rank == 0:
    base = times["gemm"]
    for k, ts in times.items():
        rs = [a / b for a, b in zip(ts, base)]
        print(f"{k:18s} {statistics.median(ts):7.3f} ms   x{statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}]")
dist.destroy_process_group()
