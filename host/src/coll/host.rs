//! The collectives on the host backend: the same algorithms, protocol and workspace
//! layout as on GPUs, with CPU copies standing in for copy engines and kernels, so that
//! the synchronisation and the data layout are tested in CI without a GPU.
//!
//! The calls are synchronous (they return when the data is in place). On this backend
//! `sm-oneshot` differs from `ce-pull` only in reading its own shard from symmetric
//! memory too, and `sm-direct` from `ce-reduce` only in working through 64 KiB blocks
//! rather than staged pieces, and `tma-reduce` from `sm-direct` in reading a head, ring
//! tiles and a tail (the GPU's bulk-copy split); `tma-push-reduce` pushes each chunk into
//! its owner's workspace between the same barriers as on GPUs; what they share with the GPU versions is the order of
//! barriers and which rank reads or writes which buffer.

mod ll;
mod wire_steps;

use std::borrow::Cow;

use std::sync::Mutex;

use super::check::{call_text, check_all_gather, check_reduce_scatter, grow_to, no_wire, rotated};
use super::counters::{Counters, Moved};
use super::geometry::{piece_elems, tma_split};
use super::reference::{reduce_into, reduce_into_as};
use super::{AgAlgo, AllGatherOptions, ArrivalForm, DType, ReduceOp, ReduceScatterOptions, RsAlgo};
use crate::error::{Error, Result};
use crate::memory::host::{HostBuffer, alloc};
use crate::plan::{AgCall, Planner, RsCall};
use crate::sync::host::HostSync;

/// A collective's input on the host backend.
#[derive(Clone, Copy)]
pub enum HostInput<'a> {
    /// Ordinary memory: staged through the group's workspace where the algorithm needs
    /// peers to read it.
    Plain(&'a [u8]),
    /// `len` bytes at `offset` of a symmetric buffer; every rank must pass the same
    /// offset and length. Peers read it in place.
    Symmetric {
        /// The buffer.
        buf: &'a HostBuffer,
        /// Byte offset, the same on every rank.
        offset: usize,
        /// Bytes.
        len: usize,
    },
}

impl HostInput<'_> {
    fn len(&self) -> usize {
        match self {
            HostInput::Plain(d) => d.len(),
            HostInput::Symmetric { len, .. } => *len,
        }
    }

    fn check(&self, rank: usize) -> Result<()> {
        if let HostInput::Symmetric { buf, offset, len } = self
            && offset.checked_add(*len).is_none_or(|end| end > buf.len())
        {
            return Err(Error::InvalidArgument(format!(
                "rank {rank}: input {offset}+{len} bytes is outside its {}-byte symmetric buffer",
                buf.len()
            )));
        }
        Ok(())
    }

    /// This rank's input bytes.
    fn local(&self, rank: usize) -> Result<Cow<'_, [u8]>> {
        Ok(match self {
            HostInput::Plain(d) => Cow::Borrowed(d),
            HostInput::Symmetric { buf, offset, len } => {
                let mut v = vec![0u8; *len];
                buf.read(rank, *offset, &mut v)?;
                Cow::Owned(v)
            }
        })
    }
}

/// Where every rank's input can be read: a symmetric buffer and an offset.
struct SymIn<'a> {
    buf: &'a HostBuffer,
    offset: usize,
}

fn elems(rank: usize, what: &str, bytes: usize, dtype: DType) -> Result<usize> {
    if !bytes.is_multiple_of(dtype.size()) {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: {what} has {bytes} bytes, not a whole number of {dtype} elements"
        )));
    }
    Ok(bytes / dtype.size())
}

fn refuse_staging(rank: usize, algorithm: &str, what: &str) -> Error {
    Error::InvalidArgument(format!(
        "rank {rank}: {algorithm} needs a symmetric {what}, the {what} is ordinary memory, and staging is disabled \
         (allow_staging = false)"
    ))
}

/// A host group's collectives: its synchronisation and per channel a workspace (grown
/// collectively on demand).
pub(crate) struct HostColl {
    pub(crate) sync: HostSync,
    /// Decides every call (NOTE [one planner]).
    pub(crate) planner: std::sync::Arc<Planner>,
    workspaces: Vec<Mutex<Option<HostBuffer>>>,
    ll: Vec<Mutex<ll::LlState>>,
    /// Bytes moved to and from peers (NOTE [bf16 wire]).
    counters: Counters,
}

impl HostColl {
    pub(crate) fn new(sync: HostSync, planner: std::sync::Arc<Planner>) -> Self {
        let workspaces = (0..lowcon_abi::pad::CHANNELS).map(|_| Mutex::new(None)).collect();
        let ll = (0..lowcon_abi::pad::CHANNELS).map(|_| Mutex::default()).collect();
        Self { sync, planner, workspaces, ll, counters: Counters::default() }
    }

    /// The counters (NOTE [bf16 wire]).
    pub(crate) fn stats(&self) -> super::CollStats {
        self.counters.read((0, 0)).with_host_time(&self.sync.core)
    }

    /// Runs `f` with the channel's workspace grown to at least `need` bytes (collective
    /// when it grows: every rank asks for the same).
    fn with_workspace<R>(
        &self,
        channel: u32,
        need: usize,
        f: impl FnOnce(Option<&HostBuffer>) -> Result<R>,
    ) -> Result<R> {
        let mut ws = self.workspaces[channel as usize].lock().unwrap_or_else(|p| p.into_inner());
        let have = ws.as_ref().map_or(0, |b| b.len());
        if need > have {
            // The old one stays until the new one exists: a refused allocation leaves
            // this rank's workspace as the peers' are.
            let grown = alloc(&self.sync.core, grow_to(have, need), &format!("channel {channel}'s workspace"))?;
            *ws = Some(grown);
        }
        f(ws.as_ref())
    }

    /// Stages `input` into the workspace (at 0) if it is ordinary memory.
    fn symmetric_input<'a>(&self, input: &HostInput<'a>, ws: Option<&'a HostBuffer>) -> Result<SymIn<'a>> {
        Ok(match *input {
            HostInput::Symmetric { buf, offset, .. } => SymIn { buf, offset },
            HostInput::Plain(d) => {
                let ws = ws.expect("workspace sized for staging");
                ws.write(self.sync.core.rank, 0, d)?;
                SymIn { buf: ws, offset: 0 }
            }
        })
    }

    /// All-gather: `output[p * n .. (p + 1) * n]` receives rank `p`'s `input` (`n` bytes,
    /// a whole number of `dtype` elements) on every rank. Synchronous.
    pub(crate) fn all_gather(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        (dtype, output_dtype): (DType, DType),
        opts: &AllGatherOptions,
    ) -> Result<()> {
        // NOTE [host time]: the whole call, timed.
        let _call = self.sync.core.clock.call();
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        self.sync.core.check_usable()?;
        // NOTE [checked calls]: before any check of this rank's own, and anything moved.
        let (i, o) = ((input.len(), dtype), (output.len(), output_dtype));
        self.sync.core.check_call(opts.channel, || call_text("all-gather", None, i, o, "bytes of", opts))?;
        opts.check(rank)?;
        no_traffic(rank, opts.traffic)?;
        input.check(rank)?;
        let n_in = elems(rank, "all-gather input", input.len(), dtype)?;
        let n_out = elems(rank, "all-gather output", output.len(), output_dtype)?;
        no_wire(rank, (opts.wire, opts.reduce_launch), dtype)?;
        let shard = check_all_gather(rank, world, (n_in, dtype), (n_out, output_dtype))?;
        if shard == 0 {
            return Ok(());
        }
        let call = AgCall { shard, dtype, output_symmetric: false, captured: false };
        let plan = self.planner.all_gather(&call, opts);
        crate::log::plan(rank, "all-gather", opts.context.name(), shard, &plan);
        let algorithm = plan.algorithm;
        if algorithm == AgAlgo::Ll {
            self.ll_all_gather(input, output, opts.channel, shard)?;
            self.counters.add(Moved::AllGather(2 * (world - 1) * shard));
            return Ok(());
        }
        // In place: the input is this rank's slot of the output, in a symmetric buffer.
        // Peers' shards are then at their own slots of that buffer (not at this input's
        // offset): the pull algorithms read them there (as on GPUs).
        let in_place_base = match input {
            HostInput::Symmetric { buf, offset, .. }
                if offset >= rank * shard
                    && std::ptr::eq(output.as_ptr(), buf.local_ptr().wrapping_add(offset - rank * shard)) =>
            {
                Some(offset - rank * shard)
            }
            _ => None,
        };
        let plain = matches!(input, HostInput::Plain(_));
        let stage_in = plain && algorithm != AgAlgo::CePush;
        if stage_in && !opts.allow_staging {
            return Err(refuse_staging(rank, algorithm.name(), "input"));
        }
        let need = match algorithm {
            AgAlgo::CePush => world * shard,
            _ if stage_in => shard,
            _ => 0,
        };
        let ch = opts.channel;
        self.with_workspace(ch, need, |ws| {
            match algorithm {
                AgAlgo::CePull | AgAlgo::SmOneshot => {
                    let (src, slot) = match (in_place_base, input) {
                        (Some(base), HostInput::Symmetric { buf, .. }) => (SymIn { buf, offset: base }, shard),
                        _ => (self.symmetric_input(&input, ws)?, 0),
                    };
                    // NOTE [arrival-driven all-gather] (coll::gpu): with a per-peer
                    // arrival, each peer's read waits for that peer alone (the host's
                    // waits are in order either way).
                    let epoch = match plan.arrival {
                        ArrivalForm::InOrder | ArrivalForm::AnyOrder => Some(self.sync.arrive(ch)?),
                        _ => {
                            self.sync.barrier(ch)?;
                            None
                        }
                    };
                    for p in rotated(rank, world) {
                        let out = &mut output[p * shard..(p + 1) * shard];
                        if p == rank && in_place_base.is_some() {
                            continue; // already in its slot
                        } else if p == rank && algorithm == AgAlgo::CePull {
                            out.copy_from_slice(&input.local(rank)?);
                        } else {
                            if let Some(e) = epoch {
                                self.sync.await_peer(p, ch, e)?;
                            }
                            src.buf.read(p, src.offset + p * slot, out)?;
                        }
                    }
                    self.sync.barrier(ch)
                }
                AgAlgo::Ll => unreachable!("handled by ll_all_gather"),
                AgAlgo::CePush => {
                    let ws = ws.expect("workspace sized for push");
                    // In place, this rank's shard is already in `output`: read it there, not
                    // through the symmetric buffer that `output` also covers.
                    let mine = match in_place_base {
                        Some(_) => std::borrow::Cow::Owned(output[rank * shard..(rank + 1) * shard].to_vec()),
                        None => input.local(rank)?,
                    };
                    // Peers are done reading what we pushed last time once they pass this.
                    self.sync.barrier(ch)?;
                    for p in rotated(rank, world).filter(|&p| p != rank) {
                        ws.write(p, rank * shard, &mine)?;
                    }
                    output[rank * shard..(rank + 1) * shard].copy_from_slice(&mine);
                    self.sync.barrier(ch)?;
                    for p in (0..world).filter(|&p| p != rank) {
                        ws.read(rank, p * shard, &mut output[p * shard..(p + 1) * shard])?;
                    }
                    Ok(())
                }
            }
        })?;
        self.counters.add(Moved::AllGather((world - 1) * shard));
        Ok(())
    }

    /// Reduce-scatter: `output` (`n` elements of `dtypes.1`) receives `op` over all ranks
    /// of their input chunk `rank` (`input[rank * n .. (rank + 1) * n]`, of `dtypes.0`).
    /// f32, f16 and bf16, accumulated in f32 in rank order; a bf16 input may reduce into
    /// an f32 output, and f32 may cross over a bf16 wire (NOTE [bf16 wire]).
    /// Synchronous.
    pub(crate) fn reduce_scatter(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        (dtype, out_dtype): (DType, DType),
        op: ReduceOp,
        opts: &ReduceScatterOptions,
    ) -> Result<()> {
        // NOTE [host time]: the whole call, timed.
        let _call = self.sync.core.clock.call();
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        self.sync.core.check_usable()?;
        // NOTE [checked calls]: before any check of this rank's own, and anything moved.
        let (i, o) = ((input.len(), dtype), (output.len(), out_dtype));
        self.sync.core.check_call(opts.channel, || call_text("reduce-scatter", Some(op), i, o, "bytes of", opts))?;
        opts.check(rank)?;
        no_traffic(rank, opts.traffic)?;
        input.check(rank)?;
        let n_in = elems(rank, "reduce-scatter input", input.len(), dtype)?;
        let n_out = elems(rank, "reduce-scatter output", output.len(), out_dtype)?;
        let input_symmetric = matches!(input, HostInput::Symmetric { .. });
        let call = RsCall {
            chunk: n_out.saturating_mul(dtype.size()),
            input: dtype,
            output: out_dtype,
            op,
            input_symmetric,
            captured: false,
        };
        // NOTE [one planner]: the plan refuses what no algorithm can run as asked (the same
        // calls as on GPUs, though nothing launches here); the arguments are checked here.
        let planned = self.planner.reduce_scatter(&call, opts)?;
        crate::log::plan(rank, "reduce-scatter", opts.context.name(), call.chunk, &planned);
        let chunk = check_reduce_scatter(rank, world, (n_in, dtype), (n_out, out_dtype))?;
        if chunk == 0 {
            return Ok(());
        }
        let algorithm = planned.algorithm;
        match algorithm {
            RsAlgo::TmaPushReduce => {
                self.push_reduce(input, output, dtype, opts, chunk)?;
                self.counters.add(Moved::ReduceScatter((world - 1) * chunk));
                return Ok(());
            }
            RsAlgo::Ll => {
                self.ll_reduce_scatter(input, output, dtype, op, opts.channel, chunk)?;
                self.counters.add(Moved::ReduceScatter(2 * (world - 1) * chunk));
                return Ok(());
            }
            // The split wire, or a bf16 input on sm-direct (`RsPlan::packs`). At one rank
            // the plan carries the f32 call itself (`Carry::Same`).
            _ if planned.packs() => {
                return self.wire_reduce_scatter(
                    input,
                    output,
                    (planned.carry, op),
                    (opts.channel, planned.pieces),
                    n_out,
                );
            }
            _ => {}
        }
        let plain = matches!(input, HostInput::Plain(_));
        if plain && !opts.allow_staging {
            return Err(refuse_staging(rank, algorithm.name(), "input"));
        }
        let es = dtype.size();
        let piece = match algorithm {
            RsAlgo::SmDirect => (64 << 10) / es,
            RsAlgo::TmaReduce | RsAlgo::TmaReduceEvict => planned.tma.0 as usize / es,
            // Pieces change nothing in the result: the host reads and reduces 64 KiB at a
            // time (in cache), whatever the GPU's pipeline would be.
            _ => piece_elems(n_out, planned.pieces).min((64 << 10) / es),
        };
        let ch = opts.channel;
        self.with_workspace(ch, if plain { world * chunk } else { 0 }, |ws| {
            let src = self.symmetric_input(&input, ws)?;
            let off = src.offset + rank * chunk;
            // The ranges read and reduced one after another: pieces, or for tma-reduce
            // the head, the ring's tiles of the 16-byte-aligned body and the tail.
            let mut ranges = Vec::new();
            let (head, body) = match algorithm {
                RsAlgo::TmaReduce | RsAlgo::TmaReduceEvict => {
                    let (head, body) = tma_split(off, n_out, es);
                    (head, body / es)
                }
                _ => (0, n_out),
            };
            ranges.extend((head > 0).then_some((0, head)));
            ranges.extend((0..body.div_ceil(piece)).map(|i| (head + i * piece, piece.min(body - i * piece))));
            ranges.extend((head + body < n_out).then_some((head + body, n_out - head - body)));
            self.sync.barrier(ch)?;
            // The sources are read where they are (between the barriers nobody writes
            // them), except this rank's own chunk when the output overlaps it (in place):
            // that one is copied piece by piece first.
            let own_at = src.buf.peer_ptr(rank) as usize + off;
            let out_at = output.as_ptr() as usize;
            let in_place = own_at < out_at + output.len() && out_at < own_at + n_out * es;
            let mut own = vec![0u8; if in_place { piece.max(head).max(n_out - head - body) * es } else { 0 }];
            let os = out_dtype.size();
            for (start, len) in ranges {
                let bytes = len * es;
                if in_place {
                    src.buf.read(rank, off + start * es, &mut own[..bytes])?;
                }
                let srcs = (0..world)
                    .map(|p| match p == rank && in_place {
                        true => Ok(&own[..bytes]),
                        // SAFETY: between this call's barriers no rank writes another rank's
                        // input chunks, and this rank's output does not overlap its own
                        // chunk (else it was copied above).
                        false => unsafe { src.buf.peer_slice(p, off + start * es, bytes) },
                    })
                    .collect::<Result<Vec<&[u8]>>>()?;
                let out = &mut output[start * os..(start + len) * os];
                reduce_into_as(dtype, out_dtype, op, world, &srcs, out);
            }
            self.sync.barrier(ch)
        })?;
        self.counters.add(Moved::ReduceScatter((world - 1) * chunk));
        Ok(())
    }

    /// tma-push-reduce's schedule (NOTE [tma-push-reduce] in `gpu-kernels/kernels/src/push.rs`):
    /// the owner writes its own chunk into its workspace, barrier, every rank pushes its
    /// chunk `p` into rank `p`'s workspace, barrier, the owner reduces. The GPU adds each
    /// push into one accumulator on arrival; here each source has its own slot and the
    /// owner adds them after the exit barrier, in rank order in f32, so the host backend
    /// stays exact (CPU processes have no atomic bf16 add). Neither buffer needs to be
    /// symmetric, as on GPUs.
    fn push_reduce(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        dtype: DType,
        opts: &ReduceScatterOptions,
        chunk: usize,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let ch = opts.channel;
        self.with_workspace(ch, world * chunk, |ws| {
            let ws = ws.expect("workspace sized for push-reduce");
            let local = input.local(rank)?;
            // The owner's contribution first, before the entry barrier.
            ws.write(rank, rank * chunk, &local[rank * chunk..(rank + 1) * chunk])?;
            self.sync.barrier(ch)?;
            for p in rotated(rank, world).filter(|&p| p != rank) {
                ws.write(p, rank * chunk, &local[p * chunk..(p + 1) * chunk])?;
            }
            self.sync.barrier(ch)?;
            // SAFETY: (each) this rank's own workspace slots, which the peers wrote before
            // the barrier above and write again only after this rank passes the next
            // call's first barrier; the output is the caller's memory, not the workspace.
            let srcs =
                (0..world).map(|p| unsafe { ws.peer_slice(rank, p * chunk, chunk) }).collect::<Result<Vec<&[u8]>>>()?;
            reduce_into(dtype, ReduceOp::Sum, world, &srcs, output);
            Ok(())
        })
    }
}

/// The traffic instrument (`CollOptions::traffic`, NOTE [honest floor]) measures copies
/// between GPUs: the host backend has none.
fn no_traffic(rank: usize, traffic: bool) -> Result<()> {
    match traffic {
        true => Err(Error::InvalidArgument(format!(
            "rank {rank}: traffic calls (a benchmark instrument) measure the copies between GPUs: the host backend \
             has none"
        ))),
        false => Ok(()),
    }
}
