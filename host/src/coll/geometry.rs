//! The algorithms' geometry: how a call's bytes are cut into LL rounds, `tma-reduce`
//! ring tiles, ce-reduce pipeline pieces and staging slots. What runs is the planner's
//! choice (`crate::plan`); this is how it is laid out.

/// The rounds of an LL collective of `bytes` per rank: `(first line, lines)`, each at
/// most a slot's lines (`lowcon_abi::ll::slot_lines`: 1 MiB of payload at 2 ranks).
pub(crate) fn ll_rounds(bytes: usize, world: u32) -> impl Iterator<Item = (u64, u64)> {
    let lines = (bytes as u64).div_ceil(lowcon_abi::ll::PAYLOAD_PER_LINE);
    let per = lowcon_abi::ll::slot_lines(world);
    (0..lines.div_ceil(per)).map(move |r| (r * per, per.min(lines - r * per)))
}

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

/// Staging slots of ce-reduce: copies may run this many pieces ahead of the reduction.
pub(crate) const STAGING_DEPTH: usize = 3;

/// Pieces a bf16-wire plane holds per chunk slot when a call has more (NOTE [plane
/// ring] in `coll::gpu::wire_steps`): packs may run this many pieces ahead of the
/// slowest reader.
pub(crate) const PLANE_RING: usize = 3;

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
}
