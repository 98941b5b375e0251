"""The paired FSDP2 benchmark's modes, and the instruments of its profile (torch).

A mode is the pair of collectives FSDP2 runs, set per FSDP module through torch 2.11's
`set_custom_all_gather` / `set_custom_reduce_scatter`. Those are plain attributes read
at every call (TORCH_2_11_NOTES.md), so one model can switch modes between steps
(`Switch`), and FSDP2's own defaults can be put back: the comms FSDP made are saved
before anything replaces them.

Modes (`--modes`, comma separated):
- `nccl`, `nccl-b`: FSDP2's defaults (NCCL). `nccl-b` is the A/A twin: the noise floor.
- `lowcon`, or `lowcon@ag=ALGO,rs=ALGO,sync=SYNC,agsync=SYNC,rssync=SYNC,rsgraph=SYNC,rsmap=B,arrival=A,ctas=N,rs_ctas=N,pieces=N,mem=M,agmem=M,rsmem=M,wire=W,copyin=C,launch=L,traffic=1,predict=0,batch=0,replays=0`:
  lowcon's hooks (`lowcon.fsdp`), with options (`agmem`/`rsmem`, or `mem` for both:
  "torch", the default, or "pool": where the all-gather outputs and reduce-scatter
  inputs live; with "torch" peers read them in place through IPC mappings; `wire`:
  "auto", the default as in `lowcon.fsdp.install` (the bf16 wire for bf16 parameters
  with an fp32 reduce, except for accumulated gradients), "bf16" or "fp32"; `copyin`:
  "bf16", the default as in `lowcon.fsdp.install` (where the wire is hinted, FSDP2
  copies its bf16 gradients in as bf16: NOTE [bf16 copy-in]), or "fp32" (FSDP2's own
  fp32 copy-in, the path before 2026-11-28); `launch`:
  ce-reduce's `reduce_launch`, "pieces" or "once", the latter with `wire=fp32` only;
  `pieces`: the reduce-scatter's pipeline pieces, the wire's included; `agsync`/`rssync`:
  one collective's sync (eager calls); `rsgraph`: the reduce-scatter's `graph_sync`, which
  the wire's own graphs take (NOTE [replay sync]: `rsgraph=memop` is the graph with memop
  waits that lowcon launched before b7a0fea; at b7a0fea `rssync` set it too); `rsmap`: the
  reduce-scatter's `map_ordinary` ("yes": sm-direct reads FSDP2's bf16 copy-in buffer
  where it is, mapped per call, instead of packing it: NOTE [bf16 input read in place]); `arrival`: the all-gathers'
  `arrival` ("barrier", "in-order", "any-order": NOTE [arrival-driven all-gather]);
  `traffic=1`: the honest floor, NOTE [honest floor]: every call
  runs its plan's copies as the mode would, with no barrier, signal or SM kernel, so
  the step's results are garbage and its losses are not checked; only plans that pull
  over the copy engines have copies to keep, so `ag` and `rs` default to ce-pull and
  ce-reduce there. Where the shipped reduce-scatter is sm-direct (4 GPUs: its reduction
  reads the peers' wire planes over NVLink, no copies), the floor stands for the same
  wire bytes moved by ce-reduce's copies, not for sm-direct's reads); `predict=0`: the all-gathers wait for the peers' addresses at
  every call instead of predicting them (NOTE [addresses predicted]; 0.3's way);
  `batch=0`: the all-gathers enqueue their peer copies one by one instead of as one
  batch (NOTE [batched copies]); `replays=0`: the bf16 wire's reduce-scatters are
  enqueued piece by piece at every call instead of launched as one graph (NOTE [wire
  replays]).
  Each option names one of the planner's choices; what no option names is the planner's (NOTE [one planner]).
  Several variants may run side by side, paired.
- `nccl-ce`: PyTorch #176613's copy-engine all-gather from 2.11's public pieces (a
  zero-CTA NCCL group over torch's NCCL symmetric memory), FSDP2's default
  reduce-scatter.
- `floor`: the f32 traffic floor. lowcon's hooks and pool, but each call only moves its
  collective's f32 bytes between the GPUs (`Group.traffic`: three copies per call on one
  stream, no sync, no reduction), so the step's results are garbage and its losses are
  not checked. Its excess over `nocomm` is what the bytes alone cost the step; a mode's
  excess over it is waiting, syncing and reducing. `lowcon@traffic=1` is the honest
  floor: the shipped path's copies (pieces, streams, wire bytes, torch memory).
- `lowcon-pg`: FSDP2 on a `lowcon` process group (`lowcon.distributed`), no hooks: the
  model is sharded on a mesh of that group, so it is a model of its own even with
  `--method switch`.
- `nocomm-torch`: no communication, and every buffer from torch's allocator on every
  call, as FSDP2's defaults allocate NCCL's: its memory is NCCL's without NCCL's own
  buffers. The reference of `--memory-only` runs, where NCCL cannot run (ranks sharing
  a GPU); its times and losses mean nothing.
- `nocomm`: no communication. The all-gather leaves the other ranks' shards as they
  were in a buffer kept per size (weights of the right scale, never uninitialised
  memory), the reduce-scatter returns zeros kept per size. Every other piece of the
  step (copy-in, copy-out, the optimizer on this rank's shard) runs as in the other
  modes, so its step time is the run's no-communication bound at the run's own world
  size; its losses mean nothing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllocMixin
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup, TrainingState

from fsdp2_profile import ENQUEUES


class Skip(Exception):
    """The mode cannot run here; the message says why."""


class NoCommAllGather(AllGather):
    """No all-gather: the output is a buffer kept per (size, dtype), filled once with
    weight-scale values; FSDP's copy-in writes this rank's shard into it as usual."""

    def __init__(self) -> None:
        self.buffers: Dict[Tuple[int, torch.dtype, Any], torch.Tensor] = {}

    def allocate(self, size, *, dtype, device):  # noqa: ANN001
        n = 1
        for s in size:
            n *= int(s)
        key = (n, dtype, str(device))
        if key not in self.buffers:
            buf = torch.empty(n, dtype=dtype, device=device)
            if buf.is_floating_point():
                buf.normal_(0.0, 0.02)
            else:
                buf.zero_()
            self.buffers[key] = buf
        return self.buffers[key].view(*[int(s) for s in size])

    def __call__(self, output_tensor, input_tensor, group=None, async_op=False):  # noqa: ANN001
        return None


class NoCommReduceScatter(ReduceScatter):
    """No reduce-scatter: the input is an ordinary tensor (FSDP fills it), the output a
    zero buffer kept per (size, dtype) (AdamW's work does not depend on the values)."""

    def __init__(self) -> None:
        self.zeros: Dict[Tuple[int, torch.dtype, Any], torch.Tensor] = {}
        self.output_next = False

    def allocate(self, size, *, dtype, device):  # noqa: ANN001
        # FSDP asks for the input first (on the compute stream), then the output (on
        # the reduce-scatter stream): alternate.
        n = 1
        for s in size:
            n *= int(s)
        self.output_next = not self.output_next
        if self.output_next:
            return torch.empty(*[int(s) for s in size], dtype=dtype, device=device)
        key = (n, dtype, str(device))
        if key not in self.zeros:
            self.zeros[key] = torch.zeros(n, dtype=dtype, device=device)
        return self.zeros[key].view(*[int(s) for s in size])

    def __call__(self, output_tensor, input_tensor, group=None, op=None, async_op=False):  # noqa: ANN001
        return None


class TorchMemAllGather(DefaultAllocMixin, AllGather):
    """No all-gather; the output from torch's allocator on every call (FSDP2's default
    allocation), so the memory is NCCL's pattern."""

    def __call__(self, output_tensor, input_tensor, group=None, async_op=False):  # noqa: ANN001
        return None


class TorchMemReduceScatter(DefaultAllocMixin, ReduceScatter):
    """No reduce-scatter; input and output from torch's allocator on every call."""

    def __call__(self, output_tensor, input_tensor, group=None, op=None, async_op=False):  # noqa: ANN001
        output_tensor.zero_()
        return None


class Mode:
    """A mode's comms: None for FSDP2's own default (per module, saved by `Switch`).
    `mesh`: the mode's own device mesh (its model is sharded on it), else the run's."""

    def __init__(self, name: str, ag: Any = None, rs: Any = None, notes: Optional[Dict[str, Any]] = None,
                 pool: Any = None, mesh: Any = None, check_loss: bool = True, predict: bool = True,
                 batch: bool = True, replays: bool = True) -> None:
        self.name, self.ag, self.rs = name, ag, rs
        # The group's address prediction and copy batching while this mode runs (NOTE
        # [addresses predicted], NOTE [batched copies]).
        self.predict, self.batch, self.replays = predict, batch, replays
        self.notes = notes or {}
        self.pool = pool  # a lowcon group whose pool and workspaces this mode uses, else None
        self.mesh = mesh
        self.check_loss = check_loss

    def pool_bytes(self) -> Optional[int]:
        """lowcon's symmetric memory for this mode: its pool and its workspaces."""
        if self.pool is None:
            return None
        st = self.pool.pool_stats()
        return int(st["pool_bytes"]) + int(st.get("workspace_bytes", 0))


class FloorAllGather:
    """The all-gather's traffic alone, on lowcon's pool (`Group.traffic`)."""

    def __init__(self, hooks: Any) -> None:
        self.hooks, self.group = hooks, hooks.group

    def allocate(self, size, *, dtype, device):  # noqa: ANN001
        return self.hooks.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group=None, async_op=False):  # noqa: ANN001
        self.group.traffic(output_tensor, input_tensor, "all-gather")
        return None


class FloorReduceScatter(FloorAllGather):
    """The reduce-scatter's traffic alone: peers' chunks pulled, no reduction."""

    def __call__(self, output_tensor, input_tensor, group=None, op=None, async_op=False):  # noqa: ANN001
        self.group.traffic(output_tensor, input_tensor, "reduce-scatter")
        return None


def group_switches(mode: Any) -> None:
    """Puts `mode`'s settings on the lowcon group it shares with the other lowcon modes
    (address prediction, copy batching, NOTE [wire replays]): at every step of the mode,
    since with a model per mode nothing else switches the shared group (the same call
    on every rank, at the same step: the replays' switch is collective)."""
    pool = mode.pool
    if pool is None:
        return
    if hasattr(pool, "set_address_prediction"):
        pool.set_address_prediction(mode.predict)
    if hasattr(pool, "set_copy_batching"):
        pool.set_copy_batching(mode.batch)
    if hasattr(pool, "set_wire_replays"):
        pool.set_wire_replays(mode.replays)


class Switch:
    """One model's FSDP modules, switchable between modes: saves FSDP's default comms
    first, so `nccl` means FSDP's own objects again after another mode ran."""

    def __init__(self, model: Any) -> None:
        self.groups: List[Tuple[FSDPModule, FSDPParamGroup]] = []
        for m in model.modules():
            if isinstance(m, FSDPModule):
                pg = m._get_fsdp_state()._fsdp_param_group
                if pg is not None:
                    self.groups.append((m, pg))
        if not self.groups:
            raise ValueError("the model has no FSDP modules")
        self.defaults = {id(pg): (pg._all_gather_comm, pg._reduce_scatter_comm) for _, pg in self.groups}
        try:
            # wire="auto" tells the bf16 wire's hook whether a group's gradients accumulated,
            # as lowcon.fsdp.install does (a no-op for other hooks).
            import lowcon.fsdp

            for _, pg in self.groups:
                lowcon.fsdp._watch_accumulation(pg)
        except ImportError:
            pass
        self.current: Optional[str] = None

    def set(self, mode: Mode, wrap: Any = None) -> None:
        """Puts `mode`'s comms on every module; `wrap(comm, kind)` wraps each (profiling)."""
        for m, pg in self.groups:
            ag0, rs0 = self.defaults[id(pg)]
            ag, rs = mode.ag or ag0, mode.rs or rs0
            if wrap is not None:
                ag, rs = wrap(ag, "all-gather"), wrap(rs, "reduce-scatter")
            m.set_custom_all_gather(ag)
            m.set_custom_reduce_scatter(rs)
        group_switches(mode)
        self.current = mode.name


def make_modes(specs: List[Tuple[str, str, Dict[str, str]]], device: Any,
               lowcon_group: Any) -> Tuple[List[Mode], Dict[str, str]]:
    """The modes of `specs` ((name, kind, options) from fsdp2_paired.parse_mode), and
    for each that cannot run here, why."""
    modes, skipped = [], {}
    for spec, kind, opts in specs:
        try:
            if kind in ("nccl", "nccl-b"):
                modes.append(Mode(spec))
            elif kind == "nocomm":
                modes.append(Mode(spec, NoCommAllGather(), NoCommReduceScatter()))
            elif kind == "nocomm-torch":
                modes.append(Mode(spec, TorchMemAllGather(), TorchMemReduceScatter(), check_loss=False))
            elif kind == "lowcon":
                modes.append(lowcon_mode(spec, opts, lowcon_group))
            elif kind == "floor":
                modes.append(floor_mode(spec, lowcon_group))
            elif kind == "lowcon-pg":
                modes.append(backend_mode(spec, device))
            else:
                modes.append(nccl_ce_mode(spec, device))
        except Skip as e:
            skipped[spec] = str(e)
    return modes, skipped


def lowcon_mode(name: str, opts: Dict[str, str], group: Any) -> Mode:
    if group is None:
        raise Skip("lowcon is not importable")
    import lowcon.fsdp

    # Every choice the planner makes can be named here (NOTE [one planner]); what is not
    # named is the planner's, as in lowcon.fsdp.install.
    sync = opts.get("sync", "auto")
    ag_opts = {"ctas": int(opts["ctas"])} if "ctas" in opts else {}
    rs_opts = {"ctas": int(opts["rs_ctas"])} if "rs_ctas" in opts else {}
    if "launch" in opts:
        rs_opts["reduce_launch"] = opts["launch"]
    if "pieces" in opts:
        rs_opts["pipeline"] = int(opts["pieces"])
    if "agsync" in opts:
        ag_opts["sync"] = opts["agsync"]
    if "rssync" in opts:
        rs_opts["sync"] = opts["rssync"]
    if "rsgraph" in opts:
        rs_opts["graph_sync"] = opts["rsgraph"]
    if "rsmap" in opts:
        rs_opts["map_ordinary"] = opts["rsmap"].lower() in ("1", "yes", "true", "on")
    if "arrival" in opts:
        ag_opts["arrival"] = opts["arrival"]
    traffic = opts.get("traffic", "0").lower() in ("1", "yes", "true", "on")
    if traffic:
        ag_opts["traffic"] = rs_opts["traffic"] = True
        # The honest floor runs copy-engine plans that pull (NOTE [honest floor]): where
        # the mode names no algorithm, ce-pull and ce-reduce (the wire on it, as planned).
        opts = {"ag": "ce-pull", "rs": "ce-reduce", **opts}
    mem = opts.get("mem", "torch")  # both at once (lowcon.fsdp's default); agmem / rsmem override
    agmem, rsmem = opts.get("agmem", mem), opts.get("rsmem", mem)
    wire = opts.get("wire", "auto")
    if wire not in ("auto", "bf16", "fp32"):
        raise ValueError(f"mode {name!r}: wire {wire!r}: expected auto, bf16 or fp32")
    copy_in = opts.get("copyin", "bf16")
    if copy_in not in ("bf16", "fp32"):
        raise ValueError(f"mode {name!r}: copyin {copy_in!r}: expected bf16 or fp32")
    ag = lowcon.fsdp.LowconAllGather(group, opts.get("ag", "auto"), ag_opts.pop("sync", sync), agmem, **ag_opts)
    rs = lowcon.fsdp.LowconReduceScatter(group, opts.get("rs", "auto"), rs_opts.pop("sync", sync), None, rsmem,
                                         wire=None if wire == "fp32" else wire, copy_in=copy_in, **rs_opts)
    notes = {"lowcon": getattr(lowcon, "__version__", "?"), "all_gather": opts.get("ag", "auto"),
             "reduce_scatter": opts.get("rs", "auto"), "sync": sync, "all_gather_memory": agmem,
             "reduce_scatter_memory": rsmem, "wire": wire, "copy_in": copy_in,
             **{k: opts[k] for k in ("ctas", "rs_ctas", "launch", "pieces", "agsync", "rssync", "rsgraph", "rsmap", "arrival",
                                     "traffic", "predict", "batch", "replays") if k in opts}}
    predict = opts.get("predict", "1").lower() in ("1", "yes", "true", "on")
    batch = opts.get("batch", "1").lower() in ("1", "yes", "true", "on")
    replays = opts.get("replays", "1").lower() in ("1", "yes", "true", "on")
    # The honest floor's results are garbage by design: its losses are not compared.
    return Mode(name, ag, rs, notes, pool=group, check_loss=not traffic, predict=predict, batch=batch,
                replays=replays)


def floor_mode(name: str, group: Any) -> Mode:
    if group is None:
        raise Skip("lowcon is not importable")
    if getattr(group, "backend", "gpu") != "gpu":
        raise Skip("the traffic floor moves bytes between GPUs (lowcon's host backend has none)")
    import lowcon.fsdp

    # The traffic instrument moves bytes through symmetric memory: the pool's.
    ag = FloorAllGather(lowcon.fsdp.LowconAllGather(group, memory="pool"))
    rs = FloorReduceScatter(lowcon.fsdp.LowconReduceScatter(group, memory="pool", copy_in="fp32"))
    return Mode(name, ag, rs, {"traffic": "copy engines, no sync, no reduction"}, pool=group, check_loss=False)


def backend_mode(name: str, device: Any) -> Mode:
    """FSDP2 with no hooks on a mesh of a `lowcon` process group."""
    try:
        import lowcon.distributed
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError as e:
        raise Skip(f"lowcon.distributed is not importable: {e}") from e
    lowcon.distributed.register()
    try:
        pg = dist.new_group(list(range(dist.get_world_size())), backend=lowcon.distributed.NAME)
    except RuntimeError as e:
        # torch 2.11, default group made with device_id (NCCL): new_group asks the Python
        # group for a CUDA backend to split (2026-11-24, 2x H200).
        raise Skip(f"new_group(backend='lowcon') failed: {str(e).splitlines()[0][:120]}") from e
    mesh = DeviceMesh.from_group(pg, device.type)
    return Mode(name, None, None, {"process_group": "lowcon (torch.distributed backend)"}, pool=pg.lowcon_group,
                mesh=mesh)


def nccl_ce_mode(name: str, device: Any) -> Mode:
    """A zero-CTA NCCL group for the all-gather, whose output FSDP allocates from torch's
    NCCL symmetric-memory pool and which `rendezvous` registers (TORCH_2_11_NOTES.md)."""
    pg = getattr(dist, "ProcessGroupNCCL", None)
    if device.type != "cuda" or pg is None or not hasattr(pg, "NCCL_CTA_POLICY_ZERO"):
        raise Skip(f"torch {torch.__version__} on {device.type} has no ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO")
    nccl = tuple(torch.cuda.nccl.version())
    if nccl < (2, 28):
        raise Skip(f"NCCL {'.'.join(map(str, nccl))} has no CTA policies (needs >= 2.28)")
    import torch.distributed._symmetric_memory as symm_mem

    opts = pg.Options()
    opts.config.cta_policy = pg.NCCL_CTA_POLICY_ZERO
    group = dist.new_group(list(range(dist.get_world_size())), pg_options=opts)
    symm_mem.set_backend("NCCL")
    pool = symm_mem.get_mem_pool(device) if hasattr(symm_mem, "get_mem_pool") else \
        torch.cuda.MemPool(symm_mem.get_mempool_allocator(device))
    dist.barrier(group=group)

    class SymmMemAllGather(AllGather):
        def allocate(self, size, *, dtype, device):  # noqa: ANN001
            with torch.cuda.use_mem_pool(pool):
                return torch.empty(*size, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group=None, async_op=False):  # noqa: ANN001
            symm_mem.rendezvous(output_tensor, group=group_name)
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=ce_group, async_op=async_op)

    ce_group, group_name = group, group.group_name
    return Mode(name, SymmMemAllGather(), None, {"nccl": ".".join(map(str, nccl))})


# --------------------------------------------------------------------------------------
# Instruments of the profile
# --------------------------------------------------------------------------------------


class HostTimes:
    """Host time inside every comm call, per kind ("all-gather", "all-gather allocate",
    ...): `wrap` is given to `Switch.set`. With a lowcon group, each call's time inside
    the library and in host rendezvous too (`Group.host_clock()`, NOTE [host time]): kinds
    "all-gather library", "all-gather rendezvous", ..., and of the rendezvous the address
    mailbox's post waits ("all-gather mailbox"); the rest is the hook's own Python.
    And what the library handed the driver (`lowcon.enqueue_clock()`, NOTE [enqueue
    clock]): "all-gather launch" (µs) and "all-gather launch calls", the same for memop,
    copy and event. `enqueued` replaces lowcon's clock (tests)."""

    def __init__(self, group: Any = None, enqueued: Any = None) -> None:
        self.us: Dict[str, List[float]] = defaultdict(list)
        self.clock = getattr(group, "host_clock", None)
        if enqueued is None and self.clock is not None:
            try:
                import lowcon

                enqueued = getattr(lowcon, "enqueue_clock", None)
            except ImportError:
                enqueued = None
        self.enqueued = enqueued

    def wrap(self, comm: Any, kind: str) -> Any:
        times = self.us
        clock = self.clock
        enqueued = self.enqueued

        class Timed:
            # lowcon.fsdp's accumulation watch reaches the hook through `wrapped`: without
            # it the wrapped reduce-scatter gets no bf16-exact hint, and the profile would
            # time the fp32 path instead of the one that ships (it did, until 2026-11-26).
            wrapped = comm

            def allocate(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
                t0 = time.perf_counter()
                try:
                    return comm.allocate(*a, **k)
                finally:
                    times[kind + " allocate"].append(1e6 * (time.perf_counter() - t0))

            def __call__(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
                c0 = clock() if clock else None
                e0 = enqueued() if enqueued else None
                t0 = time.perf_counter()
                try:
                    return comm(*a, **k)
                finally:
                    times[kind].append(1e6 * (time.perf_counter() - t0))
                    if e0 is not None:
                        e1 = enqueued()
                        for q in ENQUEUES:
                            times[f"{kind} {q}"].append((e1[q][1] - e0[q][1]) / 1e3)
                            times[f"{kind} {q} calls"].append(float(e1[q][0] - e0[q][0]))
                    if c0 is not None:
                        c1 = clock()
                        times[kind + " library"].append((c1[1] - c0[1]) / 1e3)
                        times[kind + " rendezvous"].append((c1[2] - c0[2]) / 1e3)
                        if len(c1) > 3:
                            times[kind + " mailbox"].append((c1[3] - c0[3]) / 1e3)

        return Timed()


class Clock:
    """Marks on the compute stream: CUDA events on a GPU, the host clock on the CPU
    (where every op is synchronous)."""

    def __init__(self, device: Any) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) if self.cuda else 1e3 * (b - a)


# NOTE [where the compute stream waits]
# FSDP2's compute stream meets the collectives in three methods of FSDPParamGroup:
# `wait_for_unshard` (waits for the layer's all-gather, then copies out: forward, and
# again in backward), `post_backward` (copies the gradients in, waits for the previous
# layer's reduce-scatter, issues this one) and `finalize_backward` (waits for the last
# reduce-scatter). `FsdpWaits` marks the compute stream before and after each call, by
# layer and phase. What a call costs includes work every mode does (copy-out, copy-in),
# so the exposed communication of a mode is its time there minus the `nocomm` mode's.
WATCHED = {"wait_for_unshard": None, "post_backward": "reduce-scatter", "finalize_backward": "final"}


class FsdpWaits:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.marks: List[Tuple[str, str, Any, Any]] = []
        self.saved: Dict[str, Any] = {}

    def __enter__(self) -> "FsdpWaits":
        for name, phase in WATCHED.items():
            orig = getattr(FSDPParamGroup, name)
            self.saved[name] = orig

            def patched(pg, *a, _orig=orig, _phase=phase, **k):  # noqa: ANN001, ANN002, ANN003
                p = _phase or ("forward" if pg._training_state == TrainingState.FORWARD else "backward")
                a0 = self.clock.mark()
                try:
                    return _orig(pg, *a, **k)
                finally:
                    self.marks.append((pg._module_fqn or "root", p, a0, self.clock.mark()))

            setattr(FSDPParamGroup, name, patched)
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, orig in self.saved.items():
            setattr(FSDPParamGroup, name, orig)

    def per_step(self, steps: int) -> Dict[str, float]:
        """ms per step, by "phase layer" (after synchronising)."""
        acc: Dict[str, float] = defaultdict(float)
        for fqn, phase, a, b in self.marks:
            acc[f"{phase} {fqn}"] += self.clock.ms(a, b) / steps
        return dict(acc)


def kernel_table(prof: Any, limit: int = 25) -> List[Dict[str, Any]]:
    """The GPU's activities of the profiled steps (kernels, copies, memsets), by name:
    calls and total µs, the longest first. lowcon's copy-engine work shows as memcpy
    rows, its sync and reduction kernels by their names; stream memory operations
    (memop sync) are not CUPTI activities and do not show."""
    from torch.autograd import DeviceType

    acc: Dict[str, List[float]] = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if getattr(e, "device_type", None) == DeviceType.CUDA:
            a = acc[e.name[:120]]
            a[0] += 1
            a[1] += e.time_range.elapsed_us()
    rows = [{"name": k, "calls": int(v[0]), "device_us": float(v[1])} for k, v in acc.items()]
    rows.sort(key=lambda r: -r["device_us"])
    return rows[:limit]


def counted_bytes(modes: List[Any], step: Any, batch: Any, device: Any) -> Dict[str, Dict[str, int]]:
    """The bytes one step of each lowcon mode moved to and from peers, as the group counts
    them (`Group.stats()`: the bf16 wire's top halves and fallbacks apart), from one untimed
    step per mode after the timed rounds (the modes share the group, so they are counted
    one at a time); the max over ranks."""
    out: Dict[str, Dict[str, int]] = {}
    cuda = device.type == "cuda"
    for m in modes:
        if m.pool is None or not hasattr(m.pool, "stats"):
            continue
        if cuda:
            torch.cuda.synchronize(device)
        before = m.pool.stats()
        step(m, batch(0))
        if cuda:
            torch.cuda.synchronize(device)
        after = m.pool.stats()
        keys = sorted(after)
        t = torch.tensor([float(after[k] - before[k]) for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out[m.name] = {k: int(v) for k, v in zip(keys, t.tolist())}
    return out
