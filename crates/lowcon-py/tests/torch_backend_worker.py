"""One rank of the torch.distributed backend check (lowcon.distributed), on CPU tensors
(lowcon's host backend) or CUDA tensors (its GPU backend):

    torchrun --nproc-per-node 2 torch_backend_worker.py ops|fsdp [cpu|cuda]
    RANK=r WORLD_SIZE=2 MASTER_ADDR=.. MASTER_PORT=.. python torch_backend_worker.py dead [cpu|cuda]

ops: every operation the backend implements, on fresh random data with outputs poisoned
(NaN, or -1 for integers) before each call, against a torch reference computed from
every rank's data (each rank regenerates the others' from their seeds). All-gathers and
broadcasts exact, reductions of small odd integers exact (sum/min/max; f32, bf16, f16),
avg within 1e-6 relative in f32. Then async_op=True works waited out of order, the list
forms (one buffer and scattered tensors), functional collectives, DTensor redistribute
(Shard->Replicate, Partial->Shard, Partial->Replicate), distribute_tensor, subgroups;
integer and bool reductions on lowcon (exact, sums wrapping); the operations lowcon falls
back for (all_to_all single and list, send/recv, reduce, gather, PRODUCT, float64) against
references, and with LOWCON_TORCH_FALLBACK=0 a NotImplementedError naming the operation.
fsdp also all-reduces an int64 token count every step.
fsdp: FSDP2 without hooks on the lowcon process group against the same model on a Gloo
(cpu) or NCCL (cuda) group, same seeds: the losses of 5 steps agree within 1e-5.
dead: rank 1 kills itself (SIGKILL) after one collective; rank 0's next call or the
Work.wait() of an earlier call raises lowcon's PeerError naming rank 1 within 30 s.
Prints "rank R: MODE ok" on success.
"""

import gc
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import lowcon
import lowcon.distributed

MODE = sys.argv[1]
DEV = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu")


def fail(msg):
    r = dist.get_rank() if dist.is_initialized() else os.environ.get("RANK", "?")
    print(f"rank {r}: {MODE} FAILED: {msg}", flush=True)
    sys.exit(1)


def data(seed, rank, shape, dtype):
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    return (torch.randint(-15, 16, shape, generator=g) * 2 + 1).to(dtype).to(DEV)


def poisoned(shape, dtype):
    fill = float("nan") if dtype.is_floating_point else -1
    return torch.full(shape, fill, dtype=dtype, device=DEV)


def check(name, got, want, rtol=0.0):
    if not torch.allclose(got.float().cpu(), want.float().cpu(), rtol=rtol, atol=0.0):
        fail(f"{name}: {got.flatten()[:6].tolist()} != {want.flatten()[:6].tolist()}")


def ops():
    r, w = dist.get_rank(), dist.get_world_size()
    seed = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (1, 5, 3000):
            seed += 1
            out = poisoned((w * n,), dtype)
            dist.all_gather_into_tensor(out, data(seed, r, (n,), dtype))
            check(f"all_gather_into_tensor {dtype} {n}", out, torch.cat([data(seed, p, (n,), dtype) for p in range(w)]))
            for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max"),
                             (dist.ReduceOp.AVG, "avg")):
                if name == "avg" and dtype != torch.float32:
                    continue
                seed += 1
                every = torch.stack([data(seed, p, (w * n,), dtype).float() for p in range(w)])
                red = {"sum": every.sum(0), "min": every.min(0).values, "max": every.max(0).values,
                       "avg": every.mean(0)}[name]
                tol = 1e-6 if name == "avg" else 0.0
                out = poisoned((n,), dtype)
                dist.reduce_scatter_tensor(out, data(seed, r, (w * n,), dtype), op=op)
                check(f"reduce_scatter_tensor {name} {dtype} {n}", out, red[r * n:(r + 1) * n], tol)
                # all_reduce: any size (padded inside), not contiguous too
                t = data(seed, r, (w * n,), dtype)
                dist.all_reduce(t, op=op)
                check(f"all_reduce {name} {dtype} {w * n}", t, red, tol)
                odd = data(seed, r, (w * n, 2), dtype)[:, 1]
                dist.all_reduce(odd, op=op)
                every2 = torch.stack([data(seed, p, (w * n, 2), dtype)[:, 1].float() for p in range(w)])
                red2 = {"sum": every2.sum(0), "min": every2.min(0).values, "max": every2.max(0).values,
                        "avg": every2.mean(0)}[name]
                check(f"all_reduce non-contiguous {name} {dtype}", odd, red2, tol)
    # The bf16 wire, opted in on the group: float32 reduce_scatter_tensor bit for bit as
    # without it, the top halves counted.
    pg = dist.group.WORLD
    for n in (1, 3000):
        seed += 1
        x = data(seed, r, (w * n,), torch.float32) / 8
        x[n // 2] += 2.0 ** -20  # one value that is not bf16-exact: its piece falls back
        pg.reduce_scatter_wire = "bf16"
        before = pg.lowcon_group.stats()
        got = poisoned((n,), torch.float32)
        dist.reduce_scatter_tensor(got, x, op=dist.ReduceOp.AVG)
        moved = pg.lowcon_group.stats()["wire_bytes"] - before["wire_bytes"]
        pg.reduce_scatter_wire = None
        want = poisoned((n,), torch.float32)
        dist.reduce_scatter_tensor(want, x, op=dist.ReduceOp.AVG)
        if DEV.type == "cuda":
            torch.cuda.synchronize()
        if not torch.equal(got.view(torch.int32), want.view(torch.int32)) or moved != (w - 1) * n * 2:
            fail(f"reduce_scatter_tensor over the bf16 wire, n={n}: {got[:4]} vs {want[:4]}, {moved} wire bytes")
    # Bytes of any dtype, the list forms, broadcast, scatter.
    seed += 1
    outs = [torch.full((3,), -1, dtype=torch.int64, device=DEV) for _ in range(w)]
    dist.all_gather(outs, data(seed, r, (3,), torch.int64))
    for p in range(w):
        check("all_gather list (scattered tensors, int64)", outs[p], data(seed, p, (3,), torch.int64))
    flat = poisoned((w * 4,), torch.float32)
    dist.all_gather(list(flat.chunk(w)), data(seed, r, (4,), torch.float32))
    check("all_gather list (one buffer)", flat, torch.cat([data(seed, p, (4,), torch.float32) for p in range(w)]))
    out = poisoned((4,), torch.float32)
    dist.reduce_scatter(out, [data(seed + p, r, (4,), torch.float32) for p in range(w)])
    check("reduce_scatter list", out, sum(data(seed + r, p, (4,), torch.float32) for p in range(w)))
    b = data(seed, r, (5,), torch.float32)
    dist.broadcast(b, src=w - 1)
    check("broadcast", b, data(seed, w - 1, (5,), torch.float32))
    s = poisoned((3,), torch.float32)
    dist.scatter(s, [data(seed, 100 + p, (3,), torch.float32) for p in range(w)] if r == 0 else None, src=0)
    check("scatter", s, data(seed, 100 + r, (3,), torch.float32))
    objs = [None] * w
    dist.all_gather_object(objs, {"rank": r})
    if objs != [{"rank": p} for p in range(w)]:
        fail(f"all_gather_object: {objs}")
    # async_op, waited out of order.
    seed += 1
    a_out, r_out = poisoned((w * 64,), torch.float32), poisoned((64,), torch.float32)
    wa = dist.all_gather_into_tensor(a_out, data(seed, r, (64,), torch.float32), async_op=True)
    wr = dist.reduce_scatter_tensor(r_out, data(seed + 1, r, (w * 64,), torch.float32), async_op=True)
    wr.wait()
    wa.wait()
    check("async all-gather", a_out, torch.cat([data(seed, p, (64,), torch.float32) for p in range(w)]))
    check("async reduce-scatter", r_out,
          sum(data(seed + 1, p, (w * 64,), torch.float32) for p in range(w))[r * 64:(r + 1) * 64])
    if not wa.is_completed() or not wr.get_future().done():
        fail("a waited Work is not completed")
    dist.barrier()
    # Functional collectives and DTensor.
    import torch.distributed._functional_collectives as fc
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    seed += 1
    x = data(seed, r, (6,), torch.float32)
    check("funcol all_gather_tensor", fc.all_gather_tensor(x, 0, dist.group.WORLD),
          torch.cat([data(seed, p, (6,), torch.float32) for p in range(w)]))
    check("funcol reduce_scatter_tensor", fc.reduce_scatter_tensor(data(seed, r, (w * 2,), torch.float32), "sum", 0,
                                                                   dist.group.WORLD),
          sum(data(seed, p, (w * 2,), torch.float32) for p in range(w))[r * 2:(r + 1) * 2])
    mesh = init_device_mesh(DEV.type, (w,))
    if not isinstance(mesh.get_group(), lowcon.distributed.LowconProcessGroup):
        fail(f"the mesh's group is a {type(mesh.get_group()).__name__}")
    local = data(seed, r, (2, 3), torch.float32)
    full = DTensor.from_local(local, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()
    check("DTensor Shard->Replicate", full, torch.cat([data(seed, p, (2, 3), torch.float32) for p in range(w)]))
    part = DTensor.from_local(data(seed + 1, r, (w * 2, 3), torch.float32), mesh, [Partial()])
    total = sum(data(seed + 1, p, (w * 2, 3), torch.float32) for p in range(w))
    check("DTensor Partial->Shard", part.redistribute(mesh, [Shard(0)]).to_local(), total[r * 2:(r + 1) * 2])
    check("DTensor Partial->Replicate", part.redistribute(mesh, [Replicate()]).to_local(), total)
    check("distribute_tensor", distribute_tensor(total, mesh, [Shard(0)]).to_local(), total[r * 2:(r + 1) * 2])
    # A subgroup, made with the backend's name.
    sub = dist.new_group(list(range(w)), backend="lowcon")
    out = poisoned((w * 2,), torch.float32)
    dist.all_gather_into_tensor(out, data(seed, r, (2,), torch.float32), group=sub)
    check("subgroup all-gather", out, torch.cat([data(seed, p, (2,), torch.float32) for p in range(w)]))
    ints(r, w, seed + 1)
    fallback(r, w, seed + 2)
    # Bad sizes: lowcon's error names the rank and the sizes.
    try:
        dist.all_gather_into_tensor(poisoned((w * 3,), torch.float32), data(seed, r, (2,), torch.float32))
    except lowcon.InvalidArgument as e:
        if f"rank {r}" not in str(e):
            fail(f"size error does not name the rank: {e}")
    else:
        fail("mismatched sizes did not raise")
    dist.barrier()


def ints(r, w, seed):
    """Integer and bool reductions on lowcon itself: exact, sums wrapping in the type."""
    big = {torch.int32: 1 << 29, torch.int64: 1 << 61, torch.uint8: 200}
    for dtype in (torch.int32, torch.int64, torch.uint8, torch.bool):
        for n in (1, 7, 1001):
            for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max")):
                seed += 1

                def mine(p):
                    g = torch.Generator().manual_seed(seed * 1009 + p)
                    if dtype == torch.bool:
                        return torch.randint(0, 2, (w * n,), generator=g).bool()
                    return torch.randint(0, big[dtype], (w * n,), generator=g, dtype=torch.int64).to(dtype)
                every = [mine(p) for p in range(w)]
                if dtype == torch.bool:  # SUM and MAX: or; MIN: and (as NCCL's backend)
                    want = torch.stack(every).any(0) if name != "min" else torch.stack(every).all(0)
                elif name == "sum":
                    want = every[0].clone()
                    for x in every[1:]:
                        want += x  # wraps in the type, as lowcon's sum does
                else:
                    want = getattr(torch.stack(every), name)(0).values
                t = mine(r).to(DEV)
                dist.all_reduce(t, op=op)
                if not torch.equal(t.cpu(), want):
                    fail(f"all_reduce {name} {dtype} {n}: {t.flatten()[:6].tolist()} != {want[:6].tolist()}")
                if dtype != torch.bool:
                    out = torch.full((n,), -1, dtype=dtype, device=DEV) if dtype != torch.uint8 else \
                        torch.zeros((n,), dtype=dtype, device=DEV)
                    dist.reduce_scatter_tensor(out, mine(r).to(DEV), op=op)
                    if not torch.equal(out.cpu(), want[r * n:(r + 1) * n]):
                        fail(f"reduce_scatter_tensor {name} {dtype} {n}")


def fallback(r, w, seed):
    """What lowcon does not implement runs on NCCL (CUDA) or Gloo (CPU), checked against a
    reference; with LOWCON_TORCH_FALLBACK=0 it raises NotImplementedError naming it."""
    if DEV.type == "cuda" and lowcon.share_gpu():
        print(f"rank {r}: fallback checks skipped: NCCL refuses ranks sharing a GPU (LOWCON_SHARE_GPU=1)",
              flush=True)
        return
    f = lambda p, n, k=0: data(seed + k, p, (n,), torch.float32)  # noqa: E731
    # all_to_all_single: rank p sends its chunk q to rank q.
    out = poisoned((w * 3,), torch.float32)
    dist.all_to_all_single(out, f(r, w * 3))
    check("all_to_all_single", out, torch.cat([f(p, w * 3)[r * 3:(r + 1) * 3] for p in range(w)]))
    outs = [poisoned((2,), torch.float32) for _ in range(w)]
    dist.all_to_all(outs, [f(r, 2, 1 + q) for q in range(w)])
    for p in range(w):
        check("all_to_all (list)", outs[p], f(p, 2, 1 + r))
    # Uneven: rank p sends rank q size(p, q) elements, single and list forms.
    size = lambda p, q: 1 + (p + 2 * q) % 3  # noqa: E731
    out = poisoned((sum(size(p, r) for p in range(w)),), torch.float32)
    dist.all_to_all_single(out, torch.cat([f(r, size(r, q), 10 + q) for q in range(w)]),
                           output_split_sizes=[size(p, r) for p in range(w)],
                           input_split_sizes=[size(r, q) for q in range(w)])
    check("all_to_all_single (uneven)", out, torch.cat([f(p, size(p, r), 10 + r) for p in range(w)]))
    outs = [poisoned((size(p, r),), torch.float32) for p in range(w)]
    dist.all_to_all(outs, [f(r, size(r, q), 20 + q) for q in range(w)])
    for p in range(w):
        check("all_to_all (list, uneven)", outs[p], f(p, size(p, r), 20 + r))
    # send/recv around a ring (even ranks send first, odd ones receive first); a rank
    # alone has no peer (the one-rank run checks the NCCL fallback's set-up on one GPU).
    got = poisoned((4,), torch.float32) if w > 1 else f(w - 1, 4, 9)
    for step in ((0, 1) if r % 2 == 0 else (1, 0)) if w > 1 else ():
        if step == 0:
            dist.send(f(r, 4, 9), dst=(r + 1) % w)
        else:
            dist.recv(got, src=(r - 1) % w)
    check("send/recv ring", got, f((r - 1) % w, 4, 9))
    if r == 0 and w > 1:
        dist.send(f(0, 3, 10), dst=w - 1)
    if r == w - 1 and w > 1:
        got = poisoned((3,), torch.float32)
        dist.recv(got, src=0)
        check("send/recv", got, f(0, 3, 10))
    red = f(r, 5, 11)
    dist.reduce(red, dst=0)
    if r == 0:
        check("reduce", red, sum(f(p, 5, 11) for p in range(w)))
    gathered = [poisoned((2,), torch.float32) for _ in range(w)] if r == 0 else None
    dist.gather(f(r, 2, 12), gathered, dst=0)
    if r == 0:
        for p in range(w):
            check("gather", gathered[p], f(p, 2, 12))
    prod = f(r, 4, 13)
    dist.all_reduce(prod, op=dist.ReduceOp.PRODUCT)
    want = f(0, 4, 13)
    for p in range(1, w):
        want = want * f(p, 4, 13)
    check("all_reduce PRODUCT (float32)", prod, want)
    dbl = f(r, 6, 14).double()
    dist.all_reduce(dbl)
    check("all_reduce float64", dbl, sum(f(p, 6, 14).double() for p in range(w)))
    os.environ["LOWCON_TORCH_FALLBACK"] = "0"
    try:
        dist.reduce(f(r, 2, 15), dst=0)
    except NotImplementedError as e:
        if "reduce is not implemented by lowcon" not in str(e) or "LOWCON_TORCH_FALLBACK=0" not in str(e):
            fail(f"the fallback-off message: {e}")
    else:
        fail("reduce with LOWCON_TORCH_FALLBACK=0 did not raise NotImplementedError")
    finally:
        del os.environ["LOWCON_TORCH_FALLBACK"]


def fsdp():
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    w = dist.get_world_size()
    # NCCL refuses ranks sharing a GPU (LOWCON_SHARE_GPU=1): Gloo on the CUDA tensors then.
    ref_backend = "nccl" if DEV.type == "cuda" and not lowcon.share_gpu() else "gloo"
    losses = {}
    for name, group in (("lowcon", dist.group.WORLD), (ref_backend, dist.new_group(list(range(w)), backend=ref_backend))):
        mesh = DeviceMesh.from_group(group, DEV.type)
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)]).to(DEV)
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(dist.get_rank())
        xs = [torch.randn(8, 64, generator=g).to(DEV) for _ in range(5)]
        out = []
        for step, x in enumerate(xs):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            # What trainers reduce every step: a token count (int64), on the same group.
            ntok = torch.tensor([x.shape[0] * (dist.get_rank() + 1) + step], dtype=torch.int64, device=DEV)
            dist.all_reduce(ntok, group=group)
            if ntok.item() != x.shape[0] * w * (w + 1) // 2 + w * step:
                fail(f"{name}: int64 token count all_reduce in the training loop gave {ntok.item()}")
            opt.step()
            out.append(loss.item())
        losses[name] = out
    a, b = losses["lowcon"], losses[ref_backend]
    if any(abs(x - y) > 1e-5 * max(1.0, abs(y)) for x, y in zip(a, b)):
        fail(f"FSDP2 losses on lowcon {a} differ from {ref_backend}'s {b}")
    if not a[-1] < a[0]:
        fail(f"FSDP2 on lowcon did not train: {a}")


def dead():
    r = dist.get_rank()
    x = torch.ones(4, device=DEV)
    out = torch.empty(4 * dist.get_world_size(), device=DEV)
    earlier = dist.all_gather_into_tensor(out, x, async_op=True)
    earlier.wait()
    if r == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    raised_by = None
    while time.monotonic() - t0 < 30 and raised_by is None:
        try:
            w = dist.all_gather_into_tensor(out, x, async_op=True)
        except lowcon.PeerError as e:
            raised_by, err = "call", e
            break
        try:
            w.wait()
        except lowcon.PeerError as e:
            raised_by, err = "wait", e
    if raised_by is None:
        fail("no error within 30 s of the peer's death")
    if "rank 1" not in str(err):
        fail(f"the error does not name rank 1: {err}")
    try:
        earlier.wait()  # an earlier Work: the group's failure raises from wait() too
    except lowcon.PeerError:
        pass
    else:
        fail("Work.wait() of an earlier call did not raise after the failure")
    print(f"rank {r}: the dead peer raised from the {raised_by} after {time.monotonic() - t0:.2f} s: {err}",
          flush=True)


def main():
    global DEV
    if DEV.type == "cuda":
        DEV = torch.device("cuda", lowcon.device_index())
        torch.cuda.set_device(DEV)
    dist.init_process_group("lowcon")
    {"ops": ops, "fsdp": fsdp, "dead": dead}[MODE]()
    r = dist.get_rank()
    if MODE == "dead":
        print(f"rank {r}: {MODE} ok", flush=True)
        os._exit(0)  # the group's peer is gone: no collective teardown
    pg = dist.group.WORLD
    had_own = any(g is not None for g in (pg._cpu, pg._gloo, pg._nccl))
    dist.destroy_process_group()
    # Shut down, the group holds no torch group of its own (they would outlive it) and
    # a call raises lowcon's error instead of reaching a closed group or a new fallback.
    if any(g is not None for g in (pg._cpu, pg._gloo, pg._nccl)):
        fail("destroy_process_group left the lowcon group's own torch groups alive")
    if MODE == "ops" and not had_own:
        fail("ops made no torch group of lowcon's own: the shutdown check above checked nothing")
    try:
        pg.allreduce([torch.ones(2, device=DEV)])
    except lowcon.Error as e:
        if f"rank {r}" not in str(e) or "shut down" not in str(e):
            fail(f"a call after shutdown: {e}")
    else:
        fail("a call after destroy_process_group did not raise")
    # Free the groups now, while the interpreter is whole: a ProcessGroupGloo that only
    # reference cycles (FSDP's modules, the mesh) keep alive would otherwise be freed by
    # the interpreter's last collection, and its run-loop threads, dropping Python
    # objects without a GIL to take, abort the process (SIGABRT, "terminate called
    # without an active exception"; 4 of 12 fsdp runs on CPU before this).
    gc.collect()
    print(f"rank {r}: {MODE} ok", flush=True)


if __name__ == "__main__":
    main()
