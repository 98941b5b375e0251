"""lowcon as a torch.distributed backend: importing this module registers "lowcon".

    import torch.distributed as dist
    import lowcon.distributed                          # registers the backend
    dist.init_process_group("lowcon")                  # or backend="cuda:lowcon,cpu:gloo"
    g = dist.new_group([0, 1], backend="lowcon")       # subgroups too

The extension point is torch 2.11's `Backend.register_backend(name, creator)` with a
creator that returns a `torch.distributed.ProcessGroup` subclass written in Python (as
torch's own tests do; a C++ `Backend` cannot be made from Python). torch then uses the
returned group as the process group itself, so it answers for every device: CUDA tensors
go through lowcon's GPU group, CPU tensors through a Gloo group made on the same store
(what "cpu:gloo" asks for; on a machine with no GPU, lowcon's host backend instead). The
group meets through the store torch passes (prefixed per group), with no second port.

Operations on lowcon: all_gather_into_tensor, reduce_scatter_tensor (SUM, AVG, MIN, MAX
on float32/float16/bfloat16; SUM, MIN, MAX on int32/int64/uint8, and bool as MAX/MIN),
their list forms (one copy in or out when the list is not one contiguous buffer) and
coalesced forms, all_reduce as reduce-scatter then all-gather (deterministic: f32
accumulation in rank order), broadcast and scatter as all-gathers (world x, and
world x world x, the bytes: for set-up such as distribute_tensor, not for hot loops),
barrier. All-gathers of any dtype move bytes.

Everything else falls back, so that a trainer can make lowcon its default group: on CUDA
tensors to an NCCL group made on first use on the same store, on CPU tensors to Gloo
(what "cpu:gloo" routes anyway, or made on first use where lowcon runs on its host
backend; Gloo runs all_to_all_single but not the list form, which therefore runs as one
all_to_all_single of the pieces). That covers all_to_all (single and list),
send/recv, reduce, gather, the
reduce operators lowcon lacks (PREMUL_SUM, PRODUCT, the bitwise ones) and the dtypes it
does not reduce (float64, int8, int16, ...). The first call of each such operation logs
one line naming it and where it went. LOWCON_TORCH_FALLBACK=0 turns the fallback off:
those calls raise NotImplementedError naming the operation instead. NCCL refuses ranks
sharing a GPU (LOWCON_SHARE_GPU=1), so there the CUDA fallback fails as NCCL says.

The backend chooses nothing itself (NOTE [one planner]): all_gather_into_tensor and
reduce_scatter_tensor, FSDP2's entry points, pass the planner the hint `pg.context`
("fsdp" by default, LOWCON_TORCH_CONTEXT when the group is made), so FSDP2 on this
backend gets the plans `lowcon.fsdp`'s hooks get for the same calls. The bf16 wire (NOTE
[bf16 wire]) needs to know that float32 inputs hold bf16 values upcast (FSDP2's
reduce-scatter with bf16 parameters and an fp32 reduce), which the backend cannot see.
`pg.reduce_scatter_wire` (LOWCON_TORCH_WIRE in the environment when the group is made)
takes the words of `lowcon.fsdp.install`'s `reduce_scatter_wire`, with the same meaning:
"auto": float32 reduce_scatter_tensor calls pass the hint `bf16_exact=True`, and the
planner sends the top half of each float where its table says so; "bf16": they ask for
the wire outright (the hint and `wire="bf16"`); None (the default): no hint, the
planner's choice (the shipped tables send the wire only for hinted calls). Either way the
bottom halves are read where a piece is not bf16-exact: the result is the float32 one bit
for bit.

Streams: a call with async_op=False runs on the caller's current stream. With
async_op=True it runs on the group's own stream, after the current stream's work, and
the returned Work's wait() makes the then-current stream wait for it (as NCCL's does),
then raises the group's failure if a peer died or is late. The tensors are kept alive
for that stream through the caching allocator (`record_stream`).

Functional collectives (`torch.distributed._functional_collectives`, what DTensor's
redistribute uses) reach these methods too: torch 2.11 routes them through the
registered Python group.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

from . import Error, InvalidArgument, from_store
from ._ops import reduce_op_name

NAME = "lowcon"
__all__ = ["NAME", "LowconProcessGroup", "register", "shrink_group"]

_FLOAT = (torch.float32, torch.float16, torch.bfloat16)
_INT = (torch.int32, torch.int64, torch.uint8)
_DIRECT = _FLOAT + _INT  # what lowcon's all-gather takes as is


def _lowcon_op(op, dtype):
    """lowcon's name of reduce op `op` on `dtype`, or None where lowcon cannot reduce it
    (the call falls back): floats SUM/AVG/MIN/MAX, integers SUM/MIN/MAX, bool as uint8
    (SUM and MAX are a logical or, MIN a logical and, as NCCL's backend maps them)."""
    name = reduce_op_name(op)
    if dtype in _FLOAT:
        return name
    if dtype == torch.bool:
        return {"sum": "max", "max": "max", "min": "min"}.get(name)
    if dtype in _INT:
        return name if name in ("sum", "min", "max") else None
    return None


def fallback_enabled():
    """Whether operations lowcon does not implement fall back to NCCL or Gloo
    (LOWCON_TORCH_FALLBACK, default on; "0" turns it off)."""
    return os.environ.get("LOWCON_TORCH_FALLBACK", "1") != "0"


class LowconWork(dist._Work):
    """A collective in flight. wait(): the current stream waits for it; a failure of
    the group (a dead or late peer, naming it) raises."""

    def __init__(self, pg, event=None, device=None, result=None):
        super().__init__()
        self._pg, self._event, self._device, self._result = pg, event, device, result
        self._future = None

    def wait(self, timeout=datetime.timedelta(0)):
        if self._event is not None:
            torch.cuda.current_stream(self._device).wait_event(self._event)
        self._pg._group.check()
        return True

    def is_completed(self):
        return self._event is None or self._event.query()

    def is_success(self):
        self._pg._group.check()
        return True

    def get_future(self):
        if self._future is None:
            self.wait()
            self._future = torch.futures.Future()
            self._future.set_result(self._result if self._result is not None else [])
        return self._future


class LowconProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run on lowcon."""

    def __init__(self, store, rank, world_size, timeout, group_name=None, group=None):
        super().__init__(rank, world_size)
        self._name = group_name or ""
        self._desc = ""
        # torch's default group timeout (30 min) would let a late peer go unnamed that
        # long: lowcon keeps its own then (LOWCON_TIMEOUT_MS, 60 s); a timeout the caller
        # chose is lowcon's too.
        secs = None
        if isinstance(timeout, datetime.timedelta) and timeout not in (dist.default_pg_timeout,
                                                                       getattr(dist.constants, "default_pg_nccl_timeout",
                                                                               None)):
            secs = timeout.total_seconds()
        backend = "gpu" if torch.cuda.is_available() else "host"
        if group is not None:  # a shrunken group (shrink_group): lowcon has met already
            self._group = group
        else:
            self._group = from_store(store, rank, world_size, backend=backend, name="torch-backend", timeout=secs)
        self._cpu = None
        self._store, self._timeout = store, timeout
        self._nccl = None  # made on the first CUDA call that falls back
        self._gloo = None  # on the host backend: made on the first CPU call that falls back
        self._logged = set()
        self._shut = False  # shutdown() ran: every call raises
        if backend == "gpu":
            # CPU tensors (what "cpu:gloo" routes): a Gloo group on the same store.
            self._cpu = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, world_size, timeout)
        self._streams = {}
        self._gpu = backend == "gpu"
        wire = os.environ.get("LOWCON_TORCH_WIRE") or None
        if wire not in (None, "auto", "bf16"):
            raise InvalidArgument(f"rank {rank}: LOWCON_TORCH_WIRE={wire!r}: expected auto, bf16 or nothing")
        self.reduce_scatter_wire = wire
        self.context = os.environ.get("LOWCON_TORCH_CONTEXT") or "fsdp"
        if self.context not in ("alone", "fsdp", "tp"):
            raise InvalidArgument(f"rank {rank}: LOWCON_TORCH_CONTEXT={self.context!r}: expected alone, fsdp or tp")
        self._done = LowconWork(self)  # what synchronous calls return: complete, but wait() still checks

    # -- identity -------------------------------------------------------------------------

    def getBackendName(self):
        return NAME

    def getGroupName(self):
        return self._name

    def setGroupName(self, name):
        self._name = name

    def getGroupDesc(self):
        return self._desc

    def setGroupDesc(self, desc):
        self._desc = desc

    @property
    def lowcon_group(self):
        """The lowcon.Group underneath (its pool, stats, check())."""
        return self._group

    # -- plumbing -------------------------------------------------------------------------

    def _where(self, tensors, what):
        """"cuda", "cpu-lowcon" (the host backend) or "cpu-gloo", from the tensors."""
        self._check_open(what)
        cuda = tensors[0].is_cuda
        for t in tensors:
            if t.is_cuda != cuda:
                raise InvalidArgument(f"rank {self.rank()}: {what}: tensors on both CPU and CUDA")
        if cuda:
            if not self._gpu:
                raise InvalidArgument(f"rank {self.rank()}: {what}: CUDA tensors, but lowcon runs on its host "
                                      "backend here (no GPU was visible when the group was made)")
            return "cuda"
        return "cpu-gloo" if self._cpu is not None else "cpu-lowcon"

    def _run(self, tensors, opts, body):
        """Runs body() on the current stream (returning the one completed Work that
        synchronous calls share), or, with async_op on CUDA tensors, on the group's
        stream after the current stream's work (returning a Work with its event)."""
        if opts is None or not opts.asyncOp or not tensors[0].is_cuda:
            body()
            return self._done
        dev = tensors[0].device
        cur = torch.cuda.current_stream(dev)
        side = self._streams.get(dev.index)
        if side is None:
            side = self._streams[dev.index] = torch.cuda.Stream(dev)
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            body()
            event = torch.cuda.Event()
            event.record(side)
        for t in tensors:
            t.record_stream(side)
        return LowconWork(self, event, dev)

    def _check_open(self, what):
        if self._shut:
            raise Error(f"rank {self.rank()}: {what}: the group was shut down (destroy_process_group)")

    def _unsupported(self, what):
        raise NotImplementedError(
            f"lowcon backend: {what} is not implemented by lowcon, and the fallback is off "
            "(LOWCON_TORCH_FALLBACK=0): run it on another group, e.g. dist.new_group(backend='nccl'), "
            "or express it with all-gather / reduce-scatter"
        )

    def _fallback(self, what, tensors):
        """The group that runs `what`, which lowcon does not: Gloo for CPU tensors, NCCL
        for CUDA tensors (each made on first use, on this group's store), logging the
        first call of each operation. Every rank makes the same calls, so the groups are
        made at the same point on every rank."""
        self._check_open(what)
        cuda = bool(tensors) and tensors[0].is_cuda
        if self._cpu is not None and not cuda:
            return self._cpu  # a GPU machine's CPU tensors: Gloo, as "cpu:gloo" asks
        if not fallback_enabled():
            self._unsupported(what)
        if cuda:
            if self._nccl is None:
                opts = dist.ProcessGroupNCCL.Options()
                opts._timeout = self._timeout
                self._nccl = dist.ProcessGroupNCCL(dist.PrefixStore("nccl/", self._store), self.rank(), self.size(),
                                                   opts)
            group, name = self._nccl, "NCCL"
        else:
            if self._gloo is None:
                self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo-fallback/", self._store), self.rank(),
                                                   self.size(), self._timeout)
            group, name = self._gloo, "Gloo"
        if self._shut:
            # Shut down while this call made its group: that group goes too.
            self._drop_own_groups(abort=True)
            self._check_open(what)
        if what not in self._logged:
            self._logged.add(what)
            print(f"lowcon backend: rank {self.rank()}: {what} runs on {name} (lowcon does not implement it; "
                  "LOWCON_TORCH_FALLBACK=0 makes it an error)", file=sys.stderr, flush=True)
        return group

    # -- all-gather -----------------------------------------------------------------------

    def _allgather_base(self, output, input, opts=None):
        where = self._where([output, input], "all_gather_into_tensor")
        if where == "cpu-gloo":
            return self._cpu._allgather_base(output, input, opts)
        if output.dtype != input.dtype:
            raise InvalidArgument(f"rank {self.rank()}: all_gather_into_tensor: output is {output.dtype}, "
                                  f"input is {input.dtype}")

        if output.dtype not in _DIRECT:  # any other dtype: bytes
            output, input = output.view(torch.uint8), input.view(torch.uint8)
        return self._run([output, input], opts, lambda: self._group.all_gather(output, input, context=self.context))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(outputs, inputs, opts, self._allgather_base)

    def allgather(self, output_lists, inputs, opts=None):
        if len(inputs) != 1 or len(output_lists) != 1:
            raise InvalidArgument(f"rank {self.rank()}: all_gather: one input tensor per process (got {len(inputs)})")
        outs, inp = output_lists[0], inputs[0]
        if len(outs) != self.size():
            raise InvalidArgument(f"rank {self.rank()}: all_gather: {len(outs)} output tensors for "
                                  f"{self.size()} ranks")
        if self._where(outs + [inp], "all_gather") == "cpu-gloo":
            return self._cpu.allgather(output_lists, inputs, opts)
        flat = _as_one_buffer(outs)
        if flat is not None:
            return self._allgather_base(flat, inp.reshape(-1), opts)
        staging = torch.empty(self.size() * inp.numel(), dtype=inp.dtype, device=inp.device)

        def body():
            self._group.all_gather(*_byte_views(staging, inp.reshape(-1)))
            for k, o in enumerate(outs):
                o.copy_(staging[k * inp.numel():(k + 1) * inp.numel()].view_as(o))

        return self._run(outs + [inp, staging], opts, body)

    # -- reduce-scatter -------------------------------------------------------------------

    def _reduce_scatter_base(self, output, input, opts=None):
        where = self._where([output, input], "reduce_scatter_tensor")
        if where == "cpu-gloo":
            return self._cpu._reduce_scatter_base(output, input, opts)
        op = _lowcon_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, output.dtype)
        if op is None:
            what = f"reduce_scatter_tensor ({_op_str(opts)}, {output.dtype})"
            return self._fallback(what, [output])._reduce_scatter_base(output, input, opts)
        output, input = _as_lowcon(output), _as_lowcon(input)
        wire = self.reduce_scatter_wire
        if wire not in (None, "auto", "bf16"):
            raise InvalidArgument(f"rank {self.rank()}: reduce_scatter_wire={wire!r}: expected \"auto\", \"bf16\" or None")
        f32 = input.dtype == torch.float32 and output.dtype == torch.float32
        # As lowcon.fsdp's hook: "auto" hints, "bf16" asks for the wire as an explicit option.
        extra = {"wire": "bf16"} if f32 and wire == "bf16" else {}
        return self._run([output, input], opts, lambda: self._group.reduce_scatter(
            output, input, op, context=self.context, bf16_exact=f32 and wire is not None, **extra))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(outputs, inputs, opts, self._reduce_scatter_base)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        if len(outputs) != 1 or len(input_lists) != 1 or len(input_lists[0]) != self.size():
            raise InvalidArgument(f"rank {self.rank()}: reduce_scatter: one output and {self.size()} inputs")
        out, ins = outputs[0], input_lists[0]
        if self._where(ins + [out], "reduce_scatter") == "cpu-gloo":
            return self._cpu.reduce_scatter(outputs, input_lists, opts)
        flat = _as_one_buffer(ins)
        if flat is None:
            flat = torch.cat([t.reshape(-1) for t in ins])
        return self._reduce_scatter_base(out.view(-1), flat, opts)

    # -- all-reduce, broadcast, barrier ---------------------------------------------------

    def allreduce(self, tensors, opts=None):
        if len(tensors) != 1:
            raise InvalidArgument(f"rank {self.rank()}: all_reduce: one tensor per process (got {len(tensors)})")
        t = tensors[0]
        if self._where([t], "all_reduce") == "cpu-gloo":
            return self._cpu.allreduce(tensors, opts)
        op = _lowcon_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, t.dtype)
        if op is None:
            return self._fallback(f"all_reduce ({_op_str(opts)}, {t.dtype})", [t]).allreduce(tensors, opts)
        orig, t = t, _as_lowcon(t)
        w, n = self.size(), t.numel()
        chunk = -(-n // w)

        def body():
            # Reduce-scatter then all-gather, through a padded copy when the tensor is
            # not contiguous or not a multiple of the world size.
            if t.is_contiguous() and n % w == 0:
                buf = t.view(-1)
            else:
                buf = torch.zeros(chunk * w, dtype=t.dtype, device=t.device)
                buf[:n].copy_(t.reshape(-1))
            part = torch.empty(chunk, dtype=t.dtype, device=t.device)
            self._group.reduce_scatter(part, buf, op)
            self._group.all_gather(buf, part)
            if buf.data_ptr() != t.data_ptr() or not t.is_contiguous():
                t.copy_(buf[:n].view_as(t))

        return self._run([orig], opts, body)

    def allreduce_coalesced(self, tensors, opts=None):
        works = [self.allreduce([t], opts) for t in tensors]
        return works[-1] if works else LowconWork(self)

    def broadcast(self, tensors, opts=None):
        if len(tensors) != 1:
            raise InvalidArgument(f"rank {self.rank()}: broadcast: one tensor per process (got {len(tensors)})")
        t = tensors[0]
        if self._where([t], "broadcast") == "cpu-gloo":
            return self._cpu.broadcast(tensors, opts)
        src = opts.rootRank
        staging = torch.empty(self.size() * t.numel(), dtype=t.dtype, device=t.device)

        def body():
            # An all-gather of everyone's tensor, of which the root's is kept.
            self._group.all_gather(*_byte_views(staging, t.contiguous().reshape(-1)))
            if self.rank() != src:
                t.copy_(staging[src * t.numel():(src + 1) * t.numel()].view_as(t))

        return self._run([t, staging], opts, body)

    def barrier(self, opts=None):
        """Every rank has reached it when it returns (the host waits, as with NCCL)."""
        self._check_open("barrier")
        if self._group.backend == "gpu":
            dev = torch.device("cuda", self._group.device)
            x = torch.zeros(self.size(), dtype=torch.int32, device=dev)
            self._group.all_gather(x, x[self.rank():self.rank() + 1])
            self._group.synchronize(torch.cuda.current_stream(dev))
        else:
            x = torch.zeros(self.size(), dtype=torch.int32)
            self._group.all_gather(x, x[self.rank():self.rank() + 1])
        return LowconWork(self)

    # -- what lowcon does not do: the fallback ---------------------------------------------

    def reduce(self, tensors, opts=None):
        return self._fallback("reduce", tensors).reduce(tensors, opts)

    def gather(self, output_lists, inputs, opts=None):
        return self._fallback("gather", inputs).gather(output_lists, inputs, opts)

    def scatter(self, outputs, input_lists, opts=None):
        if len(outputs) != 1:
            raise InvalidArgument(f"rank {self.rank()}: scatter: one output tensor per process")
        out = outputs[0]
        if self._where([out], "scatter") == "cpu-gloo":
            return self._cpu.scatter(outputs, input_lists, opts)
        src, w, n = opts.rootRank, self.size(), out.numel()
        if self.rank() == src:
            ins = input_lists[0] if input_lists else []
            if len(ins) != w or any(t.numel() != n for t in ins):
                raise InvalidArgument(f"rank {self.rank()}: scatter: the root gives {len(ins)} tensors for {w} ranks, "
                                      f"each of {n} elements")
            mine = torch.cat([t.reshape(-1) for t in ins])
        else:
            mine = torch.zeros(w * n, dtype=out.dtype, device=out.device)
        staging = torch.empty(w * w * n, dtype=out.dtype, device=out.device)

        def body():
            # An all-gather of every rank's w pieces, of which the root's piece for this
            # rank is kept: w x w x the bytes, for set-up (distribute_tensor), not hot loops.
            self._group.all_gather(*_byte_views(staging, mine))
            k = src * w * n + self.rank() * n
            out.copy_(staging[k:k + n].view_as(out))

        return self._run([out, mine, staging], opts, body)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        # NCCL on CUDA tensors; Gloo on CPU tensors (it runs all_to_all_single, even and
        # uneven splits).
        g = self._fallback("all_to_all_single", [output, input])
        return g.alltoall_base(output, input, output_split_sizes, input_split_sizes, _a2a_opts(opts))

    def alltoall(self, outputs, inputs, opts=None):
        if outputs and not outputs[0].is_cuda:
            return self._alltoall_as_single(outputs, inputs, opts)
        return self._fallback("all_to_all", outputs + inputs).alltoall(outputs, inputs, _a2a_opts(opts))

    def _alltoall_as_single(self, outputs, inputs, opts):
        """The list form on CPU tensors: Gloo runs only the single-tensor form (its list
        form raises "Backend gloo does not support alltoall"), so the pieces go through
        one all_to_all_single of their concatenation, with their sizes as the splits."""
        r = self.rank()
        if len({t.dtype for t in outputs + inputs}) != 1:
            raise InvalidArgument(f"rank {r}: all_to_all: the tensors have several dtypes")
        g = self._fallback("all_to_all", outputs + inputs)
        flat_in = torch.cat([t.reshape(-1) for t in inputs])
        flat_out = torch.empty(sum(t.numel() for t in outputs), dtype=outputs[0].dtype)
        g.alltoall_base(flat_out, flat_in, [t.numel() for t in outputs], [t.numel() for t in inputs],
                        _a2a_opts(opts)).wait()
        at = 0
        for o in outputs:
            o.copy_(flat_out[at:at + o.numel()].view_as(o))
            at += o.numel()
        return self._done

    def send(self, tensors, dst, tag=0):
        return self._fallback("send", tensors).send(tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._fallback("recv", tensors).recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._fallback("recv (any source)", tensors).recv_anysource(tensors, tag)

    def _coalesced(self, outputs, inputs, opts, one):
        if len(outputs) != len(inputs):
            raise InvalidArgument(f"rank {self.rank()}: {len(outputs)} outputs for {len(inputs)} inputs")
        works = [one(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1] if works else LowconWork(self)

    def shutdown(self):
        # A failed group (a dead peer) cannot flush what its fallbacks still hold: they are
        # aborted then, as abort() does; a healthy one shuts them down.
        try:
            self._group.check()
            failed = False
        except Exception:
            failed = True
        self._shut = True
        self._group.close()
        self._drop_own_groups(abort=failed)

    def abort(self):
        self._shut = True
        self._group.abort()
        self._drop_own_groups(abort=True)

    def _drop_own_groups(self, abort):
        """The torch groups this one made (Gloo for CPU tensors, the fallbacks) go now,
        while the interpreter is whole: freed at its exit, a Gloo group's run-loop threads
        could drop Python objects with no GIL left to take, and abort the process."""
        for name in ("_cpu", "_gloo", "_nccl"):
            pg = getattr(self, name)
            setattr(self, name, None)
            if pg is not None:
                pg.abort() if abort else pg.shutdown()


def _op_str(opts):
    """The reduce op's name (PRODUCT, PREMUL_SUM, ...), for the fallback's log line."""
    op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    return str(getattr(op, "op", op)).split(".")[-1]


def _as_lowcon(t):
    """bool tensors as uint8 (what lowcon reduces); others as they are."""
    return t.view(torch.uint8) if t.dtype == torch.bool else t


def _a2a_opts(opts):
    """The all-to-all options torch passed, or the defaults."""
    return opts if opts is not None else dist.AllToAllOptions()


def _byte_views(*tensors):
    """All-gathers move bytes: dtypes lowcon does not know go as uint8."""
    if tensors[0].dtype in _DIRECT:
        return tensors
    return tuple(t.view(torch.uint8) for t in tensors)


def _as_one_buffer(tensors):
    """A flat view over `tensors` when they are consecutive, contiguous pieces of one
    buffer in order (what torch.chunk of one tensor gives), else None."""
    first = tensors[0]
    if not all(t.is_contiguous() and t.dtype == first.dtype and t.device == first.device for t in tensors):
        return None
    ptr, size = first.data_ptr(), first.element_size()
    for t in tensors:
        if t.data_ptr() != ptr or t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr():
            return None
        ptr += t.numel() * size
    total = sum(t.numel() for t in tensors)
    base = first.untyped_storage()
    offset = (first.data_ptr() - base.data_ptr()) // size
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(base, offset, (total,), (1,))


# The shrunken lowcon group that the next process group made here adopts (shrink_group).
_adopt = None


def shrink_group(group=None):
    """Collective among the survivors of a lowcon process group whose peer died (every
    live rank calls it, after a collective raised lowcon.PeerGone or lowcon.PeerTimeout):
    shrinks its lowcon group (`Group.shrink`: the live ranks agree through the store, a
    rank too late is left out and told so) and returns a new torch.distributed process
    group over the survivors, renumbered in order of their old ranks, that runs on the
    shrunken lowcon group, so lowcon meets only once. torch registers it as any group
    (`DeviceMesh.from_group(g, "cuda")`, `dist.get_process_group_ranks(g)`).

    torch 2.11's own `dist.shrink_group` works only on C++ backends (NCCL); a Python
    process group such as this one cannot take part, hence this function. The old group
    stays registered, failed: use the new one. torch's store (the default group's) must
    still answer, and under torchrun or `lowcon launch` it lives in rank 0's process
    (`MASTER_PORT`): if rank 0 died, this raises the store's error, and there is no way
    on but a restart. Collectives that fell back to NCCL or Gloo on the old group are
    made again on the new one, on first use.
    """
    global _adopt
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, LowconProcessGroup):
        raise InvalidArgument(f"shrink_group: {type(pg).__name__} is not a lowcon process group")
    new = pg.lowcon_group.shrink()
    # Which of the old ranks survived: a first collective on the new group.
    device = torch.device("cuda", new.device) if pg._gpu else torch.device("cpu")
    mine = torch.tensor([pg.rank()], dtype=torch.int64, device=device)
    ranks = torch.empty(new.world_size, dtype=torch.int64, device=device)
    new.all_gather(ranks, mine)
    survivors = [dist.get_global_rank(pg, int(r)) for r in ranks.tolist()]
    _adopt = new
    try:
        return dist.new_group(survivors, backend=NAME, timeout=pg._timeout, use_local_synchronization=True)
    finally:
        _adopt = None


def _create(store, rank, world_size, timeout):
    global _adopt
    try:
        if _adopt is not None:
            group, _adopt = _adopt, None
            if (group.rank, group.world_size) != (rank, world_size):
                raise InvalidArgument(f"rank {rank}: torch made rank {rank} of {world_size} from a shrunken group "
                                      f"of rank {group.rank} of {group.world_size}")
            return LowconProcessGroup(store, rank, world_size, timeout, group=group)
        return LowconProcessGroup(store, rank, world_size, timeout)
    except Error:
        raise
    except Exception as e:  # noqa: BLE001 (named, with the rank)
        raise Error(f"rank {rank}: the lowcon backend could not be created: {e}") from e


def register():
    """Registers the "lowcon" backend with torch.distributed (idempotent; done on import)."""
    if NAME.upper() not in getattr(dist.Backend, "_plugins", {}):
        dist.Backend.register_backend(NAME, _create, devices=["cuda", "cpu"])


register()
