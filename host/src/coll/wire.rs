//! What a reduce-scatter sends over the peer links, when that differs from its input:
//! the bf16 wire. Shared by both backends: the plan a call's dtypes and options make,
//! its refusals, the workspace layout, and the counters.
//!
//! NOTE [bf16 wire]: FSDP2's usual mixed precision reduces fp32 gradients that are
//! bf16 values upcast (`param_dtype=bf16`, `reduce_dtype=fp32`), so half of every fp32
//! byte a reduce-scatter sends is zeros. The wire sends the top halves alone and stays
//! exact for every input, with three carry modes (`Carry`):
//!
//! - **`Same`**: the input's own type crosses the links (every call without a wire).
//! - **`Bf16In`**: a bf16 input with an f32 output (callers holding bf16 gradients, and
//!   `lowcon.fsdp`'s bf16 copy-in): the bf16 input is the wire. `ce-reduce` copies peers'
//!   bf16 pieces as usual; `sm-direct` packs each chunk it sends into its high plane, as
//!   the split wire's top halves with every flag clear, and reads the peers' planes
//!   directly (`RsPlan::packs`, NOTE [the wire read directly]). Either accumulates in
//!   f32, in rank order, writing f32.
//! - **`Split`**: f32 in and out, `wire = bf16`. Each rank *packs* its input: the top 16
//!   bits of each f32 of every chunk it sends go to the *high plane* of its symmetric
//!   workspace, the bottom 16 bits to the *low plane*. The high half is the bf16 value
//!   itself whenever the f32 is bf16-exact. Per piece (the `pipeline` pieces of
//!   ce-reduce) and destination, the pack writes one *inexact* flag, set if any bottom
//!   half is nonzero, into the destination's device pad. The copy engines move only the
//!   high plane, into the receiver's staging ring; the receiver's reduction joins each
//!   staged high half with the sender's low half, read over NVLink only for flagged
//!   pieces (else zero, which the flag proves exact), and adds the sources in rank
//!   order in f32. So the result equals the f32 reduce-scatter's bit for bit, for every
//!   input: NaN, infinities, denormals and values past bf16's range included. Copy sizes
//!   are fixed when the call is enqueued, so the call can be captured in a CUDA graph.
//!
//! **Signals per piece.** A piece is copied once its sender packed it: a cross-rank
//! signal per piece, which the plain ce-reduce (its peers' inputs ready at the entry
//! barrier) has no need of. The pack kernel's last CTA (found with the channel's CTA
//! counter) writes the flags, fences at system scope, and sets its own byte of the
//! destination's *piece word* (`lowcon_abi::pad::piece_slot`: one byte per source,
//! four sources a word) with `st.release.sys.u8`. The receiver's copy stream waits
//! until the word holds a byte of 1 for every other rank (`pad::piece_mask`):
//! - memop sync: `cuStreamWaitValue32(GEQ, mask)` on its host pad, one wait per piece
//!   up to 4 ranks (two at 5 to 8): the signal costs no graph node at all (it is part of
//!   the pack kernel), where a memop write would cost ~1.3 µs of host time per replay;
//! - kernel sync: a one-thread wait kernel on its device pad, bounded like every wait.
//!
//! The receiver's reduction of the piece resets the word to 0 (its wait saw it).
//! - *No reset erases a signal*: a sender writes its byte of piece `i` again only in its
//!   next wire call on the channel, after the exit barrier of this one, which needs this
//!   rank's exit signal, which comes after its reductions (stream order, and a
//!   system-scope fence after the reset).
//! - *No entry barrier*: peers never read the caller's input (only the workspace it
//!   packed into), so only the pieces need ordering; the workspace is free again for
//!   the next call's pack once every peer passed this call's exit barrier.
//! - *Graph flags stay sound*: a captured wire call has an exit barrier and no entry
//!   barrier, so `GRAPH_EXIT` could come twice in a row on a channel; the argument of
//!   NOTE [graph flags] still holds, because a peer's next exit signal needs this rank's
//!   piece signals of the next call, which come after this rank's reset of its exit slot.
//!
//! **Streams.** The packs run on the channel's pack stream, the copies on its copy
//! stream, the reductions on the caller's: pack `i + 1`, the copies of piece `i` and
//! the reduction of piece `i - 1` overlap. Every stream forks from and joins back into
//! the caller's with events.
//!
//! **Counted.** Every group counts the bytes its calls moved to or from peers
//! ([`CollStats`](super::counters::CollStats)): top halves (`wire_bytes`) on the host as calls are enqueued, and the
//! fallbacks (bottom halves read for flagged pieces) on the device as reductions run.
//! Gradients accumulated in fp32 over several backward passes are not bf16-exact, so
//! there the fallback is the normal case (`lowcon.fsdp` sends f32 then).

use crate::error::Result;
pub(crate) use crate::plan::Carry;

/// Where a split-wire call's regions are in the channel's workspace (byte offsets, the
/// same on every rank, since every rank makes the same call).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The high plane: `world - 1` chunk slots (the rank's own chunk has none), each
    /// `stride` elements of 2 bytes.
    pub(crate) hi: usize,
    /// The low plane, laid out as the high one (none for a bf16 input: see `new`).
    pub(crate) lo: usize,
    /// Elements between two chunk slots of a plane (256-byte aligned).
    pub(crate) stride: usize,
    /// The staging ring: `STAGING_DEPTH` x (`world - 1`) slots of `pe` bf16 elements.
    pub(crate) staging: usize,
    /// Bytes in all.
    pub(crate) bytes: usize,
    /// Pieces a chunk slot of a plane holds (NOTE [plane ring] in
    /// `coll::gpu::wire_steps`): 0, every piece at its place in the chunk; else piece `i`
    /// in ring slot `i % ring`, `pe` elements each.
    pub(crate) ring: usize,
    pe: usize,
}

impl Layout {
    /// The layout for chunks of `n` elements in pieces of `pe`, with `planes` planes: 2
    /// for the split wire, 1 for a bf16 input that packs (the high plane alone), 0 for a
    /// `Bf16In` call that copies (the staging ring alone).
    pub(crate) fn new(world: usize, n: usize, pe: usize, planes: usize) -> Self {
        Self::ringed(world, n, (pe, pe), planes, 0)
    }

    /// As [`Layout::new`], with planes that hold `ring` pieces of `plane_pe` elements
    /// per chunk slot (0: the whole chunk), and a staging ring of pieces of `pe`.
    pub(crate) fn ringed(world: usize, n: usize, (pe, plane_pe): (usize, usize), planes: usize, ring: usize) -> Self {
        debug_assert!(planes <= 2);
        let elems = if ring == 0 { n } else { ring * plane_pe };
        let stride = (elems * 2).div_ceil(256) * 256 / 2;
        let plane = if planes > 0 { (world - 1) * stride * 2 } else { 0 };
        // With the high plane alone, `lo` is where the staging ring starts: nothing reads
        // it (every flag stays clear).
        let staging = planes * plane;
        let bytes = staging + super::geometry::STAGING_DEPTH * (world - 1) * pe * 2;
        Self { hi: 0, lo: plane, stride, staging, bytes, ring, pe: plane_pe }
    }

    /// Where piece `piece` (starting at element `first` of its chunk) lies in a chunk
    /// slot of the planes, in elements.
    pub(crate) fn plane_first(&self, piece: usize, first: usize) -> usize {
        if self.ring == 0 { first } else { (piece % self.ring) * self.pe }
    }

    /// Byte offset of destination `q`'s chunk slot, element `first`, in rank `rank`'s
    /// plane starting at `plane` (`first` as [`Layout::plane_first`] places it).
    pub(crate) fn slot(&self, plane: usize, q: usize, rank: usize, first: usize) -> usize {
        // Slots skip the owner's own chunk (as `check::staged_slot`).
        let slot = if q < rank { q } else { q - 1 };
        plane + 2 * (slot * self.stride + first)
    }

    /// Byte offset of staging slot `(piece % depth, peer slot k)` for pieces of `pe`.
    pub(crate) fn stage(&self, world: usize, pe: usize, piece: usize, k: usize) -> usize {
        let ring = piece % super::geometry::STAGING_DEPTH;
        self.staging + 2 * pe * (ring * (world - 1) + k)
    }
}

/// The pieces of a wire call of `n` elements per chunk, as planned: at most
/// `pad::WIRE_PIECES`, each with its own signal words (the planner keeps its own choice
/// within that and refuses a caller's `pipeline` past it, in the words of
/// `plan::runnable::check_wire_pieces`, which this checks again). Returns (elements per
/// piece, pieces).
pub(crate) fn pieces(rank: usize, n: usize, want: u32) -> Result<(usize, usize)> {
    crate::plan::runnable::check_wire_pieces(rank, want)?;
    let pe = super::geometry::piece_elems(n, want.max(1));
    Ok((pe, n.div_ceil(pe)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_keeps_slots_apart_and_aligned() {
        for world in [2usize, 3, 8] {
            for n in [1usize, 7, 1003, 65_541] {
                let (pe, pieces) = pieces(0, n, 3).unwrap();
                assert!(pieces <= 3 && pe * pieces >= n && pe % 64 == 0);
                let l = Layout::new(world, n, pe, 2);
                assert_eq!(l.stride % 128, 0);
                assert!(l.stride >= n);
                assert_eq!(l.lo, (world - 1) * l.stride * 2);
                assert_eq!(l.staging, 2 * l.lo);
                // The last slot of the low plane ends before the staging ring.
                assert!(l.slot(l.lo, world - 1, 0, 0) + 2 * l.stride <= l.staging);
                assert_eq!(l.slot(l.hi, 2, 1, 3), 2 * (l.stride + 3), "rank 1 keeps no slot for itself");
                let last = l.stage(world, pe, 5, world - 2) + 2 * pe;
                assert_eq!(last, l.bytes);
                assert_eq!(l.stage(world, pe, 5, 0) % 16, 0);
                let plain = Layout::new(world, n, pe, 0);
                assert_eq!(plain.staging, 0);
                // A bf16 input packs its high plane alone: half the planes' bytes.
                let high = Layout::new(world, n, pe, 1);
                assert_eq!((high.hi, high.lo, high.staging), (0, l.lo, l.lo));
                assert_eq!(high.bytes, l.bytes - l.lo);
            }
        }
        let e = pieces(2, 100, 65).unwrap_err().to_string();
        assert!(e.contains("rank 2: pipeline 65") && e.contains("at most 64"), "{e}");
        assert_eq!(pieces(0, 1 << 25, 8).unwrap().1, 8);
    }

    #[test]
    fn a_plane_ring_holds_its_pieces_apart_in_less_memory() {
        // NOTE [plane ring]: 8 pieces through a ring of 3 slots per chunk slot.
        let (world, n) = (4usize, 1 << 20);
        let (pe, count) = pieces(0, n, 8).unwrap();
        let full = Layout::new(world, n, 0, 2);
        let ring = Layout::ringed(world, n, (0, pe), 2, 3);
        assert_eq!(count, 8);
        assert!(ring.bytes * 8 <= full.bytes * 3 + 8 * 256 * world, "{} of {}", ring.bytes, full.bytes);
        assert!(ring.stride >= 3 * pe && ring.stride.is_multiple_of(128));
        // Pieces 0, 3, 6 share ring slot 0; every slot is whole and inside its chunk slot.
        let at: Vec<_> = (0..count).map(|i| ring.plane_first(i, i * pe)).collect();
        assert_eq!(at, [0, pe, 2 * pe, 0, pe, 2 * pe, 0, pe]);
        assert!(at.iter().all(|&f| f + pe <= ring.stride && (2 * f).is_multiple_of(16)));
        // Without a ring every piece keeps its own place.
        assert_eq!(full.plane_first(5, 5 * pe), 5 * pe);
        // The last chunk slot of the high plane ends where the low plane begins.
        assert_eq!(ring.slot(ring.hi, world - 1, 0, 2 * pe) + 2 * pe, ring.lo - 2 * (ring.stride - 3 * pe));
    }
}
