//! Hopper's bulk asynchronous copies (TMA) and the mbarriers that complete them, one PTX
//! instruction per function (as `atomics.rs` does for the memory-model operations).
//!
//! Everything here needs `sm_90` and PTX ISA 8.0 (`lowcon_build` passes `-mattr=+ptx80`
//! to llc). Shared-memory operands are 32-bit addresses in the `.shared` window (what
//! `cvta.to.shared` gives, and what [`smem_base`] returns), global operands generic
//! addresses converted with `cvta.to.global`.
//!
//! NOTE [async proxy]: bulk copies are performed by the *async proxy*, a different
//! path to memory than ordinary loads and stores (the generic proxy). Ordering between
//! the two needs a proxy fence, besides the usual release/acquire:
//! - data written by generic stores (a peer's kernel, a copy engine, then a signal that
//!   our barrier acquired) must be fenced with [`fence_proxy_async_global`] before a
//!   bulk copy reads it;
//! - a signal that tells peers we are done with their memory (the exit barrier) must
//!   follow a [`fence_proxy_async`] after our bulk copies completed.
//!
//! `host/tests/ptx.rs` fails when a kernel's bulk copies are not followed by
//! `fence.proxy.async` before its next system-scope signal.
//!
//! The `asm!` blocks omit `nomem`/`readonly`: each is a compiler memory barrier, so
//! ordinary loads and stores are not moved across them.

use core::arch::asm;

/// The `.shared`-window address of the dynamic shared-memory array `lowcon_smem`, which
/// `lowcon_build::declare_shared` declares in the PTX (rustc cannot). Its size is the
/// launch's dynamic shared memory.
#[inline(always)]
pub fn smem_base() -> u32 {
    let a: u32;
    // SAFETY: takes the address of a symbol declared in the module; no memory access.
    unsafe { asm!("mov.u32 {a}, lowcon_smem;", a = out(reg32) a, options(nostack, nomem, pure)) };
    a
}

/// `mbarrier.init.shared::cta.b64`: an mbarrier expecting `count` arrivals per phase.
///
/// # Safety
/// `bar` is an 8-byte-aligned shared address inside the launch's shared memory that no
/// other thread uses until a barrier (and [`fence_mbarrier_init`]) published the init.
#[inline(always)]
pub unsafe fn mbar_init(bar: u32, count: u32) {
    // SAFETY: the caller's contract.
    unsafe {
        asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", b = in(reg32) bar, c = in(reg32) count, options(nostack))
    };
}

/// `fence.mbarrier_init.release.cluster`: makes this thread's `mbarrier.init`s visible
/// to the async proxy (the bulk copies that will complete on them). Follow it with a
/// CTA barrier before other threads use the mbarriers.
#[inline(always)]
pub fn fence_mbarrier_init() {
    // SAFETY: a fence has no operands and cannot fault.
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) };
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64`: adds `bytes` to the current phase's
/// expected transaction count, then arrives. The phase completes once every arrival
/// happened and the bulk copies completing on `bar` delivered `bytes`.
///
/// # Safety
/// `bar` is an initialised mbarrier.
#[inline(always)]
pub unsafe fn mbar_arrive_expect_tx(bar: u32, bytes: u32) {
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};",
            b = in(reg32) bar,
            n = in(reg32) bytes,
            options(nostack)
        )
    };
}

/// `mbarrier.arrive.shared::cta.b64` (release, CTA scope): one arrival.
///
/// # Safety
/// `bar` is an initialised mbarrier.
#[inline(always)]
pub unsafe fn mbar_arrive(bar: u32) {
    // SAFETY: the caller's contract.
    unsafe { asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(reg32) bar, options(nostack)) };
}

/// `mbarrier.try_wait.parity.shared::cta.b64` (acquire, CTA scope): whether the phase
/// with parity `parity` has completed. The hardware suspends the thread for a while
/// before it answers `false`, so a loop over it is not a hot spin.
///
/// # Safety
/// `bar` is an initialised mbarrier.
#[inline(always)]
pub unsafe fn mbar_try_wait_parity(bar: u32, parity: u32) -> bool {
    let done: u32;
    // SAFETY: the caller's contract.
    unsafe {
        asm!(
            "{{ .reg .pred %lb_p;",
            "mbarrier.try_wait.parity.shared::cta.b64 %lb_p, [{b}], {ph};",
            "selp.u32 {d}, 1, 0, %lb_p; }}",
            b = in(reg32) bar,
            ph = in(reg32) parity,
            d = out(reg32) done,
            options(nostack)
        )
    };
    done != 0
}

/// Waits until the phase of `bar` with parity `parity` has completed.
///
/// NOTE [unbounded mbarrier waits]: unlike the signal waits, these wait for this CTA's
/// own threads and bulk copies, never for another GPU: the cross-GPU waits (bounded,
/// reported in the error record) happen before the ring starts. A bulk copy that
/// faults ends the kernel with an error rather than leaving this wait hanging.
///
/// # Safety
/// `bar` is an initialised mbarrier.
#[inline(always)]
pub unsafe fn mbar_wait_parity(bar: u32, parity: u32) {
    // SAFETY: forwarded from the caller.
    while !unsafe { mbar_try_wait_parity(bar, parity) } {}
}

/// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`: copies `bytes`
/// from global (local or NVLink-mapped peer) memory at `src` into shared memory at
/// `dst`, completing `bytes` of transactions on the mbarrier `bar`. With `policy`, the
/// `.L2::cache_hint` form with that cache policy (from [`create_policy_evict_first`]).
///
/// # Safety
/// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16; `dst..dst+bytes` inside
/// the launch's shared memory, `src..src+bytes` readable; `bar` an initialised mbarrier
/// whose current phase expects these bytes (`mbar_arrive_expect_tx`).
#[inline(always)]
pub unsafe fn bulk_load(dst: u32, src: u64, bytes: u32, bar: u32, policy: Option<u64>) {
    // SAFETY: (both) the caller's contract.
    match policy {
        None => unsafe {
            asm!(
                "{{ .reg .u64 %lb_g; cvta.to.global.u64 %lb_g, {s};",
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [%lb_g], {n}, [{b}]; }}",
                d = in(reg32) dst,
                s = in(reg64) src,
                n = in(reg32) bytes,
                b = in(reg32) bar,
                options(nostack)
            )
        },
        Some(pol) => unsafe {
            asm!(
                "{{ .reg .u64 %lb_g; cvta.to.global.u64 %lb_g, {s};",
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [{d}], [%lb_g], {n}, [{b}], {p}; }}",
                d = in(reg32) dst,
                s = in(reg64) src,
                n = in(reg32) bytes,
                b = in(reg32) bar,
                p = in(reg64) pol,
                options(nostack)
            )
        },
    }
}

/// `createpolicy.fractional.L2::evict_first.b64` with fraction 1.0: a cache policy that
/// marks the lines a hinted access brings into L2 as the first to evict (streamed data
/// that is read once), so a concurrent GEMM keeps more of its working set.
#[inline(always)]
pub fn create_policy_evict_first() -> u64 {
    let p: u64;
    // SAFETY: creates a policy value in a register; no memory access.
    unsafe { asm!("createpolicy.fractional.L2::evict_first.b64 {p}, 1.0;", p = out(reg64) p, options(nostack, nomem)) };
    p
}

/// `fence.proxy.async`: orders this thread's memory accesses in every state space
/// between the generic proxy and the async proxy (see NOTE [async proxy]).
#[inline(always)]
pub fn fence_proxy_async() {
    // SAFETY: a fence has no operands and cannot fault.
    unsafe { asm!("fence.proxy.async;", options(nostack)) };
}

/// `fence.proxy.async.global`: as [`fence_proxy_async`], for global memory only: issued
/// after the entry barrier's acquire and before the first bulk copy reads peer memory.
#[inline(always)]
pub fn fence_proxy_async_global() {
    // SAFETY: a fence has no operands and cannot fault.
    unsafe { asm!("fence.proxy.async.global;", options(nostack)) };
}

/// `ld.shared.v4.u32`: sixteen bytes of shared memory.
///
/// # Safety
/// `addr` is a 16-byte-aligned shared address inside the launch's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the caller's contract; reads 16 bytes, writes nothing.
    unsafe {
        asm!(
            "ld.shared.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            p = in(reg32) addr,
            a = out(reg32) a,
            b = out(reg32) b,
            c = out(reg32) c,
            d = out(reg32) d,
            options(nostack, readonly, preserves_flags)
        )
    };
    [a, b, c, d]
}

/// `bar.warp.sync 0xffffffff`: the warp's threads meet, and their memory accesses
/// before it are ordered before those after it. Every thread of the warp must call it.
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: a warp barrier; the caller's contract that the whole warp reaches it.
    unsafe { asm!("bar.warp.sync -1;", options(nostack)) };
}

/// The element types of [`bulk_reduce_add`] (its `TY` parameter).
pub mod add_type {
    /// `.f32`.
    pub const F32: u32 = 0;
    /// `.noftz.f16`.
    pub const F16: u32 = 1;
    /// `.noftz.bf16`.
    pub const BF16: u32 = 2;
}

/// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.{f32, noftz.f16, noftz.bf16}`:
/// adds `bytes` of elements from shared memory at `src` to global (local or
/// NVLink-mapped peer) memory at `dst`, element-wise and atomically per element, in the
/// destination's type (f16 and bf16 round to their own type at every addition; `.noftz`
/// keeps subnormals). Completes with the bulk group committed next
/// ([`bulk_commit_group`]). `TY` is an [`add_type`] constant.
///
/// # Safety
/// `dst` and `src` 16-byte aligned, `bytes` a multiple of 16; `src..src+bytes` inside
/// the launch's shared memory and not written until the group's reads completed
/// ([`bulk_wait_group_read`]); `dst..dst+bytes` writable and not accessed through the
/// generic proxy until the group completed ([`bulk_wait_group_all`], then
/// [`fence_proxy_async`]).
#[inline(always)]
pub unsafe fn bulk_reduce_add<const TY: u32>(dst: u64, src: u32, bytes: u32) {
    // SAFETY: (each) the caller's contract.
    match TY {
        add_type::F32 => unsafe {
            asm!(
                "{{ .reg .u64 %lb_g; cvta.to.global.u64 %lb_g, {d};",
                "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%lb_g], [{s}], {n}; }}",
                d = in(reg64) dst,
                s = in(reg32) src,
                n = in(reg32) bytes,
                options(nostack)
            )
        },
        add_type::F16 => unsafe {
            asm!(
                "{{ .reg .u64 %lb_g; cvta.to.global.u64 %lb_g, {d};",
                "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16 [%lb_g], [{s}], {n}; }}",
                d = in(reg64) dst,
                s = in(reg32) src,
                n = in(reg32) bytes,
                options(nostack)
            )
        },
        _ => unsafe {
            asm!(
                "{{ .reg .u64 %lb_g; cvta.to.global.u64 %lb_g, {d};",
                "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%lb_g], [{s}], {n}; }}",
                d = in(reg64) dst,
                s = in(reg32) src,
                n = in(reg32) bytes,
                options(nostack)
            )
        },
    }
}

/// `cp.async.bulk.commit_group`: closes the bulk group of this thread's bulk operations
/// issued since the last commit.
#[inline(always)]
pub fn bulk_commit_group() {
    // SAFETY: no operands; affects only this thread's bulk-group bookkeeping.
    unsafe { asm!("cp.async.bulk.commit_group;", options(nostack)) };
}

/// `cp.async.bulk.wait_group.read N`: waits until at most `N` of this thread's committed
/// bulk groups still read their sources (their shared memory may then be reused).
#[inline(always)]
pub fn bulk_wait_group_read<const N: u32>() {
    // SAFETY: a wait; no memory operands.
    unsafe { asm!("cp.async.bulk.wait_group.read {n};", n = const N, options(nostack)) };
}

/// `cp.async.bulk.wait_group 0`: waits until every bulk group this thread committed has
/// completed, writes included.
#[inline(always)]
pub fn bulk_wait_group_all() {
    // SAFETY: a wait; no memory operands.
    unsafe { asm!("cp.async.bulk.wait_group 0;", options(nostack)) };
}

/// `fence.proxy.async.shared::cta`: as [`fence_proxy_async`], for this CTA's shared
/// memory only.
#[inline(always)]
pub fn fence_proxy_async_shared_cta() {
    // SAFETY: a fence has no operands and cannot fault.
    unsafe { asm!("fence.proxy.async.shared::cta;", options(nostack)) };
}
