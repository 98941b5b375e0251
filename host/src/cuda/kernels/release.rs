//! The release kernels of a released reduce-scatter (NOTE [release rounds] in
//! `host/src/coll/gpu/per_piece/released.rs`): their launchers, apart from the other kernels'.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::timed_launch;
use super::{Kernels, PadArgs};
use crate::cuda::Stream;
use crate::error::{Result, drv};

impl Kernels {
    /// Enqueues a one-thread `release` of this rank's next piece for `peer` on `channel`.
    ///
    /// # Safety
    /// As [`Kernels::barrier`], with `peer < a.world`.
    pub(crate) unsafe fn release(&self, stream: &Stream, a: PadArgs, peer: u32, channel: u32) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.release);
        l.arg(&a.pads).arg(&a.rank).arg(&a.world).arg(&peer).arg(&channel);
        // SAFETY: matches `lowcon_release`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(release)"))?;
        Ok(())
    }

    /// Enqueues a one-thread `release_wait` for `peer`'s next release on `channel`.
    ///
    /// # Safety
    /// As [`Kernels::barrier`], with `peer < a.world`.
    pub(crate) unsafe fn release_wait(&self, stream: &Stream, a: PadArgs, peer: u32, channel: u32) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.release_wait);
        l.arg(&a.pads).arg(&a.rank).arg(&a.world).arg(&peer).arg(&channel).arg(&a.timeout_ns).arg(&a.err);
        // SAFETY: matches `lowcon_release_wait`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(release_wait)"))?;
        Ok(())
    }
}
