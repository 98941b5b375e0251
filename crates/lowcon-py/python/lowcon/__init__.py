"""lowcon for Python: low-contention all-gather and reduce-scatter on one NVLink box.

    import lowcon
    g = lowcon.init()                      # under `lowcon launch` or torchrun
    g.all_gather(output, input)            # torch tensors, CuPy or numpy arrays (DLPack)
    g.reduce_scatter(output, input, "sum")
    g.synchronize()                        # GPU: the current stream; raises if a peer died

Calls follow torch.distributed's argument order (output first). On the GPU backend they
are asynchronous on the caller's current stream (torch's for torch tensors, CuPy's for
CuPy arrays, or `stream=`), like NCCL's; on the host backend they are synchronous.
Errors are `lowcon.Error` subclasses whose messages name the rank, the peer or the sizes.
"""

from ._errors import CudaError, Error, InvalidArgument, PeerError
from ._native import __version__, device_count, device_index, enqueue_clock, host_phases, share_gpu
from ._native import Group as _NativeGroup

__all__ = [
    "Arrivals",
    "CudaError",
    "Error",
    "Group",
    "InvalidArgument",
    "PeerError",
    "__version__",
    "device_count",
    "device_index",
    "enqueue_clock",
    "host_phases",
    "share_gpu",
    "from_process_group",
    "from_store",
    "init",
    "memory_stats",
]

# dtype names lowcon takes, from torch / numpy / CuPy dtypes or strings.
_DTYPES = {
    "float32": "f32",
    "float": "f32",
    "f32": "f32",
    "float16": "f16",
    "half": "f16",
    "f16": "f16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "int32": "i32",
    "i32": "i32",
    "uint8": "u8",
    "u8": "u8",
    "int64": "i64",
    "i64": "i64",
}


_DTYPE_OF = {}  # dtype object -> lowcon's name, filled on first use


def _dtype_name(dtype):
    try:
        return _DTYPE_OF[dtype]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like object
        pass
    name = _dtype_name_uncached(dtype)
    try:
        _DTYPE_OF[dtype] = name
    except TypeError:
        pass
    return name


def _dtype_name_uncached(dtype):
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__.startswith("torch"):
        name = str(dtype).rsplit(".", 1)[-1]  # torch.bfloat16 -> bfloat16
    else:
        name = getattr(dtype, "name", None) or getattr(dtype, "__name__", str(dtype))  # numpy / CuPy
    try:
        return _DTYPES[name]
    except KeyError:
        raise InvalidArgument(f"dtype {dtype!r}: lowcon takes float32, float16, bfloat16, int32, uint8, int64") from None


class _Exporter:
    """Hands a DLPack capsule to a consumer that wants `__dlpack__` (numpy, CuPy)."""

    def __init__(self, capsule, device):
        self._capsule, self._device = capsule, device

    def __dlpack__(self, *args, **kwargs):
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("lowcon: this pool block was already exported")
        return capsule

    def __dlpack_device__(self):
        return self._device


def _stream_of(tensor, stream):
    """The CUDA stream a call on `tensor` runs on, as an integer (None: not a CUDA tensor)."""
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    # torch tensors take `_torch_current` when no stream is given.
    if type(tensor).__module__.startswith("cupy"):
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return None


def _torch_current(tensor):
    """(stream, True) for a torch tensor: its device's current stream as an integer (None
    on the CPU). The native call then reads the tensors' own accessors instead of
    exporting them through DLPack, which on the current stream only finds that no stream
    needs to wait. None for anything that is not a torch tensor."""
    if not type(tensor).__module__.startswith("torch") or not hasattr(tensor, "data_ptr"):
        return None
    if not tensor.is_cuda:
        return None, True
    return _torch_stream(tensor.get_device()), True


def _torch_stream(device):
    """torch's current stream on CUDA device `device` (an index), as an integer."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object made
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


class Arrivals:
    """One CUDA event per rank, recorded by `Group.all_gather(..., arrivals=...)` as each
    rank's piece lands (NOTE [per-piece arrivals] in host/src/coll/gpu/per_piece/arrivals.rs)."""

    def __init__(self, native, device, rank):
        self._a = native
        self._device = device
        self._rank = rank

    order = property(lambda self: self._a.order,
                     doc="The order ce-pull lands the pieces: this rank's, then rank + 1, ...")
    pieces = property(lambda self: self._a.pieces, doc="The number of pieces (ranks).")

    def wait(self, piece, stream=None):
        """Work enqueued on `stream` (default: torch's current stream) after this waits for
        piece `piece` of the last all-gather given these arrivals."""
        if not isinstance(piece, int) or piece < 0:
            raise InvalidArgument(f"rank {self._rank}: arrivals: piece {piece!r} is not a rank (0 to "
                                  f"{self.pieces - 1})")
        raw = _stream_of(None, stream) if stream is not None else _torch_stream(self._device)
        self._a.wait(piece, raw)

    def wait_started(self, stream=None):
        """Work enqueued on `stream` (default: torch's current stream) after this waits until
        the last all-gather given these arrivals has started: with ce-pull, passed its entry
        barrier (every peer's piece can be read); else landed every piece. A consumer that
        waits for it before its first GEMM lets the barrier run before the GEMM holds the
        SMs."""
        raw = _stream_of(None, stream) if stream is not None else _torch_stream(self._device)
        self._a.wait_started(raw)


class Group:
    """A group of ranks. Make it with `lowcon.init()`; every rank makes the same calls."""

    def __init__(self, native):
        self._g = native

    rank = property(lambda self: self._g.rank, doc="This rank.")
    world_size = property(lambda self: self._g.world_size, doc="Number of ranks.")
    backend = property(lambda self: self._g.backend, doc='"gpu" or "host".')
    device = property(lambda self: self._g.device, doc="The CUDA device index (None on the host backend).")

    def all_gather(self, output, input, *, stream=None, arrivals=None, **options):
        """`output[p * n:(p + 1) * n]` receives rank p's `input` (n elements), on every rank.

        Options: algorithm ("auto": the planner's choice, NOTE [one planner]; "ce-pull",
        "ce-push", "sm-oneshot", "ll"), sync ("auto", "kernel", "memop"), graph_sync (the
        sync of a call captured into a CUDA graph: "auto", kernel waits unless the tuning
        table says otherwise, whatever `sync` says, or "kernel", or "memop", whose waits hold
        no SM but cost the host 1.3-4.5 us per barrier at every replay; docs/graphs.md), ctas,
        channel (default: one per stream, in order of first use), allow_staging,
        map_ordinary (GPU, ce-pull: peers read an ordinary `input`, e.g. torch's memory, in
        place through IPC instead of a staging copy; the call then exchanges addresses with
        the peers' hosts; docs/python.md, "Torch memory"; None: the planner's choice),
        context (a hint: "alone", "fsdp" or "tp", what runs beside the call). `plan()` says
        what a call would run. traffic=True is a benchmark instrument, not a collective:
        the call's copies as planned, without its barriers, so `output` is garbage (GPU,
        eager, ce-pull; NOTE [honest floor] in host/src/coll/gpu/floor.rs). arrival (ce-pull,
        eager, memop sync, or the host backend): what each peer's copy waits for: "barrier"
        (every peer, then every copy), "in-order" (that peer alone, in turn), "any-order"
        (that peer alone, on a stream per peer), or "auto" (the planner's; NOTE
        [arrival-driven all-gather] in host/src/coll/gpu.rs).

        arrivals (GPU; from `arrivals()`): the call records each rank's piece as it lands
        in `output` (ce-pull: one by one, in `arrivals.order`; other algorithms: all at
        the end), and `arrivals.wait(p, stream)` makes another stream wait for piece p
        alone. Enqueue the waits before the next all-gather that reuses the arrivals.
        """
        if arrivals is not None:
            options["arrivals"] = arrivals._a
        fast = _torch_current(output) if stream is None else None
        if fast is not None:
            self._g.all_gather(output, input, stream=fast[0], on_current=True, **options)
        else:
            self._g.all_gather(output, input, stream=_stream_of(output, stream), **options)

    def arrivals(self):
        """Events for `all_gather(..., arrivals=...)`: one per rank, recorded as that rank's
        piece lands (GPU backend; docs/python.md, "Fused tensor parallelism")."""
        return Arrivals(self._g.arrivals(), self.device, self.rank)

    def reduce_scatter_released(self, output, input, produce, op="sum", *, stream=None, ctas=None, channel=None):
        """A reduce-scatter whose input is written chunk by chunk by the caller, each chunk
        sent to its owner as soon as it is written (GPU backend).

        `input` (world x n elements) must be pool memory (`empty`): peers read it in place.
        `produce(d)` is called for every destination d in the order rank + 1, rank + 2,
        ..., rank (modulo the world) and must enqueue, on the call's stream (torch's current
        one by default), the work that writes `input[d * n:(d + 1) * n]`; it must not call
        this group. Then `output` (n elements) receives `op` ("sum", "avg") over every
        rank's chunk `rank`, as `reduce_scatter` gives it. Floats; ce-reduce's copies;
        its waits are kernels whose rounds live on the GPU, so the call can be captured
        into a CUDA graph. An exception in `produce` aborts the group (peers wait for
        this rank's chunks) and is raised as it is.
        """
        fast = _torch_current(output) if stream is None else None
        if fast is not None:
            self._g.reduce_scatter_released(output, input, produce, op, stream=fast[0], on_current=True,
                                            ctas=ctas, channel=channel)
        else:
            self._g.reduce_scatter_released(output, input, produce, op, stream=_stream_of(output, stream),
                                            ctas=ctas, channel=channel)

    def reduce_scatter(self, output, input, op="sum", *, stream=None, **options):
        """`output` (n elements) receives `op` ("sum", "avg", "min", "max") over all ranks of
        their `input[rank * n:(rank + 1) * n]`; f32, f16, bf16, accumulated in f32 in rank order;
        int32, int64, uint8 with sum (wrapping), min and max, on ce-reduce or sm-direct.

        Options: algorithm ("auto", "ce-reduce", "sm-direct", "tma-reduce", "tma-reduce-evict",
        "tma-push-reduce": sum only, not deterministic; "ll": small messages),
        sync, graph_sync, ctas, pipeline, channel, allow_staging, map_ordinary, context (as for
        `all_gather`; map_ordinary: ce-reduce), wire, reduce_launch, bf16_exact (a hint: the
        float32 input holds bf16 values upcast, so the planner may send the bf16 wire),
        traffic (the instrument of `all_gather`: ce-reduce's and its wire's copies as
        planned, without barriers, signals, pack or reduction; `output` is garbage).

        The bf16 wire: with float32 `input` and `output`, `wire="bf16"` (or torch.bfloat16)
        sends the top half of each float through the copy engines and reads the bottom
        half only for pieces where it is nonzero, so the result is the float32 one bit for
        bit, with half the bytes when the values are bf16-exact (gradients upcast from
        bf16); ce-reduce, sm-direct (reading the peers' planes directly) or auto. A
        bfloat16 `input` may reduce into a float32 `output` (no wire needed: bf16 crosses). `stats()` counts the bytes and the fallbacks.

        reduce_launch (ce-reduce): "auto" (the planner's choice), "pieces" (one reduction
        launch per pipeline piece) or "once" (one launch per call, its CTAs waiting for
        each piece's copies: beside a GEMM that holds every SM it waits for an SM once,
        not once per piece; stages the whole chunk; floats without a wire).
        """
        if options.get("wire") is not None:
            options["wire"] = _dtype_name(options["wire"])
        fast = _torch_current(output) if stream is None else None
        if fast is not None:
            self._g.reduce_scatter(output, input, op, stream=fast[0], on_current=True, **options)
        else:
            self._g.reduce_scatter(output, input, op, stream=_stream_of(output, stream), **options)

    def plan(self, kind, count, dtype, **options):
        """What the planner would run for a call, as a dict (NOTE [one planner]): algorithm,
        ctas, sync, map_ordinary, for an all-gather arrival, and for a reduce-scatter pieces, wire and reduce_launch;
        origin (the tuning table's rule, "default" or "explicit"), table and table_how.

        kind: "all-gather" or "reduce-scatter"; count: elements per rank (the all-gather's
        input, the reduce-scatter's output); dtype, and out_dtype for a reduce-scatter into
        another type; symmetric: whether the memory peers read is the pool's (the
        all-gather's output, the reduce-scatter's input); captured: in a CUDA graph; op; and
        the collectives' options and hints (algorithm, sync, ctas, pipeline, wire, context,
        bf16_exact, ...), which win over the planner as they do in a call."""
        options = dict(options)
        for k in ("wire", "out_dtype"):
            if options.get(k) is not None:
                options[k] = _dtype_name(options[k])
        return self._g.plan(kind, int(count), _dtype_name(dtype), **options)

    def stats(self):
        """The bytes this rank's calls moved to and from peers since the group was made, as a
        dict: all_gather_bytes, reduce_scatter_bytes, wire_bytes (the bf16 wire's top halves),
        fallback_bytes and fallback_pieces (bottom halves read where a piece was not
        bf16-exact), wire_pieces, total_bytes. Calls count as they are enqueued (a captured
        call once, not per replay); the fallbacks are counted by the GPU as its reductions run,
        so synchronize first for the calls just enqueued. Also host_rendezvous (the blocking
        exchanges with the other ranks through the host this rank made: the store, the
        address mailbox; the group's creation included), and predicted_calls and
        mispredicted_calls (all-gathers reading torch memory in place whose peer addresses
        were predicted, and those fixed by a copy: `set_address_prediction`). And where the
        host time of collective calls goes (NOTE [host time]): host_calls, host_call_ns (from
        entry to return in the library) and host_rendezvous_ns (of those, and of the group's
        creation, the blocking waits for other ranks); a hook's own time is what the caller
        measures around the call, less host_call_ns. Of the rendezvous, mailbox_waits and
        mailbox_wait_ns: the address mailbox's posts that waited for a peer to read the entry
        they replace (this rank 8 calls of a channel ahead of that peer's host: backpressure
        between the hosts, not an exchange the call needed). And wire_replays and wire_captures:
        eager bf16-wire reduce-scatters launched as one graph, and the captures made for
        them (`set_wire_replays`)."""
        return self._g.stats()

    def host_clock(self):
        """(host_calls, host_call_ns, host_rendezvous_ns, mailbox_wait_ns) of `stats()`, read
        without a device call: cheap enough to read around every call, to split a caller's time per call
        into its own, the library's and the rendezvous' (NOTE [host time])."""
        return self._g.host_clock()

    def set_copy_batching(self, on):
        """Whether an eager all-gather hands its copies from (or to) its peers to the driver
        as one batch (`cuMemcpyBatchAsync`, as NCCL's copy-engine all-gather does; on by
        default), which may run them at once on several copy engines, or one by one on the
        stream. Per rank, not collective; results are the same either way (GPU; nothing on
        the host backend). For measuring it (fsdp2_paired.py's `lowcon@batch=0`)."""
        self._g.set_copy_batching(bool(on))

    def set_wire_replays(self, on):
        """Whether an eager bf16-wire reduce-scatter (lowcon.fsdp's default for f32
        gradients) is launched as one CUDA graph from its shape's second call on, instead of
        a pack, a wait and a reduction per piece (on by default; `LOWCON_WIRE_REPLAYS=0`
        turns it off for groups made after). Collective choice: every rank must make the same
        one between the same calls, or the ranks wait for each other until the group's
        timeout names a peer. Results are the same either way (GPU; nothing on the host
        backend). For measuring it (fsdp2_paired.py's `lowcon@replays=0`)."""
        self._g.set_wire_replays(bool(on))

    def set_address_prediction(self, on):
        """Whether all-gathers that read the peers' torch memory in place (`map_ordinary`,
        lowcon.fsdp's default) predict where the peers' buffers are from the same call
        before, checked off the calling thread (on by default: no host rendezvous per call
        in steady state). Off, every such call waits for every peer's address, as lowcon
        0.3 did. Per rank, not collective; results are the same either way (GPU; nothing
        on the host backend)."""
        self._g.set_address_prediction(bool(on))

    def release_mappings(self):
        """Closes the peers' allocations that `map_ordinary` calls (lowcon.fsdp's torch
        memory) opened and that no call in flight uses; returns how many. A peer's freed
        segment goes back to its driver only once every rank that mapped it closed it:
        call it on every rank before `torch.cuda.empty_cache()` when memory must go back.
        Later calls open what they need again."""
        return self._g.release_mappings()

    def reserve_workspace(self, channel, nbytes):
        """Collective: set up `channel`'s workspace (at least `nbytes`) and LL buffer now (GPU).
        Needed before capturing calls on the channel into a CUDA graph, since a captured call
        cannot grow them: a call that would is refused, naming the bytes to reserve."""
        self._g.reserve_workspace(channel, nbytes)

    def replay(self, graph):
        """Replay `graph` (a `torch.cuda.CUDAGraph` holding lowcon calls) on torch's current
        stream and register the replay with the group's watchdog (`track_replay`)."""
        graph.replay()
        self.track_replay()

    def track_replay(self, stream=None):
        """Register the work enqueued on `stream` (default: torch's current stream) with the
        group's watchdog, after replaying a CUDA graph that holds lowcon calls by any means:
        a dead or late peer is then named while the replay waits for it (`check`,
        `synchronize`). Eager calls register themselves."""
        # torch's current stream as a raw pointer: making a torch.cuda.Stream object for
        # it cost more than the registration itself (17 µs of 28, 1x H100, 2026-11-25).
        if stream is not None:
            self._g.track_replay(_stream_of(None, stream))
        else:
            self._g.track_replay(None if self.device is None else _torch_stream(self.device))

    def channel(self, name):
        """A channel of its own for `name` (a string), for `channel=`: claimed in order of
        first use among the channels streams get, so every rank must claim names and use
        streams in the same order. `lowcon.fsdp`'s hooks use "fsdp/all-gather" and
        "fsdp/reduce-scatter", so that FSDP2's streams, made anew for every model, do not
        each take one."""
        return self._g.channel(name)

    def traffic(self, output, input, kind, *, stream=None):
        """A benchmark instrument, not a collective: moves the bytes of `kind`'s collective
        ("all-gather" or "reduce-scatter") between the GPUs, through the pool and the copy
        engines, with no sync and no reduction, so `output` is garbage. The all-gather's
        output, or the reduce-scatter's input, must be pool memory. It splits a
        collective's cost in a workload into the traffic's own and the rest
        (`fsdp2_paired.py`'s `floor` mode). GPU backend only."""
        fast = _torch_current(output) if stream is None else None
        if fast is not None:
            self._g.traffic(output, input, kind, stream=fast[0], on_current=True)
        else:
            self._g.traffic(output, input, kind, stream=_stream_of(output, stream))

    def empty(self, shape, dtype, *, stream=None, framework=None):
        """A tensor of `shape` and `dtype` in the group's symmetric pool (uninitialised).

        Collectives on pool tensors need no staging copy: peers reach them in place. Every
        rank must allocate (and free) pool tensors in the same order; the pool grows
        collectively. The block belongs to `stream` (default: the current stream of the
        tensor's framework), is reused at once on that stream once the tensor dies, and on
        another stream only after an event. framework: "torch" (the GPU default), "cupy",
        or "numpy" (the host backend's).
        """
        if isinstance(shape, int):
            shape = (shape,)
        shape = [int(d) for d in shape]
        if framework is None:
            framework = "numpy" if self.backend == "host" else "torch"
        if stream is None and self.backend == "gpu":
            if framework == "torch":
                stream = _torch_stream(self.device)
            elif framework == "cupy":
                import cupy

                stream = cupy.cuda.get_current_stream()
        raw = _stream_of(None, stream) if stream is not None else None
        # numpy makes arrays of legacy capsules read-only: give it (and CuPy) DLPack 1.x.
        capsule = self._g.empty(shape, _dtype_name(dtype), stream=raw, versioned=framework != "torch")
        device = (2, self.device) if self.backend == "gpu" else (1, 0)
        if framework == "torch":
            import torch

            # The capsule is ours and unused: torch's converter takes it as is (what
            # torch.utils.dlpack.from_dlpack calls after its checks).
            return torch._C._from_dlpack(capsule) if hasattr(torch._C, "_from_dlpack") else \
                torch.utils.dlpack.from_dlpack(capsule)
        if framework == "cupy":
            import cupy

            return cupy.from_dlpack(_Exporter(capsule, device))
        if framework == "numpy":
            import numpy

            return numpy.from_dlpack(_Exporter(capsule, device))
        raise InvalidArgument(f'framework {framework!r}: expected "torch", "cupy" or "numpy"')

    def pool_stats(self):
        """Bytes and counts of the symmetric pool on this rank (pool_bytes is what it holds)."""
        return self._g.pool_stats()

    def pool_trim(self):
        """Collective: give back the pool's segments that no rank uses, and return the bytes
        released on this rank. Every rank calls it at the same point, with no collective in
        flight; it waits for this GPU's work first. Use it between phases that use the pool
        differently (another model shape, the end of training); tensors still alive keep
        their segments."""
        return self._g.pool_trim()

    def check(self):
        """Raise the group's failure (a dead or late peer, naming the rank), if any, without waiting."""
        self._g.check()

    def synchronize(self, stream=None):
        """Wait for the work on `stream` (default: torch's current stream when torch is loaded,
        else the legacy default stream), or raise the group's failure. Ctrl-C works."""
        if stream is None:
            import sys

            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available() and self.device is not None:
                stream = torch.cuda.current_stream(self.device)
        self._g.synchronize(_stream_of(None, stream) if stream is not None else None)

    def shrink(self):
        """Collective among the survivors of a failed group (every live rank calls it): a new
        Group of the ranks still alive, renumbered in order of their old ranks. The ranks agree
        through the store within the group's timeout; one that arrives too late is left out and
        gets lowcon.Error saying so (again on every later call). A rank that dies during the
        shrink makes it raise on every survivor at once, naming it: call shrink() again. With
        the torch backend, lowcon.distributed.shrink_group() also makes the torch process
        group of the survivors. This group is failed (its calls in flight are
        discarded) and should be closed; the pool's tensors of this group must be made again
        from the new one (docs/faults.md, "Shrink")."""
        return Group(self._g.shrink())

    def abort(self):
        """Fail the group now: waits in flight give up, every later call raises."""
        self._g.abort()

    def close(self):
        """Release the group's memory and threads; later calls raise."""
        self._g.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def init(backend="auto", *, name="default", timeout=None):
    """Collective: join the job's group (the environment `lowcon launch` or torchrun sets).

    backend: "gpu", "host", or "auto" (the GPU when this process sees one). timeout: seconds
    any wait for a peer may take (default LOWCON_TIMEOUT_MS, 60 s).
    """
    if backend == "auto":
        backend = "gpu" if device_count() > 0 else "host"
    ms = None if timeout is None else int(timeout * 1000)
    return Group(_NativeGroup.from_env(backend, name, ms))


def from_store(store, rank, world_size, *, backend="auto", name="default", timeout=None, device=None):
    """Collective: a group of `world_size` ranks meeting through `store`, any object with
    torch.distributed's store methods (set, get, add, wait), e.g. torch's own store.

    device: the CUDA device index (GPU backend; default LOWCON_DEVICE, else LOCAL_RANK,
    else the rank). Ranks making groups with one name meet; names must be unique per
    group of ranks.
    """
    if backend == "auto":
        backend = "gpu" if device_count() > 0 else "host"
    ms = None if timeout is None else int(timeout * 1000)
    return Group(_NativeGroup.from_store(store, int(rank), int(world_size), backend, name, ms, device))


def from_process_group(group=None, *, backend="auto", name=None, timeout=None):
    """Collective over `group`'s ranks: a lowcon group over a torch.distributed process
    group (default: the world), meeting through torch's own store (no second port).

    Subgroups work (e.g. `mesh.get_group("shard")` of a DeviceMesh, for HSDP: lowcon inside
    the box, NCCL across boxes); the name defaults to the process group's own name, which
    is unique. The GPU is torch's current device.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        raise Error("from_process_group: torch.distributed is not initialised (call init_process_group first)")
    pg = group if group is not None else dist.group.WORLD
    rank, world = dist.get_rank(pg), dist.get_world_size(pg)
    if rank < 0:
        raise InvalidArgument(f"from_process_group: this process (global rank {dist.get_rank()}) is not in the group")
    name = name or f"pg-{pg.group_name}"
    store = dist.PrefixStore(f"lowcon/{name}/", dist.distributed_c10d._get_default_store())
    device = None
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        device = torch.cuda.current_device()
    return from_store(store, rank, world, backend=backend, name=name, timeout=timeout, device=device)


def memory_stats(group):
    """What lowcon's symmetric pool holds on this rank (a dict; "pool_bytes" is its size)."""
    return group.pool_stats()
