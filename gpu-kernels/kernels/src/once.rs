//! ce-reduce's reduction of a whole call in one launch (`ReduceLaunch::Once`; NOTE [one
//! launch per call] in `host/src/coll/gpu/ce_reduce.rs`): the `n` elements in pieces of
//! `pe`, piece `i` reduced once its flag is 1 (the copy stream sets it after the piece's
//! staged copies); the staged peer chunks hold the whole chunk (`stride >= n`). Thread 0
//! of each CTA waits, the CTA's barrier passes the acquire on to its threads. The last
//! CTA writes every flag back to 0. A wait that expires reports to the error record and
//! the CTA stops reducing (the group is dead; its output is not used).

use lowcon_abi::{ErrorRecord, status};

use crate::atomics::{st_relaxed_sys_u32, wait_epoch_acquire_sys_or_abort};
use crate::coll::last_cta;
use crate::errors::report_error;
use crate::reduce::{Bf16, Elem, F16, reduce_part, staged_sources};
use crate::thread::{block_dim_x, grid_stride, sync_threads_or, thread_idx_x};

/// Vector positions per thread per pass fewer than the per-piece kernels load: the
/// piece loop's state needs the registers (`host/tests/ptx.rs` fails on spills).
const CUT: u32 = 1;

/// Where a one-launch reduction finds its pieces' flags and reports a wait that
/// expired (passed as scalars, as every kernel argument).
struct OnceFlags {
    /// Piece `i`'s flag: `flags + 4 i` (this rank's device pad, `pad::once_flag_offset`).
    flags: *mut u32,
    /// The channel's CTA counter (0 when the launch begins).
    counter: *mut u32,
    /// The group's error record.
    err: *mut ErrorRecord,
    /// Bound on each piece's wait, in ns (0: none).
    timeout_ns: u64,
    rank: u32,
    channel: u32,
}

/// Waits (thread 0) for piece `i`'s flag; returns, in every thread, whether the wait
/// failed (then reported).
///
/// # Safety
/// `o.flags + i` inside the flags; `o.err` the group's record.
#[inline(always)]
unsafe fn wait_piece(o: &OnceFlags, i: u64) -> bool {
    let mut failed = false;
    if thread_idx_x() == 0 {
        // SAFETY: (the block) the caller's contract.
        unsafe {
            let flag = o.flags.add(i as usize);
            if let Err(t) = wait_epoch_acquire_sys_or_abort(flag, 1, o.timeout_ns, o.err.cast::<u32>()) {
                let rec = ErrorRecord {
                    code: status::WAIT_TIMEOUT,
                    rank: o.rank,
                    peer: ErrorRecord::NO_PEER,
                    channel: o.channel,
                    expected: 1,
                    observed: t.observed as u64,
                    waited_ns: t.waited_ns,
                };
                report_error(o.err, rec);
                failed = true;
            }
        }
    }
    sync_threads_or(failed)
}

/// The module's reduction for one element type.
///
/// # Safety
/// `own` and `dst` valid for `n` elements, `staged` for `(nsrc - 1) * stride` with
/// `stride >= n`; `vec_ok` only if every address and `stride` allow 16-byte vectors;
/// `o.flags` valid for `n.div_ceil(pe)` words, `o.counter` and `o.err` as their fields
/// say, no other kernel using them meanwhile.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn reduce_once<T: Elem>(
    own: *const T,
    own_idx: u32,
    staged: *const T,
    stride: u64,
    nsrc: u32,
    dst: *mut T,
    (n, pe): (u64, u64),
    op: u32,
    vec_ok: u32,
    o: &OnceFlags,
) {
    let pieces = n.div_ceil(pe.max(1));
    let (start, step) = grid_stride();
    let mut i = 0;
    while i < pieces {
        // SAFETY: `i` is a piece of this call (contract).
        if unsafe { wait_piece(o, i) } {
            break;
        }
        let first = i * pe;
        let len = pe.min(n - first);
        let f = first as usize;
        let src = staged_sources(own.wrapping_add(f), own_idx, staged.wrapping_add(f), stride);
        // SAFETY: the piece lies inside every source and `dst` (contract).
        unsafe { reduce_part::<T, T, CUT>(src, nsrc, dst.wrapping_add(f), len, op, vec_ok != 0, start, step) };
        i += 1;
    }
    // SAFETY: the channel's counter (contract).
    if unsafe { last_cta(o.counter) } {
        let mut k = thread_idx_x() as u64;
        while k < pieces {
            // SAFETY: inside `o.flags`; every CTA is past its waits.
            unsafe { st_relaxed_sys_u32(o.flags.add(k as usize), 0) };
            k += block_dim_x() as u64;
        }
    }
}

macro_rules! once_kernel {
    ($t:ty, $name:ident) => {
        /// The module's reduction for this element type (see `reduce_once`).
        ///
        /// # Safety
        /// See `reduce_once`.
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(
            own: *const $t,
            own_idx: u32,
            staged: *const $t,
            stride: u64,
            nsrc: u32,
            dst: *mut $t,
            n: u64,
            pe: u64,
            op: u32,
            vec_ok: u32,
            flags: *mut u32,
            counter: *mut u32,
            err: *mut ErrorRecord,
            timeout_ns: u64,
            rank: u32,
            channel: u32,
        ) {
            let o = OnceFlags { flags, counter, err, timeout_ns, rank, channel };
            // SAFETY: forwarded from the caller.
            unsafe { reduce_once::<$t>(own, own_idx, staged, stride, nsrc, dst, (n, pe), op, vec_ok, &o) };
        }
    };
}

once_kernel!(f32, lowcon_reduce_once_f32);
once_kernel!(F16, lowcon_reduce_once_f16);
once_kernel!(Bf16, lowcon_reduce_once_bf16);
