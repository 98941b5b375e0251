//! Release signals of a released reduce-scatter (NOTE [release rounds] in
//! `host/src/coll/gpu/per_piece/released.rs`): a producer tells one peer that the piece it
//! computed for that peer is ready, and the peer's copy stream waits for exactly that.
//!
//! Both kernels keep their round in this rank's own pad (`pad::release_round_offset`),
//! not in their arguments: a kernel captured into a CUDA graph signals and waits for a
//! fresh round on every replay, and eager and replayed calls share one sequence.

use lowcon_abi::{ErrorRecord, pad, status};

use crate::atomics::{fence_acq_rel_sys, st_release_sys_u32, wait_epoch_acquire_sys_or_abort};
use crate::errors::report_error;
use crate::thread::thread_idx_x;

/// Releases this rank's next piece for `peer` on `channel`: after a system-scope fence
/// (everything the stream did before, the producer's kernels included, is ordered
/// before the signal), advances this rank's sent-round counter for `peer` and stores
/// the new round into `peer`'s release word from this rank. Launch one thread.
///
/// # Safety
/// `pads` holds `world` valid pad pointers of `pad::buffer_bytes(world)`; `rank`,
/// `peer < world`; `channel < pad::CHANNELS`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_release(
    pads: *const *mut u32,
    rank: u32,
    world: u32,
    peer: u32,
    channel: u32,
) {
    if thread_idx_x() != 0 {
        return;
    }
    fence_acq_rel_sys();
    // SAFETY: the contract: both words are inside mapped pads.
    unsafe {
        let own = *pads.add(rank as usize);
        let sent = own.add(pad::release_round_offset(world, channel, peer, pad::RELEASE_SENT) / 4);
        let round = core::ptr::read_volatile(sent).wrapping_add(1);
        core::ptr::write_volatile(sent, round);
        let word = (*pads.add(peer as usize)).add(pad::release_offset(world, channel, rank) / 4);
        st_release_sys_u32(word, round);
    }
}

/// Waits for `peer`'s next release to this rank on `channel`: advances this rank's
/// seen-round counter for `peer` and waits (acquire, system scope) until `peer`'s
/// release word reaches it, bounded by `timeout_ns` and the group's abort word. A
/// timeout fills the error record (the peer, the channel, the round expected and seen)
/// and the kernel returns. Launch one thread.
///
/// # Safety
/// As [`lowcon_release`]; `err` is the group's error record.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn lowcon_release_wait(
    pads: *const *mut u32,
    rank: u32,
    world: u32,
    peer: u32,
    channel: u32,
    timeout_ns: u64,
    err: *mut ErrorRecord,
) {
    if thread_idx_x() != 0 {
        return;
    }
    // SAFETY: the contract: both words are inside this rank's pad; `err` is valid.
    unsafe {
        let own = *pads.add(rank as usize);
        let seen = own.add(pad::release_round_offset(world, channel, peer, pad::RELEASE_SEEN) / 4);
        let round = core::ptr::read_volatile(seen).wrapping_add(1);
        core::ptr::write_volatile(seen, round);
        let word = own.add(pad::release_offset(world, channel, peer) / 4);
        if let Err(t) = wait_epoch_acquire_sys_or_abort(word, round, timeout_ns, err.cast::<u32>()) {
            let rec = ErrorRecord {
                code: status::WAIT_TIMEOUT,
                rank,
                peer,
                channel,
                expected: round as u64,
                observed: t.observed as u64,
                waited_ns: t.waited_ns,
            };
            report_error(err, rec);
        }
    }
}
