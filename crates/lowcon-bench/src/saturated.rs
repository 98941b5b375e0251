//! `lowcon bench overlap` (the default, saturated mode): what a collective that runs
//! back-to-back for a whole GEMM window costs the GEMM, and what the GEMM costs it.
//!
//! Per configuration (collective × shard × collective-stream priority × enqueue style
//! × implementation): the GEMM window is `gemms` bf16 GEMMs of about `gemm_ms`; the
//! collective window is `calls` collectives, enough to cover it at the collective's
//! own rate plus 25% ([`stats::saturating_calls`], [`stats::CALLS_MARGIN`]). Each trial
//! is three phases, every one started together on all ranks by a store barrier: the
//! GEMMs alone, the collectives alone, and both. Reported, over `trials` pairs:
//! - the GEMM slowdown: each trial's overlapped GEMM time over the alone time of the
//!   same trial (max over ranks), median and spread of these pairwise ratios;
//! - busbw of the collectives that finished inside the GEMM window (min over ranks),
//!   and those calls per GEMM of the window: synchronised calls finish on GEMM-kernel
//!   boundaries, so this says how many GEMM periods a call takes; whether the last
//!   call ended after the window (else the window was not covered: `cover`); the
//!   bandwidth kept (in-window busbw over alone) is in the JSON and last in the table;
//! - SM time per GB: CTAs × call time alone per GB a rank sends;
//! - from NVML (when it loads): SM clock, clock-event reasons and power from the
//!   energy counter, during each phase; power is a phase's energy over its time, both
//!   summed over every trial (`nvml`, NOTE [energy, not power]).
//!
//! NOTE [enqueue as a trainer does]: `interleaved` enqueues GEMM i, then the collectives
//! whose share of the window falls in it ([`stats::interleave`]); `threads` enqueues
//! the GEMMs from a second host thread while this one enqueues the collectives. Never
//! all collectives first: a library whose enqueue waits would then delay every GEMM's
//! launch and look far worse than it is (`--mode burst` keeps that test).
//!
//! NOTE [window prelude]: a GEMM window's length depends on what the GPU did just before it
//! (run 3 of 2026-11-22: the alone GEMM time fell as the collective-only tail that
//! ended the previous overlapped phase grew, r = -0.76). So both the alone and the
//! overlapped GEMM windows start behind `prelude` untimed GEMMs (about `--prelude-ms`),
//! and in the overlapped phase the collective stream waits for the prelude's end: both
//! phases start from a busy GPU, and the collectives start with the window's GEMMs.
//! NVML sampling and the energy reading start once the prelude is done.
//!
//! NOTE [the null collective]: `null` moves the same bytes as the collective, (world
//! − 1) shards per rank, as peer `cuMemcpyAsync` copies on the collective stream, with no
//! synchronisation at all. What it costs the GEMM is the floor that any data movement
//! costs (power, memory and L2 traffic); what an implementation costs above it is its
//! own. The copies to different peers run one after another on one stream, so above 2
//! ranks `null` uses fewer copy engines at once than `ce-push` does. `null+local`
//! (`--null-local`) adds a same-device copy of the shard per call: whether a plain local
//! copy is what slows down next to a persistent GEMM (its bytes are not in its busbw).

use std::time::{Duration, Instant};

use lowcon::cuda::{Event, Stream, StreamPriority};
use lowcon::{GpuGroup, GpuGroupOptions, SyncMethod};

use crate::contenders::{Impl, NcclComm, caller, ctas_of};
use crate::nvml::{Nvml, Samples, delta_mj};
use crate::overlap::{Gemm8, calibrate, ms};
use crate::report::{self, SaturatedRow};
use crate::stats;
use crate::sweep::Kind;
use crate::{Res, nccl};

mod row;
use row::row;

/// How the host enqueues the two streams' work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueue {
    /// One thread: a GEMM, then the collectives that cover it.
    Interleaved,
    /// One host thread per stream.
    Threads,
}

impl Enqueue {
    pub fn name(self) -> &'static str {
        match self {
            Enqueue::Interleaved => "interleaved",
            Enqueue::Threads => "threads",
        }
    }
}

/// What the saturated benchmark measures (the flags of `lowcon bench overlap`).
#[derive(Clone, Debug)]
pub struct SaturatedOptions {
    pub kinds: Vec<Kind>,
    /// GEMM size M = N = K.
    pub m: usize,
    /// GEMM window to aim for (ms).
    pub gemm_ms: f64,
    /// Shards (bytes per rank).
    pub shards: Vec<usize>,
    /// Priorities of the collective stream (`High`, `Default`).
    pub priorities: Vec<StreamPriority>,
    pub enqueue: Vec<Enqueue>,
    /// Alone/overlapped trial pairs.
    pub trials: usize,
    /// lowcon algorithms by name (each used for the collective it belongs to).
    pub algorithms: Vec<String>,
    pub methods: Vec<SyncMethod>,
    /// CTA count of lowcon's SM parts (`None`: the library's default).
    pub ctas: Option<u32>,
    pub nccl: bool,
    /// Run the null collective.
    pub null: bool,
    /// Run null+local (the null's copies plus a same-device copy of the shard).
    pub null_local: bool,
    /// Untimed GEMMs before each GEMM window, in ms (NOTE [window prelude]; 0 for none).
    pub prelude_ms: f64,
    /// Reduce-scatter over the bf16 wire (NOTE [bf16 wire]): lowcon's calls reduce f32
    /// (`shard` bytes of f32 per rank, bf16-exact values) over it, NCCL reduces the same
    /// element count in f32 and in bf16. busbw counts the f32 bytes; the wire (and NCCL's
    /// bf16) carries half.
    pub wire: Option<lowcon::DType>,
    /// A bf16 input reduced into f32 (FSDP2's bf16 copy-in, NOTE [bf16 copy-in] in
    /// `lowcon/fsdp.py`): lowcon's calls reduce `shard / 4` bf16 elements per rank into f32,
    /// NCCL reduces the same element count in f32 and in bf16. bw counts the f32 bytes
    /// (the shard), as with `wire`.
    pub bf16_in: bool,
    /// lowcon's `map_ordinary` for its reduce-scatters (`--map-ordinary`; the plan's when
    /// `None`): with `bf16_in`, `Some(true)` has sm-direct read the bf16 input where it is
    /// instead of packing it (NOTE [bf16 input read in place]).
    pub map: Option<bool>,
}

/// Above this many calls per window the run prints a note on the driver's queue depth
/// (`docs/benchmarks.md`, queue depth: up to 4 entries per lowcon call, plus our event).
const QUEUE_NOTE_CALLS: usize = 400;

/// A phase's energy-counter change (mJ) and the time between the readings (ms), or
/// `NaN`s without NVML.
#[derive(Clone, Copy)]
struct Energy {
    mj: f64,
    ms: f64,
}

const NO_ENERGY: Energy = Energy { mj: f64::NAN, ms: f64::NAN };

/// Polls NVML while waiting for `events`, from when `start` (the prelude's end) is
/// complete; returns the samples and the energy used.
fn wait_sampling(start: Option<&Event>, events: &[&Event], nvml: Option<&Nvml>) -> Res<(Samples, Energy)> {
    if let (Some(st), Some(_)) = (start, nvml) {
        while !st.is_complete()? {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let Some(n) = nvml else {
        for e in events {
            e.synchronize()?;
        }
        return Ok((Samples::default(), NO_ENERGY));
    };
    let t0 = Instant::now();
    let e0 = n.energy_mj().ok();
    let mut s = Samples::default();
    loop {
        if let Ok(x) = n.sample() {
            s.add(x);
        }
        let mut done = true;
        for e in events {
            done &= e.is_complete()?;
        }
        if done {
            break;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let e1 = n.energy_mj().ok();
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let energy = match (e0, e1) {
        (Some(a), Some(b)) => Energy { mj: delta_mj(a, b), ms },
        _ => NO_ENERGY,
    };
    Ok((s, energy))
}

/// What [`measure`] returns: calls per window, one call's time alone (ms, max over
/// ranks), and every rank's per-trial values, `[field][rank][trial]`.
type Measured = (usize, f64, Vec<Vec<Vec<f64>>>);

/// Per-trial values one rank measured, in the order they are exchanged.
const FIELDS: usize = 16;
#[derive(Default)]
struct Trials {
    gemm_alone: Vec<f64>,
    gemm_over: Vec<f64>,
    bw_alone: Vec<f64>,
    bw_window: Vec<f64>,
    mhz_alone: Vec<f64>,
    mhz_over: Vec<f64>,
    mhz_min_over: Vec<f64>,
    /// Energy (mJ) and time (ms) of each phase: GEMM alone, collectives alone, both.
    mj_alone: Vec<f64>,
    ms_alone: Vec<f64>,
    mj_comm: Vec<f64>,
    ms_comm: Vec<f64>,
    mj_over: Vec<f64>,
    ms_over: Vec<f64>,
    reasons: Vec<f64>,
    /// Calls that finished inside the GEMM window; 1 when the last one ended after it.
    in_window: Vec<f64>,
    covered: Vec<f64>,
}

impl Trials {
    fn fields(&self) -> [&Vec<f64>; FIELDS] {
        [
            &self.gemm_alone,
            &self.gemm_over,
            &self.bw_alone,
            &self.bw_window,
            &self.mhz_alone,
            &self.mhz_over,
            &self.mhz_min_over,
            &self.mj_alone,
            &self.ms_alone,
            &self.mj_comm,
            &self.ms_comm,
            &self.mj_over,
            &self.ms_over,
            &self.reasons,
            &self.in_window,
            &self.covered,
        ]
    }
}

/// Everything one configuration needs besides its collective.
struct Setup<'a> {
    g: &'a GpuGroup,
    compute: &'a Stream,
    gemm: &'a mut Gemm8,
    gemms: usize,
    /// Untimed GEMMs before each window (NOTE [window prelude]).
    prelude: usize,
    window_ms: f64,
    nvml: Option<&'a Nvml>,
    trials: usize,
}

/// Measures one configuration; `coll` enqueues one collective call on the stream.
fn measure(
    s: &mut Setup,
    comm: &Stream,
    enqueue: Enqueue,
    key: &str,
    shard: usize,
    coll: &mut dyn FnMut(&Stream) -> Res<()>,
) -> Res<Measured> {
    let g = s.g;
    let world = g.world_size();
    // Warm-up (workspaces, kernels, NCCL's lazy connections), then one call's time alone.
    for _ in 0..2 {
        coll(comm)?;
    }
    comm.synchronize()?;
    g.store_barrier(&format!("{key}/cal"))?;
    let (c0, c1) = (comm.event(true)?, comm.event(true)?);
    comm.record(&c0)?;
    for _ in 0..5 {
        coll(comm)?;
    }
    comm.record(&c1)?;
    c1.synchronize()?;
    let call = ms(&c0, &c1)? / 5.0;
    let call = stats::gather_max(g, &format!("{key}/call"), &[call])?[0];
    let calls = stats::saturating_calls(s.window_ms, call, stats::CALLS_MARGIN);
    if calls > QUEUE_NOTE_CALLS && g.rank() == 0 {
        println!(
            "# note: {key}: {calls} calls per window; with a few queue entries per call (plus an event each) \
             CUDA's per-stream queue (about 2,040 entries) may fill, and enqueues then wait for the GPU"
        );
    }
    let plan = stats::interleave(s.gemms, calls);
    let done: Vec<Event> = (0..calls).map(|_| comm.event(true)).collect::<Result<_, _>>()?;
    let (e0, e1) = (s.compute.event(true)?, s.compute.event(true)?);
    let pre = s.compute.event(false)?;
    let bw = |k: usize, t: f64| if k == 0 { f64::NAN } else { stats::busbw_gbs(shard, world, t / k as f64) };
    let mut t = Trials::default();
    for trial in 0..s.trials {
        // GEMMs alone.
        g.store_barrier(&format!("{key}/{trial}/g"))?;
        s.gemm.run(s.prelude)?;
        s.compute.record(&pre)?;
        s.compute.record(&e0)?;
        s.gemm.run(s.gemms)?;
        s.compute.record(&e1)?;
        let (sa, wa) = wait_sampling(Some(&pre), &[&e1], s.nvml)?;
        t.gemm_alone.push(ms(&e0, &e1)?);
        t.mhz_alone.push(sa.mean_mhz());
        t.mj_alone.push(wa.mj);
        t.ms_alone.push(wa.ms);
        // Collectives alone.
        g.store_barrier(&format!("{key}/{trial}/c"))?;
        comm.record(&c0)?;
        for d in &done {
            coll(comm)?;
            comm.record(d)?;
        }
        let last = done.last().ok_or("no collective planned")?;
        let (_, wc) = wait_sampling(None, &[last], s.nvml)?;
        t.bw_alone.push(bw(calls, ms(&c0, last)?));
        t.mj_comm.push(wc.mj);
        t.ms_comm.push(wc.ms);
        // Both, enqueued as a trainer does.
        g.store_barrier(&format!("{key}/{trial}/o"))?;
        // The same prelude; the collectives wait for its end (enqueued here, before the
        // threads of `threads` start, so the wait follows the prelude's record).
        s.gemm.run(s.prelude)?;
        s.compute.record(&pre)?;
        comm.wait(&pre)?;
        match enqueue {
            Enqueue::Interleaved => {
                s.compute.record(&e0)?;
                comm.record(&c0)?;
                let mut j = 0;
                for &n in &plan {
                    s.gemm.run(1)?;
                    for d in &done[j..j + n] {
                        coll(comm)?;
                        comm.record(d)?;
                    }
                    j += n;
                }
                s.compute.record(&e1)?;
            }
            Enqueue::Threads => {
                let (compute, gemm, gemms) = (s.compute, &mut *s.gemm, s.gemms);
                let (e0r, e1r) = (&e0, &e1);
                let go = std::sync::Barrier::new(2);
                std::thread::scope(|sc| -> Res<()> {
                    let h = sc.spawn(|| -> Result<(), String> {
                        // Wait first: an early return must not leave the other thread at the barrier.
                        go.wait();
                        compute.device().bind_to_thread().map_err(|e| e.to_string())?;
                        compute.record(e0r).map_err(|e| e.to_string())?;
                        gemm.run(gemms).map_err(|e| e.to_string())?;
                        compute.record(e1r).map_err(|e| e.to_string())
                    });
                    go.wait();
                    let mine = (|| -> Res<()> {
                        comm.record(&c0)?;
                        for d in &done {
                            coll(comm)?;
                            comm.record(d)?;
                        }
                        Ok(())
                    })();
                    let theirs = h.join().map_err(|_| "the GEMM thread panicked")?;
                    mine?;
                    Ok(theirs?)
                })?;
            }
        }
        let (so, wo) = wait_sampling(Some(&pre), &[&e1, last], s.nvml)?;
        let gemm_ms = ms(&e0, &e1)?;
        t.gemm_over.push(gemm_ms);
        // Collectives that finished inside the GEMM window, and their rate.
        let done_ms: Vec<f64> = done.iter().map(|d| ms(&e0, d)).collect::<Res<_>>()?;
        let (k, covered) = stats::in_window(&done_ms, gemm_ms);
        t.in_window.push(k as f64);
        t.covered.push(if covered { 1.0 } else { 0.0 });
        t.bw_window.push(if k == 0 { f64::NAN } else { bw(k, ms(&c0, &done[k - 1])?) });
        t.mhz_over.push(so.mean_mhz());
        t.mhz_min_over.push(if so.n == 0 { f64::NAN } else { so.mhz_min as f64 });
        t.mj_over.push(wo.mj);
        t.ms_over.push(wo.ms);
        t.reasons.push(so.reasons as f64);
    }
    // Exchange: every rank gets every rank's per-trial values.
    let mine: Vec<f64> = t.fields().iter().flat_map(|v| v.iter().copied()).collect();
    let n = s.trials;
    if mine.len() != FIELDS * n {
        return Err(format!("{key}: this rank has {} values, expected {}", mine.len(), FIELDS * n).into());
    }
    let all = stats::gather(g, &format!("{key}/trials"), &mine)?;
    let mut per_field = vec![Vec::new(); FIELDS];
    for xs in &all {
        for (f, slot) in per_field.iter_mut().enumerate() {
            slot.push(xs[f * n..(f + 1) * n].to_vec());
        }
    }
    Ok((calls, call, per_field))
}

/// Runs the saturated benchmark as one rank; prints the table (rank 0), returns the rows.
pub fn run(a: &SaturatedOptions) -> Res<Vec<SaturatedRow>> {
    let g = GpuGroup::from_env(GpuGroupOptions::default())?;
    let (rank, world) = (g.rank(), g.world_size());
    let compute = g.device().stream(StreamPriority::Default)?;
    let mut gemm = Gemm8::new(&compute, a.m)?;
    let (gemms, one) = calibrate(&g, &compute, &mut gemm, a.gemm_ms)?;
    let info = g.device().info()?;
    let nvml = match Nvml::open(&info.pci_bus_id) {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("rank {rank}: NVML not used: {why}");
            if rank == 0 {
                println!("# note: NVML could not be used ({why}): no clock, throttle or energy columns");
            }
            None
        }
    };
    // How often the energy counter moves, for the note on the power columns.
    let energy_update_ms = nvml.as_ref().and_then(|n| n.update_ms(Duration::from_millis(400)));
    let max_shard = a.shards.iter().copied().max().ok_or("no shard size given")?;
    let (buf_a, buf_b) = (g.alloc(world * max_shard)?, g.alloc(world * max_shard)?);
    // SAFETY: fills two live buffers on `compute`, synchronised next.
    unsafe {
        compute.fill(buf_a.local_ptr(), 0x3c, world * max_shard)?;
        compute.fill(buf_b.local_ptr(), 0x3c, world * max_shard)?;
        if a.wire.is_some() {
            // bf16-exact f32s (0x3c3c0000), as FSDP2's upcast gradients: nothing falls back.
            compute.fill_u32(buf_a.local_ptr(), 0x3c3c_0000, world * max_shard / 4)?;
        }
    }
    compute.synchronize()?;
    // NCCL: a default communicator and, on 2.28+, a copy-engine one of its own (zero-CTA
    // policy, so the default one's reduce-scatter keeps its kernels), made once.
    let mut comms: Vec<NcclComm> = Vec::new();
    let mut nccl_ctas = (None, "unknown".to_string());
    if a.nccl {
        match nccl::version() {
            Err(why) if rank == 0 => println!("# NCCL skipped: {why}"),
            Err(_) => {}
            Ok(v) => {
                for ce in [false, true] {
                    if ce && v < 22800 {
                        if rank == 0 {
                            println!("# nccl-ce skipped: NCCL {v} has no copy-engine collectives (2.28+)");
                        }
                        continue;
                    }
                    let made = nccl::Comm::new(&g, if ce { "sat-ce" } else { "sat" }, ce).and_then(|mut c| {
                        let w = if ce {
                            Some((c.alloc_window(world * max_shard)?, c.alloc_window(world * max_shard)?))
                        } else {
                            None
                        };
                        Ok((c, ce, w))
                    });
                    match made {
                        Ok(c) => {
                            if !ce {
                                nccl_ctas = nccl::cta_count();
                            }
                            comms.push(c);
                        }
                        Err(e) => {
                            if rank == 0 {
                                println!("# {} skipped: {e}", if ce { "nccl-ce" } else { "nccl" });
                            }
                        }
                    }
                }
            }
        }
    }
    if rank == 0 {
        println!(
            "# lowcon bench overlap (saturated): collectives back-to-back for the whole window of {gemms} bf16 GEMMs of \
             {}^3 ({:.1} ms); {world} GPUs ({}); {} alone/overlapped trial pairs; slowdown = median of pairwise ratios \
             [min..max], max over ranks; bw = busbw GB/s alone and inside the GEMM window, min over ranks; ctas(source) \
             x call time = CTA-ms per GB sent (upper bound); MHz = mean SM clock alone/overlapped; W = power from the \
             energy counter during GEMM alone / collectives alone / both, each phase's energy over its time summed \
             over all {} trials, highest rank ('-': the counter never moved)",
            a.m,
            one * gemms as f64,
            info.name,
            a.trials,
            a.trials
        );
        if a.bf16_in {
            println!(
                "# reduce-scatter of a bf16 input into f32 (FSDP2's bf16 copy-in): lowcon reduces bf16 into f32; NCCL \
                 reduces the same elements in f32 and in bf16; bw counts the f32 bytes (the shard), the bf16 rows carry half"
            );
        }
        if let Some(w) = a.wire {
            println!(
                "# reduce-scatter over the {w} wire: lowcon reduces f32 values that are {w}-exact, sending {w}; NCCL \
                 reduces the same elements in f32 and in {w}; bw counts the f32 bytes (the shard), the {w} rows carry half"
            );
        }
        if nvml.is_some() {
            match energy_update_ms {
                Some(u) => println!(
                    "# energy counter moves about every {u:.1} ms here (rank 0), against about {:.0} ms per phase summed \
                     over trials",
                    one * gemms as f64 * a.trials.max(1) as f64
                ),
                None => println!("# energy counter: too few changes in 0.4 s to say how often it moves"),
            }
        }
        report::print_saturated_legend();
        report::print_saturated_columns();
    }
    let prelude = stats::prelude_gemms(a.prelude_ms, one);
    if rank == 0 {
        println!(
            "# each GEMM window (alone and overlapped) starts behind {prelude} untimed GEMMs ({:.1} ms, --prelude-ms); \
             overlapped, the collectives start when that prelude ends; {:.2}x the calls the idle call time needs",
            one * prelude as f64,
            1.0 + stats::CALLS_MARGIN
        );
    }
    let mut setup = Setup {
        g: &g,
        compute: &compute,
        gemm: &mut gemm,
        gemms,
        prelude,
        window_ms: one * gemms as f64,
        nvml: nvml.as_ref(),
        trials: a.trials.max(1),
    };
    let mut rows = Vec::new();
    for &kind in &a.kinds {
        let mut impls: Vec<Impl> = Vec::new();
        for algo in &a.algorithms {
            let belongs = match kind {
                Kind::AllGather => crate::ag_variant(algo).is_ok(),
                Kind::ReduceScatter => crate::rs_variant(algo).is_ok(),
            };
            if belongs {
                impls.extend(a.methods.iter().map(|&method| Impl::Lowcon { algo: algo.clone(), method }));
            }
        }
        let nccl_types = match (kind, a.wire) {
            (Kind::ReduceScatter, Some(w)) => vec![lowcon::DType::F32, w],
            (Kind::ReduceScatter, None) if a.bf16_in => vec![lowcon::DType::F32, lowcon::DType::Bf16],
            _ => vec![lowcon::DType::Bf16],
        };
        for (_, ce, _) in &comms {
            impls.extend(nccl_types.iter().map(|&dtype| Impl::Nccl { ce: *ce, dtype }));
        }
        if a.null {
            impls.push(Impl::Null);
        }
        if a.null_local {
            impls.push(Impl::NullLocal);
        }
        for &shard in &a.shards {
            for &prio in &a.priorities {
                let comm = g.device().stream(prio)?;
                let prio_name = if prio == StreamPriority::High { "high" } else { "default" };
                for &enq in &a.enqueue {
                    for im in &impls {
                        let name = match im {
                            Impl::Lowcon { algo, method } => {
                                let w = match (kind, a.wire) {
                                    (Kind::ReduceScatter, Some(w)) => format!(" f32 wire={w}"),
                                    (Kind::ReduceScatter, None) if a.bf16_in => " bf16 into f32".to_string(),
                                    _ => String::new(),
                                };
                                format!("lowcon {algo} {}{w}", method.name())
                            }
                            Impl::Nccl { ce, dtype } => {
                                let n = if *ce { "nccl-ce" } else { "nccl" };
                                match (kind, a.wire) {
                                    (Kind::ReduceScatter, Some(_)) => format!("{n} {dtype}"),
                                    (Kind::ReduceScatter, None) if a.bf16_in => format!("{n} {dtype}"),
                                    _ => n.to_string(),
                                }
                            }
                            Impl::Null => "null (copies, no sync)".to_string(),
                            Impl::NullLocal => "null+local (no sync)".to_string(),
                        };
                        let key =
                            format!("sat/{}/{shard}/{prio_name}/{}/{name}", kind.name(), enq.name()).replace(' ', "_");
                        let carried = (a.ctas, a.wire, a.bf16_in, a.map);
                        let mut coll = caller(&g, kind, im, shard, &buf_a, &buf_b, &comms, carried)?;
                        let res = measure(&mut setup, &comm, enq, &key, shard, &mut *coll);
                        let (calls, call_ms, f) = match res {
                            Ok(x) => x,
                            Err(e) => return Err(format!("rank {rank}: {key}: {e}").into()),
                        };
                        let (ctas, src) = ctas_of(im, kind, a.ctas, (nccl_ctas.0, &nccl_ctas.1));
                        let r = row(kind, &name, world, shard, prio_name, enq, &setup, calls, call_ms, &f, ctas, src);
                        if rank == 0 {
                            report::print_saturated_row(&r);
                        }
                        rows.push(r);
                    }
                }
                comm.synchronize()?;
            }
        }
    }
    // Drop order: each communicator (which deregisters its windows) before the
    // windows' memory.
    for (c, _, w) in comms {
        drop(c);
        drop(w);
    }
    g.store_barrier("saturated-done")?;
    Ok(rows)
}
