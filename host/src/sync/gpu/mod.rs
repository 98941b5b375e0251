//! Barriers and signals on GPU streams. Each is enqueued: a one-CTA Rust kernel with
//! system-scope release/acquire and a timeout ([`SyncMethod::Kernel`]), or stream
//! memory operations and 4-byte copy-engine writes that need no SM
//! ([`SyncMethod::StreamMemop`]). `failure` holds what happens when a peer does not
//! arrive.

pub(crate) mod failure;
pub(crate) mod graph;
pub(crate) mod host_pad;
pub(crate) mod inflight;
pub(crate) mod reentry;
pub(crate) mod sentinel;
pub(crate) mod watchdog;
pub(crate) mod wire_pieces;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use lowcon_abi::pad;

use self::failure::HostRecord;
use self::host_pad::HostPad;
use self::inflight::{InFlight, Rules};
use super::{Epochs, SyncMethod};
use crate::cuda::kernels::PadArgs;
use crate::cuda::{Device, Event, Stream, StreamPriority, raw};
use crate::error::Result;
use crate::memory::gpu::{Drain, HandleKind, SymmetricBuffer, alloc};
use crate::memory::pinned::Pinned;
use crate::rendezvous::GroupCore;

/// A GPU group's synchronisation: its rendezvous, device, epochs, signal pads, error
/// record, and the completion events of the collective calls in flight.
///
/// Fields drop in order: the group core (and with it the socket mesh peers watch for a
/// hang-up) is last, after every buffer has waited for this GPU to drain.
pub(crate) struct GpuSync {
    pub(crate) device: Device,
    /// How symmetric memory is shared (for every later allocation).
    handles: HandleKind,
    epochs: Mutex<Epochs>,
    pub(crate) pads: SymmetricBuffer,
    /// The slots of stream-memop waits, in shared host memory (NOTE [host pad]).
    host_pad: HostPad,
    err: HostRecord,
    /// Where `read_own_pad` copies this rank's pad (pinned, so the copy is truly
    /// asynchronous and its wait can be bounded).
    pad_mirror: Pinned,
    /// For failure handling only: reads and releases of this rank's pad, which must
    /// not queue behind the (possibly stuck) collective streams.
    side: Stream,
    /// The collective calls in flight (the watchdog retires them); `wake` tells the
    /// watchdog that calls arrived, or that it must stop (`stopping`).
    inflight: Mutex<InFlight<Arc<Event>>>,
    wake: Condvar,
    /// The watchdog sleeps on `wake` with its long idle tick (set and read under
    /// `inflight`'s lock): only then does a new call wake it (NOTE [watchdog wakes]).
    watchdog_asleep: AtomicBool,
    stopping: AtomicBool,
    rules: Rules,
    /// Workspaces replaced by larger ones, with the sequence number of the first call
    /// that no longer uses them: freed by the watchdog once every earlier call is done.
    retired: Mutex<Vec<(u64, SymmetricBuffer)>>,
    /// One past the sequence number of the last LL call (0: none yet). LL kernels wait
    /// for data lines, not pad slots, so while one is in flight every peer is awaited
    /// (`awaits_missing_from`).
    ll_last: std::sync::atomic::AtomicU64,
    /// The watchdog's current step, which the sentinel watches (NOTE [stuck watchdog]).
    watch_step: sentinel::Stage,
    /// Release rounds run so far (for the debug log).
    release_rounds: std::sync::atomic::AtomicU64,
    /// The watchdog is diagnosing a timeout (the sentinel takes over if that is stuck).
    diagnosing: AtomicBool,
    /// Per (channel, kind): whether the last wait issued there was a stream-memop wait
    /// (its signal lands in the host pad) rather than a kernel's (the device pad), so a
    /// diagnosis from the host pad alone looks only where it can see.
    memop_last: Vec<AtomicBool>,
    /// Channels on which calls were captured (bit per channel): their graph slots are
    /// what a stuck replay may wait on (NOTE [graph flags], `graph.rs`).
    graph_channels: std::sync::atomic::AtomicU32,
    /// One past the sequence number of the last registered replay (0: none yet).
    graph_last: std::sync::atomic::AtomicU64,
    /// Every rank's host pad as this GPU addresses it: where memop-sync piece signals
    /// of the bf16 wire go (NOTE [bf16 wire]).
    host_pads: cudarc::driver::CudaSlice<u64>,
    /// Channels on which bf16-wire calls ran (bit per channel): their piece words are
    /// released when the group fails.
    wire_channels: std::sync::atomic::AtomicU32,
    /// Where `read_stats` copies this rank's counters.
    stats_mirror: Pinned,
    /// A stream-memop barrier's operations go as one batch (NOTE [memop batches];
    /// the planner's setting, NOTE [plan settings]).
    memop_batch: bool,
    pub(crate) core: GroupCore,
}

impl GpuSync {
    /// Collective: allocates the pads, the error record and the pad mirror. `memop_batch`:
    /// the planner's setting (NOTE [plan settings]): a stream-memop barrier as one batch.
    pub(crate) fn new(core: GroupCore, device: Device, (handles, memop_batch): (HandleKind, bool)) -> Result<Self> {
        device.kernels()?;
        let world = core.world as u32;
        let pads = alloc(&core, &device, handles, pad::buffer_bytes(world), "the signal pads")?;
        let host_pad = HostPad::new(&core, &device, Drain::new(&core))?;
        let err = HostRecord::new(&device, Drain::new(&core))?;
        let pad_mirror = Pinned::new(&device, pad::bytes(world), Drain::new(&core))?;
        let stats_mirror = Pinned::new(&device, pad::STATS * 8, Drain::new(&core))?;
        let side = device.stream(StreamPriority::High)?;
        let host_pads = side.upload(host_pad.dev_ptrs())?;
        side.synchronize()?;
        let core_timeout = core.timeout;
        Ok(Self {
            epochs: Mutex::new(Epochs::new(core.world)),
            core,
            device,
            handles,
            pads,
            host_pad,
            err,
            pad_mirror,
            side,
            inflight: Default::default(),
            wake: Condvar::new(),
            watchdog_asleep: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            rules: Rules::for_timeout(core_timeout),
            retired: Mutex::new(Vec::new()),
            ll_last: Default::default(),
            watch_step: Default::default(),
            release_rounds: Default::default(),
            diagnosing: AtomicBool::new(false),
            memop_last: (0..pad::CHANNELS * pad::KINDS).map(|_| AtomicBool::new(false)).collect(),
            memop_batch,
            graph_channels: Default::default(),
            graph_last: Default::default(),
            host_pads,
            wire_channels: Default::default(),
            stats_mirror,
        })
    }

    /// Registers a call just enqueued on `stream`: records its completion event (a
    /// reused one when the watchdog has freed some) and hands it to the watchdog.
    /// Never waits.
    pub(crate) fn track(&self, stream: &Stream) -> Result<u64> {
        let free = self.inflight.lock().unwrap_or_else(|p| p.into_inner()).take_free();
        let ev = match free {
            Some(e) => e,
            None => Arc::new(stream.event(false)?),
        };
        // Not under the lock: recording takes a slot in the stream's queue and blocks
        // while the driver's queue is full, and the watchdog must still get the lock then
        // (to find a dead peer and release the waits that drain the queue).
        stream.record(&ev)?;
        let mut q = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let seq = q.push(stream.raw() as u64, ev, Instant::now());
        // Read under the lock the watchdog sets it under (NOTE [watchdog wakes]).
        let asleep = self.watchdog_asleep.load(std::sync::atomic::Ordering::Relaxed);
        // Woken after the lock is released, so the watchdog does not wake only to wait
        // for it.
        drop(q);
        if asleep {
            self.wake.notify_all();
        }
        Ok(seq)
    }

    /// As [`GpuSync::track`], for an LL call: until it completes, a dead peer is one
    /// this rank waits for (its kernels wait on data lines, which the pad does not show).
    pub(crate) fn track_ll(&self, stream: &Stream) -> Result<()> {
        let seq = self.track(stream)?;
        self.ll_last.fetch_max(seq + 1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Whether an LL call is still in flight on this rank.
    pub(crate) fn ll_in_flight(&self) -> bool {
        let last = self.ll_last.load(std::sync::atomic::Ordering::Relaxed);
        last > 0 && !self.inflight.lock().unwrap_or_else(|p| p.into_inner()).done_before(last)
    }

    /// Whether every call registered with a sequence number below `seq` has completed
    /// (as the watchdog last saw).
    pub(crate) fn done_before(&self, seq: u64) -> bool {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner()).done_before(seq)
    }

    /// Hands `buf` (a workspace no later call will use) to the watchdog, which frees it
    /// once the calls enqueued so far have completed. Never waits.
    pub(crate) fn retire(&self, buf: SymmetricBuffer) {
        let seq = self.inflight.lock().unwrap_or_else(|p| p.into_inner()).next_seq();
        self.retired.lock().unwrap_or_else(|p| p.into_inner()).push((seq, buf));
    }

    /// Records the method of the wait just issued on (`channel`, `kind`).
    pub(crate) fn note_wait_method(&self, channel: u32, kind: u32, method: SyncMethod) {
        let i = (channel * pad::KINDS + kind) as usize;
        self.memop_last[i].store(method == SyncMethod::StreamMemop, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the last wait issued on (`channel`, `kind`) was a stream-memop wait.
    pub(crate) fn memop_last(&self, channel: u32, kind: u32) -> bool {
        self.memop_last[(channel * pad::KINDS + kind) as usize].load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn epochs(&self) -> MutexGuard<'_, Epochs> {
        self.epochs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Collective: a symmetric buffer of `bytes` on every rank, for `purpose` (NOTE
    /// [allocations agreed]).
    pub(crate) fn alloc(&self, bytes: usize, purpose: &str) -> Result<SymmetricBuffer> {
        self.core.check_usable()?;
        alloc(&self.core, &self.device, self.handles, bytes, purpose)
    }

    pub(crate) fn pad_args(&self) -> PadArgs {
        PadArgs {
            pads: crate::cuda::device_ptr(self.pads.device_peer_ptrs()),
            rank: self.core.rank as u32,
            world: self.core.world as u32,
            err: self.err.device_ptr(),
            timeout_ns: self.core.timeout.as_nanos().min(u64::MAX as u128) as u64,
        }
    }

    /// As [`GpuSync::begin`], refusing a capturing stream (calls that cannot be
    /// captured: synchronising, point-to-point signals, the traffic floor).
    pub(crate) fn check_stream(&self, stream: &Stream) -> Result<()> {
        self.check_stream_for(stream, "this call")
    }

    /// Memop signal: one write-value of the epoch into `peer`'s host pad (NOTE [host
    /// pad]); the driver's default memory barrier before it, and stream order, put it
    /// after everything enqueued before (copies into the peer's memory included).
    fn memop_signal(&self, stream: &Stream, peer: usize, channel: u32, kind: u32, epoch: u32) -> Result<()> {
        let slot = pad::slot(channel, kind, self.core.rank as u32, self.core.world as u32);
        // SAFETY: the slot is inside `peer`'s registered host pad, owned by `self`.
        unsafe { raw::mem_op::write_u32(stream.raw(), self.host_pad.slot_dev(peer, slot), epoch) }
    }

    fn memop_wait(&self, stream: &Stream, peer: usize, channel: u32, kind: u32, epoch: u32) -> Result<()> {
        let slot = pad::slot(channel, kind, peer as u32, self.core.world as u32);
        // SAFETY: the slot is inside this rank's registered host pad, owned by `self`.
        unsafe { raw::mem_op::wait_geq_u32(stream.raw(), self.host_pad.slot_dev(self.core.rank, slot), epoch) }
    }

    /// Enqueues a barrier of all ranks on `channel`. Work enqueued on `stream` before it
    /// (kernels, copies into peers' buffers) is visible to every rank's work after it.
    /// Asynchronous: a peer that never arrives shows in [`GpuSync::synchronize`].
    ///
    /// Captured into a CUDA graph, it is two barriers, an entry and an exit (NOTE [graph
    /// flags]), so that every replay synchronises afresh.
    pub fn barrier(&self, stream: &Stream, channel: u32, method: SyncMethod) -> Result<()> {
        let mode = self.begin(stream)?;
        Epochs::check_channel(channel)?;
        if mode == graph::Mode::Captured {
            self.graph_barrier(stream, channel, method, pad::GRAPH_ENTRY)?;
            return self.graph_barrier(stream, channel, method, pad::GRAPH_EXIT);
        }
        self.barrier_eager(stream, channel, method)
    }

    /// One eager barrier (the stream is checked and not capturing).
    pub(crate) fn barrier_eager(&self, stream: &Stream, channel: u32, method: SyncMethod) -> Result<()> {
        let epoch = self.epochs().next_barrier(channel);
        self.note_wait_method(channel, pad::BARRIER, method);
        match method {
            // SAFETY: pad pointers and the error record are owned by `self`.
            SyncMethod::Kernel => unsafe {
                self.device.kernels()?.barrier(stream, self.pad_args(), channel, pad::BARRIER, epoch)
            },
            SyncMethod::StreamMemop => self.memop_barrier(stream, channel, (pad::BARRIER, epoch), false),
        }
    }

    /// A stream-memop barrier as one batch (NOTE [memop batches] in `graph.rs`): this
    /// rank's signal to every peer, then its wait for every peer's, then (`reset`, the
    /// graph flags) its slots back to 0.
    pub(crate) fn memop_barrier(
        &self,
        stream: &Stream,
        channel: u32,
        (kind, value): (u32, u32),
        reset: bool,
    ) -> Result<()> {
        use raw::mem_op::Op;
        let (rank, world) = (self.core.rank, self.core.world as u32);
        let peers = (0..self.core.world).filter(|&p| p != rank);
        let mine = pad::slot(channel, kind, rank as u32, world);
        let own = |p: usize| self.host_pad.slot_dev(rank, pad::slot(channel, kind, p as u32, world));
        let mut ops: Vec<Op> = peers.clone().map(|p| Op::Write(self.host_pad.slot_dev(p, mine), value)).collect();
        ops.extend(peers.clone().map(|p| Op::WaitGeq(own(p), value)));
        if reset {
            ops.extend(peers.map(|p| Op::Write(own(p), 0)));
        }
        // SAFETY: every slot is inside a registered host pad owned by `self`.
        unsafe { raw::mem_op::batch(stream.raw(), &ops, self.memop_batch) }
    }

    /// The first half of an eager stream-memop barrier split per peer (NOTE
    /// [arrival-driven all-gather] in `coll::gpu`): this rank's signal to every peer on
    /// `channel`, as one batch, after everything enqueued on `stream` before. Returns the
    /// barrier's epoch, which [`GpuSync::memop_await_peer`] then waits for, one peer at a
    /// time and on any stream. The same slots and epoch as [`GpuSync::barrier`]: with one
    /// wait for every peer it is that barrier (the watchdog releases it the same way).
    pub(crate) fn memop_arrive(&self, stream: &Stream, channel: u32) -> Result<u32> {
        use raw::mem_op::Op;
        let epoch = self.epochs().next_barrier(channel);
        self.note_wait_method(channel, pad::BARRIER, SyncMethod::StreamMemop);
        let (rank, world) = (self.core.rank, self.core.world as u32);
        let mine = pad::slot(channel, pad::BARRIER, rank as u32, world);
        let ops: Vec<Op> = (0..self.core.world)
            .filter(|&p| p != rank)
            .map(|p| Op::Write(self.host_pad.slot_dev(p, mine), epoch))
            .collect();
        // SAFETY: every slot is inside a registered host pad owned by `self`.
        unsafe { raw::mem_op::batch(stream.raw(), &ops, self.memop_batch)? };
        Ok(epoch)
    }

    /// The second half, for one peer: work enqueued on `stream` after this sees what
    /// `peer` did before its [`GpuSync::memop_arrive`] of `epoch` on `channel`.
    pub(crate) fn memop_await_peer(&self, stream: &Stream, channel: u32, peer: usize, epoch: u32) -> Result<()> {
        self.memop_wait(stream, peer, channel, pad::BARRIER, epoch)
    }

    /// Enqueues a signal to `peer` on `channel`, after everything enqueued before.
    pub fn put_signal(&self, stream: &Stream, peer: usize, channel: u32, method: SyncMethod) -> Result<()> {
        self.check_stream_for(stream, "a point-to-point signal (put_signal)")?;
        crate::sync::check_peer(&self.core, peer, channel)?;
        let epoch = self.epochs().next_send(channel, peer);
        match method {
            // SAFETY: pad pointers and the error record are owned by `self`; peer < world.
            SyncMethod::Kernel => unsafe {
                self.device.kernels()?.put_signal(stream, self.pad_args(), peer as u32, channel, epoch)
            },
            SyncMethod::StreamMemop => self.memop_signal(stream, peer, channel, pad::P2P, epoch),
        }
    }

    /// Enqueues a wait for `peer`'s next signal on `channel`; work after it sees what
    /// the peer did before signalling.
    pub fn wait_signal(&self, stream: &Stream, peer: usize, channel: u32, method: SyncMethod) -> Result<()> {
        self.check_stream_for(stream, "a point-to-point signal (wait_signal)")?;
        crate::sync::check_peer(&self.core, peer, channel)?;
        let epoch = self.epochs().next_receive(channel, peer);
        self.note_wait_method(channel, pad::P2P, method);
        match method {
            // SAFETY: pad pointers and the error record are owned by `self`; peer < world.
            SyncMethod::Kernel => unsafe {
                self.device.kernels()?.wait_signal(stream, self.pad_args(), peer as u32, channel, epoch)
            },
            SyncMethod::StreamMemop => self.memop_wait(stream, peer, channel, pad::P2P, epoch),
        }
    }
}
