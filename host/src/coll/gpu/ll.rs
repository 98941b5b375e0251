//! The LL algorithms on GPUs (`ll` for all-gather and reduce-scatter): one kernel per
//! round, no barrier (NOTE [LL protocol] in `gpu-kernels/kernels/src/ll.rs`).
//!
//! Each channel gets its LL buffer (`lowcon_abi::ll::BUFFER_BYTES` per rank, symmetric)
//! on its first LL call: allocated collectively, zeroed on the caller's stream, then one
//! barrier, so that no peer writes a line before this rank has zeroed its buffer. The
//! channel's round counter, in the pad buffer, then advances by one per round on every
//! rank alike (every rank makes the same calls), which gives each round its half and
//! its flag; the kernels read and advance it themselves (NOTE [LL rounds on the
//! device]), so LL calls can be captured into CUDA graphs.

use super::{ChannelState, GpuColl, Sym};
use crate::coll::ReduceOp;
use crate::coll::device_buf::DeviceBuf;
use crate::coll::geometry::ll_rounds;
use crate::cuda::kernels::LlArgs;
use crate::cuda::{Stream, raw};
use crate::error::{Error, Result};
use crate::plan::{AgPlan, RsPlan};
use crate::sync::SyncMethod;
use crate::sync::gpu::graph::Mode;

impl GpuColl {
    /// Readies the channel's LL buffer (first LL call on the channel: collective).
    pub(super) fn prepare_ll(
        &self,
        st: &mut ChannelState,
        stream: &Stream,
        (channel, sync, mode): (u32, SyncMethod, Mode),
    ) -> Result<()> {
        if st.ll.is_some() {
            return Ok(());
        }
        if mode == Mode::Captured {
            return Err(Error::InvalidArgument(format!(
                "rank {}: a captured ll call needs channel {channel}'s LL buffer, which is made by the first \
                 ll call or reserve_workspace({channel}, ...) on the channel: call either before the capture \
                 (making it allocates and meets the peers, which a capture cannot)",
                self.sync.core.rank
            )));
        }
        let buf = self.sync.alloc(lowcon_abi::ll::BUFFER_BYTES as usize, &format!("channel {channel}'s LL buffer"))?;
        // SAFETY: the buffer is this rank's, `len()` bytes, alive (kept in the channel
        // state, retired through the watchdog like workspaces).
        unsafe { raw::mem_op::fill(stream.raw(), buf.local_ptr(), 0, buf.len())? };
        // Nobody pushes into this rank's buffer before the zeroing above has run.
        self.sync.barrier_eager(stream, channel, sync)?;
        st.ll = Some(buf);
        Ok(())
    }

    /// Enqueues the rounds of an LL collective: `launch(args, ctas)` for each, with the
    /// round's half, flag and lines, and the plan's CTAs (no more than a round's lines
    /// need: a last, short round takes fewer) and launch overlap.
    fn ll_rounds(
        &self,
        stream: &Stream,
        (channel, sync, mode): (u32, SyncMethod, Mode),
        (ctas, overlap): (u32, bool),
        (src, dst, bytes): (u64, u64, usize),
        mut launch: impl FnMut(&LlArgs, u32) -> Result<()>,
    ) -> Result<()> {
        let world = self.sync.core.world as u32;
        let mut st = self.channel(channel);
        self.prepare_ll(&mut st, stream, (channel, sync, mode))?;
        let ll = st.ll.as_ref().expect("prepared");
        let bases = Sym { buf: ll, off: 0 }.bases();
        let slot = lowcon_abi::ll::slot_bytes(world);
        let aligned = src.is_multiple_of(8) && dst.is_multiple_of(8) && bytes.is_multiple_of(8);
        let pads = self.sync.pads.local_ptr();
        for (first, n) in ll_rounds(bytes, world) {
            let a = LlArgs {
                bases,
                seq: pads + lowcon_abi::pad::ll_seq_offset(world, channel) as u64,
                counter: pads + lowcon_abi::pad::counter_offset(world, channel) as u64,
                slot,
                src,
                dst,
                bytes: bytes as u64,
                first,
                n,
                aligned,
                overlap,
            };
            launch(&a, ctas.min(n.div_ceil(crate::cuda::kernels::COLL_THREADS as u64).max(1) as u32))?;
        }
        if mode == Mode::Eager {
            self.sync.track_ll(stream)?;
        } else {
            self.sync.mark_graph_channel(channel);
        }
        drop(st);
        Ok(())
    }

    /// LL all-gather of `shard` bytes per rank (arguments already checked). Neither
    /// buffer needs to be symmetric: each rank pushes its own shard into the peers' LL
    /// buffers and copies out of its own.
    pub(super) fn ll_all_gather(
        &self,
        input: &DeviceBuf<'_>,
        output: &DeviceBuf<'_>,
        stream: &Stream,
        (channel, plan): (u32, &AgPlan),
        shard: usize,
        mode: Mode,
    ) -> Result<()> {
        let rank = self.sync.core.rank;
        // In place, the own shard is already in its slot.
        let own = input.ptr != output.ptr + (rank * shard) as u64;
        let kernels = self.sync.device.kernels()?;
        let pad = self.sync.pad_args();
        let ch = (channel, plan.sync, mode);
        self.ll_rounds(stream, ch, (plan.ctas, plan.ll_overlap), (input.ptr, output.ptr, shard), |a, ctas| {
            // SAFETY: the input holds `shard` bytes and the output `world * shard`
            // (checked); the LL buffers hold both halves of `world` slots of `a.slot`
            // bytes on every rank, and `a.n` lines fit a slot (`ll_rounds`).
            unsafe { kernels.ll_allgather(stream, pad, channel, ctas, a, own) }
        })
    }

    /// LL reduce-scatter of `chunk` bytes per rank (arguments already checked).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ll_reduce_scatter(
        &self,
        input: &DeviceBuf<'_>,
        output: &DeviceBuf<'_>,
        op: ReduceOp,
        stream: &Stream,
        (channel, plan): (u32, &RsPlan),
        chunk: usize,
        dt: usize,
        mode: Mode,
    ) -> Result<()> {
        let kernels = self.sync.device.kernels()?;
        let pad = self.sync.pad_args();
        let ch = (channel, plan.sync, mode);
        self.ll_rounds(stream, ch, (plan.ctas, plan.ll_overlap), (input.ptr, output.ptr, chunk), |a, ctas| {
            // SAFETY: as in `ll_all_gather`, with the input holding `world * chunk`
            // bytes and the output `chunk`.
            unsafe { kernels.ll_rs(stream, dt, pad, channel, ctas, a, op.code()) }
        })
    }
}
