"""Train a small transformer with FSDP2 on lowcon's all-gather and reduce-scatter.

    torchrun --nproc-per-node 2 crates/lowcon-py/examples/fsdp2_train.py [--nccl]

One GPU per rank, on one box. `--nccl` trains the same model on FSDP2's defaults, for
comparison: from the same seeds the losses match (lowcon's reductions are in f32, in rank
order). NCCL_NVLS_ENABLE=0 keeps NVLink multicast off.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import lowcon
import lowcon.fsdp


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 8 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        gate, up = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Model(nn.Module):
    def __init__(self, vocab=8192, d=1024, heads=8, layers=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nccl", action="store_true", help="FSDP2's defaults instead of lowcon")
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)

    torch.manual_seed(0)  # the same initial weights on every rank
    model = Model().to(dev)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)

    group = None
    if not args.nccl:
        # A lowcon group over the same ranks, meeting through torch's own store.
        group = lowcon.from_process_group()
        lowcon.fsdp.install(model, group)  # every FSDP module: all-gather and reduce-scatter

    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device=dev).manual_seed(1 + rank)
    for step in range(args.steps):
        tokens = torch.randint(0, 8192, (4, 1025), device=dev, generator=gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    if group is not None:
        group.check()  # raises if a peer failed
        if rank == 0:
            print(f"lowcon pool: {lowcon.memory_stats(group)}")
    dist.barrier()
    if group is not None:
        group.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
