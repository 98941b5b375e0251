"""A tensor-parallel (sequence-parallel) MLP on lowcon's fused ops, trained for a few
steps and checked against the same MLP built with DTensor's `parallelize_module`
(ColwiseParallel then RowwiseParallel, sequence-sharded in and out) on the lowcon backend.

    lowcon launch --nproc-per-node 2 -- python crates/lowcon-py/examples/tp_mlp.py

Each rank holds a slice of the tokens (x: tokens / world x d), a column slice of the up
projection (d x f / world) and a row slice of the down projection (f / world x d):

    h = all_gather_matmul(x, w_up, 0, group)        # [tokens, f / world]
    y = matmul_reduce_scatter(gelu(h), w_down, "sum", 0, group)   # [tokens / world, d]

On GPUs (one per rank, or ranks sharing one with LOWCON_SHARE_GPU=1) the all-gather's
pieces and the reduce-scatter's chunks overlap the matmuls; on the CPU (no GPU, or
`--cpu`) the same code runs on lowcon's host backend. Both models start from the same
weights, train with SGD on the same data, and must end with the same losses and weights
(float32, within 1e-4 relative). Prints "tp_mlp: ok" and the losses.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.distributed.tensor.placement_types import Shard

import lowcon.distributed  # noqa: F401 (registers the "lowcon" backend)
import lowcon.tp


class MLP(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--f", type=int, default=256)
    ap.add_argument("--cpu", action="store_true", help="the host backend even where there is a GPU")
    args = ap.parse_args()

    gpu = torch.cuda.is_available() and not args.cpu
    if gpu:
        device = torch.device("cuda", int(os.environ.get("LOWCON_DEVICE", os.environ.get("LOCAL_RANK", "0"))))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("lowcon")
    rank, world = dist.get_rank(), dist.get_world_size()
    pg = dist.group.WORLD
    if args.tokens % world or args.f % world:
        sys.exit(f"tp_mlp: tokens {args.tokens} and f {args.f} must divide by the world of {world}")

    torch.manual_seed(0)
    ref = MLP(args.d, args.f).to(device)
    # lowcon's shards of the same weights: nn.Linear keeps W as (out, in), so y = x W^T.
    fs = args.f // world
    w_up = ref.up.weight.detach().t()[:, rank * fs:(rank + 1) * fs].contiguous().requires_grad_()
    w_down = ref.down.weight.detach().t()[rank * fs:(rank + 1) * fs].contiguous().requires_grad_()

    mesh = DeviceMesh.from_group(pg, device.type)
    plan = {
        "up": ColwiseParallel(input_layouts=Shard(0)),
        "down": RowwiseParallel(output_layouts=Shard(0)),
    }
    dt = parallelize_module(ref, mesh, plan)
    opt_ref = torch.optim.SGD(dt.parameters(), lr=0.1)
    opt = torch.optim.SGD([w_up, w_down], lr=0.1)

    tl = args.tokens // world
    losses, ref_losses = [], []
    for step in range(args.steps):
        gen = torch.Generator().manual_seed(1000 + step)
        x_all = torch.randn(args.tokens, args.d, generator=gen).to(device)
        target = torch.randn(args.tokens, args.d, generator=gen).to(device)
        x = x_all[rank * tl:(rank + 1) * tl].contiguous()
        t = target[rank * tl:(rank + 1) * tl]

        h = lowcon.tp.all_gather_matmul(x, w_up, 0, pg)
        y = lowcon.tp.matmul_reduce_scatter(F.gelu(h), w_down, "sum", 0, pg)
        loss = ((y - t) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

        y_ref = dt(x)
        y_ref = y_ref.to_local() if hasattr(y_ref, "to_local") else y_ref
        loss_ref = ((y_ref - t) ** 2).mean()
        opt_ref.zero_grad()
        loss_ref.backward()
        opt_ref.step()

        # The global loss: every rank's part, summed (the same on both sides).
        both = torch.stack([loss.detach(), loss_ref.detach()])
        dist.all_reduce(both)
        losses.append(both[0].item())
        ref_losses.append(both[1].item())

    bad = []
    for a, b in zip(losses, ref_losses):
        if abs(a - b) > 1e-4 * max(1.0, abs(b)):
            bad.append(f"loss {a} against DTensor's {b}")
    up_ref = dt.up.weight.to_local().t()
    down_ref = dt.down.weight.to_local().t()
    for name, mine, theirs in (("w_up", w_up, up_ref), ("w_down", w_down, down_ref)):
        if mine.shape != theirs.shape or not torch.allclose(mine.detach(), theirs.detach(), rtol=1e-4, atol=1e-5):
            bad.append(f"{name} differs from DTensor's (max {(mine.detach() - theirs.detach()).abs().max().item()})")
    if bad:
        print(f"rank {rank}: tp_mlp: FAILED: " + "; ".join(bad), flush=True)
        sys.exit(1)
    print(f"rank {rank}: tp_mlp: ok on {world} ranks ({device.type}); losses "
          + " ".join(f"{v:.5f}" for v in losses) + " (DTensor " + " ".join(f"{v:.5f}" for v in ref_losses) + ")",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
