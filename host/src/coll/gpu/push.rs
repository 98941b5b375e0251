//! `tma-push-reduce`: every rank adds its chunks into the owners' accumulators over
//! NVLink with bulk reductions (NOTE [tma-push-reduce] in `gpu-kernels/kernels/src/push.rs`).

use super::{GpuColl, Sym, ce_copy};
use crate::coll::check::align256;
use crate::coll::device_buf::DeviceBuf;
use crate::cuda::Stream;
use crate::cuda::kernels::PushArgs;
use crate::error::Result;
use crate::plan::RsPlan;
use crate::sync::gpu::graph::Mode;

impl GpuColl {
    /// tma-push-reduce (NOTE [tma-push-reduce] in `gpu-kernels/kernels/src/push.rs`): this rank's
    /// accumulator (the workspace's first `align256(chunk)` bytes) starts as its own
    /// chunk, then, between the barriers, every rank adds its chunk `p` into rank `p`'s
    /// accumulator with bulk reductions, and the owner copies the result out. Neither
    /// buffer needs to be symmetric: the input is only read locally, and the accumulator
    /// is algorithm-internal scratch like ce-reduce's ring, so `allow_staging` (about user
    /// buffers that must be symmetric) does not apply. Inputs whose chunks are not
    /// 16-byte aligned (address or chunk size) are first copied, locally, into the
    /// workspace with a padded chunk stride, since bulk operations need 16-byte alignment.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_reduce(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        stream: &Stream,
        (ch, plan): (u32, &RsPlan),
        chunk: usize,
        dt: usize,
        mode: Mode,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let slot = align256(chunk);
        let aligned = input.ptr.is_multiple_of(16) && chunk.is_multiple_of(16);
        let need = slot + if aligned { 0 } else { world * slot };
        let mut st = self.channel(ch);
        self.prepare(&mut st, ch, mode, need, 0)?;
        let ws = st.workspace.as_ref().expect("prepared");
        let kernels = self.sync.device.kernels()?;
        let acc = ws.local_ptr();
        let (ctas, hint) = (plan.ctas, plan.copy_hint);
        // SAFETY: (the whole block) the input holds `world * chunk` bytes and the output
        // `chunk` (checked); the workspace holds `need` bytes on every rank (grown
        // collectively); the accumulator is written by its owner only before the entry
        // barrier and read only after the exit barrier, and peers add into it only
        // between the two (NOTE [tma-push-reduce]).
        unsafe {
            let (src, stride) = if aligned {
                (input.ptr, chunk as u64)
            } else {
                let staged = acc + slot as u64;
                for p in (0..world).filter(|&p| p != rank) {
                    ce_copy(stream, staged + (p * slot) as u64, input.ptr + (p * chunk) as u64, chunk, hint)?;
                }
                (staged, slot as u64)
            };
            // The accumulator starts as this rank's own contribution, before the entry
            // barrier lets the peers add theirs.
            ce_copy(stream, acc, input.ptr + (rank * chunk) as u64, chunk, hint)?;
            let a = PushArgs {
                src,
                stride,
                bases: Sym { buf: ws, off: 0 }.bases(),
                acc_off: 0,
                body: chunk.next_multiple_of(16) as u64,
                tile: plan.tma.0,
            };
            self.one_shot(stream, (ch, plan.sync, mode), |f| kernels.tma_push_reduce(stream, dt, f, ctas, &a))?;
            ce_copy(stream, output.ptr, acc, chunk, hint)?;
        }
        self.finish(stream, mode, None)?;
        drop(st);
        Ok(())
    }
}
