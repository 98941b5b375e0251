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

/// Largest all-gather shard for which `auto` picks `ll` at 2 ranks. Measured on 2x H200
/// (2026-11-22, commit b1258e8, `bench all-gather --sync kernel`): `ll` took 5.7 µs at 64 KiB
/// (NCCL 10.9, `sm-oneshot` 12.4) and 13.0 µs at 1 MiB (NCCL 16.8, `sm-oneshot` 18.9);
/// at 2 MiB `sm-oneshot` (24.7) and NCCL (26.8) beat it (27.3): beyond a round's
/// 1 MiB, half of what `ll` moves is flags.
pub const LL_MAX_SHARD_2: usize = 1 << 20;

/// Largest reduce-scatter chunk for which `auto` picks `ll` at 2 ranks. Measured as
/// above (`bench reduce-scatter`): 7.1 µs at 64 KiB (NCCL 9.1, `sm-direct` 16.1); at
/// 1 MiB `sm-direct` (17.1) and NCCL (15.7) beat it (18.0).
pub const LL_MAX_CHUNK_2: usize = 512 << 10;

/// The algorithm `auto` runs for a shard of `shard_bytes` per rank. At 2 ranks, `ll` up
/// to [`LL_MAX_SHARD_2`] (other worlds are not measured yet, and keep the one-shot
/// range). Above that, `ce-push` when the output is symmetric (measured 2-8% faster
/// than `ce-pull` from 1 MiB up, and no staging), else `ce-pull` (which stages only the
/// input shard, where `ce-push` would stage the whole output).
pub fn choose_all_gather(shard_bytes: usize, world: usize, output_symmetric: bool) -> AllGatherAlgorithm {
    if world == 2 && shard_bytes <= LL_MAX_SHARD_2 {
        AllGatherAlgorithm::Ll
    } else if shard_bytes <= ONESHOT_MAX_SHARD {
        AllGatherAlgorithm::SmOneshot
    } else if output_symmetric {
        AllGatherAlgorithm::CePush
    } else {
        AllGatherAlgorithm::CePull
    }
}

/// The algorithm `auto` runs for an output chunk of `chunk_bytes` per rank: `ll` up to
/// [`LL_MAX_CHUNK_2`] at 2 ranks, else `sm-direct`. Since its reduction issues every source's 16-byte loads before
/// combining them, `sm-direct` with 16 CTAs beat `ce-reduce` at every size from 64 KiB
/// to 256 MiB per rank on 4x H200 (311 against 228 GB/s busbw at 256 MiB): `ce-reduce`'s
/// copies and reductions overlap too little. Re-measure on other machines and worlds.
pub fn choose_reduce_scatter(chunk_bytes: usize, world: usize) -> ReduceScatterAlgorithm {
    if world == 2 && chunk_bytes <= LL_MAX_CHUNK_2 {
        return ReduceScatterAlgorithm::Ll;
    }
    // Measured on 2x H200 (2026-11-22, docs/benchmarks.md "Reduce-scatter with bulk
    // copies"): `tma-reduce` with 8 CTAs is nowhere faster than `sm-direct` with 8 (132
    // against 130 GB/s busbw at 256 MiB, 47 against 49 at 1 MiB) and slower than
    // `sm-direct` with 16 (242) at every size, and next to a GEMM it costs more (9.5-10%
    // against 3.5-6.7%), so `auto` does not pick it. A crossover goes here (a chunk size
    // per world) once a few-SM algorithm beats `sm-direct`: busbw and 64 KiB latency at 2
    // ranks (and 4 when measured), and the saturated overlap benchmark's slowdown.
    // 2x H200, 2026-11-22, commit aff766f: `tma-push-reduce` reached 180 GB/s busbw at 256 MiB with 8 CTAs
    // (tma-reduce 132), and cost the GEMM 14.5-19.7% with kernel sync (NCCL 13.7-15.5).
    // `tma-push-reduce` is never chosen here, however fast: it is not deterministic and
    // adds in the element type (opt-in only; `auto_never_picks_push_reduce`).
    ReduceScatterAlgorithm::SmDirect
}

/// The rounds of an LL collective of `bytes` per rank: `(first line, lines)`, each at
/// most a slot's lines (`lowcon_abi::ll::slot_lines`: 1 MiB of payload at 2 ranks).
pub(crate) fn ll_rounds(bytes: usize, world: u32) -> impl Iterator<Item = (u64, u64)> {
    let lines = (bytes as u64).div_ceil(lowcon_abi::ll::PAYLOAD_PER_LINE);
    let per = lowcon_abi::ll::slot_lines(world);
    (0..lines.div_ceil(per)).map(move |r| (r * per, per.min(lines - r * per)))
}

/// Default CTAs of an LL round of `lines` lines: one line per thread up to 32 CTAs (a
/// 64 KiB shard takes 16), so that every line is in flight at once.
pub(crate) fn ll_ctas(lines: u64) -> u32 {
    lines.div_ceil(crate::cuda::kernels::COLL_THREADS as u64).clamp(1, 32) as u32
}

/// Default CTAs of the one-shot all-gather for `total` gathered bytes: one per 16 KiB,
/// 4 to 32 (it is meant for small messages, where it runs for a few microseconds).
pub(crate) fn oneshot_ctas(total: usize) -> u32 {
    (total / (16 << 10)).clamp(4, 32) as u32
}

/// Default CTAs of the reductions (ce-reduce and sm-direct).
pub const DEFAULT_REDUCE_CTAS: u32 = 16;

/// Default CTAs of `tma-reduce`: each CTA's one producer thread keeps a whole ring of
/// bulk copies in flight, so a few CTAs suffice (the aim is 330 GB/s busbw
/// with at most 8; measured: 131.9 GB/s at 8 CTAs, docs/benchmarks.md); `--ctas` overrides.
pub const DEFAULT_TMA_CTAS: u32 = 8;

/// Shared memory a `tma-reduce` ring may use: with the barrier area, just below
/// H100/H200's 227 KiB of dynamic shared memory per CTA (opt-in). What keeps NVLink busy
/// with few CTAs is bytes in flight per CTA (gpu-kernels/kernels/src/tma.rs, NOTE [tma-reduce
/// bytes in flight]), so the ring takes all of it.
pub(crate) const TMA_RING_BYTES: u32 = 224 << 10;

/// Bytes of one `tma-reduce` stage (one tile per rank).
const TMA_STAGE_BYTES: u32 = 32 << 10;

/// Most dynamic shared memory of one CTA on sm_90 (227 KiB, opt-in).
const MAX_SMEM: u32 = 227 << 10;

/// Tile bytes and stages of `tma-reduce`'s ring for `world` ranks: 32 KiB stages (tiles
/// of `32 KiB / world`, at least `TILE_ALIGN`), as many as fit in [`TMA_RING_BYTES`]
/// (2 ranks: 7 stages of two 16 KiB tiles; 8 ranks: 7 of eight 4 KiB tiles). Small
/// stages, many of them: a stage being reduced is a stage not in flight.
///
/// `LOWCON_TMA_TILE_BYTES` and `LOWCON_TMA_STAGES` (config.rs) override either, for
/// measuring; the ring is then shrunk until it fits 227 KiB.
pub(crate) fn tma_ring(world: usize) -> (u32, u32) {
    use lowcon_abi::tma::{MAX_STAGES, TILE_ALIGN, smem_bytes};
    let world = world.max(1) as u32;
    let (tile_env, stages_env) = (crate::config::tma_tile_bytes(), crate::config::tma_stages());
    let mut tile = match tile_env {
        Some(t) => (t.min(MAX_SMEM as u64) as u32).div_ceil(TILE_ALIGN) * TILE_ALIGN,
        None => TMA_STAGE_BYTES / world / TILE_ALIGN * TILE_ALIGN,
    }
    .max(TILE_ALIGN);
    // At least two stages must fit.
    tile = tile.min((MAX_SMEM - lowcon_abi::tma::DATA_OFFSET) / (2 * world) / TILE_ALIGN * TILE_ALIGN).max(TILE_ALIGN);
    let mut stages = match stages_env {
        Some(s) => s.min(MAX_STAGES as u64) as u32,
        None => TMA_RING_BYTES / (world * tile),
    }
    .clamp(2, MAX_STAGES);
    while stages > 2 && smem_bytes(world, tile, stages) > MAX_SMEM {
        stages -= 1;
    }
    (tile, stages)
}

/// Tile bytes of `tma-push-reduce`'s ring (`lowcon_abi::tma::PUSH_STAGES` tiles): 16 KiB,
/// 192 KiB in all; `LOWCON_TMA_TILE_BYTES` overrides it (rounded up to 128, shrunk to
/// fit 227 KiB). Each tile is loaded from local memory and pushed once, so the ring
/// only has to cover the local load latency: `PUSH_LAG` tiles (128 KiB) of loads run
/// ahead of the pushes. Not measured yet.
pub(crate) fn push_tile() -> u32 {
    use lowcon_abi::tma::{DATA_OFFSET, PUSH_STAGES, TILE_ALIGN};
    let max = (MAX_SMEM - DATA_OFFSET) / PUSH_STAGES / TILE_ALIGN * TILE_ALIGN;
    match crate::config::tma_tile_bytes() {
        Some(t) => ((t.min(MAX_SMEM as u64) as u32).div_ceil(TILE_ALIGN) * TILE_ALIGN).clamp(TILE_ALIGN, max),
        None => (16 << 10).min(max),
    }
}

/// How `tma-reduce` splits a chunk of `n` elements of `esize` bytes that starts at byte
/// offset `off` of the symmetric input (the same on every rank): `(head elements, body
/// bytes)`. The head runs up to the first 16-byte boundary, the body is whole 16-byte
/// vectors (what bulk copies may move), the tail the rest. Head and tail are reduced
/// with plain loads. An `off` that is not a multiple of `esize` leaves no body.
pub(crate) fn tma_split(off: usize, n: usize, esize: usize) -> (usize, usize) {
    if !off.is_multiple_of(esize) {
        return (n, 0);
    }
    let head = (((16 - off % 16) % 16) / esize).min(n);
    let body = (n - head) * esize / 16 * 16;
    (head, body)
}

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

// NOTE [shared CTAs]: a collective's kernels spin until their peers' kernels arrive, so
// every rank's kernels in flight at once must be resident at once. One GPU per rank holds
// them easily; ranks sharing a GPU (`LOWCON_SHARE_GPU`) may not: seen on one H100 under
// MPS, kernel-sync `coll-stress` (two streams per rank) stopped at 6 and 8 ranks, and
// FSDP2 (all-gather and reduce-scatter streams) at 4, with one rank's reduce-scatter
// kernel holding its SMs while the all-gather kernel its peer waited for could not start.
// So with k ranks on a GPU of S SMs, every kernel gets at most max(2, S / (4k)) CTAs:
// four kernels per rank in flight fit even at one CTA per SM, and SMs stay free for the
// application's own kernels (capping each MPS client's share of the SMs instead starved
// those: FSDP2 at 8 ranks stopped with 12% per client). Results do not depend on the CTA
// count (the benchmarks sweep it); shared mode never measures speed.

/// NOTE [shared CTAs]: the CTA cap for `ranks_on_gpu` ranks sharing a GPU of `sm_count`
/// SMs; `None` for a GPU of its own.
pub(crate) fn shared_cta_cap(ranks_on_gpu: usize, sm_count: u32) -> Option<u32> {
    (ranks_on_gpu > 1).then(|| (sm_count / (4 * ranks_on_gpu as u32)).max(2))
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

    #[test]
    fn tma_ring_fits_shared_memory_and_keeps_alignment() {
        assert_eq!(tma_ring(2), (16 << 10, 7));
        assert_eq!(tma_ring(4), (8 << 10, 7));
        assert_eq!(tma_ring(8), (4 << 10, 7));
        for world in 1..=16 {
            let (tile, stages) = tma_ring(world);
            assert_eq!(tile % lowcon_abi::tma::TILE_ALIGN, 0);
            assert!((2..=lowcon_abi::tma::MAX_STAGES).contains(&stages));
            let smem = lowcon_abi::tma::smem_bytes(world as u32, tile, stages);
            assert!(smem <= 227 << 10, "world {world}: {smem} bytes");
        }
    }

    #[test]
    fn ll_rounds_cover_the_lines_within_a_slot() {
        for world in [2u32, 3, 8] {
            let per = lowcon_abi::ll::slot_lines(world);
            for bytes in [1usize, 7, 8, 9, 65536, (per * 8) as usize, (per * 8) as usize + 1, 5 << 20] {
                let rounds: Vec<_> = ll_rounds(bytes, world).collect();
                let mut next = 0;
                for &(first, n) in &rounds {
                    assert_eq!(first, next);
                    assert!(n >= 1 && n <= per);
                    next += n;
                }
                assert_eq!(next, (bytes as u64).div_ceil(8), "world {world} bytes {bytes}");
            }
        }
        assert_eq!(ll_rounds(1 << 20, 2).count(), 1);
        assert_eq!(ll_rounds((1 << 20) + 1, 2).count(), 2);
        assert_eq!(ll_ctas(8192), 16);
        assert_eq!(ll_ctas(1), 1);
        assert_eq!(ll_ctas(1 << 20), 32);
    }

    #[test]
    fn auto_picks_ll_for_small_messages_at_2_ranks_only() {
        assert_eq!(choose_all_gather(64 << 10, 2, false), AllGatherAlgorithm::Ll);
        assert_eq!(choose_all_gather(LL_MAX_SHARD_2, 2, true), AllGatherAlgorithm::Ll);
        assert_eq!(choose_all_gather(LL_MAX_SHARD_2 + 2, 2, true), AllGatherAlgorithm::CePush);
        assert_eq!(choose_all_gather(64 << 10, 4, false), AllGatherAlgorithm::SmOneshot);
        assert_eq!(choose_reduce_scatter(64 << 10, 2), ReduceScatterAlgorithm::Ll);
        assert_eq!(choose_reduce_scatter(LL_MAX_CHUNK_2 + 2, 2), ReduceScatterAlgorithm::SmDirect);
        assert_eq!(choose_reduce_scatter(64 << 10, 8), ReduceScatterAlgorithm::SmDirect);
    }

    #[test]
    fn auto_never_picks_push_reduce() {
        for world in 1..=16 {
            for shift in 0..40 {
                assert_ne!(choose_reduce_scatter(1 << shift, world), ReduceScatterAlgorithm::TmaPushReduce);
            }
        }
    }

    #[test]
    fn push_tile_fits_shared_memory() {
        let tile = push_tile();
        assert_eq!(tile % lowcon_abi::tma::TILE_ALIGN, 0);
        assert!(lowcon_abi::tma::push_smem_bytes(tile) <= MAX_SMEM);
    }

    #[test]
    fn tma_split_covers_the_chunk_with_an_aligned_body() {
        for esize in [2usize, 4] {
            for off in (0..64).step_by(esize) {
                for n in [0usize, 1, 3, 7, 8, 9, 100, 1003] {
                    let (head, body) = tma_split(off, n, esize);
                    assert!(body.is_multiple_of(16));
                    assert!(head * esize + body <= n * esize);
                    assert!(n * esize - head * esize - body < 16 + 16, "tail too long");
                    if head * esize + body > 0 && body > 0 {
                        assert!((off + head * esize).is_multiple_of(16), "body unaligned at {off}");
                    }
                }
            }
        }
        assert_eq!(tma_split(12, 100, 4), (1, 384));
        assert_eq!(tma_split(1, 10, 2), (10, 0));
    }

    #[test]
    fn the_shared_gpu_cap_fits_four_kernels_per_rank() {
        assert_eq!(shared_cta_cap(1, 132), None);
        assert_eq!(shared_cta_cap(2, 132), Some(16));
        assert_eq!(shared_cta_cap(4, 132), Some(8));
        assert_eq!(shared_cta_cap(8, 132), Some(4));
        assert_eq!(shared_cta_cap(64, 132), Some(2));
        for k in 2..=8 {
            assert!(4 * k as u32 * shared_cta_cap(k, 132).unwrap() <= 132);
        }
    }
}
