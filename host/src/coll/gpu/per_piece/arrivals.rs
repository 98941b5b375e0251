//! Per-piece arrival signals of an all-gather, so that a consumer starts on the pieces
//! that have landed (fused all-gather-matmul, `lowcon.tp`).
//!
//! NOTE [per-piece arrivals]: an [`Arrivals`] holds one CUDA event per rank. An all-gather given
//! it (`GpuGroup::all_gather_arrivals`) records event `p` once piece `p` (rank `p`'s
//! shard) is in the output, and a consumer stream waits for piece `p` alone
//! ([`Arrivals::wait`]). Events need no SM and no host work at replay: in a CUDA graph,
//! a record and a wait in the same capture become an edge between the copy of piece
//! `p` and the consumer's node.
//! - **ce-pull** (and `auto` where it picks ce-pull) records each piece as it lands:
//!   the own piece after its local copy (on the channel's copy stream, at once), then
//!   the peers' in the order the call pulls them, [`Arrivals::order`] (rank + 1,
//!   rank + 2, ...), each after its own copy.
//! - Other algorithms land every piece at once: all events are recorded when the call
//!   ends.
//!
//! One more event says the call has *started* ([`Arrivals::wait_started`]): with ce-pull,
//! recorded once the entry barrier has passed (every peer's piece is ready to be read),
//! else with the pieces. A consumer that waits for it before its first kernel lets the
//! barrier run before that kernel takes the SMs: a GEMM that holds every SM holds back a
//! barrier kernel until it ends, and a stream-memop wait beside one was seen to resolve
//! about as late (2x H200, 2026-11-26, `docs/runs/2026-11-26-5ea1009-2xh200/agmm_trace.txt`:
//! the peer's piece was pulled only as the own piece's GEMM ended).
//!
//! Rules for the consumer (the docs of `wait` say them too):
//! - its waits must be enqueued before the next all-gather that reuses the same
//!   `Arrivals` (a CUDA event waits for its latest record at the time of the wait);
//! - a captured all-gather's events are waited for inside the same capture;
//! - a piece is readable once waited for; the peers' reads of this rank's input end
//!   only with the call (the stream the call was enqueued on).

use crate::coll::check::rotated;
use crate::cuda::{Device, Event, Stream};
use crate::error::{Error, Result};

/// One CUDA event per rank, recorded by an all-gather as each piece lands (NOTE
/// [per-piece arrivals]). Made by `GpuGroup::arrivals`; reuse one per consumer.
#[derive(Debug)]
pub struct Arrivals {
    rank: usize,
    device: usize,
    events: Vec<Event>,
}

impl Arrivals {
    pub(crate) fn new(device: &Device, rank: usize, world: usize) -> Result<Self> {
        // One per piece, then the call's start.
        let events = (0..=world).map(|_| device.event(false)).collect::<Result<Vec<_>>>()?;
        Ok(Self { rank, device: device.index(), events })
    }

    /// The number of pieces (the group's ranks).
    pub fn pieces(&self) -> usize {
        self.events.len() - 1
    }

    /// Makes work enqueued on `stream` after this wait until the last all-gather given
    /// these arrivals has started: with ce-pull, passed its entry barrier; with the other
    /// algorithms, landed every piece (NOTE [per-piece arrivals]).
    pub fn wait_started(&self, stream: &Stream) -> Result<()> {
        self.wait_event(stream, self.pieces())
    }

    /// The order in which ce-pull lands the pieces: this rank's own first, then rank +
    /// 1, rank + 2, ... (modulo the world). Consumers that follow it wait least.
    pub fn order(&self) -> Vec<usize> {
        let world = self.pieces();
        std::iter::once(self.rank).chain(rotated(self.rank, world).filter(|&p| p != self.rank)).collect()
    }

    /// Makes work enqueued on `stream` after this wait for piece `piece` of the last
    /// all-gather given these arrivals (rank `piece`'s shard is then in its output).
    /// Enqueue it before the next all-gather that reuses these arrivals.
    pub fn wait(&self, stream: &Stream, piece: usize) -> Result<()> {
        let world = self.pieces();
        if piece >= world {
            return Err(Error::InvalidArgument(format!(
                "rank {}: arrivals: piece {piece} is out of range (the group has {world} pieces, one per rank)",
                self.rank
            )));
        }
        self.wait_event(stream, piece)
    }

    fn wait_event(&self, stream: &Stream, index: usize) -> Result<()> {
        if stream.device().index() != self.device {
            return Err(Error::InvalidArgument(format!(
                "rank {}: arrivals: the stream is on device {} but the arrivals on device {}",
                self.rank,
                stream.device().index(),
                self.device
            )));
        }
        stream.wait(&self.events[index])
    }

    /// Checks that these arrivals were made for a group of `rank` in `world` on `device`.
    pub(crate) fn check(&self, rank: usize, world: usize, device: usize) -> Result<()> {
        if self.rank != rank || self.pieces() != world || self.device != device {
            return Err(Error::InvalidArgument(format!(
                "rank {rank}: these arrivals belong to another group (rank {} of {} on device {}; this group: rank \
                 {rank} of {world} on device {device})",
                self.rank,
                self.pieces(),
                self.device
            )));
        }
        Ok(())
    }

    /// Records piece `piece`'s event on `stream`.
    pub(crate) fn record(&self, stream: &Stream, piece: usize) -> Result<()> {
        stream.record(&self.events[piece])
    }

    /// Records the start event on `stream` (ce-pull, after its entry barrier).
    pub(crate) fn record_started(&self, stream: &Stream) -> Result<()> {
        stream.record(&self.events[self.pieces()])
    }

    /// Records every piece's event and the start on `stream` (algorithms that land the
    /// pieces together).
    pub(crate) fn record_all(&self, stream: &Stream) -> Result<()> {
        self.events.iter().try_for_each(|e| stream.record(e))
    }
}
