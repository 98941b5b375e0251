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

use super::{GpuColl, Sym, ce_copy};
use crate::coll::check::{check_all_gather, check_reduce_scatter, rotated};
use crate::coll::device_buf::DeviceBuf;
use crate::cuda::Stream;
use crate::error::{Error, Result};

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
            (check_reduce_scatter(rank, world, ins, outs, None)?.0, input.symm)
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
        for p in rotated(rank, world).filter(|&p| p != rank) {
            let (dst, src) = if gather { (sym.peer(p) + slot, input.ptr) } else { (output.ptr, sym.peer(p) + slot) };
            // SAFETY: peer p's mapping of the symmetric buffer holds world x `bytes` (checked
            // on this rank; every rank makes the same call) and the local side `bytes`;
            // both stay mapped while the caller holds the buffers. The bytes race with the
            // peers' use by design (module docs).
            unsafe { ce_copy(stream, dst, src, bytes)? };
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
