//! The LL algorithms on GPUs (`ll` for all-gather and reduce-scatter): one kernel per
//! round, no barrier (NOTE [LL protocol] in `gpu-kernels/src/ll.rs`).
//!
//! Each channel gets its LL buffer (`lowcon_abi::ll::BUFFER_BYTES` per rank, symmetric)
//! on its first LL call: allocated collectively, zeroed on the caller's stream, then one
//! barrier, so that no peer writes a line before this rank has zeroed its buffer. The
//! channel's round counter then advances by one per round on every rank alike (every
//! rank makes the same calls), which gives each round its half and its flag.

use super::{ChannelState, GpuColl, Sym};
use crate::coll::device_buf::DeviceBuf;
use crate::coll::select::{ll_ctas, ll_rounds};
use crate::coll::{AllGatherOptions, ReduceOp, ReduceScatterOptions};
use crate::cuda::kernels::LlArgs;
use crate::cuda::{Stream, raw};
use crate::error::Result;
use crate::sync::SyncMethod;

impl GpuColl {
    /// Readies the channel's LL buffer (first LL call on the channel: collective).
    pub(super) fn prepare_ll(
        &self,
        st: &mut ChannelState,
        stream: &Stream,
        channel: u32,
        sync: SyncMethod,
    ) -> Result<()> {
        if st.ll.is_some() {
            return Ok(());
        }
        let buf = self.sync.alloc(lowcon_abi::ll::BUFFER_BYTES as usize)?;
        // SAFETY: the buffer is this rank's, `len()` bytes, alive (kept in the channel
        // state, retired through the watchdog like workspaces).
        unsafe { raw::mem_op::fill(stream.raw(), buf.local_ptr(), 0, buf.len())? };
        // Nobody pushes into this rank's buffer before the zeroing above has run.
        self.sync.barrier(stream, channel, sync)?;
        st.ll = Some(buf);
        st.ll_seq = 1;
        Ok(())
    }

    /// Enqueues the rounds of an LL collective: `launch(args, ctas)` for each, with the
    /// round's half, flag and lines.
    fn ll_rounds(
        &self,
        stream: &Stream,
        channel: u32,
        sync: SyncMethod,
        ctas: Option<u32>,
        (src, dst, bytes): (u64, u64, usize),
        mut launch: impl FnMut(&LlArgs, u32) -> Result<()>,
    ) -> Result<()> {
        let world = self.sync.core.world as u32;
        let mut st = self.channel(channel);
        self.prepare_ll(&mut st, stream, channel, sync)?;
        let ll = st.ll.as_ref().expect("prepared");
        let bases = Sym { buf: ll, off: 0 }.bases();
        let slot = lowcon_abi::ll::slot_bytes(world);
        let aligned = src.is_multiple_of(8) && dst.is_multiple_of(8) && bytes.is_multiple_of(8);
        for (first, n) in ll_rounds(bytes, world) {
            let seq = st.ll_seq;
            let a = LlArgs {
                bases,
                half_off: lowcon_abi::ll::slot_offset(world, seq, 0),
                slot,
                flag: lowcon_abi::ll::flag(seq),
                src,
                dst,
                bytes: bytes as u64,
                first,
                n,
                aligned,
            };
            launch(&a, self.ctas(ctas.unwrap_or_else(|| ll_ctas(n))))?;
            st.ll_seq += 1;
        }
        self.sync.track_ll(stream)?;
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
        opts: &AllGatherOptions,
        shard: usize,
    ) -> Result<()> {
        let rank = self.sync.core.rank;
        // In place, the own shard is already in its slot.
        let own = input.ptr != output.ptr + (rank * shard) as u64;
        let kernels = self.sync.device.kernels()?;
        let pad = self.sync.pad_args();
        self.ll_rounds(stream, opts.channel, opts.sync, opts.ctas, (input.ptr, output.ptr, shard), |a, ctas| {
            // SAFETY: the input holds `shard` bytes and the output `world * shard`
            // (checked); the LL buffers hold both halves of `world` slots of `a.slot`
            // bytes on every rank, and `a.n` lines fit a slot (`ll_rounds`).
            unsafe { kernels.ll_allgather(stream, pad, opts.channel, ctas, a, own) }
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
        opts: &ReduceScatterOptions,
        chunk: usize,
        dt: usize,
    ) -> Result<()> {
        let kernels = self.sync.device.kernels()?;
        let pad = self.sync.pad_args();
        self.ll_rounds(stream, opts.channel, opts.sync, opts.ctas, (input.ptr, output.ptr, chunk), |a, ctas| {
            // SAFETY: as in `ll_all_gather`, with the input holding `world * chunk`
            // bytes and the output `chunk`.
            unsafe { kernels.ll_rs(stream, dt, pad, opts.channel, ctas, a, op.code()) }
        })
    }
}
