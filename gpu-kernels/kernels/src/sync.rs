//! Barrier and signal kernels over the signal pads (see `lowcon_abi::pad`).
//!
//! Every rank's pad lives in symmetric memory; `pads` is a device array of the `world`
//! pad base pointers as this rank maps them (its own at index `rank`). Rank `r` signals
//! peer `p` by storing an epoch into `pads[p][slot(channel, kind, r)]` with
//! `st.release.sys`, after a `fence.acq_rel.sys` so that everything the stream did
//! before this kernel (earlier kernels, copy-engine writes) is ordered before the
//! signal. `p` waits until its own slot holds that epoch or a later one, then acquires.
//! Waits are bounded by `%globaltimer`; on expiry the kernel fills the error record
//! (rank, missing peer, channel, epochs) and returns instead of trapping.

use lowcon_abi::{ErrorRecord, pad, status};

use crate::atomics::{fence_acq_rel_sys, st_release_sys_u32, wait_epoch_acquire_sys_or_abort};
use crate::errors::report_error;
use crate::thread::{block_dim_x, sync_threads_or, thread_idx_x};

/// Signals `peer` on `(channel, kind)` with `epoch`.
///
/// # Safety
/// `pads` holds `world` valid pad pointers; `peer < world`; `channel < pad::CHANNELS`.
#[inline(always)]
pub(crate) unsafe fn signal(
    pads: *const *mut u32,
    rank: u32,
    world: u32,
    peer: u32,
    channel: u32,
    kind: u32,
    epoch: u32,
) {
    fence_acq_rel_sys();
    // SAFETY: the caller guarantees `pads[peer]` is a mapped pad of pad::bytes(world).
    unsafe {
        let slot = (*pads.add(peer as usize)).add(pad::slot(channel, kind, rank, world) as usize);
        st_release_sys_u32(slot, epoch);
    }
}

/// Waits for `peer`'s signal on `(channel, kind)`; reports a timeout in `err`.
///
/// # Safety
/// As [`signal`]; `err` points to a valid `ErrorRecord`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn wait(
    pads: *const *mut u32,
    rank: u32,
    world: u32,
    peer: u32,
    channel: u32,
    kind: u32,
    epoch: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
) -> bool {
    // SAFETY: the caller guarantees `pads[rank]` is this rank's mapped pad.
    let slot = unsafe { (*pads.add(rank as usize)).add(pad::slot(channel, kind, peer, world) as usize) };
    // SAFETY: `slot` is inside this rank's pad.
    match unsafe { wait_epoch_acquire_sys_or_abort(slot, epoch, timeout_ns, err.cast::<u32>()) } {
        Ok(_) => true,
        Err(t) => {
            let rec = ErrorRecord {
                code: status::WAIT_TIMEOUT,
                rank,
                peer,
                channel,
                expected: epoch as u64,
                observed: t.observed as u64,
                waited_ns: t.waited_ns,
            };
            // SAFETY: forwarded from the caller.
            unsafe { report_error(err, rec) };
            false
        }
    }
}

/// Resets this rank's graph-flag slot for `peer` on `(channel, kind)` to 0, after its
/// wait saw the flag (NOTE [graph flags] in `host/src/sync/gpu/graph.rs`). The next
/// signal this rank sends is preceded by a system-scope fence, which orders the reset
/// before the peer's next write of this slot.
///
/// # Safety
/// As [`signal`], for this rank's own pad.
#[inline(always)]
pub(crate) unsafe fn reset(pads: *const *mut u32, rank: u32, world: u32, peer: u32, channel: u32, kind: u32) {
    // SAFETY: the caller guarantees `pads[rank]` is this rank's mapped pad.
    unsafe {
        let slot = (*pads.add(rank as usize)).add(pad::slot(channel, kind, peer, world) as usize);
        st_release_sys_u32(slot, 0);
    }
}

/// A barrier of all `world` ranks on `channel`: thread `t` signals peer `t` and waits
/// for peer `t` (strided by the block size). Launch one CTA of at least 32 threads.
/// `kind` is [`pad::BARRIER`] (an eager barrier: monotonic `epoch`s) or a graph kind
/// (a captured one: `epoch` is [`pad::GRAPH_SET`] and each wait resets its slot).
///
/// # Safety
/// `pads` holds `world` valid pad pointers, `rank < world`, `channel < pad::CHANNELS`,
/// `kind < pad::KINDS`, `err` is a valid record.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_barrier(
    pads: *const *mut u32,
    rank: u32,
    world: u32,
    channel: u32,
    kind: u32,
    epoch: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
) {
    let flags = kind >= pad::GRAPH_ENTRY;
    let mut p = thread_idx_x();
    while p < world {
        if p != rank {
            // SAFETY: p < world; forwarded from the caller.
            unsafe { signal(pads, rank, world, p, channel, kind, epoch) };
        }
        p += block_dim_x();
    }
    let mut failed = false;
    let mut p = thread_idx_x();
    while p < world {
        // SAFETY: p < world; forwarded from the caller.
        if p != rank {
            if !unsafe { wait(pads, rank, world, p, channel, kind, epoch, timeout_ns, err) } {
                failed = true;
            }
            if flags {
                // SAFETY: as above.
                unsafe { reset(pads, rank, world, p, channel, kind) };
            }
        }
        p += block_dim_x();
    }
    // Every thread leaves only after every wait finished (or failed), so work after the
    // kernel is ordered after all the acquires.
    sync_threads_or(failed);
}

/// Signals `peer` on `(channel, P2P)` with `epoch`. Launch one thread.
///
/// # Safety
/// As [`lowcon_barrier`], with `peer < world`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_put_signal(
    pads: *const *mut u32,
    rank: u32,
    world: u32,
    peer: u32,
    channel: u32,
    epoch: u32,
) {
    // SAFETY: forwarded from the caller.
    unsafe { signal(pads, rank, world, peer, channel, pad::P2P, epoch) };
}

/// Waits for `peer`'s signal on `(channel, P2P)` reaching `epoch`. Launch one thread.
///
/// # Safety
/// As [`lowcon_barrier`], with `peer < world`.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_wait_signal(
    pads: *const *mut u32,
    rank: u32,
    world: u32,
    peer: u32,
    channel: u32,
    epoch: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
) {
    // SAFETY: forwarded from the caller.
    unsafe { wait(pads, rank, world, peer, channel, pad::P2P, epoch, timeout_ns, err) };
}

/// The gate of a kernel that reads peer addresses predicted by the host (NOTE [addresses
/// predicted]): thread 0 of each CTA waits until `word` (the verify word) reaches
/// `value`, as `lowcon_wait_word` does, and the CTA's barrier hands its acquire to the
/// other threads. No gate when `word` is null. A timeout or the group's abort reports
/// in `err` and lets the CTA go on (the group has failed; nothing it computes is used).
///
/// # Safety
/// `word` null or valid mapped memory for the kernel's life; `err` a valid
/// `ErrorRecord`; every thread of the CTA calls it.
#[inline(always)]
pub(crate) unsafe fn gate(
    word: *const u32,
    value: u32,
    rank: u32,
    channel: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
) {
    if word.is_null() {
        return;
    }
    if thread_idx_x() == 0 {
        // SAFETY: forwarded from the caller.
        unsafe { wait_word(word, value, rank, channel, timeout_ns, err) };
    }
    sync_threads_or(false);
}

/// This thread waits until `word` reaches `value` (wrapping, as epochs), then acquires;
/// a timeout or the group's abort reports in `err` (as `WAIT_TIMEOUT`, no peer) and
/// returns.
///
/// # Safety
/// `word` is valid mapped memory; `err` a valid `ErrorRecord`.
#[inline(always)]
unsafe fn wait_word(word: *const u32, value: u32, rank: u32, channel: u32, timeout_ns: u64, err: *mut ErrorRecord) {
    // SAFETY: forwarded from the caller.
    if let Err(t) = unsafe { wait_epoch_acquire_sys_or_abort(word, value, timeout_ns, err.cast::<u32>()) } {
        let rec = ErrorRecord {
            code: status::WAIT_TIMEOUT,
            rank,
            peer: ErrorRecord::NO_PEER,
            channel,
            expected: value as u64,
            observed: t.observed as u64,
            waited_ns: t.waited_ns,
        };
        // SAFETY: forwarded from the caller.
        unsafe { report_error(err, rec) };
    }
}

/// Waits until the word at `word` (pinned host memory the host writes: the verify word
/// of NOTE [addresses predicted]) reaches `value` (wrapping, as epochs), then acquires.
/// A kernel, not a stream memory operation, so that the wait does not hold up other
/// streams that share its hardware queue (the host's write may depend on one of them).
/// A timeout or the group's abort reports in `err` and returns. Launch one thread.
///
/// # Safety
/// `word` is valid mapped memory for the kernel's life; `err` a valid `ErrorRecord`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_wait_word(
    word: *const u32,
    value: u32,
    rank: u32,
    channel: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
) {
    // SAFETY: forwarded from the caller.
    unsafe { wait_word(word, value, rank, channel, timeout_ns, err) };
}
