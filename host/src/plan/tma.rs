//! The TMA rings a plan carries (its `tma` field): `tma-reduce`'s tile bytes and stages,
//! `tma-push-reduce`'s tile bytes, from the world and the settings (NOTE [plan settings]).

/// Shared memory a `tma-reduce` ring may use: with the barrier area, just below
/// H100/H200's 227 KiB of dynamic shared memory per CTA (opt-in). What keeps NVLink busy
/// with few CTAs is bytes in flight per CTA (gpu-kernels/kernels/src/tma.rs, NOTE [tma-reduce
/// bytes in flight]), so the ring takes all of it.
pub const TMA_RING_BYTES: u32 = 224 << 10;

/// Bytes of one `tma-reduce` stage (one tile per rank).
const TMA_STAGE_BYTES: u32 = 32 << 10;

/// Most dynamic shared memory of one CTA on sm_90 (227 KiB, opt-in).
const MAX_SMEM: u32 = 227 << 10;

/// Tile bytes and stages of `tma-reduce`'s ring for `world` ranks: 32 KiB stages (tiles
/// of `32 KiB / world`, at least `TILE_ALIGN`), as many as fit in [`TMA_RING_BYTES`]
/// (2 ranks: 7 stages of two 16 KiB tiles; 8 ranks: 7 of eight 4 KiB tiles). Small
/// stages, many of them: a stage being reduced is a stage not in flight.
///
/// `tile_env` and `stages_env` (`LOWCON_TMA_TILE_BYTES` and `LOWCON_TMA_STAGES`, which
/// the planner reads: NOTE [plan settings]) override either, for measuring; the ring is
/// then shrunk until it fits 227 KiB.
pub fn tma_ring(world: usize, (tile_env, stages_env): (Option<u64>, Option<u64>)) -> (u32, u32) {
    use lowcon_abi::tma::{MAX_STAGES, TILE_ALIGN, smem_bytes};
    let world = world.max(1) as u32;
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
/// 192 KiB in all; `tile_env` (`LOWCON_TMA_TILE_BYTES`) overrides it (rounded up to 128,
/// shrunk to fit 227 KiB). Each tile is loaded from local memory and pushed once, so the
/// ring only has to cover the local load latency: `PUSH_LAG` tiles (128 KiB) of loads
/// run ahead of the pushes. Not measured yet.
pub fn push_tile(tile_env: Option<u64>) -> u32 {
    use lowcon_abi::tma::{DATA_OFFSET, PUSH_STAGES, TILE_ALIGN};
    let max = (MAX_SMEM - DATA_OFFSET) / PUSH_STAGES / TILE_ALIGN * TILE_ALIGN;
    match tile_env {
        Some(t) => ((t.min(MAX_SMEM as u64) as u32).div_ceil(TILE_ALIGN) * TILE_ALIGN).clamp(TILE_ALIGN, max),
        None => (16 << 10).min(max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tma_ring_fits_shared_memory_and_keeps_alignment() {
        assert_eq!(tma_ring(2, (None, None)), (16 << 10, 7));
        assert_eq!(tma_ring(4, (None, None)), (8 << 10, 7));
        assert_eq!(tma_ring(8, (None, None)), (4 << 10, 7));
        for world in 1..=16 {
            let (tile, stages) = tma_ring(world, (None, None));
            assert_eq!(tile % lowcon_abi::tma::TILE_ALIGN, 0);
            assert!((2..=lowcon_abi::tma::MAX_STAGES).contains(&stages));
            let smem = lowcon_abi::tma::smem_bytes(world as u32, tile, stages);
            assert!(smem <= 227 << 10, "world {world}: {smem} bytes");
        }
    }

    #[test]
    fn push_tile_fits_shared_memory() {
        let tile = push_tile(None);
        assert_eq!(push_tile(Some(1)), lowcon_abi::tma::TILE_ALIGN);
        assert!(lowcon_abi::tma::push_smem_bytes(push_tile(Some(1 << 30))) <= MAX_SMEM);
        assert_eq!(tile % lowcon_abi::tma::TILE_ALIGN, 0);
        assert!(lowcon_abi::tma::push_smem_bytes(tile) <= MAX_SMEM);
    }
}
