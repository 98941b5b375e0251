"""FSDP2 on lowcon: all-gather and reduce-scatter through FSDP2's custom-collective hooks.

    import lowcon, lowcon.fsdp
    from torch.distributed.fsdp import fully_shard
    g = lowcon.init()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    lowcon.fsdp.install(model, g)

torch 2.11's `FSDPModule.set_custom_all_gather` / `set_custom_reduce_scatter` take objects
with `allocate(size, *, dtype, device)` and `__call__(output_tensor, input_tensor, group,
[op,] async_op=False)`. Ours hand out torch's memory, as FSDP2's defaults do, so the
collective buffers share memory with activations and peak memory stays NCCL's; the
peers read it in place through IPC mappings of torch's segments (`map_ordinary`, which
the planner turns on for FSDP2's calls; NOTE [mapped ordinary memory]), at addresses
predicted from the previous step's same call and checked off the calling thread, so a
steady-state step makes no host rendezvous (NOTE [addresses predicted]). With `memory="pool"` they come from
the group's symmetric pool instead (no exchange per call, but the pool's memory is its
own: NOTE [FSDP2 pool size]). lowcon's collectives run on FSDP2's own streams, on one
channel per kind of hook. The hooks are per FSDP module (they do not recurse): `install`
sets them on every one.

The hooks choose nothing themselves (NOTE [one planner]): every call passes the hint
`context="fsdp"`, and the library's planner picks the algorithm, CTAs, sync, pieces and
wire from the tuning table of the machine (`g.plan(...)` shows what it picks). An option
given to `install` still wins.

The bf16 wire (NOTE [bf16 wire]): with FSDP2's usual mixed precision (`param_dtype=bf16`,
`reduce_dtype=fp32`) the reduce-scatter's fp32 input holds bf16 gradients upcast, so half
its bytes are zeros. The hooks then pass the hint `bf16_exact=True`, and the planner sends
only the top halves where its table says so (ce-reduce; `reduce_scatter_wire="bf16"` asks
for the wire outright): the result is the fp32 one bit
for bit, and a piece that is not bf16-exact falls back to reading its bottom halves.
Gradients accumulated in fp32 over several backward passes
(`set_requires_gradient_sync(False)`) are not bf16-exact, so for a reduce of accumulated
gradients the hooks give no hint: `install` wraps each parameter group's `post_backward`
to see whether it holds accumulated gradients before it reduces. It prints one line
saying what it chose (`reduce_scatter_wire="auto"`, the default; "bf16": the hint and
the wire for every fp32 input; None: no hint, the planner's choice, which with the
shipped tables is fp32 on the wire). The torch backend's `pg.reduce_scatter_wire` takes
the same words with the same meanings.

NOTE [bf16 copy-in]: FSDP2 copies the bf16 gradients into the reduce-scatter's fp32 input
(`foreach_reduce_scatter_copy_in`, a cast: 2 bytes read, 4 written per element), and the
wire's pack then read those 4 bytes back to write the top and bottom halves (4 more): 14
bytes of SM traffic per element beside the GEMMs, for bytes whose bottom halves are zero
(the copy-in and sm-direct's pack of a bf16 input: 8).
With `copy_in="bf16"` (the default) a hook that would hint bf16-exact gradients instead
hands FSDP2 a placeholder for the fp32 input (a zero-stride view of a bf16 buffer, so
FSDP2 keeps that buffer alive exactly as long as it keeps its input), `install` has
FSDP2's copy-in fill the bf16 buffer instead (a copy: 4 bytes an element), and the call
reduces the bf16 buffer into FSDP2's fp32 output (a bf16 input into f32: the sum is
the fp32 one bit for bit, as the upcast values are exact). The planner decides how that
call runs (the tables' `dtype=bf16 out=f32` rules; sm-direct packs it as top halves,
half the split wire's planes). A copy-in that meets gradients that are not bf16 fills a
real fp32 input instead (FSDP2's own path); an in-place write to the placeholder (a
pre-division) raises instead of being lost. No placeholder where it could not be reduced:
at one rank, for an algorithm named that takes no bf16 input (`ll`, the `tma` ones), for a
reduce whose FSDP2 group is not the lowcon group's size (FSDP2 would copy a one-rank
group's placeholder itself), or without the word of `install`'s post_backward wrapper. A
placeholder no call took (FSDP2 raised between the two) is dropped at the hook's next
input. `copy_in="fp32"` keeps FSDP2's fp32 copy-in.

Reduce-scatter ops: FSDP2 passes SUM, AVG, or PREMUL_SUM(1/f) after
`set_gradient_divide_factor(f)`. torch does not expose PREMUL_SUM's factor in Python, so
give the same factor to `install(..., gradient_divide_factor=f)`, which sets it on the
modules too; lowcon then sums and scales the output by 1/f on the same stream.
"""

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGather
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatter

from . import InvalidArgument
from ._ops import reduce_op_name

__all__ = ["LowconAllGather", "LowconReduceScatter", "install", "CONTEXT"]

# The hint every hook call passes to the planner (NOTE [one planner]): the tuning tables'
# rules for FSDP2 (ce-reduce reading torch's memory in place, the bf16 wire with the CTAs
# measured inside FSDP2's step: NOTE [auto inside FSDP2] and NOTE [wire CTAs inside FSDP2]
# in docs/algorithms.md) apply to these calls.
CONTEXT = "fsdp"


def _check_group(g, group):
    """FSDP2's process group must be the same ranks as the lowcon group."""
    if group is not None and (group.size() != g.world_size or group.rank() != g.rank):
        raise InvalidArgument(
            f"rank {g.rank}: FSDP's process group has rank {group.rank()} of {group.size()}, but the lowcon "
            f"group has rank {g.rank} of {g.world_size}: build the lowcon group over the same ranks "
            "(for HSDP, over the intra-node mesh dimension)"
        )


_MEMORY = ("pool", "torch")


class _Comm:
    def __init__(self, group, algorithm="auto", sync="auto", memory="torch", **options):
        if memory not in _MEMORY:
            raise InvalidArgument(f"rank {group.rank}: memory {memory!r}: expected \"pool\" or \"torch\"")
        self.group = group
        self.memory = memory
        self.options = {"context": CONTEXT, **dict(algorithm=algorithm, sync=sync, **options)}
        # One channel per kind of hook on the group, not one per stream: FSDP2 makes new
        # streams for every root (every model), which would use up the 16 channels.
        # FSDP2 issues each kind in order on one stream per root; two roots whose
        # collectives overlap need channels of their own (all_gather_options=...).
        if "channel" not in self.options and hasattr(group, "channel"):
            self.options["channel"] = group.channel(self._CHANNEL)
        self._checked_device = None

    def allocate(self, size, *, dtype, device):
        """A pool block on the current stream (FSDP2 allocates on the stream that fills it),
        or with memory="torch" a tensor from torch's allocator, which peers then read in
        place (`map_ordinary`: its cudaMalloc segment is opened once per peer)."""
        if self.memory == "torch":
            return torch.empty([int(s) for s in size], dtype=dtype, device=device)
        if device is not None and device != self._checked_device:
            d = torch.device(device)
            if d.type == "cuda" and d.index is not None and d.index != self.group.device:
                raise InvalidArgument(
                    f"rank {self.group.rank}: FSDP allocates on cuda:{d.index}, but the lowcon group uses "
                    f"cuda:{self.group.device}"
                )
            self._checked_device = device  # FSDP passes one device object: check it once
        return self.group.empty([int(s) for s in size], dtype, framework="torch")


class LowconAllGather(_Comm, _AllGather):
    """FSDP2's all-gather on lowcon (the input is a view of the output)."""

    _CHANNEL = "fsdp/all-gather"

    def __call__(self, output_tensor, input_tensor, group=None, async_op=False):
        _check_group(self.group, group)
        self.group.all_gather(output_tensor, input_tensor, **self.options)
        return None  # stream-ordered: FSDP2 records an event on this stream after the call


def _op_name(op, factor):
    """lowcon's op for FSDP2's ReduceOp, and the post-scale (or None)."""
    name = reduce_op_name(op)
    if name is not None:
        return name, None
    if op == dist.ReduceOp.PREMUL_SUM:
        if factor is None:
            raise InvalidArgument(
                "FSDP2 asked for PREMUL_SUM (set_gradient_divide_factor), whose factor torch does not expose: "
                "pass the same factor to lowcon.fsdp.install(..., gradient_divide_factor=f)"
            )
        return "sum", 1.0 / factor
    raise InvalidArgument(f"reduce op {op!r}: lowcon takes SUM, AVG, MIN, MAX and PREMUL_SUM")


_COPY_INS = ("bf16", "fp32")
# The reduce-scatter algorithms that take a bf16 input into f32 (RsCaps::bf16_in), and auto.
_BF16_IN = ("auto", "ce-reduce", "sm-direct")
# NOTE [bf16 copy-in]: each placeholder handed out (by its data pointer) -> the buffer
# FSDP2's copy-in fills (bf16; fp32 where the gradients were not bf16).
_COPY_IN = {}


def _is_placeholder(t):
    """Whether `t` is a bf16 copy-in placeholder: a 1-d fp32 view of stride 0."""
    return t.dim() == 1 and t.numel() > 1 and t.stride() == (0,) and t.dtype == torch.float32


def _patch_copy_in():
    """Has FSDP2's copy-in fill the bf16 buffer behind a placeholder (NOTE [bf16 copy-in]);
    every other input as before. Once per process; False where this torch has no
    `foreach_reduce_scatter_copy_in` (the hooks then keep FSDP2's fp32 copy-in)."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_collectives as fc
    except ImportError:
        return False
    original = getattr(fc, "foreach_reduce_scatter_copy_in", None)
    if original is None:
        return False
    if getattr(original, "_lowcon_copy_in", False):
        return True

    def copy_in(unsharded_grads, reduce_scatter_input, world_size):
        if not _is_placeholder(reduce_scatter_input):
            return original(unsharded_grads, reduce_scatter_input, world_size)
        key = reduce_scatter_input.data_ptr()
        buf = _COPY_IN.get(key)
        if buf is None:
            raise InvalidArgument("FSDP2's copy-in got a lowcon placeholder that no hook handed out")
        if any(g.dtype != torch.bfloat16 for g in unsharded_grads):
            # Not bf16 gradients: FSDP2's own fp32 copy-in, into a real input.
            buf = torch.empty(reduce_scatter_input.shape, dtype=torch.float32, device=reduce_scatter_input.device)
            _COPY_IN[key] = buf
        return original(unsharded_grads, buf, world_size)

    copy_in._lowcon_copy_in = True
    copy_in.wrapped = original
    fc.foreach_reduce_scatter_copy_in = copy_in
    return True


class LowconReduceScatter(_Comm, _ReduceScatter):
    """FSDP2's reduce-scatter on lowcon, accumulating in f32.

    With memory="pool" only the input comes from the pool. FSDP2 asks for two buffers per reduce-scatter:
    the input (on the compute stream, world x the output), then the output (on the
    reduce-scatter stream), which it keeps as this rank's sharded gradient until the next
    `zero_grad`. Peers read the input; every reduce-scatter algorithm writes the output
    locally, so it needs no symmetric memory. It comes from torch's allocator, as with
    NCCL: there gradients share memory with activations (freed as backward goes on the
    gradients grow), where in the pool they would sit beside it, all of them at once
    (NOTE [FSDP2 pool size] in docs/fsdp2-memory.md).
    """

    _CHANNEL = "fsdp/reduce-scatter"

    def __init__(self, group, algorithm="auto", sync="auto", gradient_divide_factor=None, memory="torch",
                 wire=None, copy_in="bf16", **options):
        if wire not in _WIRES:
            raise InvalidArgument(f"rank {group.rank}: wire {wire!r}: expected \"auto\", \"bf16\" or None")
        if copy_in not in _COPY_INS:
            raise InvalidArgument(f"rank {group.rank}: copy_in {copy_in!r}: expected \"bf16\" or \"fp32\"")
        if options.get("reduce_launch") == "once" and wire is not None:
            # NOTE [one launch per call]: the wire's reduction is launched per piece.
            raise InvalidArgument(f"rank {group.rank}: reduce_launch=\"once\" needs wire=None (the bf16 wire "
                                  "reduces one launch per piece)")
        super().__init__(group, algorithm, sync, memory, **options)
        self.gradient_divide_factor = gradient_divide_factor
        self.wire = wire
        # Set by install's post_backward wrapper for the reduce in progress ("auto"):
        # whether that parameter group's fp32 gradients are bf16 values upcast.
        self._exact = False
        self._pending_input = None  # (numel, dtype) of the last input handed out
        self.wire_calls = 0  # reduce-scatters hinted bf16-exact (the planner may send them as bf16)
        self.plain_calls = 0  # and not
        # NOTE [bf16 copy-in]: on where FSDP2's copy-in can be steered (one rank never), and
        # for the algorithms that reduce a bf16 input into f32 (a caller naming another
        # keeps the fp32 copy-in, as before).
        self.copy_in = copy_in
        self._copy_in = (copy_in == "bf16" and group.world_size > 1 and self.options.get("algorithm") in _BF16_IN
                         and _patch_copy_in())
        self._copy_in_key = None  # the placeholder handed out and not yet taken
        # Set by install's post_backward wrapper for the reduce in progress: the size of
        # FSDP2's reduce-scatter group (a placeholder only where it is the lowcon group's:
        # FSDP2 copies a one-rank group's input itself, and would copy the placeholder).
        self._fsdp_world = None
        self.copy_in_calls = 0  # reduce-scatters of FSDP2's bf16 gradients as they are (of wire_calls)

    def allocate(self, size, *, dtype, device):
        """The input (torch's memory by default, the pool with memory="pool"); the output
        that follows it from torch's allocator."""
        numel = 1
        for s in size:
            numel *= int(s)
        pending, self._pending_input = self._pending_input, None
        if pending == (numel * self.group.world_size, dtype):
            return torch.empty([int(s) for s in size], dtype=dtype, device=device)
        self._pending_input = (numel, dtype)
        # A placeholder this hook handed out that no call took (FSDP2 raised between the
        # two): its buffer goes now (each hook has at most one input in flight).
        stale, self._copy_in_key = self._copy_in_key, None
        if stale is not None:
            _COPY_IN.pop(stale, None)
        if (self._copy_in and dtype == torch.float32 and numel % 2 == 0 and len(size) == 1 and self._hinted()
                and self._fsdp_world == self.group.world_size):
            # NOTE [bf16 copy-in]: FSDP2 fills the bf16 buffer; it holds the placeholder,
            # whose storage is the buffer's, as long as it would hold its input.
            buf = super().allocate(size, dtype=torch.bfloat16, device=device)
            placeholder = buf.view(torch.float32)[:1].expand(numel)
            self._copy_in_key = placeholder.data_ptr()
            _COPY_IN[self._copy_in_key] = buf
            return placeholder
        return super().allocate(size, dtype=dtype, device=device)

    def _hinted(self):
        """Whether an fp32 reduce now carries bf16-exact gradients (the hint's condition)."""
        return self.wire == "bf16" or (self.wire == "auto" and self._exact)

    def __call__(self, output_tensor, input_tensor, group=None, op=None, async_op=False):
        _check_group(self.group, group)
        name, scale = _op_name(dist.ReduceOp.SUM if op is None else op, self.gradient_divide_factor)
        options = self.options
        if _is_placeholder(input_tensor):
            # NOTE [bf16 copy-in]: the buffer FSDP2's copy-in filled.
            buf = _COPY_IN.pop(input_tensor.data_ptr(), None)
            if self._copy_in_key == input_tensor.data_ptr():
                self._copy_in_key = None
            if buf is None:
                raise InvalidArgument(f"rank {self.group.rank}: a bf16 copy-in placeholder reached the "
                                      "reduce-scatter without FSDP2's copy-in (torch's foreach_reduce changed?)")
            if buf.dtype == torch.bfloat16:
                self.wire_calls += 1
                self.copy_in_calls += 1
                self.group.reduce_scatter(output_tensor, buf, name, **options)
                if scale is not None:
                    output_tensor.mul_(scale)
                return None
            # Not bf16 gradients after all: FSDP2's fp32 input, read on this stream.
            if buf.is_cuda:
                buf.record_stream(torch.cuda.current_stream(buf.device))
            input_tensor = buf
        if input_tensor.dtype == torch.float32 and self._hinted():
            # NOTE [bf16 wire]: "auto" hints, and the planner decides whether the top halves
            # go alone; "bf16" asks for the wire, as an explicit option does.
            options = dict(options, bf16_exact=True)
            if self.wire == "bf16":
                options["wire"] = "bf16"
            self.wire_calls += 1
        else:
            # No hint: the planner's choice (the shipped tables send the wire only for
            # hinted calls), as the torch backend's None.
            self.plain_calls += 1
        self.group.reduce_scatter(output_tensor, input_tensor, name, **options)
        if scale is not None:
            output_tensor.mul_(scale)
        return None


_WIRES = (None, "auto", "bf16")


def _bf16_params_fp32_reduce(module):
    """Whether an FSDP module's parameter group reduces fp32 gradients of bf16 parameters
    (FSDP2's mixed precision with param_dtype=bf16, reduce_dtype=fp32)."""
    pg = module._get_fsdp_state()._fsdp_param_group
    mp = getattr(pg, "mp_policy", None) if pg is not None else None
    return mp is not None and mp.param_dtype == torch.bfloat16 and mp.reduce_dtype == torch.float32


def _unwrap(hook):
    """The hook inside `hook`: a wrapper around a hook (a profiler's timer, say) names the
    hook it wraps as `wrapped`, so the accumulation watch still reaches it."""
    return getattr(hook, "wrapped", hook)


def _reduce_scatter_world(pg):
    """The size of the parameter group's reduce-scatter group in FSDP2 (1 where it has
    none: a replicate-only mesh), as torch 2.11's `foreach_reduce` sees it."""
    try:
        g = pg._reduce_scatter_process_group
    except Exception:  # noqa: BLE001 (no shard dimension: FSDP2 reduces nothing across ranks)
        return 1
    return g.size() if g is not None else 1


def _watch_accumulation(pg):
    """Wraps the parameter group's post_backward (which reduces, through the group's
    reduce-scatter hook, `_reduce_scatter_comm` in torch 2.11): the reduce it makes sends
    bf16 only if no gradient of the group accumulated in fp32 over an earlier backward
    without sync (torch 2.11's `unsharded_accumulated_grad`). Whatever lowcon hook the group
    holds when it reduces is told, also through wrappers that name it `wrapped` (without
    that a wrapped hook gets no hint, and fp32 goes on the wire)."""
    if getattr(pg, "_lowcon_wire_watched", False):
        return
    original = pg.post_backward

    def post_backward(*args, **kwargs):
        hook = _unwrap(getattr(pg, "_reduce_scatter_comm", None))
        if not isinstance(hook, LowconReduceScatter):
            return original(*args, **kwargs)
        hook._exact = not any(getattr(fp, "unsharded_accumulated_grad", None) is not None for fp in pg.fsdp_params)
        hook._fsdp_world = _reduce_scatter_world(pg)
        try:
            return original(*args, **kwargs)
        finally:
            hook._exact = False
            hook._fsdp_world = None

    pg.post_backward = post_backward
    pg._lowcon_wire_watched = True


def install(
    model,
    group,
    *,
    all_gather="auto",
    reduce_scatter="auto",
    sync="auto",
    gradient_divide_factor=None,
    all_gather_options=None,
    reduce_scatter_options=None,
    all_gather_memory="torch",
    reduce_scatter_memory="torch",
    reduce_scatter_wire="auto",
    reduce_scatter_copy_in="bf16",
):
    """Set lowcon's all-gather and reduce-scatter on every FSDP module of `model` (after
    `fully_shard`, before the first forward). Returns the number of modules set.

    all_gather / reduce_scatter: lowcon algorithm names ("auto": the planner's choice,
    NOTE [one planner]). sync: "auto", "kernel" or "memop". gradient_divide_factor: also set on every module (FSDP2 then
    passes PREMUL_SUM, which lowcon applies after summing). all_gather_memory /
    reduce_scatter_memory: "torch" (the default: torch's allocator, sharing memory with
    activations as NCCL's buffers do; peers read them in place through IPC mappings of
    torch's segments, exchanged per call: `map_ordinary`, docs/python.md "Memory
    model"; with an allocator whose memory cannot be shared, such as expandable
    segments, every call stages instead) or "pool" (the all-gather outputs and the
    reduce-scatter inputs in lowcon's symmetric pool, memory of its own). Neither stages
    a copy with ce-pull and ce-reduce. reduce_scatter_wire: "auto" (the bf16 wire for the
    modules with param_dtype=bf16 and reduce_dtype=fp32, except for a reduce of gradients
    accumulated without sync), "bf16" (every fp32 reduce-scatter) or None (see the module
    docs); one line says what was chosen. reduce_scatter_copy_in: "bf16" (the default:
    where the wire is hinted, FSDP2 copies its bf16 gradients in as bf16 and lowcon
    reduces them into the fp32 output, NOTE [bf16 copy-in]) or "fp32" (FSDP2's own
    fp32 copy-in).
    """
    from torch.distributed.fsdp import FSDPModule

    if reduce_scatter_wire not in _WIRES:
        raise InvalidArgument(f"rank {group.rank}: reduce_scatter_wire {reduce_scatter_wire!r}: expected "
                              "\"auto\", \"bf16\" or None")
    ag = LowconAllGather(group, all_gather, sync, all_gather_memory, **(all_gather_options or {}))
    rs = LowconReduceScatter(group, reduce_scatter, sync, gradient_divide_factor, reduce_scatter_memory,
                             wire=reduce_scatter_wire, copy_in=reduce_scatter_copy_in,
                             **(reduce_scatter_options or {}))
    n, wired = 0, 0
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_custom_all_gather(ag)
            m.set_custom_reduce_scatter(rs)
            if gradient_divide_factor is not None:
                m.set_gradient_divide_factor(gradient_divide_factor)
            pg = m._get_fsdp_state()._fsdp_param_group
            if reduce_scatter_wire == "auto" and pg is not None and _bf16_params_fp32_reduce(m):
                _watch_accumulation(pg)
                wired += 1
            elif reduce_scatter_wire == "bf16" and pg is not None:
                # Every fp32 reduce is hinted; the wrapper tells the hook the size of FSDP2's
                # group, which the bf16 copy-in needs (NOTE [bf16 copy-in]).
                _watch_accumulation(pg)
            n += 1
    if n == 0:
        raise InvalidArgument("install: the model has no FSDP modules: call fully_shard on it first")
    if group.rank == 0:
        if reduce_scatter_wire == "auto":
            what = (f"{wired} of {n} modules (bf16 parameters, fp32 reduce) hint bf16-exact gradients (the "
                    "planner sends bf16 over the wire where its table says so, fp32-exact); no hint for gradients "
                    "accumulated without sync" if wired else
                    f"fp32 reduce-scatters keep fp32 on the wire (no module of {n} has bf16 parameters with an "
                    "fp32 reduce)")
        elif reduce_scatter_wire == "bf16":
            what = f"every fp32 reduce-scatter of {n} modules hints bf16-exact gradients (bf16 on the wire, fp32-exact)"
        else:
            what = "the bf16 wire is off (reduce_scatter_wire=None)"
        if reduce_scatter_wire is not None and rs._copy_in:
            what += "; hinted gradients are copied in as bf16 (reduce_scatter_copy_in=\"bf16\")"
        print(f"lowcon.fsdp: {what}", flush=True)
    return n
