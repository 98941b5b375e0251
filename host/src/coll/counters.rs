//! What a group's calls moved to and from peers (`stats()`): the counters both backends
//! add to as calls are enqueued, and the record they read into (NOTE [bf16 wire] in
//! `coll::wire` for the wire's top and bottom halves).

/// A group's counters of the bytes its calls moved to or from peers, since it was made
/// (NOTE [bf16 wire]): what this rank's copies and kernels read from or wrote to other
/// ranks' memory, per kind of call. Eager calls count as they are enqueued; a call
/// captured into a CUDA graph counts once, when captured, not per replay, except the
/// fallbacks, which the GPU counts as they run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollStats {
    /// All-gathers.
    pub all_gather_bytes: u64,
    /// Reduce-scatters that send their input's type (a bf16 input into an f32 output
    /// included: its wire is its input).
    pub reduce_scatter_bytes: u64,
    /// Split-wire reduce-scatters (f32 over a bf16 wire): the top halves.
    pub wire_bytes: u64,
    /// Split-wire reduce-scatters: the bottom halves read for pieces flagged inexact.
    pub fallback_bytes: u64,
    /// Split-wire pieces this rank received (pieces x peers).
    pub wire_pieces: u64,
    /// Of those, the pieces whose bottom halves it had to read.
    pub fallback_pieces: u64,
    /// Host rendezvous this rank made: blocking exchanges with the other ranks through
    /// the host (the store, the address mailbox), its group's creation included. With
    /// `map_ordinary`, a call this rank made before makes none (NOTE [addresses
    /// predicted]).
    pub host_rendezvous: u64,
    /// `map_ordinary` calls whose peer addresses were predicted, and of those the ones
    /// where a peer's buffer was elsewhere (fixed by a copy before the call completed).
    pub predicted_calls: u64,
    pub mispredicted_calls: u64,
    /// Collective calls this rank made (all-gathers and reduce-scatters), the host
    /// nanoseconds they took from entry to return, and of those the nanoseconds spent in
    /// host rendezvous, the group's creation's included (NOTE [host time] in
    /// `rendezvous`): per call, what is not rendezvous is the library's own work, mostly
    /// the launches and copies it enqueues.
    pub host_calls: u64,
    pub host_call_ns: u64,
    pub host_rendezvous_ns: u64,
    /// Of the host rendezvous, the address mailbox's posts that waited for a peer to
    /// read the entry they replace (this rank `DEPTH` = 8 calls of a channel ahead of that
    /// peer's host), and their nanoseconds: backpressure between the hosts, not an
    /// exchange the call needed.
    pub mailbox_waits: u64,
    pub mailbox_wait_ns: u64,
    /// Eager split-wire reduce-scatters launched as a graph, and the captures made for
    /// them (NOTE [wire replays] in `coll::gpu`; 0 on the host backend).
    pub wire_replays: u64,
    pub wire_captures: u64,
}

impl CollStats {
    /// These counters with the group's host rendezvous (the store's waits and the address
    /// mailbox's, since the group was made, its creation's included) and its host time
    /// (NOTE [host time] in `rendezvous`) filled in: what both backends' `stats()` report
    /// alike.
    pub(crate) fn with_host_time(self, core: &crate::rendezvous::GroupCore) -> Self {
        let (host_calls, host_call_ns, host_rendezvous_ns, mailbox_wait_ns) = core.clock.read();
        Self {
            host_rendezvous: core.clock.rendezvous.load(std::sync::atomic::Ordering::Relaxed),
            host_calls,
            host_call_ns,
            host_rendezvous_ns,
            mailbox_waits: core.clock.mailbox_waits.load(std::sync::atomic::Ordering::Relaxed),
            mailbox_wait_ns,
            ..self
        }
    }

    /// Every byte moved to or from peers.
    pub fn total_bytes(&self) -> u64 {
        self.all_gather_bytes + self.reduce_scatter_bytes + self.wire_bytes + self.fallback_bytes
    }
}

/// The host-side counters of a group (the device adds the fallbacks on GPUs).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    all_gather: std::sync::atomic::AtomicU64,
    reduce_scatter: std::sync::atomic::AtomicU64,
    wire: std::sync::atomic::AtomicU64,
    wire_pieces: std::sync::atomic::AtomicU64,
    fallback: std::sync::atomic::AtomicU64,
    fallback_pieces: std::sync::atomic::AtomicU64,
    /// NOTE [wire replays]: split-wire calls launched as a graph, and captures made.
    wire_replays: std::sync::atomic::AtomicU64,
    wire_captures: std::sync::atomic::AtomicU64,
}

/// What one call adds to the counters.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Moved {
    AllGather(usize),
    ReduceScatter(usize),
    /// Top-half bytes and pieces (x peers) of a split-wire call.
    Wire(usize, usize),
    /// Bottom-half bytes and pieces read (host backend; GPUs count them on the device).
    Fallback(usize, usize),
}

impl Counters {
    pub(crate) fn add(&self, m: Moved) {
        use std::sync::atomic::Ordering::Relaxed;
        match m {
            Moved::AllGather(b) => self.all_gather.fetch_add(b as u64, Relaxed),
            Moved::ReduceScatter(b) => self.reduce_scatter.fetch_add(b as u64, Relaxed),
            Moved::Wire(b, p) => {
                self.wire_pieces.fetch_add(p as u64, Relaxed);
                self.wire.fetch_add(b as u64, Relaxed)
            }
            Moved::Fallback(b, p) => {
                self.fallback_pieces.fetch_add(p as u64, Relaxed);
                self.fallback.fetch_add(b as u64, Relaxed)
            }
        };
    }

    /// A split-wire call launched as a graph (NOTE [wire replays]), `captured` for it.
    pub(crate) fn replayed(&self, captured: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.wire_replays.fetch_add(1, Relaxed);
        if captured {
            self.wire_captures.fetch_add(1, Relaxed);
        }
    }

    /// The counts so far, with `device`'s (fallback pieces, bytes) added.
    pub(crate) fn read(&self, device: (u64, u64)) -> CollStats {
        use std::sync::atomic::Ordering::Relaxed;
        CollStats {
            all_gather_bytes: self.all_gather.load(Relaxed),
            reduce_scatter_bytes: self.reduce_scatter.load(Relaxed),
            wire_bytes: self.wire.load(Relaxed),
            fallback_bytes: self.fallback.load(Relaxed) + device.1,
            wire_pieces: self.wire_pieces.load(Relaxed),
            fallback_pieces: self.fallback_pieces.load(Relaxed) + device.0,
            wire_replays: self.wire_replays.load(Relaxed),
            wire_captures: self.wire_captures.load(Relaxed),
            ..CollStats::default()
        }
    }
}
