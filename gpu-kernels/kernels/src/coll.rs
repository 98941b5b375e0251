//! Collective kernels' shared pieces and the one-shot all-gather: 16-byte vectors, the
//! fused barriers, the copy loop (the reductions are in `reduce.rs`).
//!
//! Data moves in 16-byte vectors when every address and the length allow it (the host
//! decides and passes `vec_ok`), else element by element.
//!
//! NOTE [fused barriers]: with `fused != 0` the one-shot kernels carry their own entry
//! and exit barriers (saving two launches, which is most of a small collective's time):
//! - entry: CTA 0 signals every peer (`BARRIER` kind, `epoch_in`); every CTA then waits
//!   for every peer's `epoch_in` before it reads peer memory;
//! - exit: each CTA, when its part is done, counts itself in on the channel's counter
//!   (`fence.acq_rel.sys` first, so its reads and writes are ordered before); the last
//!   CTA resets the counter, signals `epoch_out` to every peer and waits for theirs. A
//!   peer that sees our `epoch_out` knows we no longer read its memory.
//!
//! A failed wait is reported in the error record (first failure wins); the CTAs then
//! skip the data movement but still count themselves in, so the counter returns to 0.
//!
//! With `graph != 0` (a call captured into a CUDA graph) the barriers use the graph
//! flags instead of epochs (NOTE [graph flags] in `host/src/sync/gpu/graph.rs`): entry
//! on `GRAPH_ENTRY`, exit on `GRAPH_EXIT`, each signal writing `GRAPH_SET`. Every CTA
//! waits on the entry flags, so none can reset them there: the last CTA resets them at
//! exit (every CTA has passed entry by then), before it signals the exit flags, and
//! resets the exit flags after its own exit wait.

use lowcon_abi::{ErrorRecord, pad};

use crate::atomics::{
    atom_add_relaxed_gpu_u32, fence_acq_rel_gpu, fence_acq_rel_sys, st_release_gpu_u32, st_release_sys_u32,
};
use crate::sync::{reset, signal, wait};
use crate::thread::{block_dim_x, block_idx_x, grid_dim_x, grid_stride, sync_threads_or, thread_idx_x};

/// Sixteen bytes, loaded and stored as one vector.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub(crate) struct V16(pub(crate) [u32; 4]);

/// A kernel whose first parameter is the fused barriers' head (`lowcon_abi::FusedHead`,
/// by value: NOTE [fused head by value]), then its own. The body sees it as one `Fused`,
/// bound to the name given between bars. Every fused kernel has this head, so the host
/// launches them alike (`host/src/cuda/kernels.rs`).
macro_rules! fused_kernel {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) |$f:ident| $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(head: lowcon_abi::FusedHead, $($arg: $ty),*) {
            let $f = $crate::coll::Fused::from_head(&head);
            $body
        }
    };
}
pub(crate) use fused_kernel;

/// Where a fused kernel synchronises: the barrier fields are unused (zero) when
/// `fused == 0`, but `rank` and `world` are always set (the kernels' own loops use them).
#[derive(Clone, Copy)]
pub(crate) struct Fused {
    pub(crate) pads: *const *mut u32,
    pub(crate) rank: u32,
    pub(crate) world: u32,
    pub(crate) channel: u32,
    pub(crate) epoch_in: u32,
    pub(crate) epoch_out: u32,
    pub(crate) timeout_ns: u64,
    pub(crate) err: *mut ErrorRecord,
    pub(crate) counter: *mut u32,
    pub(crate) on: bool,
    /// A captured call: graph flags instead of epochs (module note).
    pub(crate) graph: bool,
}

impl Fused {
    /// The head's fields as the barriers use them.
    #[inline(always)]
    pub(crate) fn from_head(h: &lowcon_abi::FusedHead) -> Self {
        Fused {
            pads: h.pads as *const *mut u32,
            rank: h.rank,
            world: h.world,
            channel: h.channel,
            epoch_in: h.epoch_in,
            epoch_out: h.epoch_out,
            timeout_ns: h.timeout_ns,
            err: h.err as *mut ErrorRecord,
            counter: h.counter as *mut u32,
            on: h.fused != 0,
            graph: h.graph != 0,
        }
    }

    /// The entry barrier's slot kind and value.
    #[inline(always)]
    fn entry(&self) -> (u32, u32) {
        if self.graph { (pad::GRAPH_ENTRY, pad::GRAPH_SET) } else { (pad::BARRIER, self.epoch_in) }
    }

    /// The exit barrier's slot kind and value.
    #[inline(always)]
    fn exit_slot(&self) -> (u32, u32) {
        if self.graph { (pad::GRAPH_EXIT, pad::GRAPH_SET) } else { (pad::BARRIER, self.epoch_out) }
    }

    /// Graph flags only: resets this rank's slots of `kind` for every peer (strided
    /// over the CTA's threads).
    ///
    /// # Safety
    /// As [`Fused::enter`].
    #[inline(always)]
    unsafe fn reset_all(&self, kind: u32) {
        let mut p = thread_idx_x();
        while p < self.world {
            if p != self.rank {
                // SAFETY: p < world; the caller's contract.
                unsafe { reset(self.pads, self.rank, self.world, p, self.channel, kind) };
            }
            p += block_dim_x();
        }
    }

    /// Entry barrier; returns `false` (in every thread of the CTA) if a wait failed.
    ///
    /// # Safety
    /// The pointers are valid as the kernels' contracts state.
    #[inline(always)]
    pub(crate) unsafe fn enter(&self) -> bool {
        if !self.on {
            return true;
        }
        let t = thread_idx_x();
        let (kind, value) = self.entry();
        if block_idx_x() == 0 {
            let mut p = t;
            while p < self.world {
                if p != self.rank {
                    // SAFETY: p < world; the caller's contract.
                    unsafe { signal(self.pads, self.rank, self.world, p, self.channel, kind, value) };
                }
                p += block_dim_x();
            }
        }
        let mut failed = false;
        let mut p = t;
        while p < self.world {
            if p != self.rank
                // SAFETY: as above.
                && !unsafe {
                    wait(
                        self.pads,
                        self.rank,
                        self.world,
                        p,
                        self.channel,
                        kind,
                        value,
                        self.timeout_ns,
                        self.err,
                    )
                }
            {
                failed = true;
            }
            p += block_dim_x();
        }
        !sync_threads_or(failed)
    }

    /// Exit barrier (see the module note). Every thread of every CTA calls it.
    ///
    /// # Safety
    /// As [`Fused::enter`].
    #[inline(always)]
    pub(crate) unsafe fn exit(&self) {
        if !self.on {
            return;
        }
        let t = thread_idx_x();
        // SAFETY: `counter` is this rank's counter word for the channel.
        if !unsafe { last_cta(self.counter) } {
            return;
        }
        let (kind, value) = self.exit_slot();
        if self.graph {
            // SAFETY: the caller's contract. Every CTA has passed its entry waits.
            unsafe { self.reset_all(pad::GRAPH_ENTRY) };
        }
        let mut p = t;
        while p < self.world {
            if p != self.rank {
                // SAFETY: p < world; the caller's contract. (`signal` fences first, which
                // orders the resets above before it.)
                unsafe { signal(self.pads, self.rank, self.world, p, self.channel, kind, value) };
            }
            p += block_dim_x();
        }
        let mut p = t;
        while p < self.world {
            if p != self.rank {
                // SAFETY: as above. A failure is recorded in `err`.
                unsafe {
                    wait(self.pads, self.rank, self.world, p, self.channel, kind, value, self.timeout_ns, self.err)
                };
                if self.graph {
                    // SAFETY: as above; this thread's own wait on the slot is done.
                    unsafe { reset(self.pads, self.rank, self.world, p, self.channel, kind) };
                }
            }
            p += block_dim_x();
        }
        sync_threads_or(false);
    }
}

/// Counts this CTA in on `counter` once all its threads got here; returns, in every
/// thread, whether it was the grid's last CTA (which resets the counter to 0, so it is
/// ready for the next launch on the channel). Every thread of every CTA calls it.
///
/// # Safety
/// `counter` is this rank's counter word of the channel, 0 when the launch began and
/// used by no other kernel running at the same time.
#[inline(always)]
pub(crate) unsafe fn last_cta(counter: *mut u32) -> bool {
    // SAFETY: the caller's contract.
    unsafe { count_out::<true>(counter) }
}

/// As [`last_cta`], ordering at GPU scope only: for a last CTA that acts on this GPU's
/// memory alone (the LL kernels' round counter, NOTE [LL rounds on the device]), where
/// a system-scope fence would also wait, in every CTA, for its stores into the peers'
/// memory to land, which nothing here needs (the LL lines carry their own flags).
///
/// # Safety
/// As [`last_cta`].
#[inline(always)]
pub(crate) unsafe fn last_cta_local(counter: *mut u32) -> bool {
    // SAFETY: the caller's contract.
    unsafe { count_out::<false>(counter) }
}

/// [`last_cta`] (`SYS`: fences and the reset at system scope) and [`last_cta_local`]
/// (at GPU scope).
///
/// # Safety
/// As [`last_cta`].
#[inline(always)]
unsafe fn count_out<const SYS: bool>(counter: *mut u32) -> bool {
    let fence = || if SYS { fence_acq_rel_sys() } else { fence_acq_rel_gpu() };
    let mut last = false;
    sync_threads_or(false);
    if thread_idx_x() == 0 {
        fence();
        // SAFETY: the caller's contract.
        let before = unsafe { atom_add_relaxed_gpu_u32(counter, 1) };
        last = before == grid_dim_x() - 1;
        if last {
            fence();
            // SAFETY: as above; the next launch on this channel starts after this
            // kernel completes, so nobody counts concurrently with the reset.
            unsafe { if SYS { st_release_sys_u32(counter, 0) } else { st_release_gpu_u32(counter, 0) } };
        }
    }
    sync_threads_or(last)
}

/// Copies `bytes` from `src` to `dst` with this thread's share of the grid-stride
/// `(start, step)`, in 16-byte vectors when `vec`.
///
/// # Safety
/// Both ranges valid; when `vec`, both addresses and `bytes` are multiples of 16.
#[inline(always)]
unsafe fn copy_part(src: *const u8, dst: *mut u8, bytes: u64, vec: bool, start: u64, step: u64) {
    if vec {
        let (s, d) = (src.cast::<V16>(), dst.cast::<V16>());
        let n = bytes / 16;
        let mut i = start;
        // Four independent loads in flight per thread.
        while i + 3 * step < n {
            // SAFETY: i + 3*step < n vectors; the caller's contract.
            unsafe {
                let a = s.add(i as usize).read();
                let b = s.add((i + step) as usize).read();
                let c = s.add((i + 2 * step) as usize).read();
                let e = s.add((i + 3 * step) as usize).read();
                d.add(i as usize).write(a);
                d.add((i + step) as usize).write(b);
                d.add((i + 2 * step) as usize).write(c);
                d.add((i + 3 * step) as usize).write(e);
            }
            i += 4 * step;
        }
        while i < n {
            // SAFETY: i < n vectors.
            unsafe { d.add(i as usize).write(s.add(i as usize).read()) };
            i += step;
        }
    } else {
        let mut i = start;
        while i < bytes {
            // SAFETY: i < bytes.
            unsafe { *dst.add(i as usize) = src.add(i as usize).read() };
            i += step;
        }
    }
}

fused_kernel! {
    /// One-shot all-gather: `dst[p * shard ..][..shard] = peer p's (src_bases[p] + src_off)`
    /// for every rank `p` (its own included), reading peers over NVLink. Peers are visited
    /// starting after this rank, so the ranks do not all read one peer at once.
    ///
    /// # Safety
    /// `src_bases` is a device array of `world` mapped symmetric-buffer bases, each valid
    /// for `src_off + shard` bytes; `dst` valid for `world * shard` bytes; when `fused`,
    /// `pads`, `err` and `counter` are the group's (see the module note). `vec_ok` only if
    /// `src_off`, `dst` and `shard` are multiples of 16.
    fn lowcon_allgather_oneshot(
        src_bases: *const u64,
        src_off: u64,
        dst: *mut u8,
        shard: u64,
        vec_ok: u32,
    ) |f| {
        // SAFETY: the caller's contract.
        if unsafe { f.enter() } {
            let (start, step) = grid_stride();
            for k in 0..f.world {
                let p = (f.rank + 1 + k) % f.world;
                // SAFETY: p < world; the ranges are the caller's contract.
                unsafe {
                    let src = (*src_bases.add(p as usize) + src_off) as *const u8;
                    copy_part(src, dst.add((p as u64 * shard) as usize), shard, vec_ok != 0, start, step);
                }
            }
        }
        // SAFETY: the caller's contract.
        unsafe { f.exit() };
    }
}
