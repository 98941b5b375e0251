//! Kernels that exercise the build pipeline and the ordering primitives: a vector add,
//! and a system-scope flag round trip between two kernels on two streams.

use lowcon_abi::{ErrorRecord, RoundTripReport, payload_word, status};

use crate::atomics::{atom_add_relaxed_gpu_u32, st_release_sys_u32, wait_epoch_acquire_sys};
use crate::errors::report_error;
use crate::thread::{block_dim_x, grid_stride, sync_threads_or, thread_idx_x};

/// `out[i] = a[i] + b[i]` for `i < n`, grid-stride.
///
/// # Safety
/// `a`, `b` and `out` must be valid device pointers to `n` `f32`s; `out` may not alias.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_vec_add_f32(a: *const f32, b: *const f32, out: *mut f32, n: u64) {
    let (mut i, step) = grid_stride();
    while i < n {
        // SAFETY: i < n and the caller guarantees n elements behind each pointer.
        unsafe { *out.add(i as usize) = *a.add(i as usize) + *b.add(i as usize) };
        i += step;
    }
}

/// Holds its CTAs for `ns` nanoseconds of `%globaltimer`, sleeping, with no memory
/// traffic: the SM-holding control of `lowcon bench reduce-kernels` (what a kernel costs
/// a GEMM by taking SMs alone, apart from its bytes).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_spin(ns: u64) {
    let start = crate::atomics::globaltimer_ns();
    while crate::atomics::globaltimer_ns().wrapping_sub(start) < ns {
        crate::atomics::nanosleep(1000);
    }
}

/// Salt that makes the pong side's payload differ from the ping side's.
const PONG_SALT: u64 = 0x0005_EED0_FB0B;

/// One side of the round trip. For each round `r` in `1..=rounds`:
/// - the first mover writes `words` payload words to `payload_out`, then releases `r`
///   into `flag_out`, then waits for `flag_in >= r` and checks `payload_in`;
/// - the other side waits first, checks, then writes and releases.
///
/// One CTA. Thread 0 does the waits; `sync_threads_or` both orders the CTA behind its
/// acquire and broadcasts a timeout, so every thread leaves together.
///
/// # Safety
/// Pointers valid for `words` `u32`s (payloads), one `u32` (flags), one report and one
/// error record; launched with exactly one CTA.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn round_trip(
    first_mover: bool,
    payload_out: *mut u32,
    flag_out: *mut u32,
    payload_in: *const u32,
    flag_in: *const u32,
    words: u32,
    rounds: u32,
    seed: u64,
    timeout_ns: u64,
    report: *mut RoundTripReport,
    err: *mut ErrorRecord,
) {
    let tid = thread_idx_x();
    let nthreads = block_dim_x();
    let (my_seed, peer_seed) = if first_mover { (seed, seed ^ PONG_SALT) } else { (seed ^ PONG_SALT, seed) };
    let role = if first_mover { 0 } else { 1 };
    let mut mismatches = 0u32;
    let mut done = 0u32;

    let mut r = 1u32;
    while r <= rounds {
        // Step A (first mover) / step B (other side), as described above.
        for phase in 0..2u32 {
            let send = (phase == 0) == first_mover;
            if send {
                let mut i = tid;
                while i < words {
                    // SAFETY: i < words; payload_out holds `words` u32s.
                    unsafe { *payload_out.add(i as usize) = payload_word(my_seed, r, i) };
                    i += nthreads;
                }
                // Orders every thread's payload stores before thread 0's release.
                sync_threads_or(false);
                if tid == 0 {
                    // SAFETY: flag_out is valid (caller).
                    unsafe { st_release_sys_u32(flag_out, r) };
                }
            } else {
                let mut timed_out = false;
                if tid == 0 {
                    // SAFETY: flag_in is valid (caller).
                    if let Err(t) = unsafe { wait_epoch_acquire_sys(flag_in, r, timeout_ns) } {
                        timed_out = true;
                        let rec = ErrorRecord {
                            code: status::WAIT_TIMEOUT,
                            rank: role,
                            peer: 1 - role,
                            channel: 0,
                            expected: r as u64,
                            observed: t.observed as u64,
                            waited_ns: t.waited_ns,
                        };
                        // SAFETY: err is valid (caller).
                        unsafe { report_error(err, rec) };
                    }
                }
                // Orders the other threads' payload reads after thread 0's acquire.
                if sync_threads_or(timed_out) {
                    if tid == 0 {
                        // SAFETY: report is valid (caller).
                        unsafe { (*report).rounds_done = done };
                    }
                    return;
                }
                let mut i = tid;
                while i < words {
                    // SAFETY: i < words; payload_in holds `words` u32s. A volatile read:
                    // the value was written by another kernel, not by this thread.
                    let got = unsafe { payload_in.add(i as usize).read_volatile() };
                    if got != payload_word(peer_seed, r, i) {
                        mismatches += 1;
                    }
                    i += nthreads;
                }
                // The peer may overwrite `payload_in` only after our next release, which
                // thread 0 issues after this barrier, so all reads finish first.
                sync_threads_or(false);
            }
        }
        done = r;
        r += 1;
    }
    if mismatches != 0 {
        // SAFETY: report is valid (caller).
        unsafe { atom_add_relaxed_gpu_u32(&raw mut (*report).mismatches, mismatches) };
    }
    if tid == 0 {
        // SAFETY: report is valid (caller).
        unsafe { (*report).rounds_done = done };
    }
}

/// The first mover of the flag round trip; see `round_trip`.
///
/// # Safety
/// As `round_trip`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn lowcon_flag_ping(
    payload_out: *mut u32,
    flag_out: *mut u32,
    payload_in: *const u32,
    flag_in: *const u32,
    words: u32,
    rounds: u32,
    seed: u64,
    timeout_ns: u64,
    report: *mut RoundTripReport,
    err: *mut ErrorRecord,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        round_trip(true, payload_out, flag_out, payload_in, flag_in, words, rounds, seed, timeout_ns, report, err)
    }
}

/// The responder of the flag round trip; see `round_trip`.
///
/// # Safety
/// As `round_trip`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn lowcon_flag_pong(
    payload_out: *mut u32,
    flag_out: *mut u32,
    payload_in: *const u32,
    flag_in: *const u32,
    words: u32,
    rounds: u32,
    seed: u64,
    timeout_ns: u64,
    report: *mut RoundTripReport,
    err: *mut ErrorRecord,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        round_trip(false, payload_out, flag_out, payload_in, flag_in, words, rounds, seed, timeout_ns, report, err)
    }
}
