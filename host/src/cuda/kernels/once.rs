//! The launcher of ce-reduce's one-launch reduction (NOTE [one launch per call] in
//! `host/src/coll/gpu/once.rs`).

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::timed_launch;
use super::{COLL_THREADS, Kernels};
use crate::cuda::Stream;
use crate::error::{Result, drv};

/// The arguments of one `lowcon_reduce_once_*` launch: see `gpu-kernels/kernels/src/reduce.rs`
/// (`reduce_once`) for their contract.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OnceArgs {
    /// This rank's own chunk (`n` elements).
    pub own: u64,
    pub own_idx: u32,
    /// The staged peer chunks, `stride` elements apart, each holding all `n`.
    pub staged: u64,
    pub stride: u64,
    /// Sources (the world).
    pub nsrc: u32,
    pub dst: u64,
    pub n: u64,
    /// Elements per piece.
    pub pe: u64,
    pub op: u32,
    pub vec_ok: bool,
    /// Piece 0's flag in this rank's device pad (`pad::once_flag_offset`).
    pub flags: u64,
    /// The channel's CTA counter.
    pub counter: u64,
    /// The group's error record, and each wait's bound.
    pub err: u64,
    pub timeout_ns: u64,
    pub rank: u32,
    pub channel: u32,
}

impl Kernels {
    /// Enqueues ce-reduce's reduction of a whole call (`dtype`: a float `reduce_dtype`
    /// index) on `ctas` CTAs of `threads`.
    ///
    /// # Safety
    /// As `reduce_once` in `gpu-kernels/kernels/src/reduce.rs`: every pointer valid for what it
    /// names until the kernel has run, the flags set only by this call's copy stream.
    pub(crate) unsafe fn reduce_once(
        &self,
        stream: &Stream,
        dtype: usize,
        (ctas, threads): (u32, u32),
        a: &OnceArgs,
    ) -> Result<()> {
        let threads = threads.clamp(32, COLL_THREADS);
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.reduce_once[dtype]);
        let vec_ok = a.vec_ok as u32;
        l.arg(&a.own).arg(&a.own_idx).arg(&a.staged).arg(&a.stride).arg(&a.nsrc).arg(&a.dst).arg(&a.n).arg(&a.pe);
        l.arg(&a.op).arg(&vec_ok).arg(&a.flags).arg(&a.counter).arg(&a.err).arg(&a.timeout_ns).arg(&a.rank);
        l.arg(&a.channel);
        // SAFETY: matches `lowcon_reduce_once_*`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(reduce_once)"))?;
        Ok(())
    }
}
