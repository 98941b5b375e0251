//! Types that cross the host ↔ device boundary, defined once.
//!
//! Both the host library (`lowcon`) and the device kernels (`lowcon-kernels`, built for
//! `nvptx64-nvidia-cuda`) depend on this crate, so a field added here is seen by both.
//! Every type is `#[repr(C)]`, `Copy`, `bytemuck::Pod` + `Zeroable`, and has a `const`
//! size assertion: a layout change that would silently desynchronise host and device
//! fails to compile instead.
#![no_std]

use bytemuck::{Pod, Zeroable};

/// Status codes a kernel writes into an [`ErrorRecord::code`].
pub mod status {
    /// Nothing went wrong (the record's initial, zeroed state).
    pub const OK: u32 = 0;
    /// A wait on a signal slot did not see the expected epoch before its deadline.
    pub const WAIT_TIMEOUT: u32 = 1;
    /// A kernel found data that did not match what it expected (test kernels).
    pub const DATA_MISMATCH: u32 = 2;
    /// The host gave up on the group (a peer died or timed out); waits drain at once.
    pub const ABORTED: u32 = 3;
}

/// Written by a kernel when a bounded wait expires (or a self-check fails) instead of
/// trapping the context, so the host can turn it into an error that names the peer.
///
/// The first writer wins: kernels claim the record with a CAS on `code` from
/// [`status::OK`] and only then fill the other fields, so a record is never a mix of two
/// failures. Once `code` is non-zero the host treats the record as final after the
/// kernel's stream has been synchronised.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct ErrorRecord {
    /// One of [`status`]'s codes.
    pub code: u32,
    /// The rank (or, in single-GPU tests, the kernel role) that observed the failure.
    pub rank: u32,
    /// The peer whose signal never arrived (or `u32::MAX` when not applicable).
    pub peer: u32,
    /// The signal channel the wait was on.
    pub channel: u32,
    /// The epoch the wait expected (the slot must hold this value or a later one).
    pub expected: u64,
    /// The value last read from the slot when the wait gave up.
    pub observed: u64,
    /// How long the kernel waited, in nanoseconds of `%globaltimer`.
    pub waited_ns: u64,
}
const _: () = assert!(core::mem::size_of::<ErrorRecord>() == 40);

impl ErrorRecord {
    /// Value of [`ErrorRecord::peer`] when no peer is involved.
    pub const NO_PEER: u32 = u32::MAX;
}

/// Counters the flag round-trip test kernels report back (one per kernel role).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct RoundTripReport {
    /// Rounds this kernel completed.
    pub rounds_done: u32,
    /// Payload words that did not match the expected pattern, summed over all rounds.
    pub mismatches: u32,
}
const _: () = assert!(core::mem::size_of::<RoundTripReport>() == 8);

/// The head of every fused collective kernel (NOTE [fused barriers] in the kernels'
/// `coll.rs`): where its entry and exit barriers synchronise, passed by value as the
/// kernel's first parameter. The host fills it once per call (`FusedArgs` in
/// `host/src/cuda/kernels/fused.rs`), and every fused kernel takes it alike; device
/// addresses are `u64`s. With `fused == 0` the host enqueues the barriers itself and the
/// kernel ignores the rest.
///
/// NOTE [fused head by value]: rustc's `ptx-kernel` ABI passes this 64-byte struct as one
/// `.param .align 8 .b8 …[64]` parameter that the kernels read with `ld.param`, no copy
/// to local memory (checked in the PTX by the kernels' build test,
/// `host/tests/ptx.rs`), where before it was 11 scalar parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct FusedHead {
    /// Device array of the `world` signal-pad base pointers.
    pub pads: u64,
    /// The bound of every wait, in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// Device pointer to the group's (host-mapped) [`ErrorRecord`].
    pub err: u64,
    /// Device pointer to this rank's CTA counter word for the channel.
    pub counter: u64,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub world: u32,
    /// The signal channel.
    pub channel: u32,
    /// The entry barrier's epoch.
    pub epoch_in: u32,
    /// The exit barrier's epoch.
    pub epoch_out: u32,
    /// Non-zero: the kernel runs its own entry and exit barriers.
    pub fused: u32,
    /// Non-zero: a captured call, whose barriers use the graph flags, not the epochs
    /// (NOTE [graph flags] in `host/src/sync/gpu/graph.rs`).
    pub graph: u32,
    /// Zero (explicit padding to 8 bytes).
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<FusedHead>() == 64);
const _: () = assert!(core::mem::align_of::<FusedHead>() == 8);

/// The pseudo-random payload word `i` of round `round` for a test seeded with `seed`.
///
/// Shared by the device test kernels (which write and check payloads) and the host
/// tests (which pick a fresh `seed` per run), so the pattern is defined once. It is a
/// SplitMix64-style finaliser: every word differs from its neighbours and from the same
/// word of the previous round, so a stale or partially visible payload is detected.
#[inline(always)]
pub const fn payload_word(seed: u64, round: u32, i: u32) -> u32 {
    let mut z = seed ^ ((round as u64) << 32 | i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

pub mod kernel_names;

/// The LL ("low latency") protocol's buffer layout, which host and kernel share.
///
/// Each rank has, per channel, one symmetric LL buffer of [`BUFFER_BYTES`](ll::BUFFER_BYTES): two halves
/// (parity 0 and 1), each with one slot per source rank of [`slot_bytes`](ll::slot_bytes). A slot is
/// made of 16-byte lines `{data0, flag, data1, flag}` (`u32`s): 8 bytes of payload, each
/// 4 of them stored in one 8-byte word with the flag, so a reader that sees the flag in
/// both words has the data (8-byte stores are single-copy atomic). A collective runs
/// in rounds of at most `slot_bytes / 16` lines per source; round `seq` (a per-channel
/// counter every rank advances alike) uses half `seq & 1` and flag [`flag`](ll::flag)`(seq)`.
pub mod ll {
    /// Bytes of one line (8 of payload, two flags).
    pub const LINE_BYTES: u64 = 16;
    /// Payload bytes per line.
    pub const PAYLOAD_PER_LINE: u64 = 8;
    /// Bytes of one rank's LL buffer on one channel.
    pub const BUFFER_BYTES: u64 = 8 << 20;

    /// Bytes of one source's slot in one half: `BUFFER_BYTES / (2 * world)`, whole lines
    /// (2 MiB at 2 ranks: 1 MiB of payload per round; 512 KiB at 8 ranks).
    pub const fn slot_bytes(world: u32) -> u64 {
        let w = if world == 0 { 1 } else { world as u64 };
        BUFFER_BYTES / (2 * w) / LINE_BYTES * LINE_BYTES
    }

    /// Lines of one slot: the most lines per source in one round.
    pub const fn slot_lines(world: u32) -> u64 {
        slot_bytes(world) / LINE_BYTES
    }

    /// The flag of round `seq`: never 0 (a zeroed buffer holds no round), and different
    /// for `seq`, `seq - 1` and `seq - 2`, so stale lines of the same half never match.
    pub const fn flag(seq: u64) -> u32 {
        (seq % 0xFFFF_FFFE) as u32 + 1
    }

    /// Byte offset of source `src`'s slot in half `seq & 1`.
    pub const fn slot_offset(world: u32, seq: u64, src: u32) -> u64 {
        ((seq & 1) * world as u64 + src as u64) * slot_bytes(world)
    }
}

/// The shared-memory layout of the bulk-copy kernels (`tma-reduce`), which host and
/// kernel must agree on. The dynamic shared memory holds, from its start: `stages`
/// "full" mbarriers, `stages` "empty" mbarriers (8 bytes each), padding to
/// [`tma::DATA_OFFSET`], then `stages x world` tiles of `tile` bytes (stage-major:
/// stage `s`, source rank `p` at `DATA_OFFSET + (s * world + p) * tile`).
pub mod tma {
    /// Most pipeline stages (mbarrier pairs) the barrier area holds.
    pub const MAX_STAGES: u32 = 16;
    /// Byte offset of the first tile: after `2 * MAX_STAGES` mbarriers, 128-aligned.
    pub const DATA_OFFSET: u32 = 256;
    /// Tiles are a multiple of this many bytes (bulk copies need 16; 128 keeps each
    /// tile on its own shared-memory lines).
    pub const TILE_ALIGN: u32 = 128;
    /// Dynamic shared memory a launch with `stages` stages of `world` tiles needs.
    pub const fn smem_bytes(world: u32, tile: u32, stages: u32) -> u32 {
        DATA_OFFSET + stages * world * tile
    }
    const _: () = assert!(2 * MAX_STAGES * 8 <= DATA_OFFSET);

    /// Stages of `tma-push-reduce`'s ring (a compile-time constant: the kernel's
    /// `cp.async.bulk.wait_group.read` takes its count as an immediate). One tile each,
    /// with a "full" mbarrier at `8 * s` and the tile at `DATA_OFFSET + s * tile`.
    pub const PUSH_STAGES: u32 = 12;
    /// Tiles `tma-push-reduce` loads ahead of the one it pushes (`< PUSH_STAGES`).
    pub const PUSH_LAG: u32 = 8;
    const _: () = assert!(PUSH_LAG < PUSH_STAGES && PUSH_STAGES <= MAX_STAGES);
    /// Dynamic shared memory of a `tma-push-reduce` launch with `tile`-byte tiles.
    pub const fn push_smem_bytes(tile: u32) -> u32 {
        DATA_OFFSET + PUSH_STAGES * tile
    }
}

/// Reduction operators, as the reduction kernels take them (a `u32` argument).
pub mod reduce_op {
    /// Sum.
    pub const SUM: u32 = 0;
    /// Sum divided by the world size.
    pub const AVG: u32 = 1;
    /// Minimum.
    pub const MIN: u32 = 2;
    /// Maximum.
    pub const MAX: u32 = 3;
}

/// Element types of the reduction kernels: the floats index `kernel_names::REDUCE` and
/// `kernel_names::RS_DIRECT`; the integers go to `REDUCE_INT` and `RS_DIRECT_INT`, whose
/// `dtype` argument is their index minus [`reduce_dtype::I32`].
pub mod reduce_dtype {
    /// `f32`.
    pub const F32: usize = 0;
    /// IEEE half.
    pub const F16: usize = 1;
    /// bfloat16.
    pub const BF16: usize = 2;
    /// `i32` (the first integer type).
    pub const I32: usize = 3;
    /// `i64`.
    pub const I64: usize = 4;
    /// `u8`.
    pub const U8: usize = 5;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_words_differ_across_rounds_and_indices() {
        let seed = 0x1234_5678_9abc_def0;
        assert_ne!(payload_word(seed, 1, 0), payload_word(seed, 2, 0));
        assert_ne!(payload_word(seed, 1, 0), payload_word(seed, 1, 1));
        assert_ne!(payload_word(seed, 1, 0), payload_word(seed ^ 1, 1, 0));
    }

    #[test]
    fn ll_flags_never_zero_and_differ_from_the_two_rounds_before() {
        for seq in [0u64, 1, 2, 3, 0xFFFF_FFFC, 0xFFFF_FFFD, 0xFFFF_FFFE, 0xFFFF_FFFF, 1 << 33, u64::MAX - 1, u64::MAX]
        {
            assert_ne!(ll::flag(seq), 0, "seq {seq}");
            if seq >= 2 {
                assert_ne!(ll::flag(seq), ll::flag(seq - 1), "seq {seq}");
                assert_ne!(ll::flag(seq), ll::flag(seq - 2), "seq {seq}");
            }
        }
    }

    #[test]
    fn ll_slots_tile_the_buffer() {
        for world in 1..=16u32 {
            let slot = ll::slot_bytes(world);
            assert_eq!(slot % ll::LINE_BYTES, 0);
            let last = ll::slot_offset(world, 1, world - 1) + slot;
            assert!(last <= ll::BUFFER_BYTES, "world {world}");
            assert_eq!(ll::slot_offset(world, 0, 1), slot);
            assert_eq!(ll::slot_offset(world, 3, 0), world as u64 * slot);
        }
        assert_eq!(ll::slot_lines(2) * ll::PAYLOAD_PER_LINE, 1 << 20);
    }

    #[test]
    fn pad_slots_are_distinct() {
        let world = 5;
        let mut seen = [false; pad::bytes(5) / 4];
        for c in 0..pad::CHANNELS {
            for k in 0..pad::KINDS {
                for from in 0..world {
                    let s = pad::slot(c, k, from, world) as usize;
                    assert!(!seen[s], "slot {s} used twice");
                    seen[s] = true;
                }
            }
        }
        // The piece words follow: ranks 0-3 share one word, rank 4 has the next; the
        // "read" signals (NOTE [plane ring]) have words of their own.
        for c in 0..pad::CHANNELS {
            for piece in (0..pad::WIRE_PIECES).chain((0..pad::WIRE_PIECES).map(pad::read_piece)) {
                let a = pad::piece_slot(c, piece, 0, world) as usize;
                assert_eq!(pad::piece_slot(c, piece, 3, world) as usize, a);
                let b = pad::piece_slot(c, piece, 4, world) as usize;
                assert_eq!(b, a + 1);
                for s in [a, b] {
                    assert!(!seen[s], "piece word {s} used twice");
                    seen[s] = true;
                }
            }
        }
        assert!(seen.iter().all(|&b| b));
    }

    #[test]
    fn the_pad_regions_follow_each_other_without_overlap() {
        for world in 1..=16u32 {
            let last_counter = pad::counter_offset(world, pad::CHANNELS - 1) + 4;
            assert!(pad::ll_seq_offset(world, 0) >= last_counter, "world {world}");
            for c in 0..pad::CHANNELS {
                assert_eq!(pad::ll_seq_offset(world, c) % 8, 0, "world {world} channel {c}");
            }
            assert_eq!(pad::ll_seq_offset(world, pad::CHANNELS - 1) + 8, pad::wire_flag_offset(world, 0, 0, 0));
            // The wire flags, their scratch and the statistics follow, in that order.
            let last_flag = pad::wire_flag_offset(world, pad::CHANNELS - 1, pad::WIRE_PIECES - 1, world - 1) + 4;
            assert_eq!(last_flag, pad::wire_or_offset(world, 0));
            let scratch_end = pad::wire_or_offset(world, pad::CHANNELS);
            assert_eq!(pad::wire_or_offset(world, pad::CHANNELS - 1) + 4 * world as usize, scratch_end);
            assert!(pad::stats_offset(world) >= pad::wire_or_offset(world, pad::CHANNELS));
            assert_eq!(pad::stats_offset(world) % 8, 0);
            // Then the one-launch reductions' piece flags, which end the buffer.
            assert_eq!(pad::stats_offset(world) + 8 * pad::STATS, pad::once_flag_offset(world, 0, 0));
            let last_once = pad::once_flag_offset(world, pad::CHANNELS - 1, pad::WIRE_PIECES - 1) + 4;
            // Then the release words, then each rank's own release rounds, which end it.
            assert_eq!(last_once, pad::release_offset(world, 0, 0));
            let last_release = pad::release_offset(world, pad::CHANNELS - 1, world - 1) + 4;
            assert_eq!(last_release, pad::release_round_offset(world, 0, 0, pad::RELEASE_SENT));
            // Every (channel, peer, which) has its own word, one after the other.
            let mut next = last_release;
            for c in 0..pad::CHANNELS {
                for p in 0..world {
                    for which in [pad::RELEASE_SENT, pad::RELEASE_SEEN] {
                        assert_eq!(pad::release_round_offset(world, c, p, which), next, "world {world}");
                        next += 4;
                    }
                }
            }
            let last_round = pad::release_round_offset(world, pad::CHANNELS - 1, world - 1, pad::RELEASE_SEEN) + 4;
            // Then the wire reductions' counters, which end it.
            assert_eq!(last_round, pad::reduce_counter_offset(world, 0));
            let last_reduce = pad::reduce_counter_offset(world, pad::CHANNELS - 1) + 4;
            assert_eq!(last_reduce, pad::buffer_bytes(world));
        }
    }

    #[test]
    fn piece_masks_wait_for_every_other_rank_and_nothing_less() {
        for world in 1..=16u32 {
            for rank in 0..world {
                let mut bytes = 0;
                for word in 0..pad::piece_words(world) {
                    let mask = pad::piece_mask(world, rank, word);
                    assert!(mask < 1 << 31, "world {world}");
                    bytes += mask.count_ones();
                    // Every value with a byte of the mask still 0 is below it, as
                    // cuStreamWaitValue32(GEQ) compares (cyclic, as i32).
                    for missing in 0..pad::RANKS_PER_WORD {
                        let bit = 1u32 << (8 * missing);
                        if mask & bit != 0 {
                            let partial = mask & !bit;
                            assert!((partial.wrapping_sub(mask) as i32) < 0, "world {world} rank {rank}");
                        }
                    }
                    assert_eq!(mask.wrapping_sub(mask) as i32, 0);
                }
                assert_eq!(bytes, world - 1, "world {world} rank {rank}: one byte per other rank");
            }
        }
        assert_eq!(pad::piece_mask(2, 0, 0), 0x100);
        assert_eq!(pad::piece_mask(4, 2, 0), 0x0100_0101);
        assert_eq!(pad::piece_mask(8, 5, 1), 0x0101_0001);
    }

    #[test]
    fn graph_kinds_are_distinct_from_the_eager_ones() {
        let kinds = [pad::BARRIER, pad::P2P, pad::GRAPH_ENTRY, pad::GRAPH_EXIT];
        for (i, a) in kinds.iter().enumerate() {
            assert!(*a < pad::KINDS);
            assert!(kinds[i + 1..].iter().all(|b| b != a));
        }
        assert_ne!(pad::GRAPH_SET, 0, "a graph slot at rest holds 0");
    }

    #[test]
    fn error_record_is_plain_bytes() {
        let r = ErrorRecord { code: status::WAIT_TIMEOUT, peer: 3, ..Default::default() };
        let bytes = bytemuck::bytes_of(&r);
        assert_eq!(bytes.len(), 40);
        let back: ErrorRecord = *bytemuck::from_bytes(bytes);
        assert_eq!(back, r);
    }
}

/// The signal pad: one `u32` epoch slot per (channel, kind, peer), in symmetric memory.
///
/// Rank `r` signals peer `p` by writing into *`p`'s* pad at `slot(channel, kind, r)`;
/// `p` waits on its own pad. Barriers and point-to-point signals use separate kinds, so
/// their epoch counters never share a slot, and independent operations use different
/// channels, so two streams never share slots either.
///
/// Captured calls (CUDA graphs) use the two graph kinds instead, as flags rather than
/// epochs: a signal writes [`GRAPH_SET`](pad::GRAPH_SET), the waiter resets its slot to 0 after its
/// wait, and a captured call's entry barrier uses [`GRAPH_ENTRY`](pad::GRAPH_ENTRY), its exit barrier
/// [`GRAPH_EXIT`](pad::GRAPH_EXIT) (NOTE [graph flags] in `host/src/sync/gpu/graph.rs`).
///
/// After the slots come the piece words of the bf16-wire reduce-scatter (NOTE [bf16
/// wire] in `host/src/coll/wire.rs`): per channel and piece, one byte per source rank
/// ([`piece_slot`](pad::piece_slot)), set to 1 by the source once its pack of the piece
/// is done and reset to 0 by this rank's reduction of it. Host pads (memop waits) and
/// device pads (kernel waits) share this layout, up to [`bytes`](pad::bytes).
pub mod pad {
    /// Channels per group: independent sync streams (e.g. one per CUDA stream).
    pub const CHANNELS: u32 = 16;
    /// Slot kinds within a channel.
    pub const KINDS: u32 = 4;
    /// Kind used by barriers.
    pub const BARRIER: u32 = 0;
    /// Kind used by put_signal / wait_signal.
    pub const P2P: u32 = 1;
    /// Kind of a captured call's entry barrier (a flag, reset by its waiter).
    pub const GRAPH_ENTRY: u32 = 2;
    /// Kind of a captured call's exit barrier (a flag, reset by its waiter).
    pub const GRAPH_EXIT: u32 = 3;
    /// The value a graph signal writes (a graph slot at rest holds 0).
    pub const GRAPH_SET: u32 = 1;
    /// Most pieces of one bf16-wire reduce-scatter (each has its piece words and flags).
    pub const WIRE_PIECES: u32 = 64;
    /// Source ranks per piece word (one byte each).
    pub const RANKS_PER_WORD: u32 = 4;
    /// Piece signals per channel: [`WIRE_PIECES`] "packed" signals (a sender to its
    /// receivers: piece `i` may be read), then as many "read" signals (a receiver to its
    /// senders: piece `i`'s plane slot may be packed again, [`read_piece`]).
    pub const PIECE_SIGNALS: u32 = 2 * WIRE_PIECES;

    /// The piece-word index of the "read" signal of piece `piece` (NOTE [plane ring] in
    /// `host/src/coll/gpu/wire_steps.rs`): a receiver sets its byte in each sender's word
    /// once its reduction of the piece read the sender's planes.
    pub const fn read_piece(piece: u32) -> u32 {
        WIRE_PIECES + piece
    }

    /// Index (in `u32`s) of the slot in which peer `from` signals on `(channel, kind)`.
    #[inline(always)]
    pub const fn slot(channel: u32, kind: u32, from: u32, world: u32) -> u32 {
        (channel * KINDS + kind) * world + from
    }

    /// Epoch slots of one rank's pad.
    pub const fn slots(world: u32) -> u32 {
        CHANNELS * KINDS * world
    }

    /// Piece words per piece: one byte per rank, [`RANKS_PER_WORD`] ranks a word.
    pub const fn piece_words(world: u32) -> u32 {
        world.div_ceil(RANKS_PER_WORD)
    }

    /// Index (in `u32`s) of the piece word in which rank `from` signals piece `piece` of
    /// a bf16-wire call on `channel` (`piece < PIECE_SIGNALS`: a "read" signal is
    /// [`read_piece`]): its byte is `from % RANKS_PER_WORD`.
    #[inline(always)]
    pub const fn piece_slot(channel: u32, piece: u32, from: u32, world: u32) -> u32 {
        slots(world) + (channel * PIECE_SIGNALS + piece) * piece_words(world) + from / RANKS_PER_WORD
    }

    /// The value piece word `word` holds once every rank but `rank` signalled: a byte of
    /// 1 per such source. Bytes only ever go from 0 to 1, so every earlier value is
    /// below it, and `cuStreamWaitValue32(GEQ)`'s cyclic comparison (as `i32`) waits
    /// for exactly this (the mask is below 2³¹).
    pub const fn piece_mask(world: u32, rank: u32, word: u32) -> u32 {
        let mut mask = 0;
        let mut b = 0;
        while b < RANKS_PER_WORD {
            let from = word * RANKS_PER_WORD + b;
            if from < world && from != rank {
                mask |= 1 << (8 * b);
            }
            b += 1;
        }
        mask
    }

    /// Bytes of one rank's pad (the epoch slots and the piece words) for a world of
    /// `world` ranks: all a host pad holds.
    pub const fn bytes(world: u32) -> usize {
        (slots(world) + CHANNELS * PIECE_SIGNALS * piece_words(world)) as usize * 4
    }

    /// Byte offset, in a rank's pad buffer, of the per-channel staging word that
    /// stream-memop signals copied from until their slots moved to the host pad
    /// (`host/src/sync/gpu/host_pad.rs`). Unused now; kept so the counters stay put.
    pub const fn stage_offset(world: u32, channel: u32) -> usize {
        bytes(world) + channel as usize * 4
    }

    /// Byte offset, in a rank's pad buffer, of the per-channel CTA counter that fused
    /// kernels use to find their last CTA (it returns to 0 after every launch).
    pub const fn counter_offset(world: u32, channel: u32) -> usize {
        bytes(world) + (CHANNELS + channel) as usize * 4
    }

    /// Byte offset, in a rank's pad buffer, of the per-channel LL round counter (a
    /// `u64`, 8-aligned): the next round's number, advanced by each LL kernel's last CTA,
    /// so that eager and replayed LL calls share one sequence of rounds.
    pub const fn ll_seq_offset(world: u32, channel: u32) -> usize {
        (bytes(world) + 2 * CHANNELS as usize * 4).next_multiple_of(8) + channel as usize * 8
    }

    /// Byte offset, in a rank's (device) pad buffer, of the inexact flag that rank `from`
    /// writes for piece `piece` of a bf16-wire call on `channel`: 1 when the piece of the
    /// chunk it sends this rank has a nonzero low half (this rank must read it), else 0.
    pub const fn wire_flag_offset(world: u32, channel: u32, piece: u32, from: u32) -> usize {
        ll_seq_offset(world, CHANNELS) + (((channel * WIRE_PIECES + piece) * world + from) * 4) as usize
    }

    /// Byte offset, in a rank's pad buffer, of the scratch words of a bf16-wire pack on
    /// `channel` (one per destination rank): the CTAs OR into them whether they found an
    /// inexact value, the last CTA turns them into flags and zeroes them.
    pub const fn wire_or_offset(world: u32, channel: u32) -> usize {
        wire_flag_offset(world, CHANNELS, 0, 0) + (channel * world * 4) as usize
    }

    /// Byte offset, in a rank's pad buffer, of its counters (`u64`s, 8-aligned): the
    /// bf16-wire pieces whose low half this rank read from a peer, then their bytes.
    pub const fn stats_offset(world: u32) -> usize {
        wire_or_offset(world, CHANNELS).next_multiple_of(8)
    }

    /// The counters at [`stats_offset`]: fallback pieces, fallback bytes.
    pub const STATS: usize = 2;

    /// Byte offset, in a rank's (device) pad buffer, of the flag of piece `piece` of a
    /// ce-reduce call on `channel` reduced in one launch (`ReduceLaunch::Once`): the
    /// rank's copy stream writes 1 once the piece's staged copies are done, the launch's
    /// last CTA writes 0 back. [`WIRE_PIECES`] per channel.
    pub const fn once_flag_offset(world: u32, channel: u32, piece: u32) -> usize {
        stats_offset(world) + STATS * 8 + ((channel * WIRE_PIECES + piece) * 4) as usize
    }

    /// Byte offset, in a rank's (device) pad buffer, of the release word in which rank
    /// `from` counts the pieces it released to this rank on `channel` (a released
    /// reduce-scatter, NOTE [release rounds] in `host/src/coll/gpu/per_piece/released.rs`): the
    /// sender stores its round number there, the receiver waits for its own.
    pub const fn release_offset(world: u32, channel: u32, from: u32) -> usize {
        once_flag_offset(world, CHANNELS, 0) + ((channel * world + from) * 4) as usize
    }

    /// Which of a rank's two release round counters per peer: the rounds it released to
    /// the peer, or the rounds of the peer's it has seen.
    pub const RELEASE_SENT: u32 = 0;
    /// See [`RELEASE_SENT`].
    pub const RELEASE_SEEN: u32 = 1;

    /// Byte offset, in a rank's (device) pad buffer, of its own round counter `which`
    /// ([`RELEASE_SENT`] or [`RELEASE_SEEN`]) for `peer` on `channel`. Only this rank's
    /// release kernels read and write it, so that the round a captured release signals
    /// or waits for is the device's, not the capture's.
    pub const fn release_round_offset(world: u32, channel: u32, peer: u32, which: u32) -> usize {
        release_offset(world, CHANNELS, 0) + (((channel * world + peer) * 2 + which) * 4) as usize
    }

    /// Byte offset, in a rank's pad buffer, of the per-channel CTA counter of the
    /// bf16-wire reductions, which find their last CTA with it to send the "read"
    /// signals (NOTE [plane ring]); a counter of its own, since the channel's packs run
    /// at the same time on another stream. It returns to 0 after every launch.
    pub const fn reduce_counter_offset(world: u32, channel: u32) -> usize {
        release_round_offset(world, CHANNELS, 0, 0) + channel as usize * 4
    }

    /// Bytes of one rank's whole pad buffer: slots, piece words, staging words,
    /// counters, LL round counters, bf16-wire flags and scratch, the statistics, the
    /// one-launch reductions' piece flags, the release words and rounds, and the
    /// wire reductions' counters.
    pub const fn buffer_bytes(world: u32) -> usize {
        reduce_counter_offset(world, CHANNELS)
    }
}
