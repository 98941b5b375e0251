"""Tensor parallelism that overlaps: fused all-gather-matmul and matmul-reduce-scatter.

Shaped like PyTorch's `torch.ops.symm_mem.fused_all_gather_matmul` and
`fused_matmul_reduce_scatter`, so that a caller switches by changing the namespace:

    A, (Y,) = lowcon.tp.fused_all_gather_matmul(x_shard, [w1], 0, group)
    out = lowcon.tp.fused_matmul_reduce_scatter(h, w2, "sum", 0, group)

On a GPU group the pieces overlap (docs/algorithms.md, "Fused tensor parallelism"):

- all-gather-matmul: an all-gather on a side stream records one event per rank's piece
  as it lands (`Group.arrivals`; `auto` picks ce-pull for large shards, which lands them
  one by one, and LL or sm-oneshot for small ones, which land them all at the end); this
  rank's own piece is multiplied from its shard once the all-gather's entry barrier has
  passed, and every other piece's matmul waits for that piece alone;
- matmul-reduce-scatter: the matmul of destination chunk d (in the order rank + 1, ...,
  rank) writes into pool memory and releases that chunk to rank d
  (`Group.reduce_scatter_released`), whose copy engine fetches it while the next chunk
  is multiplied; the reduction of the copied chunks runs at the end (64 CTAs).

On a host group (CPU tensors) they are the plain sequence: all-gather then matmul,
matmul then reduce-scatter. The fused ops are not differentiable (as torch's are not):
`all_gather_matmul` and `matmul_reduce_scatter` are the autograd forms, the backward of
each being the other.

Calls capture into a CUDA graph once a call of the same shapes has run on the capturing
stream (its channel and workspaces exist then): warm up inside `torch.cuda.stream(s)` and
capture with `torch.cuda.graph(g, stream=s)`.
"""

import torch

from ._errors import InvalidArgument

__all__ = [
    "fused_all_gather_matmul",
    "fused_matmul_reduce_scatter",
    "all_gather_matmul",
    "matmul_reduce_scatter",
    "group_of",
]

# The hint every call of these ops passes to the planner (NOTE [one planner]).
CONTEXT = "tp"

_DTYPES = (torch.float32, torch.bfloat16)


def _who():
    """"rank N" of this process, as torch.distributed or the launcher knows it."""
    import os

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return f"rank {dist.get_rank()}"
    return f"rank {os.environ.get('RANK', '?')}"


def group_of(group):
    """The lowcon.Group behind `group`: a lowcon.Group, a process group on the lowcon
    backend, or the name of one (as torch's fused ops take `group_name`)."""
    from . import Group

    if isinstance(group, Group):
        return group
    pg = group
    if isinstance(group, str):
        import torch.distributed.distributed_c10d as c10d

        try:
            pg = c10d._resolve_process_group(group)
        except Exception as e:  # noqa: BLE001 (named)
            raise InvalidArgument(f"{_who()}: group {group!r}: no process group has this name ({e})") from e
    if hasattr(pg, "lowcon_group"):
        return pg.lowcon_group
    for kind in ("cuda", "cpu"):
        try:
            backend = pg._get_backend(torch.device(kind))
        except Exception:  # noqa: BLE001, S112 (this device has no backend: try the next)
            continue
        if hasattr(backend, "lowcon_group"):
            return backend.lowcon_group
    raise InvalidArgument(f"{_who()}: group {group!r}: not a lowcon group, nor a process group on the lowcon backend")


def _dim(d, ndim, what, rank):
    if not isinstance(d, int) or not -ndim <= d < ndim:
        raise InvalidArgument(f"rank {rank}: {what} {d!r} is out of range for a tensor of {ndim} dims")
    d %= ndim
    if d == ndim - 1:
        raise InvalidArgument(
            f"rank {rank}: {what} {d} is the last dim (the matmul's K): lowcon.tp takes a leading dim only "
            "(docs/python.md, \"Fused tensor parallelism\"); torch's split-K path is not offered")
    return d


def _check(rank, A, Bs, what):
    if not isinstance(A, torch.Tensor) or A.dim() < 2:
        raise InvalidArgument(f"rank {rank}: {what}: A must be a tensor of at least 2 dims")
    if A.dtype not in _DTYPES:
        raise InvalidArgument(f"rank {rank}: {what}: A is {A.dtype}; float32 and bfloat16 are supported")
    for i, B in enumerate(Bs):
        if not isinstance(B, torch.Tensor) or B.dim() != 2:
            raise InvalidArgument(f"rank {rank}: {what}: B[{i}] must be a 2-dim tensor")
        if B.dtype != A.dtype:
            raise InvalidArgument(f"rank {rank}: {what}: B[{i}] is {B.dtype} but A is {A.dtype}: the dtypes must match")
        if B.shape[0] != A.shape[-1]:
            raise InvalidArgument(
                f"rank {rank}: {what}: B[{i}] has {B.shape[0]} rows but A's last dim is {A.shape[-1]}")
        if B.device != A.device:
            raise InvalidArgument(f"rank {rank}: {what}: B[{i}] is on {B.device} but A on {A.device}")


def _gpu(g, t, rank, what):
    if t.is_cuda:
        if g.device is None:
            raise InvalidArgument(f"rank {rank}: {what}: CUDA tensors, but the group runs on the host backend")
        if t.device.index != g.device:
            raise InvalidArgument(f"rank {rank}: {what}: the tensors are on cuda:{t.device.index} but the group "
                                  f"uses cuda:{g.device}")
        return True
    if g.device is not None:
        raise InvalidArgument(f"rank {rank}: {what}: CPU tensors, but the group runs on GPUs")
    return False


def _state(g):
    """The group's fused-op state: the side stream of the all-gathers, their arrivals,
    and the released reduce-scatters' pool workspaces, one per (stream, dtype), grown to
    the largest call. A workspace is kept, not freed after each call, and a grown one's
    old block too, so that a call captured into a CUDA graph keeps its own (a freed pool
    block would be reused at once on its stream)."""
    st = getattr(g, "_tp", None)
    if st is None:
        dev = torch.device("cuda", g.device)
        st = g._tp = {"side": torch.cuda.Stream(dev), "arrivals": g.arrivals(), "ws": {}, "retired": []}
    return st


# NOTE [memop start]: the first GEMM of a fused all-gather-matmul waited for the
# all-gather's entry barrier, because a kernel barrier queued behind a GEMM that holds every
# SM runs only when that GEMM ends. At 4 ranks that wait was most of the op's excess (4x
# H200, 2026-11-26: the first GEMM started 197 us after the op, symm_mem's after 36). A
# barrier of stream memory operations holds no SM, so with memop sync (the planner's, or
# `sync="memop"`) the first GEMM does not wait for it.
def _planned_sync(g, st, shard, sync):
    """The sync the planner gives the all-gather of `shard` with `sync` ("memop" or
    "kernel"; asked once per shape, dtype, sync and capture), which the call then passes
    as its own, so that the call runs what was planned (NOTE [one planner])."""
    key = (shard.numel(), shard.dtype, sync, torch.cuda.is_current_stream_capturing())
    memo = st.setdefault("planned_sync", {})
    if key not in memo:
        plan = g.plan("all-gather", shard.numel(), shard.dtype, context=CONTEXT, sync=sync, graph_sync=sync,
                      captured=key[3])
        memo[key] = plan["sync"]
    return memo[key]


def _workspace(g, st, stream, shape, dtype):
    """A view of `shape` at the start of the (stream, dtype) workspace, grown if needed
    (every rank makes the same calls, so every rank grows it at the same call)."""
    key = (stream.cuda_stream, dtype)
    n = 1
    for d in shape:
        n *= d
    ws = st["ws"].get(key)
    if ws is None or ws.numel() < n:
        if ws is not None:
            st["retired"].append(ws)
        ws = st["ws"][key] = g.empty((n,), dtype, stream=stream)
    return ws[:n].view(shape)


def fused_all_gather_matmul(A_shard, Bs, gather_dim, group, *, return_A=True, sync="auto", gemms="merged",
                            _events=None, _serial=False):
    """All-gathers `A_shard` along `gather_dim` into A and returns (A or None,
    [A @ B for B in Bs]); each partial matmul starts when its piece has landed.

    `group`: a lowcon.Group, or a process group on the lowcon backend, or its name.
    float32 or bfloat16; `gather_dim` a leading dim (not the last); a non-contiguous
    `A_shard` is copied. Every rank passes the same shapes.

    `sync` is the all-gather's ("auto": the planner's, "kernel" or "memop", in graphs too);
    every call passes the planner the hint `context="tp"` (NOTE [one planner]). The first matmul waits
    for the all-gather's entry barrier (`Arrivals.wait_started`): a barrier behind a GEMM
    that holds every SM ran only when that GEMM ended, kernel or memop alike, and the
    peers' pieces were pulled only then (2x H200, 2026-11-26: 1.09-1.10x the GEMM alone
    at tokens 8192, hidden 8192, ffn 28672).

    `gemms`: how the peers' pieces are multiplied once they land (NOTE [merged GEMMs]):
    "merged" (the default), in at most two GEMMs, the rows before this rank's and those
    after, once every piece has landed; "each", one GEMM per piece as it lands. At 2 ranks
    they are the same. (`_events`, `_serial`: the overlap test's probes.)
    """
    g = group_of(group)
    rank, world = g.rank, g.world_size
    if gemms not in ("merged", "each"):
        raise InvalidArgument(f"rank {rank}: fused_all_gather_matmul: gemms={gemms!r}: \"merged\" or \"each\"")
    Bs = list(Bs)
    _check(rank, A_shard, Bs, "fused_all_gather_matmul")
    gd = _dim(gather_dim, A_shard.dim(), "gather_dim", rank)
    cuda = _gpu(g, A_shard, rank, "fused_all_gather_matmul")
    shard = A_shard.movedim(gd, 0).contiguous()
    s0, rest = shard.shape[0], tuple(shard.shape[1:])
    gathered = torch.empty((world * s0,) + rest, dtype=shard.dtype, device=shard.device)
    outs = [torch.empty((world * s0,) + rest[:-1] + (B.shape[1],), dtype=shard.dtype, device=shard.device)
            for B in Bs]

    def piece(p, src, n=1):  # the rows of pieces p to p + n - 1, from `src`
        for B, out in zip(Bs, outs):
            torch.matmul(src, B, out=out[p * s0:(p + n) * s0])

    with torch.no_grad():  # `out=` has no autograd: the autograd forms are below
        if not cuda:
            g.all_gather(gathered, shard, context=CONTEXT)
            for p in range(world):
                piece(p, gathered[p * s0:(p + 1) * s0])
        elif shard.numel() == 0:
            for out in outs:  # no rows, or K = 0 (every product is 0)
                out.zero_()
        else:
            _overlapped(g, shard, gathered, piece, (rank, s0), sync, _events, _serial, gemms == "merged")
    A = gathered.movedim(0, gd) if return_A else None
    return A, [o.movedim(0, gd) for o in outs]


# NOTE [merged GEMMs]: one GEMM per arriving piece starts each GEMM as early as its rows
# land, but at 4 ranks and more the pieces are small GEMMs (a quarter of the rows or
# less). Why fewer, larger GEMMs win is not measured (a small GEMM's lower rate, the
# copies of a batched pull landing close together, are the guesses); that they win is.
# Multiplying the peers' rows in at most two GEMMs (those before this
# rank's rows and those after: the output is one block each) once the last piece lands,
# the own piece's GEMM overlapping the copies, was faster: 4x H200, 2026-11-28 (9fbdb43),
# tokens 8192, hidden 8192, ffn 28672, 20 rounds paired: 0.937 of one GEMM per piece
# (10th-90th percentile of the rounds 0.903-0.992, the A/A twin's 0.980-1.010), 1.075x the
# GEMM alone against symm_mem's 1.099x (0.969 of symm_mem's, 0.957-0.991). At 2 ranks
# the two are one GEMM. H100 and 8 ranks are not measured; `gemms="each"` keeps the other.
def _overlapped(g, shard, gathered, piece, where, sync, _events, _serial, merged):
    """The GPU form of `fused_all_gather_matmul`: the all-gather with arrivals on the side
    stream, the own piece after its entry barrier, each other piece after its arrival."""
    rank, s0 = where
    dev = shard.device
    cur = torch.cuda.current_stream(dev)
    st = _state(g)
    side, arr = st["side"], st["arrivals"]
    side.wait_stream(cur)
    # The plan's sync, asked first and passed as the call's own: the start below depends on it.
    planned = _planned_sync(g, st, shard, sync)
    with torch.cuda.stream(side):
        g.all_gather(gathered, shard, arrivals=arr, sync=planned, graph_sync=planned, context=CONTEXT)
    try:
        order = arr.order
        # The local piece first, from the shard itself (it needs no copy), after the
        # entry barrier, so that a kernel barrier does not wait for this GEMM's SMs. A
        # stream-memop barrier needs no SM: then the GEMM starts at once (NOTE [memop start]).
        if planned != "memop":
            arr.wait_started(cur)
        if _serial:
            for p in order:
                arr.wait(p, cur)
        if _events is not None:
            _events["first_matmul"] = torch.cuda.Event(enable_timing=True)
            _events["first_matmul"].record(cur)
            probe = _events["probe"] = torch.cuda.Stream(dev)
            arr.wait(order[-1], probe)
            _events["last_arrival"] = torch.cuda.Event(enable_timing=True)
            _events["last_arrival"].record(probe)
        piece(rank, shard)
        for p in order[1:]:
            arr.wait(p, cur)
            if not merged:
                piece(p, gathered[p * s0:(p + 1) * s0])
        if merged:
            # The peers' rows in at most two GEMMs (those before this rank's, those after),
            # once every piece has landed: fewer, larger GEMMs than one per arrival.
            for lo, hi in ((0, rank), (rank + 1, len(order))):
                if hi > lo:
                    piece(lo, gathered[lo * s0:hi * s0], hi - lo)
    finally:
        # The peers' reads of this shard end with the call (its exit barrier); the
        # blocks go back to torch only after the side stream's use, even on an error.
        cur.wait_stream(side)
        if not torch.cuda.is_current_stream_capturing():
            shard.record_stream(side)
            gathered.record_stream(side)


def fused_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group, *, ctas=None, _gemms="each"):
    """reduce-scatters `A @ B` along `scatter_dim`: returns this rank's part, of
    `A.shape[scatter_dim] / world` rows there. `reduce_op` "sum" or "avg".

    On a GPU group the matmul runs one destination chunk at a time, each released to its
    owner as soon as it is written (`Group.reduce_scatter_released`). float32 or bfloat16;
    `scatter_dim` a leading dim, divisible by the world; a non-contiguous A is copied.
    (`_gemms="merged"`: tp_bench's `lowcon-merged` probe, NOTE [merged GEMMs] for this op:
    the peers' chunks in at most two GEMMs, each chunk released when its GEMM is done.)
    """
    g = group_of(group)
    rank, world = g.rank, g.world_size
    _check(rank, A, [B], "fused_matmul_reduce_scatter")
    if reduce_op not in ("sum", "avg"):
        raise InvalidArgument(f"rank {rank}: fused_matmul_reduce_scatter: reduce_op {reduce_op!r}: sum or avg")
    if _gemms not in ("merged", "each"):
        raise InvalidArgument(f"rank {rank}: fused_matmul_reduce_scatter: _gemms={_gemms!r}: \"merged\" or \"each\"")
    sd = _dim(scatter_dim, A.dim(), "scatter_dim", rank)
    cuda = _gpu(g, A, rank, "fused_matmul_reduce_scatter")
    Am = A.movedim(sd, 0)
    M = Am.shape[0]
    if M % world:
        raise InvalidArgument(f"rank {rank}: fused_matmul_reduce_scatter: A has {M} rows along scatter_dim "
                              f"{sd}, not divisible by the world of {world}")
    m = M // world
    shape = (m,) + tuple(Am.shape[1:-1]) + (B.shape[1],)
    with torch.no_grad():  # `out=` has no autograd: `matmul_reduce_scatter` has
        if not cuda:
            full = torch.matmul(Am, B).contiguous()
            out = torch.empty(shape, dtype=A.dtype)
            g.reduce_scatter(out.view(-1), full.view(-1), reduce_op, context=CONTEXT)
            return out.movedim(0, sd)
        out = torch.empty(shape, dtype=A.dtype, device=A.device)
        if out.numel() == 0:
            return out.movedim(0, sd)
        ws = _workspace(g, _state(g), torch.cuda.current_stream(A.device), (world,) + shape, A.dtype)
        Am = Am.contiguous()

        def produce(d):
            torch.matmul(Am[d * m:(d + 1) * m], B, out=ws[d])

        if _gemms == "merged":
            produce = _merged_chunks(Am, B, ws, (rank, world, m))

        g.reduce_scatter_released(out.view(-1), ws.view(-1), produce, reduce_op, ctas=ctas)
    return out.movedim(0, sd)


def _merged_chunks(Am, B, ws, where):
    """A `produce` for `reduce_scatter_released` that computes the chunks in at most three
    GEMMs (NOTE [merged GEMMs]): it is called for chunks rank + 1, ..., world - 1, 0, ...,
    rank in turn (NOTE [release rounds]), so the rows of rank + 1 .. world - 1, then those
    of 0 .. rank - 1, then this rank's own, are each one contiguous block of A and of the
    workspace. The first chunk of a block computes the whole block; the others, released
    after it on the same stream, are already written."""
    rank, world, m = where
    blocks = {rank: rank + 1}  # the first chunk of each block -> the block's end
    if rank > 0:
        blocks[0] = rank
    if rank + 1 < world:
        blocks[rank + 1] = world

    def produce(d):
        end = blocks.get(d)
        if end is not None and end > d:
            torch.matmul(Am[d * m:end * m], B, out=ws[d:end].view((end - d) * m, *ws.shape[2:]))
    return produce


class _AllGatherMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A_shard, B, gather_dim, group):
        A, (Y,) = fused_all_gather_matmul(A_shard, [B], gather_dim, group, return_A=True)
        ctx.save_for_backward(A, B)
        ctx.gather_dim, ctx.group = gather_dim, group
        return Y

    @staticmethod
    def backward(ctx, dY):
        A, B = ctx.saved_tensors
        dA_shard = dB = None
        if ctx.needs_input_grad[0]:
            dA_shard = fused_matmul_reduce_scatter(dY.contiguous(), B.t(), "sum", ctx.gather_dim, ctx.group)
        if ctx.needs_input_grad[1]:
            dB = A.reshape(-1, A.shape[-1]).t() @ dY.reshape(-1, dY.shape[-1])
        return dA_shard, dB, None, None


class _MatmulReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B, reduce_op, scatter_dim, group):
        ctx.save_for_backward(A, B)
        ctx.scatter_dim, ctx.group, ctx.avg = scatter_dim, group, reduce_op == "avg"
        return fused_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group)

    @staticmethod
    def backward(ctx, dY):
        A, B = ctx.saved_tensors
        if ctx.avg:
            dY = dY / group_of(ctx.group).world_size
        G, (dA,) = fused_all_gather_matmul(dY.contiguous(), [B.t()], ctx.scatter_dim, ctx.group, return_A=True)
        dB = None
        if ctx.needs_input_grad[1]:
            dB = A.reshape(-1, A.shape[-1]).t() @ G.reshape(-1, G.shape[-1])
        return (dA if ctx.needs_input_grad[0] else None), dB, None, None, None


def all_gather_matmul(A_shard, B, gather_dim, group):
    """`fused_all_gather_matmul(A_shard, [B], ...)`'s product, with autograd: its backward
    is a fused matmul-reduce-scatter (dA_shard) and a local matmul (dB)."""
    return _AllGatherMatmul.apply(A_shard, B, gather_dim, group)


def matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group):
    """`fused_matmul_reduce_scatter`, with autograd: its backward is a fused
    all-gather-matmul (dA) and a local matmul of the gathered gradient (dB)."""
    return _MatmulReduceScatter.apply(A, B, reduce_op, scatter_dim, group)
