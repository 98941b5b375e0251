//! Collectives captured into CUDA graphs: the synchronisation a replay can repeat.
//!
//! NOTE [graph flags]: an eager call's barriers wait for epochs the host chose when it
//! enqueued them; a graph replays the values of its capture, so a replayed wait would
//! find its epoch long reached and skip the synchronisation. Captured barriers use
//! flags instead, in slots of their own (`pad::GRAPH_ENTRY`, `pad::GRAPH_EXIT`), in
//! the device pad for kernel waits and the host pad for stream-memop waits, as for
//! eager ones: a signal writes `GRAPH_SET` (1) into the peer's slot, and the waiter,
//! once its wait saw 1, writes 0 back. Nothing the host chose per call is left, so
//! every replay is a fresh barrier, and eager calls (epochs, other slots) may come
//! between replays on one channel.
//!
//! Why no signal is lost (the one hazard of resetting a flag): every captured call has
//! an entry barrier on `GRAPH_ENTRY` and an exit barrier on `GRAPH_EXIT`, in that
//! order (a captured `barrier()` is one of each), so on one channel the kinds
//! alternate on every rank. Take this rank's slot `s` of one kind, written by peer `p`.
//! Between two writes of `s`, `p` passes a barrier of the other kind, which needs this
//! rank's signal of that kind; this rank sends it after its wait on `s` and the reset
//! of `s` (stream order, and a system-scope fence before every signal). So `p`'s next
//! write of `s` comes after the reset, and the reset never erases a signal. The fused
//! kernels keep the order too: their last CTA resets the entry slots (every CTA has
//! passed its entry wait by then) before it signals the exit.
//!
//! A captured bf16-wire reduce-scatter (and lowcon's own replays of eager ones, NOTE [wire
//! replays] in `coll::gpu::replays`) has an exit barrier only. Its flags are safe all the
//! same: a peer's next exit signal on the channel follows its reductions of the next
//! call, which wait for this rank's packs of that call, which this rank enqueues after
//! its exit wait and reset (stream order).
//!
//! What else a captured call must not decide per call:
//! - LL rounds live on the device (NOTE [LL rounds on the device]);
//! - workspaces and LL buffers must exist before the capture (growing them is
//!   collective and allocates): a capture that would need them is refused, naming the
//!   channel and the bytes to reserve;
//! - `map_ordinary`'s address exchange is a host rendezvous per call: captured calls
//!   stage ordinary inputs instead (as `allow_staging` permits);
//! - the watchdog registers a call by an event recorded after it, which a capture does
//!   not run: replays are registered instead (`track_replay`, after each replay), and
//!   kernel waits keep their device-side timeout either way.
//!
//! Point-to-point signals cannot be captured: a replayed signal has no return path that
//! tells it the peer reset the last one.
//!
//! NOTE [memop batches]: a graph's stream-memop node costs about 1.3 µs of host time at
//! every launch, whatever memory it targets, and a four-byte copy into host memory about
//! as much; a batch of 8 operations in one node cost 2.6 µs (1x H100, 2026-11-25, 6b66d21,
//! the measurements of the rough-edges issue). A barrier with one node per signal, wait
//! and reset made a 12-layer memop graph (228 nodes, 144 of them memops) 396 µs to
//! launch. So a stream-memop barrier, eager or captured, is one `cuStreamBatchMemOp`: the
//! signals to every peer, the waits for every peer, the resets (captured), in that order
//! (a batch runs its operations in order, each write after the driver's memory barrier),
//! the same operations as before in one node. The waits stay in the host pad (NOTE [host
//! pad]), which a device-memory copy could not signal.
//!
//! NOTE [captured sync]: a replay costs the host the launch of its nodes, and one node per
//! barrier is the floor for memop waits (a wait is a memop, and a graph cannot wait
//! otherwise without an SM). The 12-layer loop of the rough-edges issue has 48 captured
//! barriers: 215-254 µs per replay with 2 ranks sharing an H100 under MPS (4.5 µs a
//! batch node), and at the 2.6 µs a batch node costs alone, about 125 µs; its kernel-sync
//! twin replays in 27-32 µs. So captured calls take kernel waits unless the caller asks
//! otherwise (`CollOptions::graph_sync`, default `Kernel`, whatever `sync` says for eager
//! calls): memop waits in a graph are for steps whose waits must hold no SM (beside
//! GEMMs that fill every SM), at that host cost. An explicit `barrier(method)` captures
//! the method it names.

use std::sync::atomic::Ordering;

use lowcon_abi::pad;

use super::GpuSync;
use crate::cuda::{Stream, raw};
use crate::error::{Error, Result};
use crate::sync::SyncMethod;

/// Whether a call is enqueued for now or captured into a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Eager,
    Captured,
}

impl GpuSync {
    /// Checks `stream` for a call of this group, and says whether it is being captured.
    /// A capture that was invalidated is refused.
    pub(crate) fn begin(&self, stream: &Stream) -> Result<Mode> {
        super::reentry::refuse_inside_producer(self.core.rank)?;
        self.core.check_usable()?;
        if stream.device().index() != self.device.index() {
            return Err(Error::InvalidArgument(format!(
                "rank {}: the stream is on device {} but the group uses device {}",
                self.core.rank,
                stream.device().index(),
                self.device.index()
            )));
        }
        self.device.bind_to_thread()?;
        // SAFETY: a live stream of this device, whose context is current.
        match unsafe { raw::capture::status(stream.raw()) } {
            raw::capture::Status::None => Ok(Mode::Eager),
            raw::capture::Status::Active => Ok(Mode::Captured),
            raw::capture::Status::Other(why) => {
                Err(Error::InvalidArgument(format!("rank {}: the stream cannot take this call: {why}", self.core.rank)))
            }
        }
    }

    /// As [`GpuSync::begin`], for calls that cannot be captured: a capturing stream is
    /// refused, naming `what`, before anything is enqueued (the capture stays valid).
    pub(crate) fn check_stream_for(&self, stream: &Stream, what: &str) -> Result<()> {
        match self.begin(stream)? {
            Mode::Eager => Ok(()),
            Mode::Captured => Err(Error::InvalidArgument(format!(
                "rank {}: {what} cannot be captured into a CUDA graph (collectives and barriers can; \
                 docs/design.md, \"CUDA graphs\"): call it outside the capture",
                self.core.rank
            ))),
        }
    }

    /// Enqueues one captured barrier of `kind` (`GRAPH_ENTRY` or `GRAPH_EXIT`) on
    /// `channel` (NOTE [graph flags]).
    pub(crate) fn graph_barrier(&self, stream: &Stream, channel: u32, method: SyncMethod, kind: u32) -> Result<()> {
        debug_assert!(kind == pad::GRAPH_ENTRY || kind == pad::GRAPH_EXIT);
        self.mark_graph_channel(channel);
        self.note_wait_method(channel, kind, method);
        match method {
            // SAFETY: pad pointers and the error record are owned by `self`.
            SyncMethod::Kernel => unsafe {
                self.device.kernels()?.barrier(stream, self.pad_args(), channel, kind, pad::GRAPH_SET)
            },
            // The wait, then the reset (NOTE [graph flags]), in one batch node.
            SyncMethod::StreamMemop => self.memop_barrier(stream, channel, (kind, pad::GRAPH_SET), true),
        }
    }

    /// Notes that a captured call uses `channel` (its graph slots are then watched).
    pub(crate) fn mark_graph_channel(&self, channel: u32) {
        self.graph_channels.fetch_or(1 << channel, Ordering::Relaxed);
    }

    /// Registers the work enqueued on `stream` so far (a replayed graph with lowcon's
    /// calls in it) with the watchdog, as an eager call registers itself: a dead or late
    /// peer is then named while it runs. Never waits.
    pub(crate) fn track_replay(&self, stream: &Stream) -> Result<()> {
        self.check_stream_for(stream, "registering a replay")?;
        let seq = self.track(stream)?;
        self.graph_last.fetch_max(seq + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a registered replay is still in flight on this rank.
    pub(crate) fn replay_in_flight(&self) -> bool {
        let last = self.graph_last.load(Ordering::Relaxed);
        last > 0 && !self.done_before(last)
    }

    /// The graph slots of this rank's pads (channels that captured calls used), as
    /// (channel, kind, peer, slot index).
    fn graph_slots(&self) -> Vec<(u32, u32, usize, usize)> {
        let used = self.graph_channels.load(Ordering::Relaxed);
        let world = self.core.world;
        let mut v = Vec::new();
        for channel in (0..pad::CHANNELS).filter(|c| used & (1 << c) != 0) {
            for kind in [pad::GRAPH_ENTRY, pad::GRAPH_EXIT] {
                for peer in (0..world).filter(|&p| p != self.core.rank) {
                    v.push((channel, kind, peer, pad::slot(channel, kind, peer as u32, world as u32) as usize));
                }
            }
        }
        v
    }

    /// Names the peer a stuck replay waits for, from this rank's pads: in a barrier
    /// where some peers' flags arrived and others' did not, the first whose did not
    /// (`None` if no barrier is half-arrived, e.g. at two ranks, where the waiting
    /// rank's flag is simply 0: then every peer is a suspect).
    pub(crate) fn graph_missing(&self, host: &[u32], dev: &[u32]) -> Option<(u32, usize)> {
        let slots = self.graph_slots();
        for (channel, kind) in slots.iter().map(|s| (s.0, s.1)) {
            for pad in [host, dev] {
                let of = slots.iter().filter(|s| s.0 == channel && s.1 == kind);
                let arrived = of.clone().filter(|s| pad[s.3] != 0).count();
                if arrived > 0
                    && let Some(s) = of.clone().find(|s| pad[s.3] == 0)
                {
                    return Some((channel, s.2));
                }
            }
        }
        None
    }

    /// Releases the captured waits of a failed group (the host pad's graph slots; kernel
    /// waits give up on the abort word). A released memop wait resets its slot to 0 and
    /// the next queued replay waits on it again, so one write per round (a round a
    /// millisecond) would drain a thousand queued replays in seconds: this keeps writing
    /// the flag into every slot found at 0 until a pass finds none consumed, or for at
    /// most [`GRAPH_RELEASE_SPIN`]. A slot no wait consumes just stays set.
    pub(crate) fn release_graph_flags(&self) -> usize {
        let slots = self.graph_slots();
        if slots.is_empty() {
            return 0;
        }
        let start = std::time::Instant::now();
        let mut released = 0;
        loop {
            let mut consumed = 0;
            for s in &slots {
                if self.host_pad.release_flag(s.3) {
                    consumed += 1;
                }
            }
            released += consumed;
            if consumed == 0 || start.elapsed() > GRAPH_RELEASE_SPIN {
                return released.max(slots.len());
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
}

/// The longest one release round keeps re-setting graph flags (see
/// [`GpuSync::release_graph_flags`]).
const GRAPH_RELEASE_SPIN: std::time::Duration = std::time::Duration::from_millis(5);
