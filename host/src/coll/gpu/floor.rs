//! The traffic floor: what a collective's bytes cost on their own. Each call moves the
//! bytes its collective moves between GPUs, through the group's symmetric buffers and
//! the copy engines, with no barrier, no signal and no reduction, so its result is
//! garbage. A benchmark runs it in place of the collective to split a collective's cost
//! in a real workload into the traffic's own (this) and the rest (waiting, reducing,
//! syncing): `fsdp2_paired.py`'s `floor` mode, like `lowcon bench saturated`'s `null`.
//!
//! - All-gather: this rank's shard is pushed into every peer's slot of the (symmetric)
//!   output, as `ce-push` does: (world - 1) x shard bytes out.
//! - Reduce-scatter: every peer's chunk `rank` of its (symmetric) input is pulled into
//!   this rank's output, each copy overwriting the last, as `ce-reduce` pulls them:
//!   (world - 1) x chunk bytes in.
//!
//! Without barriers nothing orders these copies against the peers' use of the same
//! memory: they read and write bytes that are being written and read. That is why the
//! results are garbage, and it is memory-safe only because every address is inside a
//! live allocation of the group (the caller's symmetric buffers, mapped on every rank,
//! which outlive the call as any collective's buffers do).

//!
//! NOTE [honest floor]
//! The floor above moves the f32 bytes from pool memory, three copies per call on one
//! stream: not what the shipped path issues. A call with `CollOptions::traffic` is the
//! honest floor: the planner plans it as the collective (the same algorithm, pieces,
//! wire, memory, mapped inputs and their host exchange), and it enqueues the same copies
//! on the same streams in the same order, with the same events between them, but no
//! barrier, no signal and no SM kernel (the reduction, the wire's pack). So a step's
//! excess over `nocomm` with traffic calls is what the copies cost as the shipped path
//! issues them; the excess of the real calls over it is the sync, the reductions and the
//! waiting. Only the copy-engine algorithms that pull take it (ce-pull, ce-reduce, the
//! bf16 wire on ce-reduce), eagerly: the others move their bytes in kernels, and ce-push
//! writes into the peers' memory, where without its exit barrier a late copy could land
//! on what a peer's next real call staged or packed. Its reads race with the peers'
//! writes as the floor's do (garbage, memory-safe: every address is inside a live
//! allocation, mapped inputs kept open as a real call keeps them), and it writes only
//! this rank's memory, in stream order before the caller's next call. Pads are not
//! touched, so a real call after it on the same channel finds them as the last real call
//! left them. It counts the bytes it moves in `stats()`, as a real call does (no
//! fallbacks: it reads no bottom halves).

use super::{GpuColl, Sym, ce_copy};
use crate::coll::check::{check_all_gather, check_reduce_scatter, rotated};
use crate::coll::device_buf::DeviceBuf;
use crate::cuda::Stream;
use crate::error::{Error, Result};
use crate::sync::gpu::graph::Mode;

impl GpuColl {
    /// The all-gather's traffic alone (module docs): `output` must be symmetric.
    pub(crate) fn all_gather_traffic(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        stream: &Stream,
    ) -> Result<()> {
        self.traffic(input, output, stream, true)
    }

    /// The reduce-scatter's traffic alone (module docs): `input` must be symmetric.
    pub(crate) fn reduce_scatter_traffic(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        stream: &Stream,
    ) -> Result<()> {
        self.traffic(input, output, stream, false)
    }

    /// Both: `gather` pushes this rank's shard into every peer's slot of the output;
    /// otherwise every peer's chunk `rank` of the input is pulled into the output.
    fn traffic(&self, input: DeviceBuf<'_>, output: DeviceBuf<'_>, stream: &Stream, gather: bool) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        self.sync.check_stream(stream)?;
        self.check_buf("input", &input)?;
        self.check_buf("output", &output)?;
        let (ins, outs) = ((input.count, input.dtype), (output.count, output.dtype));
        let (bytes, symm) = if gather {
            (check_all_gather(rank, world, ins, outs)?, output.symm)
        } else {
            crate::plan::runnable::carry(rank, input.dtype, output.dtype, None)?;
            (check_reduce_scatter(rank, world, ins, outs)?, input.symm)
        };
        let Some((buf, off)) = symm else {
            return Err(if gather {
                floor_needs_symmetric(rank, "all-gather", "output")
            } else {
                floor_needs_symmetric(rank, "reduce-scatter", "input")
            });
        };
        let sym = Sym { buf, off };
        let slot = (rank * bytes) as u64;
        // The floor has no plan (NOTE [honest floor]): the planner's copy setting.
        let hint = self.planner.settings().copy_hint;
        for p in rotated(rank, world).filter(|&p| p != rank) {
            let (dst, src) = if gather { (sym.peer(p) + slot, input.ptr) } else { (output.ptr, sym.peer(p) + slot) };
            // SAFETY: peer p's mapping of the symmetric buffer holds world x `bytes` (checked
            // on this rank; every rank makes the same call) and the local side `bytes`;
            // both stay mapped while the caller holds the buffers. The bytes race with the
            // peers' use by design (module docs).
            unsafe { ce_copy(stream, dst, src, bytes, hint)? };
        }
        self.sync.track(stream).map(|_| ())
    }
}

fn floor_needs_symmetric(rank: usize, what: &str, which: &str) -> Error {
    Error::InvalidArgument(format!(
        "rank {rank}: the {what} traffic floor moves bytes between the ranks' symmetric buffers, and the {which} is \
         ordinary device memory: allocate it from the group's pool"
    ))
}

/// Refuses a traffic call (NOTE [honest floor]) the instrument cannot run: captured, or a
/// plan that does not pull over the copy engines (`pulls` false: kernels, or ce-push).
pub(super) fn check_traffic(rank: usize, mode: Mode, pulls: bool, algorithm: &str) -> Result<()> {
    if mode == Mode::Captured {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: traffic calls (a benchmark instrument) run eagerly, not inside a CUDA graph capture"
        )));
    }
    if !pulls {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: traffic calls run the copy-engine algorithms that pull (ce-pull, ce-reduce, the bf16 wire \
             on ce-reduce), and this call's plan is {algorithm} (kernels, or ce-push, which writes into the peers' \
             memory): name ce-pull or ce-reduce"
        )));
    }
    Ok(())
}
