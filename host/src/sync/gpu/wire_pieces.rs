//! The per-piece signals of the bf16 wire (NOTE [bf16 wire] in `host/src/coll/wire.rs`):
//! where they land, how a copy stream waits for them, how a failed group releases
//! those waits, how a stuck one is named, and the counters the reductions keep.
//!
//! A piece word holds one byte per source rank (`lowcon_abi::pad::piece_slot`). With
//! memop sync the words are in the host pads (a `cuStreamWaitValue32` polls them, and
//! the watchdog can release it with a plain store, NOTE [host pad]); with kernel sync
//! in the device pads, where a one-thread kernel polls them.

use std::sync::atomic::Ordering;
use std::time::Instant;

use lowcon_abi::pad;

use super::GpuSync;
use crate::cuda::{Stream, raw};
use crate::error::Result;
use crate::sync::SyncMethod;

impl GpuSync {
    /// A device array of every rank's pad that `method`'s piece waits poll: the host
    /// pads (memop) or the device pads (kernel). The pack kernels signal into it.
    pub(crate) fn piece_pads(&self, method: SyncMethod) -> u64 {
        match method {
            SyncMethod::StreamMemop => crate::cuda::device_ptr(&self.host_pads),
            SyncMethod::Kernel => crate::cuda::device_ptr(self.pads.device_peer_ptrs()),
        }
    }

    /// This rank's first piece word of `piece` on `channel`, in the pad `method`'s waits
    /// poll (the reduction of the piece resets it there).
    pub(crate) fn piece_word(&self, method: SyncMethod, channel: u32, piece: u32) -> u64 {
        let (rank, world) = (self.core.rank, self.core.world as u32);
        let slot = pad::piece_slot(channel, piece, 0, world);
        match method {
            SyncMethod::StreamMemop => self.host_pad.slot_dev(rank, slot),
            SyncMethod::Kernel => self.pads.local_ptr() + 4 * slot as u64,
        }
    }

    /// Enqueues on `stream` the wait for every other rank's signal of `piece` on
    /// `channel`: one `cuStreamWaitValue32` per piece word (memop), or a one-thread
    /// kernel (kernel sync), bounded like every kernel wait.
    pub(crate) fn wait_piece(&self, stream: &Stream, method: SyncMethod, channel: u32, piece: u32) -> Result<()> {
        self.wire_channels.fetch_or(1 << channel, Ordering::Relaxed);
        let (rank, world) = (self.core.rank as u32, self.core.world as u32);
        let word0 = self.piece_word(method, channel, piece);
        match method {
            SyncMethod::StreamMemop => {
                for w in 0..pad::piece_words(world) {
                    let mask = pad::piece_mask(world, rank, w);
                    if mask != 0 {
                        // SAFETY: the word is inside this rank's registered host pad,
                        // owned by `self`.
                        unsafe { raw::mem_op::wait_geq_u32(stream.raw(), word0 + 4 * w as u64, mask)? };
                    }
                }
                Ok(())
            }
            // SAFETY: the word is inside this rank's device pad; the pads and the error
            // record are owned by `self`.
            SyncMethod::Kernel => unsafe { self.device.kernels()?.wire_wait(stream, self.pad_args(), word0, channel) },
        }
    }

    /// Releases the memop waits on piece words of a failed group: stores every
    /// awaited byte into each word of the channels that ran wire calls, until a pass
    /// finds none consumed (a released reduction resets its word, and a queued call
    /// waits on it again) or for at most `PIECE_RELEASE_SPIN`. Kernel waits give up on
    /// the abort word instead. Returns the words set.
    pub(crate) fn release_piece_words(&self) -> usize {
        let used = self.wire_channels.load(Ordering::Relaxed);
        if used == 0 {
            return 0;
        }
        let (rank, world) = (self.core.rank as u32, self.core.world as u32);
        let start = Instant::now();
        let mut released = 0;
        loop {
            let mut consumed = 0;
            for channel in (0..pad::CHANNELS).filter(|c| used & (1 << c) != 0) {
                for piece in 0..pad::PIECE_SIGNALS {
                    for w in 0..pad::piece_words(world) {
                        let slot = pad::piece_slot(channel, piece, w * pad::RANKS_PER_WORD, world) as usize;
                        if self.host_pad.release_piece(slot, pad::piece_mask(world, rank, w)) {
                            consumed += 1;
                        }
                    }
                }
            }
            released += consumed;
            if consumed == 0 || start.elapsed() > PIECE_RELEASE_SPIN {
                return released;
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }

    /// The peer a stuck wire call waits for, from this rank's pads: in a piece word with
    /// some of its awaited bytes set and others not, the first rank whose byte is
    /// missing, as (channel, peer). `None` when no word is half-arrived (at two ranks a
    /// word has one awaited byte).
    pub(crate) fn wire_missing(&self, host: &[u32], dev: &[u32]) -> Option<(u32, usize)> {
        let used = self.wire_channels.load(Ordering::Relaxed);
        let (rank, world) = (self.core.rank as u32, self.core.world as u32);
        for channel in (0..pad::CHANNELS).filter(|c| used & (1 << c) != 0) {
            for piece in 0..pad::PIECE_SIGNALS {
                for w in 0..pad::piece_words(world) {
                    let mask = pad::piece_mask(world, rank, w);
                    let slot = pad::piece_slot(channel, piece, w * pad::RANKS_PER_WORD, world) as usize;
                    for word in [host.get(slot), dev.get(slot)].into_iter().flatten() {
                        let seen = word & mask;
                        if seen != 0 && seen != mask {
                            let b = (0..pad::RANKS_PER_WORD).find(|b| mask & !seen & (1 << (8 * b)) != 0)?;
                            return Some((channel, (w * pad::RANKS_PER_WORD + b) as usize));
                        }
                    }
                }
            }
        }
        None
    }

    /// Whether bf16-wire calls ran on this group (their piece words may hold a wait).
    pub(crate) fn wire_used(&self) -> bool {
        self.wire_channels.load(Ordering::Relaxed) != 0
    }

    /// Notes that a wire call runs on `channel` (its piece words are watched).
    pub(crate) fn mark_wire_channel(&self, channel: u32) {
        self.wire_channels.fetch_or(1 << channel, Ordering::Relaxed);
    }

    /// The device's counters (fallback pieces, fallback bytes), copied on the side
    /// stream (bounded: never waits behind a stuck stream for long). They count the
    /// reductions that have run so far.
    pub(crate) fn read_stats(&self) -> Result<(u64, u64)> {
        if !self.wire_used() {
            return Ok((0, 0));
        }
        self.device.bind_to_thread()?;
        let at = self.pads.local_ptr() + pad::stats_offset(self.core.world as u32) as u64;
        // SAFETY: copies this rank's live counters into the pinned mirror of their size;
        // the mirror is read only after the copy completed (side_wait).
        unsafe { raw::mem_op::copy(self.side.raw(), self.stats_mirror.dev, at, pad::STATS * 8, false)? };
        self.side_wait("reading this rank's counters")?;
        let words = self.stats_mirror.host.cast::<u64>();
        // SAFETY: the mirror holds `STATS` aligned u64s, written by the completed copy.
        Ok(unsafe { (std::ptr::read_volatile(words), std::ptr::read_volatile(words.add(1))) })
    }
}

/// The longest one release round keeps re-setting piece words (as for graph flags).
const PIECE_RELEASE_SPIN: std::time::Duration = std::time::Duration::from_millis(5);
