//! Every memory operation that another GPU (or the host) must observe in order.
//!
//! NOTE [why not core::sync::atomic]: on the LLVM that rustc's nvptx backend uses here,
//! `AtomicU32::fetch_add` and friends lower to `atom.*` at the default (GPU) scope, and
//! orderings on plain loads/stores are not lowered to `.acquire.sys`/`.release.sys` at
//! all. A peer GPU writing over NVLink, or the host writing pinned memory, is outside
//! GPU scope, so such code would only *appear* to work. Each function here is therefore
//! one PTX instruction in inline `asm!`, named after its semantics and scope
//! (`ld_acquire_sys_u32` is `ld.acquire.sys.u32`). `host/tests/ptx.rs` checks that the
//! built PTX still contains these instructions, so a refactor that weakens them fails.
//!
//! All addresses are generic (no `.global` qualifier), so the same functions work on
//! device memory, peer memory mapped through VMM/IPC, and host-mapped memory.
//!
//! The `asm!` blocks deliberately omit `pure`/`readonly`/`nomem`: the compiler must treat
//! each as a memory clobber, which also stops it from moving ordinary loads and stores
//! across them.

use core::arch::asm;

/// `ld.acquire.sys.u32`: no later load or store of this thread may be performed before
/// this load; pairs with a release at system scope in another thread, GPU or the host.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address readable by this thread.
#[inline(always)]
pub unsafe fn ld_acquire_sys_u32(p: *const u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("ld.acquire.sys.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p, options(nostack)) };
    v
}

/// `ld.relaxed.sys.u32`: a strong load that is guaranteed to observe other agents'
/// writes eventually (unlike a plain load the compiler may hoist), but orders nothing.
/// Use only for polling, followed by an acquire (or [`fence_acq_rel_sys`]) before data
/// published by the writer is read.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address readable by this thread.
#[inline(always)]
pub unsafe fn ld_relaxed_sys_u32(p: *const u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("ld.relaxed.sys.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p, options(nostack)) };
    v
}

/// `st.release.sys.u32`: every load and store that happens-before this store (including
/// other threads' writes ordered before it by a CTA barrier: PTX release is cumulative)
/// is visible to any thread that observes this value with an acquire at system scope.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn st_release_sys_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("st.release.sys.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack)) };
}

/// `red.release.sys.add.u32`: an atomic add, with release semantics, at system scope;
/// returns nothing (a reduction, cheaper than `atom`).
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn red_release_sys_add_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("red.release.sys.add.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack)) };
}

/// `atom.relaxed.gpu.add.u32`: an atomic add visible to this GPU only (counters that
/// the host reads after the kernel's stream is synchronised). Returns the old value.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn atom_add_relaxed_gpu_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("atom.relaxed.gpu.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v, options(nostack))
    };
    old
}

/// `st.release.sys.u8`: as [`st_release_sys_u32`], for one byte (the bf16 wire's piece
/// words hold one byte per source rank, written by different GPUs).
///
/// # Safety
/// `p` must be a valid address writable by this thread.
#[inline(always)]
pub unsafe fn st_release_sys_u8(p: *mut u8, v: u8) {
    let v = v as u32;
    // SAFETY: the caller guarantees `p` is valid.
    unsafe { asm!("st.release.sys.u8 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack)) };
}

/// `st.relaxed.sys.u32`: a strong store other agents observe, ordering nothing by
/// itself (a later fence or release orders it).
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn st_relaxed_sys_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("st.relaxed.sys.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack)) };
}

/// `red.relaxed.gpu.or.b32`: an atomic OR at GPU scope, returning nothing.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn red_or_relaxed_gpu_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("red.relaxed.gpu.or.b32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack)) };
}

/// `atom.relaxed.gpu.exch.b32`: swaps in `v` at GPU scope, returning the old value.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn atom_exch_relaxed_gpu_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("atom.relaxed.gpu.exch.b32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v, options(nostack))
    };
    old
}

/// `red.relaxed.gpu.add.u64`: an atomic add at GPU scope, returning nothing (counters the
/// host copies out on a side stream).
///
/// # Safety
/// `p` must be a valid, 8-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn red_add_relaxed_gpu_u64(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("red.relaxed.gpu.add.u64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack)) };
}

/// `atom.acq_rel.sys.cas.b32`: compare-and-swap at system scope. Returns the old value;
/// the swap happened iff it equals `expected`.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address writable by this thread.
#[inline(always)]
pub unsafe fn atom_cas_acq_rel_sys_u32(p: *mut u32, expected: u32, new: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe {
        asm!("atom.acq_rel.sys.cas.b32 {o}, [{p}], {e}, {n};",
            o = out(reg32) old, p = in(reg64) p, e = in(reg32) expected, n = in(reg32) new, options(nostack))
    };
    old
}

/// `fence.acq_rel.sys`: a system-scope fence; with relaxed loads/stores on either side it
/// forms the acquire/release patterns of the PTX memory model.
#[inline(always)]
pub fn fence_acq_rel_sys() {
    // SAFETY: a fence has no operands and cannot fault.
    unsafe { asm!("fence.acq_rel.sys;", options(nostack)) };
}

/// `fence.acq_rel.gpu`: as [`fence_acq_rel_sys`], for memory only this GPU's threads
/// share (it does not wait for this thread's writes to peers' memory to land there).
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // SAFETY: a fence has no operands and cannot fault.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) };
}

/// `st.release.gpu.u32`: as [`st_release_sys_u32`], at GPU scope.
///
/// # Safety
/// As [`st_release_sys_u32`].
#[inline(always)]
pub unsafe fn st_release_gpu_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p` is valid and aligned.
    unsafe { asm!("st.release.gpu.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack)) };
}

/// `%globaltimer`: nanoseconds of a GPU-wide clock (updated every ~µs). Used to bound
/// every spin by wall time rather than by iteration count.
#[inline(always)]
pub fn globaltimer_ns() -> u64 {
    let t: u64;
    // SAFETY: reading a special register has no side effects and cannot fault.
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack, nomem)) };
    t
}

/// `nanosleep.u32`: suspends the thread for up to `ns` nanoseconds (sm_70+), so a spin
/// does not hammer the memory system.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: nanosleep has no memory effects and cannot fault.
    unsafe { asm!("nanosleep.u32 {n};", n = in(reg32) ns, options(nostack, nomem)) };
}

/// `true` when the epoch `observed` is `expected` or later, modulo 2³².
///
/// Epochs are monotonic counters that may wrap; the same comparison is what
/// `cuStreamWaitValue32(CU_STREAM_WAIT_VALUE_GEQ)` performs, so both sync methods agree.
#[inline(always)]
pub const fn epoch_reached(observed: u32, expected: u32) -> bool {
    (observed.wrapping_sub(expected) as i32) >= 0
}

/// Result of a bounded wait that gave up: the last value seen and the time waited.
#[derive(Clone, Copy)]
pub struct WaitTimeout {
    pub observed: u32,
    pub waited_ns: u64,
}

/// Spins until `*p` holds `expected` or a later epoch, then performs an acquire, or
/// gives up after `timeout_ns` of `%globaltimer` (0 = never give up).
///
/// Polling is relaxed (cheap), and the successful poll is followed by
/// `ld.acquire.sys` of the same word, so loads after this call observe everything the
/// signaller released before writing the epoch.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address readable by this thread.
#[inline(always)]
pub unsafe fn wait_epoch_acquire_sys(p: *const u32, expected: u32, timeout_ns: u64) -> Result<u32, WaitTimeout> {
    // SAFETY: forwarded; a null abort word is never read.
    unsafe { wait_epoch_acquire_sys_or_abort(p, expected, timeout_ns, core::ptr::null()) }
}

/// Waits spent before a wait starts looking at its abort word: the fast path never
/// touches it (it may be host-mapped memory, a microsecond away).
const ABORT_CHECK_AFTER_NS: u64 = 100_000;

/// As [`wait_epoch_acquire_sys`], but also gives up (reporting a timeout at once) when
/// the word at `abort` (the group's error record code) becomes non-zero: once one wait
/// of a group has failed, the group is dead, and later waits drain instead of each
/// waiting out its own timeout. `abort` is only read after the first 100 µs of waiting.
///
/// # Safety
/// `p` must be a valid, 4-byte-aligned address readable by this thread; `abort` null or
/// likewise valid.
#[inline(always)]
pub unsafe fn wait_epoch_acquire_sys_or_abort(
    p: *const u32,
    expected: u32,
    timeout_ns: u64,
    abort: *const u32,
) -> Result<u32, WaitTimeout> {
    let start = globaltimer_ns();
    let mut backoff = 32u32;
    loop {
        // SAFETY: forwarded from the caller.
        let seen = unsafe { ld_relaxed_sys_u32(p) };
        if epoch_reached(seen, expected) {
            // SAFETY: forwarded from the caller.
            return Ok(unsafe { ld_acquire_sys_u32(p) });
        }
        let waited = globaltimer_ns().wrapping_sub(start);
        if timeout_ns != 0 && waited > timeout_ns {
            return Err(WaitTimeout { observed: seen, waited_ns: waited });
        }
        // SAFETY: `abort` is non-null here and valid (caller).
        if waited > ABORT_CHECK_AFTER_NS && !abort.is_null() && unsafe { ld_relaxed_sys_u32(abort) } != 0 {
            return Err(WaitTimeout { observed: seen, waited_ns: waited });
        }
        nanosleep(backoff);
        if backoff < 256 {
            backoff *= 2;
        }
    }
}
