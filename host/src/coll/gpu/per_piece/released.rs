//! The released reduce-scatter: each rank's producer (a matmul, in `lowcon.tp`) fills
//! its input one destination chunk at a time and releases each chunk to its owner as
//! soon as it is written, so the copies and the producer's next chunk overlap.
//!
//! NOTE [release rounds]: a release is a point-to-point signal (rank `r` tells rank `d`
//! "my chunk for you is ready"), and NOTE [graph flags] says a captured point-to-point
//! signal has no way to learn that the peer reset the last one. So releases never reset:
//! each is a *round*, counted on the device. Rank `r` keeps, in its own pad, the rounds
//! it sent to each peer and the rounds it saw from each (`pad::release_round_offset`);
//! the release kernel adds one to its sent count for `d` and stores the new count into
//! `d`'s release word from `r` (`pad::release_offset`, `st.release.sys` after a
//! system-scope fence); `d`'s wait kernel adds one to its seen count for `r` and waits
//! (acquire) until the word reaches it. No count is ever chosen by the host, so a
//! captured call signals and waits for a fresh round at every replay, and eager and
//! replayed calls on a channel share one sequence, as LL's rounds do (NOTE [LL rounds on
//! the device]). Why a round is never confused with another:
//! - every rank makes the same released calls in the same order, so `d`'s n-th wait for
//!   `r` pairs with `r`'s n-th release to `d`;
//! - the word only grows (wrapping compare, as epochs), and `r`'s release n + 1 comes
//!   only after the exit barrier of call n, which `d` passes after its wait n.
//!
//! The steps of one call on rank `r` (chunk `d` = input elements `d * n .. (d + 1) * n`,
//! which the input must hold in symmetric memory, since `d` reads it in place):
//! 1. the channel's copy stream forks from the caller's (after everything before);
//! 2. step `i` (0 to world - 1): on the caller's stream, the producer's work for chunk
//!    `r + i + 1` and its release (the last step is `r`'s own chunk: no release); on the
//!    copy stream, the wait for the release of rank `r - i - 1`, which writes chunk `r`
//!    at its own step `i`, then the copy-engine copy of it into staging slot `r - i - 1`;
//! 3. the caller's stream joins the copy stream and reduces (its own chunk and the
//!    staged ones, in rank order, f32 accumulation) into the output;
//! 4. the exit barrier: no rank writes its input again until every peer has copied it.
//!
//! NOTE [release order]: the host enqueues the steps interleaved: step `i`'s matmul and
//! release on the caller's stream, then step `i`'s wait and copy on the copy stream,
//! then step `i + 1`. Two streams may share one hardware queue (`CUDA_DEVICE_MAX_
//! CONNECTIONS`, MPS), which then runs their work in the order it was enqueued. Had
//! every wait been enqueued first, a wait spinning at the head of a shared queue would
//! hold back this rank's own releases, which its peers' waits need, and theirs this
//! rank's: each rank waited out its timeout (seen on 1x H200 with ranks sharing the
//! GPU under MPS, 2026-11-26). Interleaved, the wait of step `i` needs only the peers'
//! releases of step `i`, each enqueued before that peer's own wait of step `i`, so no
//! queue order can make a cycle; a shared queue only serialises the steps.
//!
//! At step `i` every rank computes the chunk of rank `r + i + 1`, so each rank receives
//! one chunk per step and its own comes last: only the final reduction is left when the
//! last matmul ends. The waits are one-thread kernels (kernel sync, whatever `sync`
//! says: a memop wait compares with a value the host chose); they drain on the group's
//! abort like every kernel wait. A producer that fails part-way aborts the group: its
//! peers' copy streams wait for releases that will not come.

use crate::coll::check::{align256, check_reduce_scatter, staged_slot};
use crate::coll::counters::Moved;
use crate::coll::gpu::{GpuColl, Sym, ce_copy};
use crate::coll::{DeviceBuf, ReduceOp, ReduceScatterOptions, RsAlgo};
use crate::cuda::Stream;
use crate::cuda::kernels::COLL_THREADS;
use crate::error::{Error, Result};

impl GpuColl {
    /// Released reduce-scatter (NOTE [release rounds]): calls `produce(d)` for every
    /// destination `d` in release order (`rank + 1, ..., rank`), which enqueues on
    /// `stream` the work that writes chunk `d` of `input`; releases each chunk to its
    /// owner after it; `output` receives `op` over every rank's chunk `rank`.
    pub(crate) fn reduce_scatter_released(
        &self,
        input: DeviceBuf<'_>,
        output: DeviceBuf<'_>,
        op: ReduceOp,
        stream: &Stream,
        opts: &ReduceScatterOptions,
        produce: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        // NOTE [checked calls]: before any check of this rank's own, and anything enqueued.
        self.sync.core.check_call(opts.channel, || {
            let (i, o) = ((input.count, input.dtype), (output.count, output.dtype));
            crate::coll::check::call_text("released reduce-scatter", Some(op), i, o, "elements", opts)
        })?;
        let mode = self.sync.begin(stream)?;
        opts.check(rank)?;
        self.check_buf("input", &input)?;
        self.check_buf("output", &output)?;
        let refuse = |why: String| Err(Error::InvalidArgument(format!("rank {rank}: released reduce-scatter: {why}")));
        if input.dtype.is_int() || input.dtype != output.dtype {
            return refuse(format!(
                "input {} and output {}: the input and the output must be one float type (f32, f16, bf16)",
                input.dtype, output.dtype
            ));
        }
        if opts.wire.is_some_and(|w| w != input.dtype) {
            return refuse("it sends the input's own type (no wire)".into());
        }
        if opts.traffic {
            return refuse("traffic calls (the honest floor) do not apply to a released reduce-scatter".into());
        }
        if opts.pipeline.is_some() || opts.reduce_launch.named().is_some() {
            return refuse("pipeline and reduce_launch do not apply (one piece per chunk, one reduction)".into());
        }
        if opts.algorithm.named().is_some_and(|a| a != RsAlgo::CeReduce) {
            return refuse(format!(
                "algorithm {}: it runs ce-reduce's copies (auto or ce-reduce)",
                opts.algorithm.name()
            ));
        }
        let chunk = check_reduce_scatter(rank, world, (input.count, input.dtype), (output.count, output.dtype))?;
        let call = crate::plan::RsCall {
            chunk,
            input: input.dtype,
            output: output.dtype,
            op,
            input_symmetric: input.is_symmetric(),
            captured: mode == crate::sync::gpu::graph::Mode::Captured,
        };
        let plan = self.planner.released(&call, opts)?;
        crate::log::plan(rank, "released reduce-scatter", opts.context.name(), chunk, &plan);
        let Some((buf, off)) = input.symm else {
            return refuse(format!(
                "the input ({} bytes) must be symmetric memory (the group's pool), which peers read in place as \
                 each chunk is released",
                input.bytes()
            ));
        };
        let src = Sym { buf, off };
        let (n, esize) = (output.count, input.dtype.size());
        let stride = align256(chunk);
        let ch = opts.channel;
        let mut st = self.channel(ch);
        self.prepare(&mut st, ch, mode, (world - 1) * stride, 2)?;
        let stage = st.workspace.as_ref().map_or(0, |w| w.local_ptr());
        let copy = st.copy.as_ref().expect("prepared");
        let (fork, join) = (&st.events[0], &st.events[1]);
        let kernels = self.sync.device.kernels()?;
        let pads = self.sync.pad_args();
        let (ctas, hint) = (plan.ctas, plan.copy_hint);
        stream.record(fork)?;
        copy.wait(fork)?;
        // From here on a failure leaves peers waiting for this rank's releases (and this
        // rank's rounds behind theirs): the group cannot go on.
        let mut steps = || -> Result<()> {
            released_steps(rank, world, produce, |d, s| {
                // SAFETY: `d`, `s < world`; the pads and the error record are the group's;
                // the copy reads `s`'s chunk `rank` of the symmetric input (checked sizes)
                // into staging slot `s`, inside the workspace sized above.
                unsafe {
                    kernels.release(stream, pads, d as u32, ch)?;
                    kernels.release_wait(copy, pads, s as u32, ch)?;
                    let slot = stage + (staged_slot(s, rank) * stride) as u64;
                    ce_copy(copy, slot, src.peer(s) + (rank * chunk) as u64, chunk, hint)
                }
            })?;
            copy.record(join)?;
            stream.wait(join)
        };
        if let Err(e) = steps() {
            self.sync.core.abort();
            return Err(e);
        }
        let own = input.ptr + (rank * chunk) as u64;
        let vec_ok = own.is_multiple_of(16) && output.ptr.is_multiple_of(16) && stride.is_multiple_of(16);
        let dt = input.dtype.kernel_index()?;
        let (w32, r32) = (world as u32, rank as u32);
        // SAFETY: the own chunk, the staged slots (`stride / esize` elements apart) and the
        // output are the sizes checked above; the copies are complete (joined).
        unsafe {
            let pe = (stride / esize) as u64;
            kernels.reduce(
                stream,
                dt,
                (ctas, COLL_THREADS),
                own,
                r32,
                stage,
                pe,
                w32,
                output.ptr,
                n as u64,
                op.code(),
                vec_ok,
            )?;
        }
        self.exit(stream, ch, plan.sync, mode)?;
        self.count(Moved::ReduceScatter((world - 1) * chunk));
        self.finish(stream, mode, None)?;
        drop(st);
        Ok(())
    }
}

/// The steps of NOTE [release order], in host order: `produce(d)` for the chunk of rank +
/// i + 1, then (unless it is this rank's own) `step(d, s)`: the release to `d`, and the
/// wait for and the copy of the chunk that `s` = rank - i - 1 releases at its step `i`.
/// `produce` runs with the thread marked, so that a call of a group from inside it is
/// refused (`sync::gpu::reentry`) instead of waiting for the channel this call holds.
fn released_steps(
    rank: usize,
    world: usize,
    produce: &mut dyn FnMut(usize) -> Result<()>,
    mut step: impl FnMut(usize, usize) -> Result<()>,
) -> Result<()> {
    for i in 0..world {
        let d = (rank + i + 1) % world;
        crate::sync::gpu::reentry::producing(|| produce(d))?;
        if d == rank {
            break;
        }
        step(d, (rank + world - i - 1) % world)?;
    }
    Ok(())
}
