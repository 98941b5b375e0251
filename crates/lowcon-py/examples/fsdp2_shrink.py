"""Keep training with FSDP2 after a rank dies: shrink the group, re-shard from the last
checkpoint, and go on, without restarting the survivors.

    lowcon launch --nproc-per-node 3 --keep-going -- \\
        python crates/lowcon-py/examples/fsdp2_shrink.py [--die-rank 2 --die-step 7]
    # one GPU, ranks sharing it (under MPS):  lowcon launch ... --gpus 1 --keep-going ...
    # no GPU (the host backend, FSDP2 on CPU): the same command; it runs on CPU then

The process group is lowcon's torch backend ("lowcon"), and FSDP2's all-gathers and
reduce-scatters go through lowcon's hooks (`lowcon.fsdp.install`) on its lowcon group.
Every `--ckpt-every` steps the ranks save a checkpoint with torch.distributed.checkpoint
(DCP), each rank its own shards. At `--die-step` rank
`--die-rank` SIGKILLs itself halfway through the step. The survivors' next collective
raises lowcon.PeerError naming it; they call `lowcon.distributed.shrink_group()`, which
shrinks the lowcon group and gives a torch process group over the survivors, build the
model again on it, load the checkpoint (DCP re-shards 3 ranks' shards for 2) and train
on from the checkpoint's step. `lowcon launch --keep-going` lets them finish (without it
the launcher stops the job when a rank dies, as torchrun does).

What can be rebuilt, and what cannot:
- Parameters and optimizer state (AdamW's moments and step) come back exactly as
  checkpointed, at any world size: DCP saves each shard with its place in the full
  tensor and loads whatever shards the new mesh asks for. The example checks this: the
  re-sharded parameters and moments hash the same as the checkpoint's (full tensors).
- The dead rank's shards exist nowhere else: FSDP2 keeps one copy of each. So the
  survivors' newer shards cannot be used with it either: every survivor rolls back to
  the checkpoint and the steps since it are done again. The global batch is fixed and
  split among the live ranks (data by step, not by rank), so the run goes on as the
  3-rank run would have, up to the order of floating-point sums: `--no-die` gives that
  run's losses to compare.
- FSDP2 itself cannot be moved to another mesh: the sharded modules, their hooks, the
  optimizer, and anything made from the old group (CUDA graphs captured on it,
  NCCL/Gloo fallback groups, DeviceMeshes, torch.compile caches) are made again.
- Rank 0 hosts torch's store (MASTER_PORT) under lowcon launch and torchrun, and the
  lowcon backend meets through that store: if rank 0 dies, shrink_group raises the
  store's error and only a restart helps. The example refuses --die-rank 0.
"""

import argparse
import hashlib
import os
import shutil
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import lowcon
import lowcon.distributed
import lowcon.fsdp


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.RMSNorm(d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, d=96, layers=4, vocab=512):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.emb(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build(pg, device):
    """The model, FSDP2-sharded over `pg`, and its optimizer. The same seed everywhere:
    the weights are overwritten from a checkpoint after a shrink anyway."""
    torch.manual_seed(0)
    model = Model().to(device)
    mesh = DeviceMesh.from_group(pg, device.type)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    lowcon.fsdp.install(model, pg.lowcon_group)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    return model, opt


def batch(step, rank, world, device, per_step=12, seq=33):
    """This rank's part of step `step`'s global batch: the same global batch at any
    world size (12 sequences: 3, 2 or 1 ranks split it evenly)."""
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, 512, (per_step, seq), generator=g)
    return tokens.chunk(world)[rank].to(device)


def train_step(model, opt, tokens):
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    # The mean over ranks, through the process group (what a trainer would log).
    mean = loss.detach().clone()
    dist.all_reduce(mean, op=dist.ReduceOp.AVG, group=model_pg(model))
    return mean.item()


def model_pg(model):
    return next(iter(model.parameters())).device_mesh.get_group()


def digest(model, opt):
    """A hash of the full parameters and AdamW moments (collective: full_tensor gathers)."""
    h = hashlib.sha256()

    def add(t):
        h.update(t.full_tensor().detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())

    for name, p in model.named_parameters():
        h.update(name.encode())
        add(p)
        st = opt.state.get(p, {})
        for k in ("exp_avg", "exp_avg_sq"):
            if k in st:
                add(st[k])
        if "step" in st:
            h.update(str(float(st["step"])).encode())
    return h.hexdigest()[:16]


def save(model, opt, step, root, pg):
    path = os.path.join(root, f"step-{step}")
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path, process_group=pg)
    d = digest(model, opt)
    dist.barrier(group=pg)  # every rank's shards are written
    if pg.rank() == 0:
        with open(os.path.join(root, "latest.tmp"), "w") as f:
            f.write(f"{step} {d}\n")
        os.replace(os.path.join(root, "latest.tmp"), os.path.join(root, "latest"))


def load(model, opt, root, pg):
    with open(os.path.join(root, "latest")) as f:
        step, d = f.read().split()
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(root, f"step-{step}"), process_group=pg)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(step), d


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--die-rank", type=int, default=2)
    p.add_argument("--die-step", type=int, default=7)
    p.add_argument("--no-die", action="store_true", help="nobody dies: the reference run")
    p.add_argument("--ckpt", default=None, help="checkpoint directory (default: a fresh one under /tmp)")
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not args.no_die and not 0 < args.die_rank < world:
        sys.exit(f"--die-rank {args.die_rank}: pick one of 1 to {world - 1} (rank 0 hosts torch's store)")
    gpu = torch.cuda.is_available()
    if gpu:
        device = torch.device("cuda", int(os.environ.get("LOWCON_DEVICE", os.environ.get("LOCAL_RANK", "0"))))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    root = args.ckpt or f"/tmp/lowcon-fsdp2-shrink-{os.environ.get('MASTER_PORT', '0')}"
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)

    dist.init_process_group("lowcon")  # no device_id: torch binds only C++ backends to one
    pg = dist.group.WORLD
    model, opt = build(pg, device)
    dist.barrier()  # the checkpoint directory exists
    where = f"rank {rank}"
    step, losses = 0, {}
    while step < args.steps:
        try:
            if step % args.ckpt_every == 0 and step not in losses:
                save(model, opt, step, root, pg)
            tokens = batch(step, pg.rank(), pg.size(), device)
            if not args.no_die and rank == args.die_rank and step == args.die_step:
                model(tokens[:, :-1]).sum().backward()  # halfway: the forward and backward ran
                os.kill(os.getpid(), signal.SIGKILL)
            losses[step] = train_step(model, opt, tokens)
            if pg.lowcon_group is not None:
                pg.lowcon_group.check()  # a peer's failure, if the step did not raise it
            if pg.rank() == 0:
                print(f"{where}: step {step}: loss {losses[step]:.5f} on {pg.size()} ranks", flush=True)
            step += 1
        except lowcon.PeerError as e:
            t0 = time.monotonic()
            print(f"{where}: step {step} failed: {e}", flush=True)
            pg = lowcon.distributed.shrink_group(pg)
            shrunk = time.monotonic() - t0
            del model, opt
            model, opt = build(pg, device)
            step, want = load(model, opt, root, pg)
            got = digest(model, opt)
            if got != want:
                raise SystemExit(f"{where}: the re-sharded state hashes {got}, the checkpoint's {want}")
            print(f"{where}: now rank {pg.rank()} of {pg.size()}: shrunk in {shrunk * 1e3:.0f} ms, re-sharded the "
                  f"step {step} checkpoint in {(time.monotonic() - t0 - shrunk) * 1e3:.0f} ms (hash {got} matches); "
                  f"training on from step {step}", flush=True)
    if pg.rank() == 0:
        print(f"{where}: done: final loss {losses[args.steps - 1]:.6f} on {pg.size()} ranks", flush=True)
    dist.barrier(group=pg)


if __name__ == "__main__":
    main()
