//! A GPU group's per-piece signals: all-gather arrivals (NOTE [per-piece arrivals] in
//! `coll/gpu/per_piece/arrivals.rs`) and the released reduce-scatter (NOTE [release rounds] in
//! `coll/gpu/per_piece/released.rs`), the building blocks of fused tensor-parallel ops.

use super::GpuGroup;
use crate::coll::{AllGatherOptions, Arrivals, DeviceBuf, ReduceOp, ReduceScatterOptions};
use crate::cuda::Stream;
use crate::error::Result;

impl GpuGroup {
    /// Events that an all-gather records as each piece lands, for consumers that start on
    /// the pieces already there ([`GpuGroup::all_gather_arrivals`]; NOTE [per-piece arrivals]).
    pub fn arrivals(&self) -> Result<Arrivals> {
        Arrivals::new(&self.sync().device, self.rank(), self.world_size())
    }

    /// As [`GpuGroup::all_gather`], recording `arrivals`' event `p` once rank `p`'s
    /// piece is in `output`: another stream then waits for one piece with
    /// [`Arrivals::wait`]. ce-pull records each piece as it lands, in
    /// [`Arrivals::order`]; the other algorithms record them all when the call ends.
    pub fn all_gather_arrivals(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        stream: &Stream,
        opts: &AllGatherOptions,
        arrivals: &Arrivals,
    ) -> Result<()> {
        self.coll.all_gather(input, output, stream, opts, Some(arrivals))
    }

    /// Released reduce-scatter (NOTE [release rounds] in `coll/gpu/per_piece/released.rs`): the
    /// input's chunks are written by the caller's own work, one destination at a time,
    /// and each is copied to its owner as soon as it is released, while the next is
    /// being written. Calls `produce(d)` for every destination `d` in the order
    /// `rank + 1, rank + 2, ..., rank` (modulo the world); `produce` enqueues on `stream`
    /// the work that writes `input[d * n .. (d + 1) * n]` and must not call this group.
    /// Then, as [`GpuGroup::reduce_scatter`], `output` (`n` elements) receives `op` over
    /// every rank's chunk `rank`. The input must be symmetric memory (peers read it in
    /// place); floats only; ce-reduce's copies and reduction; its waits are kernels.
    /// A `produce` that fails aborts the group (peers wait for this rank's releases).
    pub fn reduce_scatter_released(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        op: ReduceOp,
        stream: &Stream,
        opts: &ReduceScatterOptions,
        produce: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        self.coll.reduce_scatter_released(input, output, op, stream, opts, produce)
    }
}
