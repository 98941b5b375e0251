//! The packed bf16 wire on GPUs (NOTE [bf16 wire] in `coll::wire`): f32 in and out, the
//! top halves through the copy engines, the bottom halves read only where a piece is
//! flagged inexact; or a bf16 input into f32 on sm-direct, packed as top halves alone
//! (`RsPlan::packs`).
//!
//! Per piece `i` of the chunk, on three streams forked from the caller's:
//! - pack stream: `wire_pack(i)` splits every chunk this rank sends and, from its last
//!   CTA, signals each destination;
//! - copy stream: wait for `i`'s staging slot (the reduction of piece `i - 3`), wait for
//!   every peer's signal of `i`, copy each peer's top halves of `i` into the slot;
//! - caller's stream: wait for the copies, `wire_reduce(i)`.
//!
//! Then the caller's stream joins the pack stream and passes the exit barrier (peers
//! may pack into their workspaces again once every rank has read them). No entry
//! barrier: peers never read this rank's input, only what it packed and signalled.
//!
//! NOTE [the wire read directly]
//! With `sm-direct` the wire has no copies: the caller's stream waits for every peer's
//! signal of piece `i`, and `wire_reduce(i)` reads the peers' high planes over NVLink
//! (as it reads their low planes where flagged), so the copy engines are left to what
//! else runs (FSDP2's all-gathers) at the price of SM time spent on NVLink loads. No
//! staging ring.
//!
//! A bf16 input into an f32 output takes the same path on sm-direct: its pack copies
//! each chunk it sends into the high plane as it is (`lowcon_wire_pack_bf16`; there is
//! no low plane, half the planes' memory, and every flag stays clear), and the
//! reduction adds this rank's bf16 chunk to the peers' in f32, in rank order, as
//! ce-reduce does with a bf16 input. This is what `lowcon.fsdp`'s bf16 copy-in sends:
//! FSDP2's bf16 gradients copied in as bf16 (NOTE [bf16 copy-in]), where the split
//! wire's pack read the f32 copy-in and wrote both halves (6 bytes an element on the
//! SMs, and 6 more for the copy-in, against 4 and 4).
//!
//! NOTE [bf16 input read in place]
//! Packing is a copy into planes that the peers can read, signalled piece by piece: a
//! pack launch and a reduction launch per piece. Beside a GEMM that holds every SM, each
//! launch waits for a GEMM kernel to end (NOTE [one launch per call]), so a packed call
//! of several pieces finishes a fraction of the calls one launch would (2x H200,
//! 2026-11-28, ea8ac1c, 256 MiB per rank beside a saturated 8192³ GEMM: 49 GB/s at 64
//! CTAs, where sm-direct's single launch over a symmetric bf16 input moved 154-166).
//! Where the plan's `map_ordinary` says so, sm-direct reads a bf16 input where it is
//! instead: a symmetric input as it is, an ordinary one through the peers' IPC mappings
//! of it (`coll::gpu::mapped`), with one fused kernel (`lowcon_rs_direct_bf16_f32`)
//! between the entry and exit barriers: the peers' bf16 chunks added to this rank's in
//! f32, in rank order, bit for bit the packed path's result. The peers' addresses go to
//! a table in the workspace (one memop batch). A call this rank made before predicts
//! them (NOTE [addresses predicted]): the kernel's threads wait at its gate for the
//! channel's verify word before they read the table, and the verifier, handed the job
//! before the kernel is launched, rewrites a missed address in the table (on its fix
//! stream, after the call's table writes) before it writes the word; so no host
//! rendezvous in steady state, and a miss costs a table write, never a wrong read. The
//! kernel checks the sources' alignment itself once the table is final (its vector
//! path needs all of them 16-byte aligned). Nothing is packed, so no planes and no
//! pieces; a captured call of an ordinary input cannot exchange, and packs.
//!
//! NOTE [plane ring]
//! The planes were the size of the input less one chunk (3/4 of it at 4 ranks): FSDP2's
//! largest reduce-scatter at 8192x4 kept 2.26 GiB of them per rank, which put lowcon's
//! peak at 1.06x NCCL's (4x H200, 2026-11-26). Where a call has more pieces than
//! `PLANE_RING`, each chunk slot of a plane holds `PLANE_RING` pieces, piece `i` in
//! ring slot `i % PLANE_RING`, and a slot is packed again only once every reader is
//! done with it:
//! - the reduction of piece `i` (for `i + PLANE_RING < pieces`) tells every sender, from
//!   its last CTA (the channel's reduction counter), that it read the piece: a byte in
//!   the sender's "read" word of `i` (`pad::read_piece`), as packs signal theirs;
//! - the pack of piece `i + PLANE_RING` waits on the pack stream for every reader's byte
//!   (memop or kernel, as the piece waits) and its CTA 0 zeroes the word before its
//!   last CTA signals the piece;
//! - *no reset erases a signal*: a reader sets its byte of `i` again only in a later call,
//!   after reading that call's piece `i`, which follows this pack (stream order) and its
//!   system-scope fence;
//! - the pieces past `pieces - PLANE_RING` signal nothing: nothing waits for them in the
//!   call, and the next call's packs wait for the exit barrier as before.
//!
//! A failed group releases the "read" waits as it releases the piece waits.

use super::{GpuColl, ce_copy};
use crate::coll::counters::Moved;
use crate::coll::device_buf::DeviceBuf;
use crate::coll::geometry::{PLANE_RING, STAGING_DEPTH};
use crate::coll::wire::Carry;
use crate::coll::wire::{Layout, pieces};
use crate::coll::{ReduceOp, RsAlgo};
use crate::cuda::kernels::{COLL_THREADS, WirePackArgs, WireReduceArgs};
use crate::cuda::{Stream, StreamPriority};
use crate::error::Result;
use crate::plan::RsPlan;
use crate::sync::gpu::graph::Mode;
use lowcon_abi::pad;

impl GpuColl {
    /// The packed reduce-scatter (see the module docs): `output` is f32, `input` f32 (the
    /// split wire) or bf16 (a bf16 input on sm-direct), checked by the caller;
    /// `output.count` elements per chunk.
    pub(super) fn wire_reduce_scatter(
        &self,
        input: &DeviceBuf<'_>,
        output: &DeviceBuf<'_>,
        op: ReduceOp,
        stream: &Stream,
        (ch, plan): (u32, &RsPlan),
        (mode, traffic): (Mode, bool),
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let n = output.count;
        let (pe, count) = pieces(rank, n, plan.pieces)?;
        let hint = plan.copy_hint;
        let direct = plan.algorithm == RsAlgo::SmDirect;
        // A bf16 input packs its values as the top halves: no low plane, no flags set.
        let bf16 = plan.carry == Carry::Bf16In;
        let esize = input.dtype.size();
        // NOTE [the wire read directly]: no staging ring (pieces of 0 elements in it).
        // NOTE [plane ring]: planes of `PLANE_RING` pieces where the call has more.
        let ring = if count > PLANE_RING { PLANE_RING } else { 0 };
        let planes = if bf16 { 1 } else { 2 };
        let layout = Layout::ringed(world, n, (if direct { 0 } else { pe }, pe), planes, ring);
        let ctas = plan.ctas;
        let mut st = self.channel(ch);
        // Events: the fork, the pack stream's join, then per piece copied and reduced.
        self.prepare(&mut st, ch, mode, layout.bytes, 2 + 2 * count)?;
        if st.pack.is_none() {
            st.pack = Some(self.sync.device.stream(StreamPriority::High)?);
        }
        self.sync.mark_wire_channel(ch);
        if mode == Mode::Captured {
            self.sync.mark_graph_channel(ch);
        }
        let ws = st.workspace.as_ref().expect("prepared");
        let (copy, pack) = (st.copy.as_ref().expect("prepared"), st.pack.as_ref().expect("made"));
        let (fork, rest) = st.events.split_first().expect("prepared");
        let (packed, rest) = rest.split_first().expect("prepared");
        let (copied, reduced) = rest.split_at(count);
        let kernels = self.sync.device.kernels()?;
        let (r32, w32) = (rank as u32, world as u32);
        let pads = self.sync.pads.local_ptr();
        let (src, out) = (input.ptr, output.ptr);
        // Every chunk's pieces keep 16-byte alignment when the input and the chunk do.
        let pack_vec = src.is_multiple_of(16) && (n * esize).is_multiple_of(16);
        let own_vec = (src + (rank * n * esize) as u64).is_multiple_of(16) && out.is_multiple_of(16);
        // SAFETY: (the whole block) the input and output are checked device buffers of
        // this rank (`world * n` elements of `esize` bytes, `n` f32s); the workspace holds `layout`
        // on every rank (prepared); the pads, counters and error record are the group's.
        // The copy stream refills a staging slot only after the reduction that read it,
        // and peers read this rank's planes only after its signal of the piece and
        // before their exit signal (module docs).
        unsafe {
            stream.record(fork)?;
            pack.wait(fork)?;
            // Read directly, the copy stream has nothing to do (and each piece's reduced
            // event nothing to order): driver calls saved are host time saved.
            if !direct {
                copy.wait(fork)?;
            }
            // NOTE [honest floor]: a traffic call packs nothing, signals nothing and
            // reduces nothing: the copies and their events only.
            let sync = !traffic;
            if sync {
                for i in 0..count {
                    let first = i * pe;
                    // Where the piece lies in the planes: the kernel addresses the source
                    // and the planes with one `first`, so the source moves by the difference.
                    let pf = layout.plane_first(i, first);
                    let read_reset = match i.checked_sub(ring) {
                        Some(j) if ring > 0 => {
                            let j = pad::read_piece(j as u32);
                            self.sync.wait_piece(pack, plan.sync, ch, j)?;
                            self.sync.piece_word(plan.sync, ch, j)
                        }
                        _ => 0,
                    };
                    let a = WirePackArgs {
                        src: src + ((first - pf) * esize) as u64,
                        src_bf16: bf16,
                        n: n as u64,
                        first: pf as u64,
                        len: pe.min(n - first) as u64,
                        hi: ws.local_ptr() + layout.hi as u64,
                        lo: ws.local_ptr() + layout.lo as u64,
                        stride: layout.stride as u64,
                        rank: r32,
                        world: w32,
                        channel: ch,
                        piece: i as u32,
                        pads: crate::cuda::device_ptr(self.sync.pads.device_peer_ptrs()),
                        sig: self.sync.piece_pads(plan.sync),
                        scratch: pads + pad::wire_or_offset(w32, ch) as u64,
                        counter: pads + pad::counter_offset(w32, ch) as u64,
                        vec_ok: pack_vec,
                        read_reset,
                    };
                    kernels.wire_pack(pack, (ctas, COLL_THREADS), &a)?;
                }
            }
            pack.record(packed)?;
            for i in 0..count {
                let first = i * pe;
                let pf = layout.plane_first(i, first);
                let len = pe.min(n - first);
                let staged = if direct {
                    // Traffic calls never get here (a kernel algorithm: refused).
                    self.sync.wait_piece(stream, plan.sync, ch, i as u32)?;
                    0
                } else {
                    if i >= STAGING_DEPTH {
                        copy.wait(&reduced[i - STAGING_DEPTH])?;
                    }
                    if sync {
                        self.sync.wait_piece(copy, plan.sync, ch, i as u32)?;
                    }
                    for p in super::rotated(rank, world).filter(|&p| p != rank) {
                        let from = ws.peer_ptr(p) + layout.slot(layout.hi, rank, p, pf) as u64;
                        let to = ws.local_ptr() + layout.stage(world, pe, i, super::staged_slot(p, rank)) as u64;
                        ce_copy(copy, to, from, len * 2, hint)?;
                    }
                    copy.record(&copied[i])?;
                    stream.wait(&copied[i])?;
                    if !sync {
                        stream.record(&reduced[i])?;
                        continue;
                    }
                    ws.local_ptr() + layout.stage(world, pe, i, 0) as u64
                };
                let a = WireReduceArgs {
                    own: src + ((rank * n + first) * esize) as u64,
                    own_bf16: bf16,
                    staged,
                    pe: pe as u64,
                    len: len as u64,
                    dst: out + (first * 4) as u64,
                    rank: r32,
                    world: w32,
                    op: op.code(),
                    vec_ok: own_vec,
                    lo_bases: crate::cuda::device_ptr(ws.device_peer_ptrs()),
                    lo_off: layout.lo as u64,
                    hi_off: layout.hi as u64,
                    stride: layout.stride as u64,
                    first: pf as u64,
                    flags: pads + pad::wire_flag_offset(w32, ch, i as u32, 0) as u64,
                    reset: self.sync.piece_word(plan.sync, ch, i as u32),
                    stats: pads + pad::stats_offset(w32) as u64,
                    // NOTE [plane ring]: the senders learn that this rank read the piece.
                    counter: pads + pad::reduce_counter_offset(w32, ch) as u64,
                    read_sig: if ring > 0 && i + ring < count { self.sync.piece_pads(plan.sync) } else { 0 },
                    read_byte: pad::piece_slot(ch, pad::read_piece(i as u32), r32, w32) as u64 * 4
                        + (r32 % pad::RANKS_PER_WORD) as u64,
                };
                kernels.wire_reduce(stream, (ctas, COLL_THREADS), &a)?;
                if !direct {
                    stream.record(&reduced[i])?;
                }
            }
            stream.wait(packed)?;
            if sync {
                self.exit(stream, ch, plan.sync, mode)?;
            }
        }
        self.count(moved(world, n, count, plan.carry));
        // Registered before the channel is released (as every call).
        self.finish(stream, mode, None)?;
        drop(st);
        Ok(())
    }
}

/// What a packed call carrying `carry` in `count` pieces of `n` elements per chunk moves:
/// top halves (the split wire), or the bf16 input itself, counted as any reduce-scatter's
/// bytes (as ce-reduce counts a bf16 input into f32).
pub(super) fn moved(world: usize, n: usize, count: usize, carry: Carry) -> Moved {
    match carry {
        Carry::Bf16In => Moved::ReduceScatter((world - 1) * n * 2),
        _ => Moved::Wire((world - 1) * n * 2, (world - 1) * count),
    }
}

/// Whether two byte ranges (address, length) share a byte.
fn overlaps(a: (u64, usize), b: (u64, usize)) -> bool {
    a.0 < b.0 + b.1 as u64 && b.0 < a.0 + a.1 as u64
}

/// Refuses a bf16 input reduced into an f32 output in place: the output, twice the
/// bytes of this rank's chunk, would overwrite input that peers read.
pub(super) fn refuse_bf16_in_place(
    rank: usize,
    plan: crate::coll::wire::Carry,
    input: &DeviceBuf<'_>,
    output: &DeviceBuf<'_>,
) -> Result<()> {
    if plan == crate::coll::wire::Carry::Bf16In && overlaps((input.ptr, input.bytes()), (output.ptr, output.bytes())) {
        return Err(crate::error::Error::InvalidArgument(format!(
            "rank {rank}: a reduce-scatter of bf16 into f32 cannot run in place: its f32 output would overwrite \
             the input that peers read"
        )));
    }
    Ok(())
}
