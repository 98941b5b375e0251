//! The bf16 wire's kernels (NOTE [bf16 wire] in `host/src/coll/wire.rs`): their arguments
//! and launchers, apart from the other kernels'.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::timed_launch;
use super::{COLL_THREADS, Kernels, PadArgs};
use crate::cuda::Stream;
use crate::error::{Result, drv};

/// The arguments of one bf16-wire pack: see `gpu-kernels/kernels/src/wire.rs`
/// (`lowcon_wire_pack_*`) for their contract.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WirePackArgs {
    /// This rank's input (`world` chunks of `n`): f32, or bf16 (`src_bf16`: a bf16 input
    /// with an f32 output, no low plane).
    pub src: u64,
    pub src_bf16: bool,
    pub n: u64,
    /// The piece: elements `first .. first + len` of every chunk.
    pub first: u64,
    pub len: u64,
    /// The workspace's high and low planes (the low one unused for a bf16 source),
    /// `stride` elements between chunk slots.
    pub hi: u64,
    pub lo: u64,
    pub stride: u64,
    pub rank: u32,
    pub world: u32,
    pub channel: u32,
    pub piece: u32,
    /// Device arrays of every rank's device pad and of the pads its waits poll.
    pub pads: u64,
    pub sig: u64,
    /// This rank's scratch words and CTA counter of the channel.
    pub scratch: u64,
    pub counter: u64,
    pub vec_ok: bool,
    /// This rank's "read" words of the piece whose plane slot this pack refills
    /// (NOTE [plane ring]), already waited for; 0: none.
    pub read_reset: u64,
}

/// The arguments of one bf16-wire reduction: see `gpu-kernels/kernels/src/wire.rs`
/// (`lowcon_wire_reduce_*`) for their contract. `lo_bases == 0` for a bf16 input.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WireReduceArgs {
    /// This rank's own chunk piece in its input, bf16 (`own_bf16`) or f32.
    pub own: u64,
    pub own_bf16: bool,
    /// The piece's staging: `world - 1` slots `pe` elements apart; 0: the peers' high
    /// planes at `hi_off` in their workspaces, read over NVLink (sm-direct's wire).
    pub staged: u64,
    pub pe: u64,
    pub len: u64,
    /// The output piece (f32).
    pub dst: u64,
    pub rank: u32,
    pub world: u32,
    pub op: u32,
    pub vec_ok: bool,
    /// Device array of every rank's workspace; the low plane at `lo_off`, `stride`
    /// elements between chunk slots; the piece starts at element `first`.
    pub lo_bases: u64,
    pub lo_off: u64,
    pub hi_off: u64,
    pub stride: u64,
    pub first: u64,
    /// This rank's inexact flags of the piece, its piece words, its counters.
    pub flags: u64,
    pub reset: u64,
    pub stats: u64,
    /// NOTE [plane ring]: the channel's reduction counter, the device array of the pads
    /// the senders' waits poll (0: no "read" signal), and the byte offset of this
    /// rank's byte of the piece's "read" word in each.
    pub counter: u64,
    pub read_sig: u64,
    pub read_byte: u64,
}

impl WireReduceArgs {
    /// A bf16 input reduced into an f32 output: the plain ce-reduce's staging, no
    /// bottom halves, no signals.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bf16_in(
        own: u64,
        staged: u64,
        pe: usize,
        len: usize,
        dst: u64,
        (rank, world): (usize, usize),
        op: u32,
        vec_ok: bool,
    ) -> Self {
        Self {
            own,
            own_bf16: true,
            staged,
            pe: pe as u64,
            len: len as u64,
            dst,
            rank: rank as u32,
            world: world as u32,
            op,
            vec_ok,
            lo_bases: 0,
            lo_off: 0,
            hi_off: 0,
            stride: 0,
            first: 0,
            flags: 0,
            reset: 0,
            stats: 0,
            counter: 0,
            read_sig: 0,
            read_byte: 0,
        }
    }
}

impl Kernels {
    /// Enqueues the bf16 wire's pack of one piece on `ctas` CTAs of `threads` (32 to
    /// `COLL_THREADS`).
    ///
    /// # Safety
    /// `a` meets `lowcon_wire_pack_*`'s contract; everything it points to lives until the
    /// kernel has run.
    pub(crate) unsafe fn wire_pack(
        &self,
        stream: &Stream,
        (ctas, threads): (u32, u32),
        a: &WirePackArgs,
    ) -> Result<()> {
        let threads = threads.clamp(32, COLL_THREADS);
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.wire_pack[usize::from(a.src_bf16)]);
        let vec_ok = a.vec_ok as u32;
        l.arg(&a.src).arg(&a.n).arg(&a.first).arg(&a.len).arg(&a.hi).arg(&a.lo).arg(&a.stride);
        l.arg(&a.rank).arg(&a.world).arg(&a.channel).arg(&a.piece).arg(&a.pads).arg(&a.sig);
        l.arg(&a.scratch).arg(&a.counter).arg(&vec_ok).arg(&a.read_reset);
        // SAFETY: matches `lowcon_wire_pack_*`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(wire_pack)"))?;
        Ok(())
    }

    /// Enqueues the bf16 wire's reduction of one piece on `ctas` CTAs of `threads` (32 to
    /// `COLL_THREADS`).
    ///
    /// # Safety
    /// `a` meets `lowcon_wire_reduce_*`'s contract; everything it points to lives until
    /// the kernel has run.
    pub(crate) unsafe fn wire_reduce(
        &self,
        stream: &Stream,
        (ctas, threads): (u32, u32),
        a: &WireReduceArgs,
    ) -> Result<()> {
        let threads = threads.clamp(32, COLL_THREADS);
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.wire_reduce[usize::from(a.own_bf16)]);
        let vec_ok = a.vec_ok as u32;
        l.arg(&a.own).arg(&a.staged).arg(&a.pe).arg(&a.len).arg(&a.dst).arg(&a.rank).arg(&a.world).arg(&a.op);
        l.arg(&vec_ok)
            .arg(&a.lo_bases)
            .arg(&a.lo_off)
            .arg(&a.hi_off)
            .arg(&a.stride)
            .arg(&a.first)
            .arg(&a.flags)
            .arg(&a.reset);
        l.arg(&a.stats).arg(&a.counter).arg(&a.read_sig).arg(&a.read_byte);
        // SAFETY: matches `lowcon_wire_reduce_*`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(wire_reduce)"))?;
        Ok(())
    }

    /// Enqueues kernel sync's wait for one piece's signals (`word0`: this rank's first
    /// piece word of the piece in its device pad).
    ///
    /// # Safety
    /// As [`Kernels::barrier`], with `word0` inside this rank's live device pad.
    pub(crate) unsafe fn wire_wait(&self, stream: &Stream, a: PadArgs, word0: u64, channel: u32) -> Result<()> {
        let threads = lowcon_abi::pad::piece_words(a.world).div_ceil(32).max(1) * 32;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.wire_wait);
        l.arg(&word0).arg(&a.rank).arg(&a.world).arg(&channel).arg(&a.timeout_ns).arg(&a.err);
        // SAFETY: matches `lowcon_wire_wait`'s signature; validity is the caller's.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(wire_wait)"))?;
        Ok(())
    }

    /// Enqueues the spin control: `ctas` CTAs of `threads` held for `ns` nanoseconds.
    pub(crate) fn spin(&self, stream: &Stream, ctas: u32, threads: u32, ns: u64) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (ctas, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let mut l = stream.cuda_stream().launch_builder(&self.spin);
        l.arg(&ns);
        // SAFETY: matches `lowcon_spin`'s signature; it touches no memory.
        unsafe { timed_launch(&mut l, cfg) }.map_err(drv("cuLaunchKernel(spin)"))?;
        Ok(())
    }
}
