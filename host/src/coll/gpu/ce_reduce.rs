//! ce-reduce's steps once its channel is ready: the copy stream stages every peer's
//! piece of this rank's chunk, the caller's stream reduces, per piece (one launch each,
//! after the piece's event) or per call (NOTE [one launch per call]).
//!
//! NOTE [one launch per call]: beside a GEMM that holds every SM (cuBLAS's persistent
//! kernels on Hopper fill an SM's registers, so no CTA of ours shares one), a kernel we
//! launch starts only when a GEMM kernel ends and frees its SMs. Each launch of a
//! reduction therefore waits about one GEMM kernel (1.45 ms for 8192³ bf16 on an H100),
//! and a call of 16 pieces waits 16 times: measured with `lowcon bench reduce-kernels`
//! (1x H100, 2026-11-25, commit 4c441e0, `docs/runs/2026-11-25-4c441e0-1xh100/`), a
//! reduction of 256 MiB on 4 CTAs kept 53 / 56 / 25 / 7% of its speed alone at 1 / 2 /
//! 4 / 16 launches per call, exactly as a control that holds the SMs and moves nothing.
//! So `ReduceLaunch::Once` launches the reduction once, right after the entry barrier:
//! its CTAs take their SMs at the first GEMM boundary and keep them; each CTA's thread 0
//! waits for piece `i`'s flag in this rank's device pad (`pad::once_flag_offset`),
//! which the copy stream sets with a stream write after the piece's staged copies (in
//! stream order: the copies are complete and visible), and the CTA's barrier hands the
//! acquire to its threads. The last CTA writes the flags back to 0, so graph replays
//! find them at rest; the next call on the channel orders after this one (channels are
//! not shared by concurrent calls). Costs: the whole chunk is staged (a slot of `n`
//! elements per peer instead of a ring of `STAGING_DEPTH` pieces), the CTAs hold their
//! SMs while they wait for copies, a captured call adds one stream-write node per
//! piece, and the pieces are limited to `pad::WIRE_PIECES`. A wait that expires (the
//! copy stream stuck) reports to the error record like every bounded wait.

use super::{GpuColl, ce_copy};
use crate::coll::check::staged_slot;
use crate::coll::geometry::STAGING_DEPTH;
use crate::coll::wire::Carry;
use crate::coll::{ReduceOp, check::align256, check::rotated};
use crate::cuda::kernels::{COLL_THREADS, OnceArgs, WireReduceArgs};
use crate::cuda::{Event, Stream, raw};
use crate::error::Result;
use crate::sync::SyncMethod;
use crate::sync::gpu::graph::Mode;

/// Workspace bytes ce-reduce stages peers' pieces in: a ring of [`STAGING_DEPTH`] pieces
/// of `pe` elements per peer, or (`once`) a whole chunk of `n` per peer.
pub(super) fn stage_bytes(world: usize, n: usize, pe: usize, esize: usize, once: bool) -> usize {
    match once {
        true => (world - 1) * align256(n * esize),
        false => STAGING_DEPTH * (world - 1) * pe * esize,
    }
}

/// One ce-reduce call, as the caller's code resolved it.
pub(super) struct CeCall<'a> {
    pub stream: &'a Stream,
    pub copy: &'a Stream,
    /// `start`, then one `copied` and one `reduced` event per piece.
    pub events: &'a [Event],
    /// The first staging byte in this rank's workspace.
    pub stage_base: u64,
    /// This rank's own chunk, and the output.
    pub own: u64,
    pub out: u64,
    /// Peer `p`'s chunk for this rank (its input, mapped or staged symmetric).
    pub from: &'a dyn Fn(usize) -> u64,
    /// Elements per chunk and per piece; element bytes of the input and the output.
    pub n: usize,
    pub pe: usize,
    pub esize: usize,
    pub out_size: usize,
    pub plan: Carry,
    /// The input's `reduce_dtype` index.
    pub dt: usize,
    pub ctas: u32,
    pub op: ReduceOp,
    pub channel: u32,
    pub sync: SyncMethod,
    pub mode: Mode,
    pub once: bool,
    /// NOTE [honest floor]: the copies and events only.
    pub traffic: bool,
    /// The plan's `copy_hint` (NOTE [plan settings]).
    pub hint: bool,
}

impl GpuColl {
    /// Enqueues `c`'s barriers, copies and reductions.
    ///
    /// # Safety
    /// As `reduce_scatter`'s block: every address valid for what `c` says, the
    /// workspace holding [`stage_bytes`] from `c.stage_base`.
    pub(super) unsafe fn ce_reduce(&self, c: &CeCall<'_>) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let (n, pe, esize) = (c.n, c.pe, c.esize);
        let pieces = n.div_ceil(pe);
        let (start, rest) = c.events.split_first().expect("prepared");
        let (copied, reduced) = rest.split_at(pieces);
        let kernels = self.sync.device.kernels()?;
        let (stream, copy) = (c.stream, c.copy);
        let world32 = world as u32;
        let flags = self.sync.pads.local_ptr() + lowcon_abi::pad::once_flag_offset(world32, c.channel, 0) as u64;
        let stride = align256(n * esize);
        let sync = !c.traffic;
        if sync {
            self.enter(stream, c.channel, c.sync, c.mode)?;
        }
        stream.record(start)?;
        copy.wait(start)?;
        if c.once && sync {
            let pad = self.sync.pad_args();
            let a = OnceArgs {
                own: c.own,
                own_idx: rank as u32,
                staged: c.stage_base,
                stride: (stride / esize) as u64,
                nsrc: world32,
                dst: c.out,
                n: n as u64,
                pe: pe as u64,
                op: c.op.code(),
                vec_ok: c.own.is_multiple_of(16) && c.out.is_multiple_of(16),
                flags,
                counter: self.sync.pads.local_ptr() + lowcon_abi::pad::counter_offset(world32, c.channel) as u64,
                err: pad.err,
                timeout_ns: pad.timeout_ns,
                rank: rank as u32,
                channel: c.channel,
            };
            // SAFETY: as this function's contract; the kernel reads the staged slots only
            // after their flags, which the copies below set.
            unsafe { kernels.reduce_once(stream, c.dt, (c.ctas, COLL_THREADS), &a)? };
        }
        for i in 0..pieces {
            let first = i * pe;
            let len = pe.min(n - first);
            let slots = match c.once {
                true => c.stage_base + (first * esize) as u64,
                false => {
                    if i >= STAGING_DEPTH {
                        copy.wait(&reduced[i - STAGING_DEPTH])?;
                    }
                    c.stage_base + ((i % STAGING_DEPTH) * (world - 1) * pe * esize) as u64
                }
            };
            let slot = if c.once { stride } else { pe * esize };
            for p in rotated(rank, world).filter(|&p| p != rank) {
                let from = (c.from)(p) + (first * esize) as u64;
                // SAFETY: the slot is inside the staging area (contract), the source
                // inside peer `p`'s input.
                unsafe { ce_copy(copy, slots + (staged_slot(p, rank) * slot) as u64, from, len * esize, c.hint)? };
            }
            if c.once {
                if !sync {
                    continue;
                }
                // SAFETY: piece `i`'s flag in this rank's live pad (`i < WIRE_PIECES`,
                // checked by `coll::launch`).
                unsafe { raw::mem_op::write_u32(copy.raw(), flags + 4 * i as u64, 1)? };
                continue;
            }
            copy.record(&copied[i])?;
            stream.wait(&copied[i])?;
            if !sync {
                stream.record(&reduced[i])?;
                continue;
            }
            let own = c.own + (first * esize) as u64;
            let dst = c.out + (first * c.out_size) as u64;
            let vec_ok = own.is_multiple_of(16) && dst.is_multiple_of(16);
            if c.plan == Carry::Bf16In {
                // bf16 pieces accumulated in f32 and written as f32.
                let a = WireReduceArgs::bf16_in(own, slots, pe, len, dst, (rank, world), c.op.code(), vec_ok);
                // SAFETY: the piece inside the own chunk, the slots and the output.
                unsafe { kernels.wire_reduce(stream, (c.ctas, COLL_THREADS), &a)? };
            } else {
                let r = rank as u32;
                let (dt, sh, code) = (c.dt, (c.ctas, COLL_THREADS), c.op.code());
                // SAFETY: as above.
                unsafe {
                    kernels.reduce(stream, dt, sh, own, r, slots, pe as u64, world32, dst, len as u64, code, vec_ok)?
                };
            }
            stream.record(&reduced[i])?;
        }
        if c.once {
            // The copy stream joins the caller's (the next call's copies order after
            // this one's flags, and the exit barrier after every copy).
            copy.record(&copied[pieces - 1])?;
            stream.wait(&copied[pieces - 1])?;
        }
        match sync {
            true => self.exit(stream, c.channel, c.sync, c.mode),
            false => Ok(()),
        }
    }
}
