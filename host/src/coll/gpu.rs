//! The collectives on GPUs: all-gather (`ce-pull`, `ce-push`, `sm-oneshot`, `ll`) and
//! reduce-scatter (`ce-reduce`, `sm-direct`, `tma-reduce`, `tma-push-reduce`, `ll`) over
//! the group's symmetric memory and signal pads (`ll` in the child module `ll`). See [`crate::coll`] for the algorithms and `docs/design.md` for why.
//!
//! Calls are asynchronous like NCCL's: they check their arguments, enqueue on the
//! caller's stream and return. A call that returns `Err` has enqueued nothing and has
//! not advanced any epoch, so the group stays usable.
//!
//! NOTE [streams]: copy-engine copies on one stream run one after another. The peer
//! copies run on the caller's stream in rotated order (rank r reads r+1, r+2, ...), so
//! at any moment each GPU is read by about one peer. Work that can overlap them (the
//! local copy of the own shard; ce-reduce's piece copies against its reductions) runs
//! on the channel's copy stream, forked from and joined back into the caller's stream
//! with events, so the caller only ever has to order work against its own stream.
//!
//! NOTE [never block]: a call checks its arguments, enqueues and registers its completion
//! event with the group's watchdog (`crate::sync::gpu::watchdog`); it never waits for
//! the GPU, however many calls are in flight. Growing a workspace allocates the larger
//! one collectively (a rendezvous with the peers' hosts, not with any GPU queue) and
//! hands the old one to the watchdog to free once the calls using it are done. A dead
//! peer surfaces as an error from the next call within the group's timeout even if the
//! caller never synchronises. What can still block is the driver itself, when a
//! stream's queue of pending operations is full (docs/design.md, "Never block").
//!
//! NOTE [arrival-driven all-gather]: a `ce-pull` all-gather behind one barrier moves
//! nothing until the last peer arrived, then every shard: inside FSDP2 the slowest peer's
//! lateness and all the copies are exposed (4x H100, 2026-11-27: the copies started
//! 1.8-5.8 ms after the compute stream ran dry, then 0.82 ms of copy). With
//! `arrival=in-order` or `any-order` (eager, stream-memop sync), the entry barrier is
//! split: this rank signals every peer at once (`GpuSync::memop_arrive`), and each peer's
//! copy waits for that peer's signal alone (`memop_await_peer`), in the rotated order on
//! the caller's stream (`in-order`) or on a stream per peer (`any-order`, so copies start
//! in the order the peers arrive). The signals, slots and epochs are the barrier's, so the
//! watchdog, a dead peer and the diagnosis treat it as one. The exit barrier stays
//! whole: a peer may still be reading this rank's shard until every peer passed it.

mod ce_reduce;
mod counters;
mod floor;
mod ll;
mod mapped;
pub(crate) mod per_piece;
mod push;
mod replays;
mod steps;
mod verify;
mod wire_steps;

use std::sync::{Arc, Mutex, MutexGuard};

use super::check::{
    align256, call_text, check_all_gather, check_reduce_scatter, grow_to, no_wire, rotated, staged_slot,
};
use super::counters::{Counters, Moved};
use super::device_buf::DeviceBuf;
use super::geometry::{piece_elems, tma_split};
use super::wire::Carry;
use super::{AgAlgo, AllGatherOptions, ArrivalForm, ReduceOp, ReduceScatterOptions, RsAlgo};
use crate::cuda::enqueued::{Phase, phase};
use crate::cuda::kernels::TmaArgs;
use crate::cuda::raw::mem_op::Op;
use crate::cuda::{Event, Stream, StreamPriority, raw};
use crate::error::{Error, Result};
use crate::memory::SymmetricBuffer;
use crate::memory::mapped::{CallNumber, Exchanged, PeerMaps};
use crate::plan::vocab::LaunchForm;
use crate::plan::{AgCall, AgPlan, Planner, RsCall, RsPlan};
use crate::sync::SyncMethod;
use crate::sync::gpu::GpuSync;
use crate::sync::gpu::graph::Mode;
use per_piece::arrivals::Arrivals;

/// A GPU group's collectives: its synchronisation (shared with the watchdog), and per
/// channel a workspace, a copy stream and events.
pub(crate) struct GpuColl {
    // Before `sync`: workspaces are released while the group's core is still up.
    channels: Box<[Mutex<ChannelState>]>,
    pub(crate) sync: Arc<GpuSync>,
    /// Decides every call (NOTE [one planner]; the CTA cap of ranks sharing a GPU too).
    pub(crate) planner: Arc<Planner>,
    /// Ordinary inputs that peers read in place (`map_ordinary`), and the check of
    /// their predicted addresses (NOTE [addresses predicted]).
    mapping: Box<verify::Mapping>,
    /// Bytes moved to and from peers, as enqueued (NOTE [bf16 wire]; the device counts
    /// the fallbacks).
    counters: Box<Counters>,
}

/// Per-channel state of a group's collectives.
#[derive(Default)]
struct ChannelState {
    workspace: Option<SymmetricBuffer>,
    copy: Option<Stream>,
    events: Vec<Event>,
    /// The stream of the bf16 wire's packs (first split-wire call on the channel).
    pack: Option<Stream>,
    /// Any-order all-gathers: a stream per peer but the first (NOTE [arrival-driven
    /// all-gather]), made on the channel's first such call.
    peers: Vec<Stream>,
    /// The LL buffer (first LL call on the channel; `coll::gpu::ll`).
    ll: Option<SymmetricBuffer>,
    /// A call on the channel was captured into a graph: its workspace is kept, not
    /// freed, when a larger one replaces it (in `kept`), since replays may still use it.
    captured: bool,
    kept: Vec<SymmetricBuffer>,
    /// Calls with a mapped input so far (the address exchange's sequence number).
    map_seq: u64,
    /// Split-wire calls launched as graphs (NOTE [wire replays]).
    replays: replays::Replays,
}

impl ChannelState {
    /// Bytes of its workspace, LL buffer and kept workspaces.
    fn held(&self) -> usize {
        self.workspace.as_ref().map_or(0, SymmetricBuffer::len)
            + self.ll.as_ref().map_or(0, SymmetricBuffer::len)
            + self.kept.iter().map(SymmetricBuffer::len).sum::<usize>()
    }
}

/// Where every rank's copy of some data lives: a symmetric buffer and a byte offset.
#[derive(Clone, Copy)]
struct Sym<'b> {
    buf: &'b SymmetricBuffer,
    off: usize,
}

impl Sym<'_> {
    fn peer(&self, p: usize) -> u64 {
        self.buf.peer_ptr(p) + self.off as u64
    }
    fn bases(&self) -> u64 {
        crate::cuda::device_ptr(self.buf.device_peer_ptrs())
    }
}

/// A copy-engine copy of `bytes` on `stream`.
///
/// # Safety
/// Both ranges valid (local or mapped peer memory) until the copy has run.
unsafe fn ce_copy(stream: &Stream, dst: u64, src: u64, bytes: usize, hint: bool) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: forwarded from the caller.
    unsafe { raw::mem_op::copy(stream.raw(), dst, src, bytes, hint) }
}

// NOTE [batched copies]
// An all-gather's copies from (or to) its peers go to the driver as one batch
// (`cuMemcpyBatchAsync`), as NCCL's copy-engine all-gather issues them, instead of one
// `cuMemcpyAsync` per peer on one stream, which the driver runs one after another. In a
// batch the driver may run them at once on several copy engines. On 4x H200 beside
// FSDP2's GEMMs at 4096 tokens per rank, the all-gather's copy rate was 278-337 GB/s
// with one copy per peer in a row, against NCCL-CE's 342-358 (2026-11-26). Not batched:
// captured calls (a graph records the copies one node each), calls that record an event
// per peer's shard (`arrivals`), legacy default streams, and drivers before CUDA 13.
// `set_copy_batching(false)` turns it off per rank, to measure it (the plan's
// `copy_batch`, NOTE [plan settings]).

/// Copies (destination, source, bytes) on `stream`: one batch where NOTE [batched
/// copies] allows (`batch`: the plan's `copy_batch`), else one after another; with the
/// copy-engine hint where `hint` (the plan's `copy_hint`).
///
/// # Safety
/// As [`ce_copy`], for every range.
unsafe fn ce_copies(stream: &Stream, batch: bool, copies: &[(u64, u64, usize)], hint: bool) -> Result<()> {
    if batch {
        // SAFETY: forwarded from the caller.
        return unsafe { raw::mem_op::copy_batch(stream.raw(), copies, hint) };
    }
    for &(dst, src, bytes) in copies {
        // SAFETY: forwarded from the caller.
        unsafe { ce_copy(stream, dst, src, bytes, hint)? };
    }
    Ok(())
}

fn refuse_staging(rank: usize, algorithm: &str, what: &str) -> Error {
    Error::InvalidArgument(format!(
        "rank {rank}: {algorithm} needs a symmetric {what} (DeviceBuf::symmetric), the {what} is ordinary device \
         memory, and staging is disabled (allow_staging = false)"
    ))
}

impl GpuColl {
    /// Collective (the address mailbox).
    pub(crate) fn new(sync: Arc<GpuSync>, planner: Arc<Planner>) -> Result<Self> {
        let channels = (0..lowcon_abi::pad::CHANNELS).map(|_| Mutex::new(ChannelState::default())).collect();
        let maps = Arc::new(PeerMaps::new(&sync.core, &sync.device)?);
        let mapping = Box::new(verify::Mapping { verifier: verify::Verifier::new(&sync)?, maps });
        Ok(Self { channels, sync, planner, mapping, counters: Box::default() })
    }

    /// Bytes of this rank's workspaces and LL buffers, over every channel (what the
    /// group holds beside its pads; a channel busy in a call is skipped, not waited for).
    pub(crate) fn workspace_bytes(&self) -> usize {
        self.workspace_split().iter().map(|&(_, b)| b).sum()
    }

    /// [`GpuColl::workspace_bytes`] per channel that holds any (the bf16 wire's planes
    /// are its channel's workspace), as (channel, bytes), channel order.
    pub(crate) fn workspace_split(&self) -> Vec<(u32, usize)> {
        (0u32..)
            .zip(&self.channels)
            .filter_map(|(ch, c)| c.try_lock().ok().map(|st| (ch, st.held())))
            .filter(|&(_, b)| b > 0)
            .collect()
    }

    fn check_buf(&self, what: &str, b: &DeviceBuf<'_>) -> Result<()> {
        let rank = self.sync.core.rank;
        let mine = self.sync.device.index() as i32;
        let on = match b.symm {
            Some((s, _)) => {
                if s.world_size() != self.sync.core.world || s.rank() != rank {
                    return Err(Error::InvalidArgument(format!(
                        "rank {rank}: the {what}'s symmetric buffer belongs to another group (rank {} of {})",
                        s.rank(),
                        s.world_size()
                    )));
                }
                s.device().index() as i32
            }
            // SAFETY: the driver is initialised (the group's device is open).
            None => unsafe { raw::device::pointer_ordinal(b.ptr) }.map_err(|e| {
                Error::InvalidArgument(format!("rank {rank}: the {what} at {:#x} is not device memory ({e})", b.ptr))
            })?,
        };
        if on != mine {
            return Err(Error::InvalidArgument(format!(
                "rank {rank}: the {what} is on device {on} but the group uses device {mine}"
            )));
        }
        Ok(())
    }

    fn channel(&self, channel: u32) -> MutexGuard<'_, ChannelState> {
        self.channels[channel as usize].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Readies the channel for a call needing `need` workspace bytes and `events`
    /// events (growing the workspace is collective: every rank asks for the same). A
    /// captured call cannot grow it (NOTE [graph flags]): it is refused, naming what to
    /// reserve before the capture.
    fn prepare(&self, st: &mut ChannelState, channel: u32, mode: Mode, need: usize, events: usize) -> Result<()> {
        // NOTE [host phases].
        let _t = phase(Phase::Prepare);
        let have = st.workspace.as_ref().map_or(0, |w| w.len());
        if need > have && mode == Mode::Captured {
            return Err(Error::InvalidArgument(format!(
                "rank {}: this captured call needs {need} bytes of workspace on channel {channel}, which has \
                 {have}: reserve them before the capture (reserve_workspace({channel}, {need}); growing a \
                 workspace allocates and meets the peers, which a capture cannot)",
                self.sync.core.rank
            )));
        }
        if need > have {
            let grown = self.sync.alloc(grow_to(have, need), &format!("channel {channel}'s workspace"))?;
            // The old one may still be in use by calls in flight: the watchdog frees it
            // once they are done (a call never waits for the GPU).
            // A workspace that captured calls use stays for the group's life: their
            // graphs may be replayed at any time (NOTE [graph flags]).
            st.replays.workspace_replaced();
            match st.workspace.replace(grown) {
                Some(old) if st.captured => st.kept.push(old),
                Some(old) => self.sync.retire(old),
                None => {}
            }
        }
        st.captured |= mode == Mode::Captured;
        if st.copy.is_none() {
            st.copy = Some(self.sync.device.stream(StreamPriority::High)?);
        }
        let copy = st.copy.as_ref().expect("just made");
        while st.events.len() < events {
            let ev = copy.event(false)?;
            st.events.push(ev);
        }
        Ok(())
    }

    /// Copies `input` into the workspace at `at` when it is not symmetric; returns where
    /// every rank's copy is.
    ///
    /// # Safety
    /// `input` is valid for its length; `ws` holds `at + input.bytes()`.
    unsafe fn symmetric_input<'b>(
        &self,
        stream: &Stream,
        input: &DeviceBuf<'b>,
        ws: Option<&'b SymmetricBuffer>,
        (at, hint): (usize, bool),
    ) -> Result<Sym<'b>> {
        Ok(match input.symm {
            Some((buf, off)) => Sym { buf, off },
            None => {
                let ws = ws.expect("workspace sized for staging");
                // SAFETY: forwarded from the caller.
                unsafe { ce_copy(stream, ws.local_ptr() + at as u64, input.ptr, input.bytes(), hint)? };
                Sym { buf: ws, off: at }
            }
        })
    }

    /// All-gather: on every rank, `output[p * n .. (p + 1) * n]` receives rank `p`'s
    /// `input` (`n` elements). Enqueued on `stream`; every rank must make the same call
    /// (same sizes, dtype, algorithm, channel and kinds of buffers).
    pub(crate) fn all_gather(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        stream: &Stream,
        opts: &AllGatherOptions,
        arrivals: Option<&Arrivals>,
    ) -> Result<()> {
        // NOTE [host time]: the whole call, timed.
        let _call = self.sync.core.clock.call();
        // NOTE [host phases].
        let checks = phase(Phase::Checks);
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        // NOTE [checked calls]: before any check of this rank's own, and anything enqueued.
        let (i, o) = ((input.count, input.dtype), (output.count, output.dtype));
        self.sync.core.check_call(opts.channel, || call_text("all-gather", None, i, o, "elements", opts))?;
        let mode = self.sync.begin(stream)?;
        opts.check(rank)?;
        if let Some(a) = arrivals {
            a.check(rank, world, self.sync.device.index())?;
        }
        self.check_buf("input", &input)?;
        self.check_buf("output", &output)?;
        no_wire(rank, (opts.wire, opts.reduce_launch), input.dtype)?;
        let shard = check_all_gather(rank, world, (input.count, input.dtype), (output.count, output.dtype))?;
        if shard == 0 {
            return arrivals.map_or(Ok(()), |a| a.record_all(stream));
        }
        let captured = mode == Mode::Captured;
        drop(checks);
        let plan = {
            let _t = phase(Phase::Plan);
            self.plan_all_gather(shard, &input, &output, captured, opts)
        };
        let algorithm = plan.algorithm;
        // A traffic call (NOTE [honest floor]) passes no barrier: ce-pull only, whose
        // copies write this rank's memory alone.
        let sync = !opts.traffic;
        if opts.traffic {
            floor::check_traffic(rank, mode, algorithm == AgAlgo::CePull, algorithm.name())?;
        }
        // NOTE [per-piece arrivals]: ce-pull records each piece as it lands, the others all at the end.
        let (each, at_end) = match algorithm {
            AgAlgo::CePull => (arrivals, None),
            _ => (None, arrivals),
        };
        if algorithm == AgAlgo::Ll {
            self.ll_all_gather(&input, &output, stream, (opts.channel, &plan), shard, mode)?;
            at_end.map_or(Ok(()), |a| a.record_all(stream))?;
            // Every 8 bytes travel as a 16-byte line (NOTE [LL protocol]).
            self.count(Moved::AllGather(2 * (world - 1) * shard));
            return Ok(());
        }
        // In place (FSDP's habit): the input is this rank's slot of a symmetric output.
        // Peers' shards are then at their own slots, not at this input's offset, so the
        // input is not read as a symmetric buffer: ce-pull reads the peers' slots of the
        // output, sm-oneshot stages the shard (one local copy), and nothing copies the
        // own shard onto itself.
        let in_place = match (input.symm, output.symm) {
            (Some((ib, io)), Some((ob, oo))) => std::ptr::eq(ib, ob) && io == oo + rank * shard,
            _ => false,
        };
        let input = if in_place { DeviceBuf { symm: None, ..input } } else { input };
        // The own shard is not copied onto itself (in place, symmetric or not).
        let own = if input.ptr == output.ptr + (rank * shard) as u64 { 0 } else { shard };
        // NOTE [algorithm capabilities]: peers write into this rank's output (ce-push), or
        // read its input.
        let push = algorithm.caps().peers == crate::plan::vocab::Peers::WriteOutput;
        let pull_in_place = in_place && algorithm == AgAlgo::CePull;
        // Peers read this rank's ordinary input in place (NOTE [mapped ordinary memory]):
        // the plan says so for eager ce-pull calls only (not captured: the exchange is a host
        // rendezvous per call, NOTE [graph flags]); an input that is symmetric or in place
        // needs no mapping.
        let mapped = plan.map_ordinary && !input.is_symmetric() && !in_place;
        let stage_in = !input.is_symmetric() && !push && !pull_in_place && !mapped;
        let stage_out = !output.is_symmetric() && push;
        if stage_in && !opts.allow_staging {
            if in_place {
                return Err(Error::InvalidArgument(format!(
                    "rank {rank}: an in-place all-gather with {} stages this rank's shard, and staging is \
                     disabled (allow_staging = false): use ce-pull or ce-push",
                    algorithm.name()
                )));
            }
            return Err(refuse_staging(rank, algorithm.name(), "input"));
        }
        if stage_out && !opts.allow_staging {
            return Err(refuse_staging(rank, algorithm.name(), "output"));
        }
        let ch = opts.channel;
        let mut st = self.channel(ch);
        // NOTE [addresses predicted]: not for calls whose arrivals report each peer's
        // shard as it lands (a fix would land after), nor for traffic calls.
        let predict = arrivals.is_none() && !opts.traffic;
        let peers = match mapped {
            true => self.exchange(
                &mut st,
                (opts.allow_staging, predict),
                ch,
                (input.ptr, input.bytes()),
                "all-gather input",
            )?,
            false => None,
        };
        // A rank that cannot share: every rank stages instead.
        let stage_in = stage_in || (mapped && peers.is_none());
        let need = if stage_in { align256(shard) } else { 0 } + if stage_out { world * shard } else { 0 };
        // Any-order arrival (planned for eager memop ce-pull only): after the own shard's
        // fork and join, a fork, and a stream and a join event per peer but the first.
        let any_order = plan.arrival == ArrivalForm::AnyOrder;
        self.prepare(&mut st, ch, mode, need, if any_order { 3 + world.saturating_sub(2) } else { 2 })?;
        if any_order {
            // world - 1 peers, the first on the caller's stream (none at world 1).
            while st.peers.len() < world.saturating_sub(2) {
                let s = self.sync.device.stream(StreamPriority::High)?;
                st.peers.push(s);
            }
        }

        let ws = st.workspace.as_ref();
        let copy = st.copy.as_ref().expect("prepared");
        let (fork, join) = (&st.events[0], &st.events[1]);
        // NOTE [batched copies].
        let (batch, hint) = (plan.copy_batch, plan.copy_hint);
        let out = output.ptr;
        let s = shard as u64;
        // A predicted call's check, handed to the verifier right after the wait for it is
        // enqueued (NOTE [nothing between the wait and its job]), and the watchdog's number of the
        // call, which the verifier's mappings wait for.
        let prediction = peers.as_ref().and_then(Exchanged::prediction);
        let mut registered = None;
        let enqueued: Result<()> = (|| {
            // SAFETY: (the whole block) every pointer is a checked device buffer of this rank
            // or a mapped symmetric buffer of the group, sized as checked above; the
            // barriers order peers' accesses (module docs of `coll`).
            unsafe {
                match algorithm {
                    AgAlgo::CePull => {
                        // Where peer p's shard is: its mapped input, its input, or (in place)
                        // its output slot.
                        let shard_of: Box<dyn Fn(usize) -> u64> = match (&peers, output.symm) {
                            (Some(a), _) => Box::new(|p| a.addrs[p]),
                            (None, Some((buf, off))) if in_place => {
                                let src = Sym { buf, off };
                                Box::new(move |p| src.peer(p) + p as u64 * s)
                            }
                            _ => {
                                let src = self.symmetric_input(stream, &input, ws, (0, plan.copy_hint))?;
                                Box::new(move |p| src.peer(p))
                            }
                        };
                        // The own shard goes on the side stream, beside the barrier; in place
                        // (FSDP2's all-gathers) there is nothing to copy, and without
                        // arrivals nothing to record there: no fork, no join (4 event
                        // operations, about 5 µs of host time inside FSDP2).
                        let side = own > 0 || each.is_some();
                        if side {
                            stream.record(fork)?;
                            copy.wait(fork)?;
                            ce_copy(copy, out + rank as u64 * s, input.ptr, own, hint)?;
                            each.map_or(Ok(()), |a| a.record(copy, rank))?;
                            copy.record(join)?;
                        }
                        // NOTE [arrival-driven all-gather]: the plan's arrival is Barrier
                        // wherever a per-peer wait cannot run, traffic calls included.
                        let arrival = plan.arrival;
                        let epoch = match arrival {
                            ArrivalForm::InOrder | ArrivalForm::AnyOrder => Some(self.sync.memop_arrive(stream, ch)?),
                            _ => {
                                if sync {
                                    self.enter(stream, ch, plan.sync, mode)?;
                                }
                                None
                            }
                        };
                        each.map_or(Ok(()), |a| a.record_started(stream))?;
                        let peers = || rotated(rank, world).filter(|&p| p != rank);
                        // One peer's wait (where the call waits per peer), copy and arrival.
                        let pull = |on: &Stream, p: usize| -> Result<()> {
                            if let Some(e) = epoch {
                                self.sync.memop_await_peer(on, ch, p, e)?;
                            }
                            ce_copy(on, out + p as u64 * s, shard_of(p), shard, hint)?;
                            each.map_or(Ok(()), |a| a.record(on, p))
                        };
                        match (arrival, each) {
                            // The first peer in the rotated order on the caller's stream, each
                            // other on a stream of its own, forked and joined with events.
                            (ArrivalForm::AnyOrder, _) => {
                                let (pfork, joins) = (&st.events[2], &st.events[3..]);
                                stream.record(pfork)?;
                                for (i, p) in peers().enumerate() {
                                    let on = if i == 0 { stream } else { &st.peers[i - 1] };
                                    if i > 0 {
                                        on.wait(pfork)?;
                                    }
                                    pull(on, p)?;
                                    if i > 0 {
                                        on.record(&joins[i - 1])?;
                                    }
                                }
                                for j in &joins[..world.saturating_sub(2)] {
                                    stream.wait(j)?;
                                }
                            }
                            // NOTE [batched copies]: one event per shard, or one wait per
                            // peer, needs one copy each.
                            (ArrivalForm::InOrder, _) | (_, Some(_)) => {
                                for p in peers() {
                                    pull(stream, p)?;
                                }
                            }
                            _ => {
                                let copies: Vec<_> =
                                    peers().map(|p| (out + p as u64 * s, shard_of(p), shard)).collect();
                                ce_copies(stream, batch, &copies, hint)?;
                            }
                        }
                        if let Some(prediction) = prediction {
                            // NOTE [nothing between the wait and its job] (verify.rs).
                            let _t = phase(Phase::Verify);
                            let v = &self.mapping.verifier;
                            let armed = v.arm(&self.sync, stream, ch)?;
                            let call = Arc::new(CallNumber::default());
                            let (seq, number) = (st.map_seq, call.clone());
                            let fix = verify::Fix::Shards { out, shard, hint };
                            let job = verify::Job { channel: ch, seq, call, prediction, armed, fix };
                            v.wait(&self.sync, stream, ch, seq)?;
                            // At once (no driver call between), and before the channel is
                            // released: jobs queue in call order.
                            v.submit(&self.sync, &self.mapping.maps, job)?;
                            registered = Some(number);
                        }
                        if side {
                            stream.wait(join)?;
                        }
                        if sync {
                            self.exit(stream, ch, plan.sync, mode)?;
                        }
                    }
                    AgAlgo::CePush => {
                        let dst = match output.symm {
                            Some((buf, off)) => Sym { buf, off },
                            None => Sym { buf: ws.expect("workspace sized"), off: 0 },
                        };
                        stream.record(fork)?;
                        copy.wait(fork)?;
                        ce_copy(copy, out + rank as u64 * s, input.ptr, own, hint)?;
                        copy.record(join)?;
                        self.enter(stream, ch, plan.sync, mode)?;
                        let copies: Vec<_> = rotated(rank, world)
                            .filter(|&p| p != rank)
                            .map(|p| (dst.peer(p) + rank as u64 * s, input.ptr, shard))
                            .collect();
                        ce_copies(stream, batch, &copies, hint)?;
                        self.exit(stream, ch, plan.sync, mode)?;
                        if stage_out {
                            let local = dst.peer(rank);
                            ce_copy(stream, out, local, rank * shard, hint)?;
                            let after = (rank as u64 + 1) * s;
                            ce_copy(stream, out + after, local + after, (world - rank - 1) * shard, hint)?;
                        }
                        stream.wait(join)?;
                    }
                    AgAlgo::Ll => unreachable!("handled by ll_all_gather"),
                    AgAlgo::SmOneshot => {
                        let src = self.symmetric_input(stream, &input, ws, (0, plan.copy_hint))?;
                        let ctas = plan.ctas;
                        let vec_ok = src.off.is_multiple_of(16) && out.is_multiple_of(16) && shard.is_multiple_of(16);
                        let kernels = self.sync.device.kernels()?;
                        self.one_shot(stream, (ch, plan.sync, mode), |f| {
                            kernels.allgather_oneshot(stream, f, ctas, src.bases(), src.off as u64, out, s, vec_ok)
                        })?;
                    }
                }
            }
            at_end.map_or(Ok(()), |a| a.record_all(stream))
        })();
        // Registered before the channel is released, so that no other user of the
        // channel can retire the workspace ahead of this call's sequence number.
        let finish = phase(Phase::Finish);
        let call = match &enqueued {
            Ok(()) => self.finish(stream, mode, peers.as_ref()),
            Err(e) => Err(e.failure_copy()),
        };
        if let Some(number) = registered {
            // A call never registered keeps its mappings open (never "completed").
            self.mapping.maps.registered(&number, *call.as_ref().unwrap_or(&(u64::MAX / 2)));
        }
        drop(finish);
        enqueued?;
        call?;
        self.count(Moved::AllGather((world - 1) * shard));
        drop(st);
        Ok(())
    }

    /// Reduce-scatter: on every rank, `output` (`n` elements) receives `op` over all
    /// ranks of their input chunk `rank` (`input[rank * n .. (rank + 1) * n]`). f32, f16
    /// and bf16, accumulated in f32, added in rank order. Enqueued on `stream`; every
    /// rank must make the same call.
    pub(crate) fn reduce_scatter(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        op: ReduceOp,
        stream: &Stream,
        opts: &ReduceScatterOptions,
    ) -> Result<()> {
        // NOTE [host time]: the whole call, timed.
        let _call = self.sync.core.clock.call();
        // NOTE [host phases].
        let checks = phase(Phase::Checks);
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        // NOTE [checked calls]: before any check of this rank's own, and anything enqueued.
        let (i, o) = ((input.count, input.dtype), (output.count, output.dtype));
        self.sync.core.check_call(opts.channel, || call_text("reduce-scatter", Some(op), i, o, "elements", opts))?;
        let mode = self.sync.begin(stream)?;
        opts.check(rank)?;
        self.check_buf("input", &input)?;
        self.check_buf("output", &output)?;
        let captured = mode == Mode::Captured;
        drop(checks);
        // NOTE [one planner]: the plan refuses what no algorithm can run as asked; what
        // is left to check here is the arguments.
        let plan = {
            let _t = phase(Phase::Plan);
            self.plan_reduce_scatter(&input, &output, op, captured, opts)?
        };
        let chunk = check_reduce_scatter(rank, world, (input.count, input.dtype), (output.count, output.dtype))?;
        let dt = input.dtype.kernel_index()?;
        if chunk == 0 {
            return Ok(());
        }
        let (algorithm, carry, once) = (plan.algorithm, plan.carry, plan.reduce_launch == LaunchForm::Once);
        wire_steps::refuse_bf16_in_place(rank, carry, &input, &output)?;
        if opts.traffic {
            // ce-reduce, with or without the wire (sm-direct's wire has no copies).
            floor::check_traffic(rank, mode, algorithm == RsAlgo::CeReduce, algorithm.name())?;
        }
        let pe = piece_elems(output.count, plan.pieces);
        let pieces = output.count.div_ceil(pe);
        match algorithm {
            RsAlgo::TmaPushReduce => {
                self.push_reduce(input, output, stream, (opts.channel, &plan), chunk, dt, mode)?;
                self.count(Moved::ReduceScatter((world - 1) * chunk));
                return Ok(());
            }
            RsAlgo::Ll => {
                self.ll_reduce_scatter(&input, &output, op, stream, (opts.channel, &plan), chunk, dt, mode)?;
                self.count(Moved::ReduceScatter(2 * (world - 1) * chunk));
                return Ok(());
            }
            // The split wire, or a bf16 input on sm-direct (`RsPlan::packs`). At one rank
            // the plan carries the f32 call itself (`Carry::Same`).
            _ if plan.packs() => {
                if plan.replays {
                    return self.wire_replayed(&input, &output, op, stream, (opts.channel, &plan));
                }
                return self.wire_reduce_scatter(
                    &input,
                    &output,
                    op,
                    stream,
                    (opts.channel, &plan),
                    (mode, opts.traffic),
                );
            }
            _ => {}
        }
        // The plan maps inputs of eager ce-reduce calls (NOTE [mapped ordinary memory]), and
        // of sm-direct's bf16 input read in place (NOTE [bf16 input read in place]).
        let mapped = plan.map_ordinary && !input.is_symmetric();
        let stage_in = !input.is_symmetric() && !mapped;
        if stage_in && !opts.allow_staging {
            return Err(refuse_staging(rank, algorithm.name(), "input"));
        }
        let esize = input.dtype.size();
        let out_size = output.dtype.size();
        let n = output.count;
        let ctas = plan.ctas;
        let ch = opts.channel;
        let mut st = self.channel(ch);
        // NOTE [addresses predicted]: for sm-direct reading a bf16 input in place, whose
        // kernel waits for the verifier before it reads the addresses (ce-reduce's copies
        // would need a fix of every piece's copies and reductions: not predicted).
        let predict = algorithm == RsAlgo::SmDirect && carry == Carry::Bf16In && !opts.traffic;
        let peers = match mapped {
            true => self.exchange(
                &mut st,
                (opts.allow_staging, predict),
                ch,
                (input.ptr, input.bytes()),
                "reduce-scatter input",
            )?,
            false => None,
        };
        // The watchdog's number of a predicted call, for the verifier's mappings.
        let mut registered = None;
        // A rank that cannot share: every rank stages instead.
        let (mapped, stage_in) = (peers.is_some(), stage_in || (mapped && peers.is_none()));
        let in_len = if stage_in { align256(world * chunk) } else { 0 };
        let ce = algorithm == RsAlgo::CeReduce;
        // sm-direct's kernel reads the mapped peers' addresses from a table in the workspace.
        let table = if mapped && algorithm == RsAlgo::SmDirect { align256(8 * world) } else { 0 };
        let need = in_len + table + if ce { ce_reduce::stage_bytes(world, n, pe, esize, once) } else { 0 };
        self.prepare(&mut st, ch, mode, need, 1 + 2 * pieces)?;
        let ws = st.workspace.as_ref();
        let copy = st.copy.as_ref().expect("prepared");
        let out = output.ptr;
        let kernels = self.sync.device.kernels()?;
        // SAFETY: (the whole block) as in `all_gather`; staging slots are inside the
        // workspace sized above, and a slot is only refilled after the reduction that
        // read it (events).
        unsafe {
            let src =
                if mapped { None } else { Some(self.symmetric_input(stream, &input, ws, (0, plan.copy_hint))?) };
            let input_of = |p: usize| match (&peers, &src) {
                (Some(a), _) => a.addrs[p],
                (None, Some(s)) => s.peer(p),
                (None, None) => unreachable!("mapped or symmetric"),
            };
            match algorithm {
                RsAlgo::CeReduce => {
                    let c = ce_reduce::CeCall {
                        stream,
                        copy,
                        events: &st.events,
                        // One rank stages nothing and may have no workspace: nothing reads it.
                        stage_base: ws.map_or(0, SymmetricBuffer::local_ptr) + in_len as u64,
                        own: input.ptr + (rank * chunk) as u64,
                        out,
                        from: &|p| input_of(p) + (rank * chunk) as u64,
                        n,
                        pe,
                        esize,
                        out_size,
                        plan: carry,
                        dt,
                        ctas,
                        op,
                        channel: ch,
                        sync: plan.sync,
                        mode,
                        once,
                        traffic: opts.traffic,
                        hint: plan.copy_hint,
                    };
                    self.ce_reduce(&c)?;
                }
                // NOTE [bf16 input read in place]: the peers' bf16 chunks read where they
                // are (symmetric, or mapped), one launch, nothing packed. Mapped addresses
                // go to a table in the workspace; predicted ones (NOTE [addresses
                // predicted]) are checked by the verifier, which rewrites a missed one in
                // the table before it writes the word the kernel waits for.
                RsAlgo::SmDirect if carry == Carry::Bf16In => {
                    let at = (rank * chunk) as u64;
                    let (bases, off, job) = match &peers {
                        Some(a) => {
                            let t = ws.expect("workspace sized for the table").local_ptr() + in_len as u64;
                            let ops: Vec<Op> = (0..world)
                                .flat_map(|p| {
                                    let (w, at) = (a.addrs[p], t + 8 * p as u64);
                                    [Op::Write(at, w as u32), Op::Write(at + 4, (w >> 32) as u32)]
                                })
                                .collect();
                            // SAFETY: the table is inside this rank's workspace (sized above),
                            // which the channel's calls use in stream order.
                            raw::mem_op::batch(stream.raw(), &ops, true)?;
                            // A predicted call's job: armed here (the fix waits for `after`,
                            // recorded after the table), submitted right after the kernel
                            // that waits for it is launched (NOTE [nothing between the wait
                            // and its job]; a launch that fails submits nothing).
                            let job = match a.prediction() {
                                Some(prediction) => {
                                    let _t = phase(Phase::Verify);
                                    let armed = self.mapping.verifier.arm(&self.sync, stream, ch)?;
                                    let call = Arc::new(CallNumber::default());
                                    let fix = verify::Fix::Table { table: t };
                                    Some(verify::Job { channel: ch, seq: st.map_seq, call, prediction, armed, fix })
                                }
                                None => None,
                            };
                            (t, at, job)
                        }
                        None => {
                            let src = src.expect("symmetric, or mapped");
                            (src.bases(), src.off as u64 + at, None)
                        }
                    };
                    let vec_ok = off.is_multiple_of(16) && out.is_multiple_of(16);
                    let (pad, n) = (self.sync.pad_args(), n as u64);
                    let v = &self.mapping.verifier;
                    let gate = job.as_ref().map(|j| (v.word(ch), j.seq as u32));
                    self.one_shot(stream, (ch, plan.sync, mode), |f| {
                        kernels.rs_direct_bf16_in(
                            stream,
                            (f, pad, ch),
                            ctas,
                            (bases, off, out, n),
                            (op.code(), vec_ok),
                            gate,
                        )?;
                        if let Some(job) = job {
                            let _t = phase(Phase::Verify);
                            let number = job.call.clone();
                            v.submit(&self.sync, &self.mapping.maps, job)?;
                            registered = Some(number);
                        }
                        Ok(())
                    })?;
                }
                RsAlgo::SmDirect => {
                    let src = src.expect("kernels read symmetric inputs");
                    let off = src.off + rank * chunk;
                    let vec_ok = off.is_multiple_of(16) && out.is_multiple_of(16);
                    self.one_shot(stream, (ch, plan.sync, mode), |f| {
                        kernels.rs_direct(
                            stream,
                            dt,
                            f,
                            ctas,
                            src.bases(),
                            off as u64,
                            out,
                            n as u64,
                            op.code(),
                            vec_ok,
                        )
                    })?;
                }
                RsAlgo::TmaPushReduce | RsAlgo::Ll => {
                    unreachable!("handled by push_reduce and ll_reduce_scatter")
                }
                RsAlgo::TmaReduce | RsAlgo::TmaReduceEvict => {
                    // Every rank's chunk is at the same offset, so one head/body/tail split
                    // (bulk copies need 16-byte alignment) fits all sources.
                    let src = src.expect("kernels read symmetric inputs");
                    let off = src.off + rank * chunk;
                    let (head, body) = tma_split(off, n, esize);
                    let (tile, stages) = plan.tma;
                    let a = TmaArgs {
                        bases: src.bases(),
                        off: off as u64,
                        dst: out,
                        n: n as u64,
                        op: op.code(),
                        head: head as u64,
                        body: body as u64,
                        tile,
                        stages,
                        vec_out: (out + (head * esize) as u64).is_multiple_of(16),
                        evict_first: algorithm == RsAlgo::TmaReduceEvict,
                    };
                    self.one_shot(stream, (ch, plan.sync, mode), |f| kernels.tma_reduce(stream, dt, f, ctas, &a))?;
                }
            }
        }
        self.count(Moved::ReduceScatter((world - 1) * chunk));
        // Registered before the channel is released, so that no other user of the
        // channel can retire the workspace ahead of this call's sequence number.
        let finish = phase(Phase::Finish);
        let call = self.finish(stream, mode, peers.as_ref());
        if let Some(number) = registered {
            // A call never registered keeps its mappings open (never "completed").
            self.mapping.maps.registered(&number, *call.as_ref().unwrap_or(&(u64::MAX / 2)));
        }
        drop(finish);
        call?;
        drop(st);
        Ok(())
    }

    /// The plan of an all-gather on this group (NOTE [one planner]), logged once per
    /// distinct plan with `LOWCON_DEBUG=1`.
    pub(crate) fn plan_all_gather(
        &self,
        shard: usize,
        input: &DeviceBuf<'_>,
        output: &DeviceBuf<'_>,
        captured: bool,
        opts: &AllGatherOptions,
    ) -> AgPlan {
        let call = AgCall { shard, dtype: input.dtype, output_symmetric: output.is_symmetric(), captured };
        let plan = self.planner.all_gather(&call, opts);
        crate::log::plan(self.sync.core.rank, "all-gather", opts.context.name(), shard, &plan);
        plan
    }

    /// The plan of a reduce-scatter on this group (NOTE [one planner]).
    pub(crate) fn plan_reduce_scatter(
        &self,
        input: &DeviceBuf<'_>,
        output: &DeviceBuf<'_>,
        op: ReduceOp,
        captured: bool,
        opts: &ReduceScatterOptions,
    ) -> Result<RsPlan> {
        let chunk = output.count.saturating_mul(input.dtype.size());
        let call = RsCall {
            chunk,
            input: input.dtype,
            output: output.dtype,
            op,
            input_symmetric: input.is_symmetric(),
            captured,
        };
        let plan = self.planner.reduce_scatter(&call, opts)?;
        crate::log::plan(self.sync.core.rank, "reduce-scatter", opts.context.name(), chunk, &plan);
        Ok(plan)
    }

    /// Collective: grows channel `channel`'s workspace to at least `bytes` now, and sets
    /// up its LL buffer, so that no later call has to (both are collective, and must not
    /// race between threads using different channels: reserve before starting them).
    pub(crate) fn reserve_workspace(&self, channel: u32, bytes: usize) -> Result<()> {
        self.sync.core.check_usable()?;
        crate::sync::Epochs::check_channel(channel)?;
        let mut st = self.channel(channel);
        self.prepare(&mut st, channel, Mode::Eager, bytes, 0)?;
        // The LL buffer too (also collective), on the channel's copy stream, waited for.
        let copy = st.copy.clone().expect("prepared");
        self.prepare_ll(&mut st, &copy, (channel, SyncMethod::default(), Mode::Eager))?;
        copy.synchronize()
    }
}
