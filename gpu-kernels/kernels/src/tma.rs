//! `tma-reduce`: reduce-scatter with Hopper's bulk copies on a few CTAs.
//!
//! NOTE [tma-reduce]: ordinary loads over NVLink need many threads in flight, so a
//! load-driven reduction (`sm-direct`) holds 16 CTAs for the whole collective. A bulk
//! copy moves a whole tile per instruction, issued by one thread, so one warp per CTA
//! keeps NVLink busy and 8 CTAs (or fewer) are enough. Per CTA:
//!
//! - warp 0, lane 0 (the producer) streams the CTA's tiles (tiles `cta, cta + grid,
//!   ...` of the 16-byte-aligned body of chunk `rank`) of every rank, its own included,
//!   into a ring of `stages` shared-memory stages, each holding one tile per rank.
//!   Stage `s` has two mbarriers: `full[s]` (one arrival, `arrive.expect_tx` of the
//!   stage's bytes; the bulk copies complete the transactions) and `empty[s]` (one
//!   arrival per consumer warp, when the warp no longer reads the stage). Tile `k` of
//!   the CTA uses stage `k % stages` in round `k / stages`: the producer waits for
//!   round `r - 1`'s `empty` phase before refilling, consumers wait for round `r`'s
//!   `full` phase (parity `r & 1`).
//! - warps 1.. (the consumers) reduce each 16-byte vector of a stage over the ranks
//!   *in rank order* in `f32`, exactly as `sm-direct`, `ce-reduce` and the CPU reference
//!   do, so the result is deterministic and bit-identical to them, and store it with
//!   plain 16-byte stores (the output is local memory; scalar stores when the output's
//!   alignment differs from the input's).
//! - bulk copies need 16-byte-aligned addresses and sizes: the host splits the chunk
//!   into a head (elements before the input's first 16-byte boundary), a body of whole
//!   16-byte vectors (the tiles) and a tail, and CTA 0's consumers reduce head and tail
//!   with plain loads.
//!
//! NOTE [tma-reduce bytes in flight]: a CTA's bandwidth is at most (bytes in flight) /
//! (round trip), and at most (stage bytes) / (time the consumers take per stage). The
//! target, 330 GB/s busbw on 2 ranks with 8 CTAs, is 660 GB/s algbw: every GPU loads
//! 660 GB/s (half local, half over NVLink), 82 GB/s per CTA. A stage completes when
//! its slowest tile (the peer's) lands, so at an NVLink round trip of 2-2.5 µs under
//! load a CTA needs 165-205 KB in flight. The ring is 224 KiB (`geometry::tma_ring`: 7
//! stages of 32 KiB, the most 227 KiB of shared memory holds); with one stage being
//! reduced, 192 KiB are in flight: 79 GB/s per CTA at 2.5 µs (8 CTAs: ~315 busbw),
//! 98 GB/s at 2 µs (~390). 8 CTAs reach 330 only if the loaded round trip stays under
//! ~2.4 µs; beyond that, only more CTAs help (shared memory is full), e.g. 10-12.
//! The first version (6 stages, 160 KiB in flight) measured 14 GB/s per CTA, 5x
//! below this bound, so it was not latency-bound: its consumers were the limit. Each
//! 16-byte vector took a runtime `op` and eight speculated IEEE `div.rn.f32` (AVG's
//! `finish`, computed then discarded for SUM), one vector at a time on two warps per
//! scheduler: ~2 µs per 32 KiB stage, i.e. one stage per "round trip". Now `consume` is
//! specialised per operator (SUM: adds only) and reduces four vectors at once. The
//! consumers' cost per stage: 1024 output vectors on 256 threads, 4 each, 8
//! `ld.shared.v4`, 32 adds and 4 `st.global.v4` per thread: well under 0.5 µs, so the
//! ring, not the consumers, sets the rate. `LOWCON_TMA_STAGES` and
//! `LOWCON_TMA_TILE_BYTES` resize the ring to check this on a GPU: bandwidth per CTA
//! should grow with stages until ~6; if it does not, the limit is the bulk copies'
//! own (outstanding requests per SM to peer memory), and then more, smaller copies
//! per stage or more CTAs are the remedy.
//!
//! Barriers are `coll.rs`'s (NOTE [fused barriers]), with the proxy fences of
//! `bulk.rs`'s NOTE [async proxy] on both sides of the ring.

use lowcon_abi::kernel_names::TMA_CONSUMER_WARPS;
use lowcon_abi::{reduce_op, tma};

use crate::bulk::{
    bulk_load, create_policy_evict_first, fence_mbarrier_init, fence_proxy_async, fence_proxy_async_global,
    ld_shared_v4, mbar_arrive, mbar_arrive_expect_tx, mbar_init, mbar_wait_parity, smem_base, sync_warp,
};
use crate::coll::{Fused, V16, fused_kernel};
use crate::reduce::{Bf16, Elem, F16, combine, finish};
use crate::thread::{block_idx_x, grid_dim_x, sync_threads_or, thread_idx_x};

/// Threads of the consumer warps.
const CONSUMER_THREADS: u64 = 32 * TMA_CONSUMER_WARPS as u64;

/// The shared-memory ring (layout: `lowcon_abi::tma`).
#[derive(Clone, Copy)]
struct Ring {
    base: u32,
    stages: u64,
    world: u32,
    tile: u64,
}

impl Ring {
    fn full(&self, s: u64) -> u32 {
        self.base + s as u32 * 8
    }
    fn empty(&self, s: u64) -> u32 {
        self.base + (tma::MAX_STAGES + s as u32) * 8
    }
    /// Stage `s`'s tile of rank `p`.
    fn slot(&self, s: u64, p: u32) -> u32 {
        self.base + tma::DATA_OFFSET + ((s as u32 * self.world + p) * self.tile as u32)
    }
}

/// Which tiles a CTA handles and how the chunk is split.
#[derive(Clone, Copy)]
struct Work {
    /// Head elements (before the body), body bytes, tiles of the body.
    head: u64,
    body: u64,
    tiles: u64,
    cta: u64,
    grid: u64,
}

impl Work {
    /// Bytes of tile `t` (the last may be short; always a multiple of 16).
    fn bytes(&self, ring: &Ring, t: u64) -> u64 {
        ring.tile.min(self.body - t * ring.tile)
    }
}

/// The producer: bulk loads of every rank's tiles into the ring, in rotated rank order
/// (so the ranks do not all start on one peer).
///
/// # Safety
/// As [`tma_reduce`]; the ring's mbarriers are initialised.
#[inline(always)]
unsafe fn produce(ring: Ring, w: Work, src: impl Fn(u32) -> u64, rank: u32, hint: bool) {
    let policy = if hint { Some(create_policy_evict_first()) } else { None };
    // The peers' inputs were written through the generic proxy (or by copy engines)
    // before their entry signal, which this CTA acquired: fence before the async proxy
    // reads them.
    fence_proxy_async_global();
    let mut k = 0u64;
    let mut t = w.cta;
    while t < w.tiles {
        let (s, round) = (k % ring.stages, k / ring.stages);
        if round > 0 {
            // SAFETY: initialised mbarrier (caller).
            unsafe { mbar_wait_parity(ring.empty(s), ((round - 1) & 1) as u32) };
        }
        let bytes = w.bytes(&ring, t);
        // SAFETY: as above; `bytes * world` is at most 8 x 32 KiB, inside the
        // transaction count's range.
        unsafe { mbar_arrive_expect_tx(ring.full(s), bytes as u32 * ring.world) };
        for i in 0..ring.world {
            let p = (rank + 1 + i) % ring.world;
            // SAFETY: the slot is inside the ring (host-sized shared memory); the source
            // is inside rank p's chunk body, 16-byte aligned, `bytes` a multiple of 16.
            unsafe { bulk_load(ring.slot(s, p), src(p) + t * ring.tile, bytes as u32, ring.full(s), policy) };
        }
        k += 1;
        t += w.grid;
    }
}

/// Stores the eight (or four) finished values `a` as elements `at..` of `dst`: one
/// 16-byte store when `vec`, else element by element.
///
/// # Safety
/// `dst` valid for `at + T::VEC` elements; 16-byte aligned there when `vec`.
#[inline(always)]
unsafe fn store<T: Elem>(dst: *mut T, at: u64, a: &[f32; 8], vec: bool) {
    // SAFETY: (both) the caller's contract.
    unsafe {
        if vec {
            dst.add(at as usize).cast::<V16>().write(T::pack(a));
        } else {
            // Indexed, not an iterator: LLVM left `iter().take()` rolled and put `a` in
            // local memory.
            #[allow(clippy::needless_range_loop)]
            for e in 0..T::VEC {
                dst.add(at as usize + e).write(T::from_f32(a[e]));
            }
        }
    }
}

/// Vectors a consumer thread reduces at once (written out four times in `consume`):
/// each thread has four independent chains of shared-memory loads and arithmetic, since
/// two consumer warps per scheduler hide little latency by themselves.
const UNROLL: u64 = 4;

/// The reduction of the 16-byte vector at byte `off` of stage `s`'s tiles over the ranks,
/// in rank order, finished (`OP` a `reduce_op` constant).
///
/// # Safety
/// `off` is inside the tiles of a stage whose `full` phase this thread waited for.
#[inline(always)]
unsafe fn reduce_vec<T: Elem, const OP: u32>(ring: &Ring, s: u64, off: u32) -> [f32; 8] {
    // SAFETY: (each) the caller's contract.
    let mut a = T::unpack(V16(unsafe { ld_shared_v4(ring.slot(s, 0) + off) }));
    for p in 1..ring.world {
        let y = T::unpack(V16(unsafe { ld_shared_v4(ring.slot(s, p) + off) }));
        for e in 0..T::VEC {
            a[e] = combine(OP, a[e], y[e]);
        }
    }
    for x in a.iter_mut().take(T::VEC) {
        *x = finish(OP, *x, ring.world);
    }
    a
}

/// A consumer thread (`ct` in `0..CONSUMER_THREADS`): reduces its vectors of each of the
/// CTA's tiles once the tile is in the ring, then releases the stage (one arrival per
/// warp). `OP` is a `reduce_op` constant: the operator is chosen once per launch, not per
/// element (a runtime `op` left a division per element in the sum's loop).
///
/// # Safety
/// As [`tma_reduce`]; the ring's mbarriers are initialised.
#[inline(always)]
unsafe fn consume<T: Elem, const OP: u32>(ring: Ring, w: Work, dst: *mut T, ct: u64, vec_out: bool) {
    let esize = 16 / T::VEC as u64;
    let step = CONSUMER_THREADS;
    let mut k = 0u64;
    let mut t = w.cta;
    while t < w.tiles {
        let (s, round) = (k % ring.stages, k / ring.stages);
        // SAFETY: initialised mbarrier (caller).
        unsafe { mbar_wait_parity(ring.full(s), (round & 1) as u32) };
        let nv = w.bytes(&ring, t) / 16;
        let at0 = w.head + t * ring.tile / esize;
        let mut v = ct;
        // Whole groups of `UNROLL` vectors: v, v + step, v + 2 step, v + 3 step. Four
        // named results rather than an array: LLVM left a `[[f32; 8]; 4]` in local memory.
        // Not for AVG: its IEEE divisions call a slow-path subroutine, and four vectors'
        // values live across those calls spilled registers. Not for f32 either (it
        // spilled 20 bytes; its vectors are half a 16-bit type's elements).
        while OP != reduce_op::AVG && T::VEC == 8 && v + 3 * step < nv {
            let off = |j: u64| (v + j * step) as u32 * 16;
            // SAFETY: (each) every offset is inside the tile the phase delivered.
            let (a0, a1, a2, a3) = unsafe {
                (
                    reduce_vec::<T, OP>(&ring, s, off(0)),
                    reduce_vec::<T, OP>(&ring, s, off(1)),
                    reduce_vec::<T, OP>(&ring, s, off(2)),
                    reduce_vec::<T, OP>(&ring, s, off(3)),
                )
            };
            let at = |j: u64| at0 + (v + j * step) * 16 / esize;
            // SAFETY: (each) `at + VEC` is inside the body's elements of `dst`.
            unsafe {
                store::<T>(dst, at(0), &a0, vec_out);
                store::<T>(dst, at(1), &a1, vec_out);
                store::<T>(dst, at(2), &a2, vec_out);
                store::<T>(dst, at(3), &a3, vec_out);
            }
            v += UNROLL * step;
        }
        // The rest (a short last tile, or tiles under `UNROLL` vectors per thread).
        while v < nv {
            // SAFETY: the offset is inside the tile the phase delivered.
            let a = unsafe { reduce_vec::<T, OP>(&ring, s, v as u32 * 16) };
            // SAFETY: `at + VEC` is inside the body's elements of `dst`.
            unsafe { store::<T>(dst, at0 + v * 16 / esize, &a, vec_out) };
            v += step;
        }
        // The warp's reads of the stage are done before its arrival releases them.
        sync_warp();
        if ct.is_multiple_of(32) {
            // SAFETY: initialised mbarrier (caller).
            unsafe { mbar_arrive(ring.empty(s)) };
        }
        k += 1;
        t += w.grid;
    }
}

/// Head and tail (the elements outside the 16-byte-aligned body), reduced with plain
/// loads by CTA 0's consumers.
///
/// # Safety
/// As [`tma_reduce`].
#[inline(always)]
unsafe fn edges<T: Elem>(src: impl Fn(u32) -> u64, world: u32, dst: *mut T, n: u64, w: Work, op: u32, ct: u64) {
    let esize = 16 / T::VEC as u64;
    let tail = n - w.head - w.body / esize;
    let mut c = ct;
    while c < w.head + tail {
        let i = if c < w.head { c } else { n - tail + (c - w.head) };
        // SAFETY: i < n; every source holds n elements.
        unsafe {
            let mut acc = (src(0) as *const T).add(i as usize).read().to_f32();
            for p in 1..world {
                acc = combine(op, acc, (src(p) as *const T).add(i as usize).read().to_f32());
            }
            dst.add(i as usize).write(T::from_f32(finish(op, acc, world)));
        }
        c += CONSUMER_THREADS;
    }
}

/// tma-reduce: `dst[i] = op over p of (bases[p] + off)[i]` for `i < n`, rank order.
///
/// # Safety
/// As `rs_direct` in `coll.rs` (the fused arguments, `bases` a device array of `world`
/// symmetric-buffer bases each valid for `off + n` elements, `dst` for `n`), and: the
/// launch has `lowcon_abi::tma::smem_bytes(world, tile, stages)` bytes of dynamic shared
/// memory and `TMA_THREADS` threads; `stages` in `1..=MAX_STAGES`; `tile` a multiple of
/// `TILE_ALIGN`; `off + head * size` a multiple of 16, `body` a multiple of 16 with
/// `head * size + body <= n * size`; `vec_out` only if `dst + head` is 16-byte aligned.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tma_reduce<T: Elem>(
    f: Fused,
    bases: *const u64,
    off: u64,
    dst: *mut T,
    n: u64,
    op: u32,
    head: u64,
    body: u64,
    tile: u32,
    stages: u32,
    vec_out: u32,
    hint: u32,
) {
    let t = thread_idx_x();
    let ring = Ring { base: smem_base(), stages: stages as u64, world: f.world, tile: tile as u64 };
    if t == 0 {
        for s in 0..ring.stages {
            // SAFETY: the barrier area is inside the launch's shared memory; nobody
            // uses the mbarriers before the CTA barrier below.
            unsafe {
                mbar_init(ring.full(s), 1);
                mbar_init(ring.empty(s), TMA_CONSUMER_WARPS);
            }
        }
        fence_mbarrier_init();
    }
    sync_threads_or(false);
    // SAFETY: the caller's contract.
    if unsafe { f.enter() } {
        // SAFETY: p < world entries in `bases`.
        let src = |p: u32| unsafe { *bases.add(p as usize) } + off;
        let (cta, grid) = (block_idx_x() as u64, grid_dim_x() as u64);
        let w = Work { head, body, tiles: body.div_ceil(tile as u64), cta, grid };
        let esize = 16 / T::VEC as u64;
        if t < 32 {
            if t == 0 {
                // SAFETY: the caller's contract; the body starts `head` elements in.
                unsafe { produce(ring, w, |p| src(p) + head * esize, f.rank, hint != 0) };
            }
        } else {
            let ct = (t - 32) as u64;
            let vec_out = vec_out != 0;
            // SAFETY: (each) the caller's contract.
            unsafe {
                match op {
                    reduce_op::AVG => consume::<T, { reduce_op::AVG }>(ring, w, dst, ct, vec_out),
                    reduce_op::MIN => consume::<T, { reduce_op::MIN }>(ring, w, dst, ct, vec_out),
                    reduce_op::MAX => consume::<T, { reduce_op::MAX }>(ring, w, dst, ct, vec_out),
                    _ => consume::<T, { reduce_op::SUM }>(ring, w, dst, ct, vec_out),
                }
            }
            if cta == 0 {
                // SAFETY: the caller's contract.
                unsafe { edges::<T>(src, f.world, dst, n, w, op, ct) };
            }
        }
        // Every bulk copy has completed (the consumers waited for every phase; the CTA
        // barrier in `exit` orders that before the signal). Order the async proxy's
        // reads of peer memory before the exit signal that lets peers overwrite it.
        fence_proxy_async();
    }
    // SAFETY: the caller's contract.
    unsafe { f.exit() };
}

macro_rules! tma_kernel {
    ($t:ty, $name:ident) => {
        fused_kernel! {
            /// tma-reduce for this element type (see `tma_reduce`).
            ///
            /// # Safety
            /// See `tma_reduce`.
            fn $name(
                bases: *const u64,
                off: u64,
                dst: *mut $t,
                n: u64,
                op: u32,
                head: u64,
                body: u64,
                tile: u32,
                stages: u32,
                vec_out: u32,
                hint: u32,
            ) |f| {
                // SAFETY: forwarded from the caller.
                unsafe { tma_reduce::<$t>(f, bases, off, dst, n, op, head, body, tile, stages, vec_out, hint) };
            }
        }
    };
}

tma_kernel!(f32, lowcon_tma_reduce_f32);
tma_kernel!(F16, lowcon_tma_reduce_f16);
tma_kernel!(Bf16, lowcon_tma_reduce_bf16);
