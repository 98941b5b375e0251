//! Automatic algorithm selection and the tuned defaults (CTAs, pipeline pieces), each
//! with the measurement behind it.

use super::{AllGatherAlgorithm, ReduceScatterAlgorithm};

// NOTE [crossovers]: where `auto` switches algorithm. Measured with `lowcon bench
// all-gather|reduce-scatter` on 4x H200 (NVSwitch, driver 580, 2026-11-21; tables in
// docs/benchmarks.md): the SM kernels win while copy-engine launch latency dominates,
// the copy engines win from about the size below on. Re-measure on other machines.

/// All-gather shard size (bytes per rank) up to which `auto` picks `sm-oneshot`: at a
/// 1 MiB shard it took 28.4 and 28.7 µs in two runs against 38.0 and 35.0 µs for
/// `ce-push`; at 4 MiB the copy engines win (194 against 164 GB/s busbw).
pub const ONESHOT_MAX_SHARD: usize = 1 << 20;

/// The algorithm `auto` runs for a shard of `shard_bytes` per rank. Above the one-shot
/// range, `ce-push` when the output is symmetric (measured 2-8% faster than `ce-pull`
/// from 1 MiB up, and no staging), else `ce-pull` (which stages only the input shard,
/// where `ce-push` would stage the whole output).
pub fn choose_all_gather(shard_bytes: usize, _world: usize, output_symmetric: bool) -> AllGatherAlgorithm {
    if shard_bytes <= ONESHOT_MAX_SHARD {
        AllGatherAlgorithm::SmOneshot
    } else if output_symmetric {
        AllGatherAlgorithm::CePush
    } else {
        AllGatherAlgorithm::CePull
    }
}

/// The algorithm `auto` runs for an output chunk of `chunk_bytes` per rank: `sm-direct`
/// at every size. Since its reduction issues every source's 16-byte loads before
/// combining them, `sm-direct` with 16 CTAs beat `ce-reduce` at every size from 64 KiB
/// to 256 MiB per rank on 4x H200 (311 against 228 GB/s busbw at 256 MiB): `ce-reduce`'s
/// copies and reductions overlap too little. Re-measure on other machines and worlds.
pub fn choose_reduce_scatter(_chunk_bytes: usize, _world: usize) -> ReduceScatterAlgorithm {
    ReduceScatterAlgorithm::SmDirect
}

/// Default CTAs of the one-shot all-gather for `total` gathered bytes: one per 16 KiB,
/// 4 to 32 (it is meant for small messages, where it runs for a few microseconds).
pub(crate) fn oneshot_ctas(total: usize) -> u32 {
    (total / (16 << 10)).clamp(4, 32) as u32
}

/// Default CTAs of the reductions (ce-reduce and sm-direct).
pub const DEFAULT_REDUCE_CTAS: u32 = 16;

/// Pieces of ce-reduce for a chunk of `bytes`: one per 16 MiB, 2 to 16 (1 below 1 MiB).
/// Every piece costs a kernel launch and two cross-stream event hops; with 4 MiB pieces
/// those hops serialised copies and reductions on 4x H200 (190 GB/s at 256 MiB).
pub(crate) fn default_pieces(bytes: usize) -> u32 {
    if bytes < (1 << 20) { 1 } else { bytes.div_ceil(16 << 20).clamp(2, 16) as u32 }
}

/// Staging slots of ce-reduce: copies may run this many pieces ahead of the reduction.
pub(crate) const STAGING_DEPTH: usize = 3;

/// Elements per ce-reduce piece: `count / pieces` rounded up to a multiple of 64
/// elements, so every piece but the last keeps 16-byte alignment.
pub(crate) fn piece_elems(count: usize, pieces: u32) -> usize {
    count.div_ceil(pieces as usize).div_ceil(64) * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_chunk_and_stay_aligned() {
        for count in [1usize, 63, 64, 1000, 1 << 20, (1 << 20) + 7] {
            for pieces in [1, 2, 3, 7, 64] {
                let pe = piece_elems(count, pieces);
                assert_eq!(pe % 64, 0);
                assert!(pe * pieces as usize >= count);
            }
        }
        assert_eq!(default_pieces(1), 1);
        assert_eq!(default_pieces(4 << 20), 2);
        assert_eq!(default_pieces(256 << 20), 16);
    }
}
