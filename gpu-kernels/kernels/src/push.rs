//! `tma-push-reduce`: reduce-scatter by pushing, the additions done at the destination
//! by `cp.reduce.async.bulk` (opt-in; never picked by `auto`).
//!
//! NOTE [tma-push-reduce]: `tma-reduce` and `sm-direct` both *read* every peer's tile
//! over NVLink, and on 2x H200 both stopped at ~33 GB/s of algbw per CTA with 8 CTAs,
//! however many bulk loads were in flight (2 ring stages cost only 19% against 7): the
//! limit looks like what one SM can read over NVLink. Here NVLink carries only
//! *writes*: each rank reads its own input (local HBM) and pushes chunk `p` into rank
//! `p`'s accumulator, where the copy engine of the bulk operation adds it.
//!
//! The schedule (host: `coll/gpu.rs`; the host backend mirrors it in `coll/host.rs`):
//! 1. the owner copies its own chunk into its accumulator (a region of the channel's
//!    symmetric workspace): the accumulator *starts* as the owner's contribution;
//! 2. entry barrier: every accumulator is initialised, and no owner still reads its
//!    accumulator from an earlier call;
//! 3. this kernel: per CTA, thread 0 walks the CTA's tiles (`cta, cta + grid, ...` of
//!    the chunk's 16-byte-padded body) and for each tile every peer `p` in rotated
//!    order: a bulk load (`cp.async.bulk`, mbarrier `complete_tx`) of tile `t` of chunk
//!    `p` of this rank's (local) input into a ring stage, then, `PUSH_LAG` items later,
//!    once the stage's mbarrier phase completed,
//!    `cp.reduce.async.bulk.global.shared::cta.bulk_group.add` of the stage into rank
//!    `p`'s accumulator, one bulk group per item. A stage is reloaded only after the
//!    push that read it finished reading (`cp.async.bulk.wait_group.read`);
//! 4. `cp.async.bulk.wait_group 0` (every push has completed at its destination), then
//!    `fence.proxy.async` in every thread, then the exit barrier (`fence.acq_rel.sys` and
//!    the release signal): a peer that sees it knows our additions into it are done;
//! 5. the owner copies its accumulator into the output.
//!
//! Not deterministic: the additions into an accumulator happen in arrival order, and
//! in the element type (f16/bf16 round at every addition; `.noftz` keeps subnormals).
//! Per element, |result − exact sum| ≤ (world − 1) · u · Σ_p |x_p|, with u the unit
//! roundoff (bf16 2⁻⁸, f16 2⁻¹¹, f32 2⁻²⁴), and repeated calls may differ in the last
//! bits. Sum only.
//!
//! Alignment: bulk operations need 16-byte-aligned addresses and sizes. The
//! accumulator is 256-byte aligned and padded, and the body is the chunk rounded up to
//! 16 bytes, so the last push adds up to 15 bytes past the chunk into the
//! accumulator's padding (never copied out). The host passes inputs whose chunks are
//! 16-byte aligned and padded: the caller's input when its address and the chunk size
//! are multiples of 16, else a copy in the workspace with a padded chunk stride.

use lowcon_abi::tma::{DATA_OFFSET, PUSH_LAG, PUSH_STAGES};

use crate::bulk::{
    add_type, bulk_commit_group, bulk_load, bulk_reduce_add, bulk_wait_group_all, bulk_wait_group_read,
    fence_mbarrier_init, fence_proxy_async, fence_proxy_async_global, fence_proxy_async_shared_cta,
    mbar_arrive_expect_tx, mbar_init, mbar_wait_parity, smem_base,
};
use crate::coll::{Fused, fused_kernel};
use crate::thread::{block_idx_x, grid_dim_x, sync_threads_or, thread_idx_x};

/// Committed push groups that may still read their stages when a stage is reloaded:
/// before loading item `k` into stage `k % S`, pushes `0 .. k - LAG` have been
/// committed, and the one that read the stage (item `k - S`) is followed by
/// `S - LAG - 1` of them.
const READ_SLACK: u32 = PUSH_STAGES - PUSH_LAG - 1;

/// What thread 0 of a CTA pushes.
#[derive(Clone, Copy)]
struct Push {
    /// This rank's (padded) input: chunk `p` at `src + p * stride`.
    src: u64,
    stride: u64,
    /// Device array of the `world` workspace bases; every accumulator at `acc_off`.
    bases: *const u64,
    acc_off: u64,
    /// Bytes per chunk (a multiple of 16), tile bytes (a multiple of 128).
    body: u64,
    tile: u64,
    rank: u32,
    world: u32,
}

impl Push {
    /// Item `k` of a CTA: (peer, tile), tile-major, peers in rotated order.
    fn item(&self, k: u64, cta: u64, grid: u64) -> (u32, u64) {
        let peers = (self.world - 1) as u64;
        let (j, i) = (k / peers, k % peers);
        ((self.rank + 1 + i as u32) % self.world, cta + j * grid)
    }
    fn bytes(&self, t: u64) -> u32 {
        self.tile.min(self.body - t * self.tile) as u32
    }
}

/// Thread 0's pipeline (see the module note). `TY` is a `bulk::add_type` constant.
///
/// # Safety
/// As [`tma_push_reduce`]; the ring's mbarriers are initialised and published.
#[inline(always)]
unsafe fn push<const TY: u32>(w: Push, base: u32) {
    let stages = PUSH_STAGES as u64;
    let lag = PUSH_LAG as u64;
    let full = |s: u64| base + s as u32 * 8;
    let slot = |s: u64| base + DATA_OFFSET + s as u32 * w.tile as u32;
    let (cta, grid) = (block_idx_x() as u64, grid_dim_x() as u64);
    let tiles = w.body.div_ceil(w.tile);
    let mine = if cta < tiles { (tiles - cta).div_ceil(grid) } else { 0 };
    let items = mine * (w.world - 1) as u64;
    // The input was written through the generic proxy (earlier kernels, copy engines)
    // and the peers' accumulators were initialised before their entry signal, which
    // this CTA acquired: fence before the async proxy reads or adds to them.
    fence_proxy_async_global();
    for k in 0..items + lag {
        if k < items {
            let s = k % stages;
            if k >= stages {
                // The push of item `k - stages` has read stage `s`.
                bulk_wait_group_read::<READ_SLACK>();
            }
            let (p, t) = w.item(k, cta, grid);
            let bytes = w.bytes(t);
            // SAFETY: initialised mbarrier; the slot is inside the launch's shared
            // memory; the source is inside chunk `p`'s 16-byte-aligned, padded body.
            unsafe {
                mbar_arrive_expect_tx(full(s), bytes);
                bulk_load(slot(s), w.src + p as u64 * w.stride + t * w.tile, bytes, full(s), None);
            }
        }
        if k >= lag {
            let q = k - lag;
            let s = q % stages;
            // SAFETY: initialised mbarrier; phase `q / stages` of stage `s` is item q's.
            unsafe { mbar_wait_parity(full(s), ((q / stages) & 1) as u32) };
            fence_proxy_async_shared_cta();
            let (p, t) = w.item(q, cta, grid);
            // SAFETY: `p < world` entries in `bases`; the accumulator holds the padded
            // body; the stage holds the tile (its phase completed).
            unsafe {
                let dst = *w.bases.add(p as usize) + w.acc_off + t * w.tile;
                bulk_reduce_add::<TY>(dst, slot(s), w.bytes(t));
            }
            bulk_commit_group();
        }
    }
    // Every push has been performed at its destination before the exit signal.
    bulk_wait_group_all();
}

/// tma-push-reduce: adds chunk `p` of this rank's input into rank `p`'s accumulator, for
/// every peer `p`.
///
/// # Safety
/// `f` as in `coll.rs`'s fused kernels; `src + p * stride` 16-byte aligned and readable
/// for `body` bytes for every `p < world`; `bases` a device array of `world` workspace
/// bases, each `base + acc_off` 16-byte aligned and writable for `body` bytes, and
/// initialised (by its owner) before the entry barrier; `body` a multiple of 16;
/// `tile` a multiple of 128; the launch has `push_smem_bytes(tile)` bytes of dynamic
/// shared memory and `PUSH_THREADS` threads.
#[inline(always)]
unsafe fn tma_push_reduce<const TY: u32>(f: Fused, w: Push) {
    let base = smem_base();
    if thread_idx_x() == 0 {
        for s in 0..PUSH_STAGES {
            // SAFETY: the barrier area is inside the launch's shared memory; nobody uses
            // the mbarriers before the CTA barrier below.
            unsafe { mbar_init(base + s * 8, 1) };
        }
        fence_mbarrier_init();
    }
    sync_threads_or(false);
    // SAFETY: the caller's contract.
    if unsafe { f.enter() } {
        if thread_idx_x() == 0 && w.world > 1 {
            // SAFETY: the caller's contract.
            unsafe { push::<TY>(w, base) };
        }
        // Thread 0's pushes have completed (`wait_group 0`); order them, in the async
        // proxy, before the exit signal (the CTA barrier in `exit` orders this before
        // the signalling thread's `fence.acq_rel.sys`).
        fence_proxy_async();
    }
    // SAFETY: the caller's contract.
    unsafe { f.exit() };
}

macro_rules! push_kernel {
    ($ty:expr, $name:ident) => {
        fused_kernel! {
            /// tma-push-reduce for this element type (see `tma_push_reduce`).
            ///
            /// # Safety
            /// See `tma_push_reduce`.
            fn $name(
                src: u64,
                stride: u64,
                bases: *const u64,
                acc_off: u64,
                body: u64,
                tile: u32,
            ) |f| {
                let w = Push { src, stride, bases, acc_off, body, tile: tile as u64, rank: f.rank, world: f.world };
                // SAFETY: forwarded from the caller.
                unsafe { tma_push_reduce::<{ $ty }>(f, w) };
            }
        }
    };
}

push_kernel!(add_type::F32, lowcon_tma_push_reduce_f32);
push_kernel!(add_type::F16, lowcon_tma_push_reduce_f16);
push_kernel!(add_type::BF16, lowcon_tma_push_reduce_bf16);
