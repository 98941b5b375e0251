//! Collective checks, written once for both backends (`Runner`): every case uses fresh
//! pseudo-random data (a new seed per case, drawn by rank 0), poisons the output with
//! 0xFF bytes (a value no generated element has: NaN for the float types, and the
//! integer generators never produce all-ones), and compares with a CPU reference.
//!
//! Reference and tolerances: all-gather must match byte for byte. Reduce-scatter is
//! compared with a reference computed in f64; the library accumulates in f32 in rank
//! order and rounds once to the output type, so per element
//! |got − ref| ≤ rel·|ref| + abs with
//! - f32: rel 1e-5, abs 1e-6 (a few f32 roundings of sums of ≤ 16 values in [−1, 1));
//! - f16: rel 2⁻¹⁰, abs 2⁻¹⁴ (one f16 rounding, plus the f32 accumulation);
//! - bf16: rel 2⁻⁷, abs 1e-6 (one bf16 rounding, plus the f32 accumulation).
//!
//! `tma-push-reduce` (opt-in, sum only) adds on the GPU in arrival order and in the
//! element type, so it gets `push_slack` on top: (world − 1) · u · Σ_p |x_p|, with u the
//! type's unit roundoff (bf16 2⁻⁸, f16 2⁻¹¹, f32 2⁻²⁴). Its host backend is exact.

use std::time::{Duration, Instant};

use half::{bf16, f16};
use lowcon::cuda::{Stream, StreamPriority};
use lowcon::{
    AllGatherAlgorithm, AllGatherOptions, Arrival, DType, DeviceBuf, GpuGroup, GpuGroupOptions, HostGroup,
    HostGroupOptions, HostInput, ReduceLaunch, ReduceOp, ReduceScatterAlgorithm, ReduceScatterOptions, SyncMethod,
};
use lowcon_abi::payload_word;
use rand::Rng;
use rayon::prelude::*;

pub(crate) fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// Which collective, with which algorithm (and operator).
#[derive(Clone, Copy, Debug)]
pub enum Coll {
    /// All-gather.
    AllGather(AllGatherAlgorithm),
    /// Reduce-scatter.
    ReduceScatter(ReduceScatterAlgorithm, ReduceOp),
}

/// One checked call.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// What runs.
    pub coll: Coll,
    /// Element type.
    pub dtype: DType,
    /// Elements per rank: the all-gather input, or the reduce-scatter output.
    pub count: usize,
    /// Use symmetric buffers (zero-copy) instead of ordinary memory.
    pub symmetric: bool,
    /// Shift both buffers by this many elements (misaligned sub-slices).
    pub misalign: usize,
    /// Barrier method (GPU).
    pub sync: SyncMethod,
    /// Channel.
    pub channel: u32,
    /// Reduce-scatter: how ce-reduce launches its reduction.
    pub launch: ReduceLaunch,
    /// All-gather: what each peer's copy waits for (NOTE [arrival-driven all-gather]).
    pub arrival: Arrival,
}

impl Case {
    /// A short description for messages.
    pub fn name(&self) -> String {
        let c = match self.coll {
            Coll::AllGather(a) if self.arrival != Arrival::Auto => format!("all-gather/{a}/arrival={}", self.arrival),
            Coll::AllGather(a) => format!("all-gather/{a}"),
            Coll::ReduceScatter(a, op) if self.launch != ReduceLaunch::Auto => {
                format!("reduce-scatter/{a}/{op}/launch={}", self.launch)
            }
            Coll::ReduceScatter(a, op) => format!("reduce-scatter/{a}/{op}"),
        };
        format!(
            "{c} {} x{} {}{} {:?}",
            self.dtype,
            self.count,
            if self.symmetric { "symmetric" } else { "plain" },
            if self.misalign > 0 { format!(" +{}", self.misalign) } else { String::new() },
            self.sync
        )
    }

    pub(crate) fn in_count(&self, world: usize) -> usize {
        match self.coll {
            Coll::AllGather(_) => self.count,
            Coll::ReduceScatter(..) => self.count * world,
        }
    }

    pub(crate) fn out_count(&self, world: usize) -> usize {
        match self.coll {
            Coll::AllGather(_) => self.count * world,
            Coll::ReduceScatter(..) => self.count,
        }
    }

    pub(crate) fn ag_opts(&self, a: AllGatherAlgorithm) -> AllGatherOptions {
        AllGatherOptions { algorithm: a, channel: self.channel, arrival: self.arrival, ..Default::default() }
            .with_sync(self.sync)
    }

    pub(crate) fn rs_opts(&self, a: ReduceScatterAlgorithm) -> ReduceScatterOptions {
        let launch = self.launch;
        ReduceScatterOptions { algorithm: a, channel: self.channel, reduce_launch: launch, ..Default::default() }
            .with_sync(self.sync)
    }
}

/// Element `i` of rank `rank`'s input for `seed`, as bytes of `dtype`. Never all-ones.
fn element(dtype: DType, seed: u64, rank: usize, i: usize, out: &mut [u8]) {
    let w = payload_word(seed, rank as u32, i as u32);
    let unit = ((w >> 8) as f32) * (2.0 / (1u32 << 24) as f32) - 1.0; // [-1, 1)
    match dtype {
        DType::F32 => out.copy_from_slice(&unit.to_le_bytes()),
        DType::F16 => out.copy_from_slice(&f16::from_f32(unit).to_le_bytes()),
        DType::Bf16 => out.copy_from_slice(&bf16::from_f32(unit).to_le_bytes()),
        DType::I32 => out.copy_from_slice(&((w >> 1) as i32).to_le_bytes()),
        DType::U8 => out[0] = (w % 255) as u8,
        // Non-negative, over the whole range: sums of two already wrap.
        DType::I64 => {
            let hi = payload_word(seed ^ 0x5EED, rank as u32, i as u32) >> 1;
            out.copy_from_slice(&(((hi as u64) << 32 | w as u64) as i64).to_le_bytes())
        }
    }
}

/// Elements per task of the CPU reference's parallel loops (rayon): the reference of a
/// replayed graph regenerates every rank's inputs each replay, which on one thread took
/// most of `coll-graph`'s time at 4 ranks sharing a GPU.
const PAR_ELEMS: usize = 1 << 16;

/// `count` elements of rank `rank`'s input, from element `first`.
pub fn input_bytes(dtype: DType, seed: u64, rank: usize, first: usize, count: usize) -> Vec<u8> {
    let s = dtype.size();
    let mut v = vec![0u8; count * s];
    v.par_chunks_mut(PAR_ELEMS * s).enumerate().for_each(|(t, part)| {
        for (k, chunk) in part.chunks_exact_mut(s).enumerate() {
            element(dtype, seed, rank, first + t * PAR_ELEMS + k, chunk);
        }
    });
    v
}

fn as_f64(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f32::from_le_bytes(b.try_into().expect("4")) as f64,
        DType::F16 => f16::from_le_bytes(b.try_into().expect("2")).to_f64(),
        DType::Bf16 => bf16::from_le_bytes(b.try_into().expect("2")).to_f64(),
        _ => unreachable!("reducible dtypes only"),
    }
}

/// The stated tolerance (rel, abs) of reduce-scatter results.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (1e-5, 1e-6),
        DType::F16 => (2f64.powi(-10), 2f64.powi(-14)),
        _ => (2f64.powi(-7), 1e-6),
    }
}

/// The unit roundoff of a reducible dtype (half an ulp at 1).
fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2f64.powi(-24),
        DType::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-8),
    }
}

/// The extra error `algorithm` may have on an element whose sources' absolute values
/// sum to `abs_sum`: `tma-push-reduce` rounds to the element type at each of its
/// `world - 1` additions (in arrival order); the others round once.
pub fn push_slack(algorithm: ReduceScatterAlgorithm, dtype: DType, world: usize, abs_sum: f64) -> f64 {
    if algorithm == ReduceScatterAlgorithm::TmaPushReduce {
        (world.saturating_sub(1)) as f64 * unit_roundoff(dtype) * abs_sum
    } else {
        0.0
    }
}

/// An integer element's value.
fn int_of(dtype: DType, b: &[u8]) -> i128 {
    match dtype {
        DType::I32 => i32::from_le_bytes(b.try_into().expect("4")) as i128,
        DType::I64 => i64::from_le_bytes(b.try_into().expect("8")) as i128,
        DType::U8 => b[0] as i128,
        _ => unreachable!("integer dtypes only"),
    }
}

/// `v` wrapped to `dtype`'s width (two's complement; u8 unsigned).
fn wrap(dtype: DType, v: i128) -> i128 {
    match dtype {
        DType::I32 => v as i32 as i128,
        DType::I64 => v as i64 as i128,
        _ => v as u8 as i128,
    }
}

/// Compares `got` with the CPU reference; returns the number of wrong elements and a
/// description of the first.
fn compare(case: &Case, seed: u64, rank: usize, world: usize, got: &[u8]) -> (usize, String) {
    let s = case.dtype.size();
    let mut wrong = 0;
    let mut first = String::new();
    match case.coll {
        Coll::AllGather(_) => {
            for p in 0..world {
                let want = input_bytes(case.dtype, seed, p, 0, case.count);
                let have = &got[p * want.len()..(p + 1) * want.len()];
                if have != want.as_slice() {
                    for (k, (a, b)) in have.chunks_exact(s).zip(want.chunks_exact(s)).enumerate() {
                        if a != b {
                            if wrong == 0 {
                                first = format!("element {k} of rank {p}'s shard: got {a:02x?}, want {b:02x?}");
                            }
                            wrong += 1;
                        }
                    }
                }
            }
        }
        Coll::ReduceScatter(_, op) if case.dtype.is_int() => {
            // Exact: wrapping sums in the type's width (computed here in i128), min, max.
            let ins: Vec<Vec<u8>> = (0..world)
                .into_par_iter()
                .map(|p| input_bytes(case.dtype, seed, p, rank * case.count, case.count))
                .collect();
            for k in 0..case.count {
                let vals = ins.iter().map(|v| int_of(case.dtype, &v[k * s..(k + 1) * s]));
                let want = match op {
                    ReduceOp::Min => vals.min().expect("ranks"),
                    ReduceOp::Max => vals.max().expect("ranks"),
                    _ => wrap(case.dtype, vals.sum::<i128>()),
                };
                let have = int_of(case.dtype, &got[k * s..(k + 1) * s]);
                if have != want {
                    if wrong == 0 {
                        first = format!("element {k}: got {have}, want {want}");
                    }
                    wrong += 1;
                }
            }
        }
        Coll::ReduceScatter(algorithm, op) => {
            let ins: Vec<Vec<u8>> = (0..world)
                .into_par_iter()
                .map(|p| input_bytes(case.dtype, seed, p, rank * case.count, case.count))
                .collect();
            let (rel, abs) = tolerance(case.dtype);
            // Per task of PAR_ELEMS elements: its wrong count and its first wrong one.
            let parts: Vec<(usize, Option<String>)> = (0..case.count.div_ceil(PAR_ELEMS))
                .into_par_iter()
                .map(|t| {
                    let (mut n, mut first) = (0usize, None);
                    for k in t * PAR_ELEMS..((t + 1) * PAR_ELEMS).min(case.count) {
                        let vals = ins.iter().map(|v| as_f64(case.dtype, &v[k * s..(k + 1) * s]));
                        let want = match op {
                            ReduceOp::Sum => vals.sum::<f64>(),
                            ReduceOp::Avg => vals.sum::<f64>() / world as f64,
                            ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
                            ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
                        };
                        let abs_sum: f64 = ins.iter().map(|v| as_f64(case.dtype, &v[k * s..(k + 1) * s]).abs()).sum();
                        let slack = push_slack(algorithm, case.dtype, world, abs_sum);
                        let have = as_f64(case.dtype, &got[k * s..(k + 1) * s]);
                        let ok = (have - want).abs() <= rel * want.abs() + abs + slack; // false for NaN (poison)
                        if !ok {
                            if n == 0 {
                                first = Some(format!("element {k}: got {have}, want {want}"));
                            }
                            n += 1;
                        }
                    }
                    (n, first)
                })
                .collect();
            for (n, f) in parts {
                if wrong == 0
                    && let Some(f) = f
                {
                    first = f;
                }
                wrong += n;
            }
        }
    }
    (wrong, first)
}

/// In-place all-gather (FSDP's habit) and reduce-scatter (the output is this rank's
/// chunk of the input, as NCCL allows) with every algorithm and `auto`, odd counts and
/// dtypes, checked like the suite; an all-gather's other slots are poisoned first.
pub fn run_in_place_suite(r: &Runner, sync: SyncMethod) -> Result<String, String> {
    let (rank, world) = (r.rank(), r.world());
    let mut checked = 0;
    let algos = std::iter::once(AllGatherAlgorithm::Auto).chain(AllGatherAlgorithm::NAMED.iter().copied());
    for (i, a) in algos.enumerate() {
        for (k, (dtype, count)) in
            [(DType::F32, 1), (DType::Bf16, 1003), (DType::U8, 7), (DType::F32, 65_541)].into_iter().enumerate()
        {
            let case = Case {
                launch: ReduceLaunch::Auto,
                arrival: Arrival::Auto,
                coll: Coll::AllGather(a),
                dtype,
                count,
                symmetric: k % 2 == 0,
                misalign: 0,
                sync,
                channel: 0,
            };
            let seed = r.shared_seed(&format!("in-place/{i}/{k}"))?;
            let input = input_bytes(dtype, seed, rank, 0, count);
            let got =
                r.run_in_place(&case, &input).map_err(|m| format!("rank {rank}: in place {}: {m}", case.name()))?;
            let (wrong, first) = compare(&case, seed, rank, world, &got);
            if wrong > 0 {
                return Err(format!("rank {rank}: in place {}: {wrong} wrong elements; first: {first}", case.name()));
            }
            checked += 1;
        }
    }
    let mut rs_checked = 0;
    let algos = std::iter::once(ReduceScatterAlgorithm::Auto).chain(ReduceScatterAlgorithm::NAMED.iter().copied());
    for (i, a) in algos.enumerate() {
        for (k, (dtype, count)) in
            [(DType::F32, 1), (DType::Bf16, 1003), (DType::F16, 7), (DType::F32, 65_541)].into_iter().enumerate()
        {
            let coll = Coll::ReduceScatter(a, ReduceOp::Sum);
            let case = Case {
                launch: ReduceLaunch::Auto,
                arrival: Arrival::Auto,
                coll,
                dtype,
                count,
                symmetric: k % 2 == 0,
                misalign: 0,
                sync,
                channel: 0,
            };
            let seed = r.shared_seed(&format!("in-place-rs/{i}/{k}"))?;
            let input = input_bytes(dtype, seed, rank, 0, case.in_count(world));
            let got =
                r.run_in_place(&case, &input).map_err(|m| format!("rank {rank}: in place {}: {m}", case.name()))?;
            let (wrong, first) = compare(&case, seed, rank, world, &got);
            if wrong > 0 {
                return Err(format!("rank {rank}: in place {}: {wrong} wrong elements; first: {first}", case.name()));
            }
            rs_checked += 1;
        }
    }
    Ok(format!("{checked} in-place all-gathers, {rs_checked} in-place reduce-scatters"))
}

/// Every rank draws a seed; all take rank 0's (`gather` is the group's store all-gather).
fn seed_of_rank0(gather: impl FnOnce(&[u8]) -> lowcon::Result<Vec<Vec<u8>>>) -> Result<u64, String> {
    let all = gather(&rand::rng().random::<u64>().to_le_bytes()).map_err(e)?;
    Ok(u64::from_le_bytes(all[0].as_slice().try_into().map_err(e)?))
}

/// Runs `c` with host memory, `input` into `out` (a GPU group refuses it, naming both).
fn host_call(g: &lowcon::Group, c: &Case, input: HostInput<'_>, output: &mut [u8]) -> lowcon::Result<()> {
    let bufs = lowcon::CollBufs::Host { input, output, dtypes: (c.dtype, c.dtype) };
    match c.coll {
        Coll::AllGather(a) => g.all_gather(bufs, &c.ag_opts(a)),
        Coll::ReduceScatter(a, op) => g.reduce_scatter(bufs, op, &c.rs_opts(a)),
    }
}

/// Runs one case with a fresh seed; returns (wrong elements, the first, elements checked).
pub fn count_wrong(r: &Runner, case: &Case, tag: &str) -> Result<(usize, String, usize), String> {
    let (rank, world) = (r.rank(), r.world());
    let seed = r.shared_seed(tag)?;
    let input = input_bytes(case.dtype, seed, rank, 0, case.in_count(world));
    let got = r.run(case, &input).map_err(|m| format!("rank {rank}: {}: {m}", case.name()))?;
    let (wrong, first) = compare(case, seed, rank, world, &got);
    Ok((wrong, first, case.out_count(world)))
}

/// Runs and checks one case with a fresh seed; returns the elements checked.
pub fn check_case(r: &Runner, case: &Case, tag: &str) -> Result<usize, String> {
    let rank = r.rank();
    let (wrong, first, _) = count_wrong(r, case, tag)?;
    if wrong > 0 {
        return Err(format!("rank {rank}: {}: {wrong} wrong elements; first: {first}", case.name()));
    }
    Ok(case.out_count(r.world()))
}

mod bad_input;
mod graph;
mod mapped;
mod runners;
mod suite;
mod typed;
mod wire;

pub use bad_input::{gpu_bad_input, host_bad_input};
pub use graph::{gpu_graph, graph_dead_peer};
pub use mapped::{gpu_mapped, two_threads as gpu_mapped_threads};
use runners::Mem;
pub use runners::{GpuRunner, Runner, host_group};
pub use suite::{gpu_stress, host_stress, run_suite, suite};
pub use typed::Typed;
pub use wire::{gpu_wire_graph, gpu_wire_in_place, gpu_wire_replays, wire_suite};
