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
use lowcon::cuda::{Stream, StreamPriority, raw};
use lowcon::{
    AllGatherAlgorithm, AllGatherOptions, DType, DeviceBuf, GpuGroup, GpuGroupOptions, HostGroup, HostGroupOptions,
    HostInput, ReduceOp, ReduceScatterAlgorithm, ReduceScatterOptions, SyncMethod,
};
use lowcon_abi::payload_word;
use rand::Rng;

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
}

impl Case {
    /// A short description for messages.
    pub fn name(&self) -> String {
        let c = match self.coll {
            Coll::AllGather(a) => format!("all-gather/{a}"),
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

    fn in_count(&self, world: usize) -> usize {
        match self.coll {
            Coll::AllGather(_) => self.count,
            Coll::ReduceScatter(..) => self.count * world,
        }
    }

    fn out_count(&self, world: usize) -> usize {
        match self.coll {
            Coll::AllGather(_) => self.count * world,
            Coll::ReduceScatter(..) => self.count,
        }
    }

    pub(crate) fn ag_opts(&self, a: AllGatherAlgorithm) -> AllGatherOptions {
        AllGatherOptions { algorithm: a, sync: self.sync, channel: self.channel, ..Default::default() }
    }

    fn rs_opts(&self, a: ReduceScatterAlgorithm) -> ReduceScatterOptions {
        ReduceScatterOptions { algorithm: a, sync: self.sync, channel: self.channel, ..Default::default() }
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
    }
}

/// `count` elements of rank `rank`'s input, from element `first`.
pub fn input_bytes(dtype: DType, seed: u64, rank: usize, first: usize, count: usize) -> Vec<u8> {
    let s = dtype.size();
    let mut v = vec![0u8; count * s];
    for (k, chunk) in v.chunks_exact_mut(s).enumerate() {
        element(dtype, seed, rank, first + k, chunk);
    }
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
        Coll::ReduceScatter(algorithm, op) => {
            let ins: Vec<Vec<u8>> =
                (0..world).map(|p| input_bytes(case.dtype, seed, p, rank * case.count, case.count)).collect();
            let (rel, abs) = tolerance(case.dtype);
            for k in 0..case.count {
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
                    if wrong == 0 {
                        first = format!("element {k}: got {have}, want {want}");
                    }
                    wrong += 1;
                }
            }
        }
    }
    (wrong, first)
}

/// Runs one collective call on a backend, with its own freshly allocated (and
/// poisoned) buffers, and returns the output.
pub trait Runner {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks.
    fn world(&self) -> usize;
    /// A seed drawn by rank 0 and shared (collective).
    fn shared_seed(&self, name: &str) -> Result<u64, String>;
    /// Runs `case` with this rank's `input` bytes; returns the output bytes.
    fn run(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String>;
    /// Runs `case` in place: an all-gather's input is this rank's slot of the output, a
    /// reduce-scatter's output this rank's chunk of the input (a symmetric buffer; on
    /// GPUs ordinary memory too when `case.symmetric` is false). Returns the output.
    fn run_in_place(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String>;
}

/// In-place all-gather (FSDP's habit) and reduce-scatter (the output is this rank's
/// chunk of the input, as NCCL allows) with every algorithm and `auto`, odd counts and
/// dtypes, checked like the suite; an all-gather's other slots are poisoned first.
pub fn run_in_place_suite(r: &mut dyn Runner, sync: SyncMethod) -> Result<String, String> {
    let (rank, world) = (r.rank(), r.world());
    let mut checked = 0;
    let algos = std::iter::once(AllGatherAlgorithm::Auto).chain(AllGatherAlgorithm::NAMED.iter().copied());
    for (i, a) in algos.enumerate() {
        for (k, (dtype, count)) in
            [(DType::F32, 1), (DType::Bf16, 1003), (DType::U8, 7), (DType::F32, 65_541)].into_iter().enumerate()
        {
            let case =
                Case { coll: Coll::AllGather(a), dtype, count, symmetric: k % 2 == 0, misalign: 0, sync, channel: 0 };
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
            let case = Case { coll, dtype, count, symmetric: k % 2 == 0, misalign: 0, sync, channel: 0 };
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

/// Runs `c` on the host backend with `input` into `out`.
fn host_call(g: &HostGroup, c: &Case, input: HostInput<'_>, out: &mut [u8]) -> lowcon::Result<()> {
    match c.coll {
        Coll::AllGather(a) => g.all_gather(input, out, c.dtype, &c.ag_opts(a)),
        Coll::ReduceScatter(a, op) => g.reduce_scatter(input, out, c.dtype, op, &c.rs_opts(a)),
    }
}

/// Runs one case with a fresh seed; returns (wrong elements, the first, elements checked).
pub fn count_wrong(r: &mut dyn Runner, case: &Case, tag: &str) -> Result<(usize, String, usize), String> {
    let (rank, world) = (r.rank(), r.world());
    let seed = r.shared_seed(tag)?;
    let input = input_bytes(case.dtype, seed, rank, 0, case.in_count(world));
    let got = r.run(case, &input).map_err(|m| format!("rank {rank}: {}: {m}", case.name()))?;
    let (wrong, first) = compare(case, seed, rank, world, &got);
    Ok((wrong, first, case.out_count(world)))
}

/// Runs and checks one case with a fresh seed; returns the elements checked.
pub fn check_case(r: &mut dyn Runner, case: &Case, tag: &str) -> Result<usize, String> {
    let rank = r.rank();
    let (wrong, first, _) = count_wrong(r, case, tag)?;
    if wrong > 0 {
        return Err(format!("rank {rank}: {}: {wrong} wrong elements; first: {first}", case.name()));
    }
    Ok(case.out_count(r.world()))
}

/// The host backend.
pub struct HostRunner {
    /// The group.
    pub g: HostGroup,
}

impl HostRunner {
    /// Joins the launcher's world.
    pub fn from_env(timeout: Option<Duration>) -> Result<Self, String> {
        let mut opts = HostGroupOptions::default();
        if let Some(t) = timeout {
            opts.timeout = t;
        }
        Ok(Self { g: HostGroup::from_env(opts).map_err(e)? })
    }
}

impl Runner for HostRunner {
    fn rank(&self) -> usize {
        self.g.rank()
    }
    fn world(&self) -> usize {
        self.g.world_size()
    }
    fn shared_seed(&self, name: &str) -> Result<u64, String> {
        seed_of_rank0(|mine| self.g.all_gather_bytes(name, mine))
    }
    fn run(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (rank, world) = (self.rank(), self.world());
        let s = case.dtype.size();
        let off = case.misalign * s;
        let out_len = case.out_count(world) * s;
        let sym;
        let mut plain = vec![0u8; off + input.len()];
        let inp = if case.symmetric {
            sym = self.g.alloc(off + input.len() + 1).map_err(e)?;
            sym.write(rank, off, input).map_err(e)?;
            HostInput::Symmetric { buf: &sym, offset: off, len: input.len() }
        } else {
            plain[off..].copy_from_slice(input);
            HostInput::Plain(&plain[off..])
        };
        let mut out = vec![0xFFu8; off + out_len];
        host_call(&self.g, case, inp, &mut out[off..]).map_err(e)?;
        Ok(out.split_off(off))
    }
    fn run_in_place(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (rank, world) = (self.rank(), self.world());
        if let Coll::ReduceScatter(..) = case.coll {
            // The output is this rank's chunk of the (symmetric) input.
            let chunk = input.len() / world;
            let sym = self.g.alloc(input.len()).map_err(e)?;
            sym.write(rank, 0, input).map_err(e)?;
            let inp = HostInput::Symmetric { buf: &sym, offset: 0, len: input.len() };
            // SAFETY: this rank's live mapping of `sym`, chunk `rank`; during the call only
            // the library touches it, through this slice and its own raw copies.
            let out = unsafe { std::slice::from_raw_parts_mut(sym.local_ptr().add(rank * chunk), chunk) };
            host_call(&self.g, case, inp, out).map_err(e)?;
            let mut got = vec![0u8; chunk];
            sym.read(rank, rank * chunk, &mut got).map_err(e)?;
            self.g.barrier(0).map_err(e)?;
            return Ok(got);
        }
        let n = input.len();
        let sym = self.g.alloc(n * world).map_err(e)?;
        sym.write(rank, 0, &vec![0xFFu8; n * world]).map_err(e)?;
        sym.write(rank, rank * n, input).map_err(e)?;
        let inp = HostInput::Symmetric { buf: &sym, offset: rank * n, len: n };
        // SAFETY: the slice is this rank's live mapping of `sym` (n * world bytes); during
        // the call only the library touches it, through this slice and its own raw copies.
        let out = unsafe { std::slice::from_raw_parts_mut(sym.local_ptr(), n * world) };
        host_call(&self.g, case, inp, out).map_err(e)?;
        let mut got = vec![0u8; n * world];
        sym.read(rank, 0, &mut got).map_err(e)?;
        // Peers may still read this rank's slot until they pass the call's last barrier.
        self.g.barrier(0).map_err(e)?;
        Ok(got)
    }
}

/// The GPU backend: one GPU per rank.
pub struct GpuRunner {
    /// The group.
    pub g: GpuGroup,
    /// The stream the collectives run on.
    pub stream: Stream,
}

impl GpuRunner {
    /// Joins the launcher's world.
    pub fn from_env(timeout: Option<Duration>) -> Result<Self, String> {
        let mut opts = GpuGroupOptions::default();
        if let Some(t) = timeout {
            opts.timeout = t;
        }
        let g = GpuGroup::from_env(opts).map_err(e)?;
        let stream = g.device().stream(StreamPriority::High).map_err(e)?;
        Ok(Self { g, stream })
    }
}

/// Device memory for one GPU case: plain (cudarc) or symmetric.
pub(crate) enum GpuMem {
    Plain(cudarc::driver::CudaSlice<u8>),
    Symmetric(lowcon::SymmetricBuffer),
}

impl GpuMem {
    fn new(g: &GpuGroup, stream: &Stream, symmetric: bool, bytes: usize) -> Result<Self, String> {
        Ok(if symmetric {
            GpuMem::Symmetric(g.alloc(bytes).map_err(e)?)
        } else {
            GpuMem::Plain(stream.alloc_zeros::<u8>(bytes).map_err(e)?)
        })
    }
    fn ptr(&self) -> u64 {
        match self {
            GpuMem::Plain(s) => lowcon::cuda::device_ptr(s),
            GpuMem::Symmetric(b) => b.local_ptr(),
        }
    }
    pub(crate) fn buf(&self, off: usize, count: usize, dtype: DType) -> Result<DeviceBuf<'_>, String> {
        match self {
            GpuMem::Plain(s) => {
                // SAFETY: `off + count * size` lies inside the allocation (callers size
                // it), which outlives the collective (synchronised before it is dropped).
                let b = unsafe { DeviceBuf::from_raw(lowcon::cuda::device_ptr(s) + off as u64, count, dtype) };
                Ok(b)
            }
            GpuMem::Symmetric(b) => DeviceBuf::symmetric(b, off, count, dtype).map_err(e),
        }
    }
}

impl GpuRunner {
    /// Uploads `input` and poisons the output buffer for `case` (synchronously).
    pub(crate) fn prepare(&self, case: &Case, input: &[u8]) -> Result<(GpuMem, GpuMem), String> {
        let s = case.dtype.size();
        let off = case.misalign * s;
        let out_len = case.out_count(self.g.world_size()) * s;
        let inp = GpuMem::new(&self.g, &self.stream, case.symmetric, off + input.len() + 16)?;
        let out = GpuMem::new(&self.g, &self.stream, case.symmetric, off + out_len + 16)?;
        // SAFETY: both buffers are live and sized above; the copies are synchronous.
        unsafe {
            raw::mem_op::copy_from_host(self.stream.raw(), inp.ptr() + off as u64, input).map_err(e)?;
            raw::mem_op::fill(self.stream.raw(), out.ptr(), 0xFF, off + out_len + 16).map_err(e)?;
        }
        self.stream.synchronize().map_err(e)?;
        Ok((inp, out))
    }

    /// Enqueues `case` on `stream` over prepared buffers.
    fn enqueue(&self, case: &Case, stream: &Stream, inp: &GpuMem, out: &GpuMem) -> Result<(), String> {
        let world = self.g.world_size();
        let off = case.misalign * case.dtype.size();
        let ib = inp.buf(off, case.in_count(world), case.dtype)?;
        let ob = out.buf(off, case.out_count(world), case.dtype)?;
        match case.coll {
            Coll::AllGather(a) => self.g.all_gather(ib, ob, stream, &case.ag_opts(a)),
            Coll::ReduceScatter(a, op) => self.g.reduce_scatter(ib, ob, op, stream, &case.rs_opts(a)),
        }
        .map_err(e)
    }

    fn fetch(&self, case: &Case, out: &GpuMem) -> Result<Vec<u8>, String> {
        let s = case.dtype.size();
        let mut v = vec![0u8; case.out_count(self.g.world_size()) * s];
        // SAFETY: `out` holds `off + v.len()` bytes; synchronous copy.
        unsafe { raw::mem_op::copy_to_host(self.stream.raw(), &mut v, out.ptr() + (case.misalign * s) as u64) }
            .map_err(e)?;
        Ok(v)
    }
}

impl Runner for GpuRunner {
    fn rank(&self) -> usize {
        self.g.rank()
    }
    fn world(&self) -> usize {
        self.g.world_size()
    }
    fn shared_seed(&self, name: &str) -> Result<u64, String> {
        seed_of_rank0(|mine| self.g.all_gather_bytes(name, mine))
    }
    fn run(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (inp, out) = self.prepare(case, input)?;
        self.enqueue(case, &self.stream, &inp, &out)?;
        self.g.synchronize(&self.stream).map_err(e)?;
        self.fetch(case, &out)
    }
    fn run_in_place(&mut self, case: &Case, input: &[u8]) -> Result<Vec<u8>, String> {
        let (rank, world) = (self.rank(), self.world());
        let (n, count) = (input.len(), case.count);
        if let Coll::ReduceScatter(a, op) = case.coll {
            // The output is this rank's chunk of the input.
            let chunk = n / world;
            let buf = GpuMem::new(&self.g, &self.stream, case.symmetric, n)?;
            // SAFETY: `buf` holds n bytes; synchronous copy.
            unsafe { raw::mem_op::copy_from_host(self.stream.raw(), buf.ptr(), input) }.map_err(e)?;
            let ib = buf.buf(0, count * world, case.dtype)?;
            let ob = buf.buf(rank * chunk, count, case.dtype)?;
            self.g.reduce_scatter(ib, ob, op, &self.stream, &case.rs_opts(a)).map_err(e)?;
            self.g.synchronize(&self.stream).map_err(e)?;
            let mut got = vec![0u8; chunk];
            // SAFETY: `buf` holds n bytes; synchronous copy.
            unsafe { raw::mem_op::copy_to_host(self.stream.raw(), &mut got, buf.ptr() + (rank * chunk) as u64) }
                .map_err(e)?;
            // The call ended with a barrier: no peer reads `buf` any more.
            return Ok(got);
        }
        let out = GpuMem::new(&self.g, &self.stream, case.symmetric, n * world)?;
        // SAFETY: `out` holds n * world bytes; the copies are synchronous.
        unsafe {
            raw::mem_op::fill(self.stream.raw(), out.ptr(), 0xFF, n * world).map_err(e)?;
            raw::mem_op::copy_from_host(self.stream.raw(), out.ptr() + (rank * n) as u64, input).map_err(e)?;
        }
        let Coll::AllGather(a) = case.coll else { return Err("in place is for all-gather".into()) };
        let ib = out.buf(rank * n, count, case.dtype)?;
        let ob = out.buf(0, count * world, case.dtype)?;
        self.g.all_gather(ib, ob, &self.stream, &case.ag_opts(a)).map_err(e)?;
        self.g.synchronize(&self.stream).map_err(e)?;
        let mut got = vec![0u8; n * world];
        // SAFETY: `out` holds n * world bytes; synchronous copy.
        unsafe { raw::mem_op::copy_to_host(self.stream.raw(), &mut got, out.ptr()) }.map_err(e)?;
        Ok(got)
    }
}

/// The cases of the correctness suite: every algorithm (and `auto`), dtype and
/// operator, at 1 element, odd counts, counts that are not a multiple of 16 bytes and
/// a larger size; plain and symmetric buffers; aligned and misaligned.
pub fn suite(sync: SyncMethod, large: usize) -> Vec<Case> {
    let mut v = Vec::new();
    let counts = [1usize, 7, 1003, 65_541, large];
    let base = Case {
        coll: Coll::AllGather(AllGatherAlgorithm::Auto),
        dtype: DType::F32,
        count: 1,
        symmetric: false,
        misalign: 0,
        sync,
        channel: 0,
    };
    let ags = std::iter::once(AllGatherAlgorithm::Auto).chain(AllGatherAlgorithm::NAMED.iter().copied());
    for a in ags {
        for dtype in DType::ALL {
            for (k, &count) in counts.iter().enumerate() {
                // Bytes are bytes: the big size once per algorithm is enough.
                if count == large && dtype != DType::Bf16 {
                    continue;
                }
                v.push(Case {
                    coll: Coll::AllGather(a),
                    dtype,
                    count,
                    symmetric: k % 2 == 1,
                    misalign: if k == 2 { 1 } else { 0 },
                    ..base
                });
            }
        }
    }
    let rss = std::iter::once(ReduceScatterAlgorithm::Auto).chain(ReduceScatterAlgorithm::NAMED.iter().copied());
    for a in rss {
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            for op in ReduceOp::ALL {
                // tma-push-reduce only sums (other operators are refused: `*_bad_input`).
                if a == ReduceScatterAlgorithm::TmaPushReduce && op != ReduceOp::Sum {
                    continue;
                }
                for (k, &count) in counts.iter().enumerate() {
                    if count == large && op != ReduceOp::Sum {
                        continue;
                    }
                    v.push(Case {
                        coll: Coll::ReduceScatter(a, op),
                        dtype,
                        count,
                        symmetric: k % 2 == 0,
                        misalign: if k == 3 { 3 } else { 0 },
                        ..base
                    });
                }
            }
        }
    }
    v
}

/// Runs `cases`; returns a summary.
pub fn run_suite(r: &mut dyn Runner, cases: &[Case]) -> Result<String, String> {
    let t = Instant::now();
    let mut checked = 0;
    for (i, c) in cases.iter().enumerate() {
        checked += check_case(r, c, &format!("suite/{i}"))?;
    }
    Ok(format!(
        "{} cases, {checked} output elements checked, 0 wrong ({:.1} s)",
        cases.len(),
        t.elapsed().as_secs_f64()
    ))
}

/// The algorithms the stress loop cycles through (eight calls; LL twice, so that its
/// rounds alternate halves and reuse each within one unsynchronised block).
fn stress_case(i: usize, channel: u32, sync: SyncMethod, count: usize) -> Case {
    let coll = match i % 8 {
        6 => Coll::AllGather(AllGatherAlgorithm::Ll),
        7 => Coll::ReduceScatter(ReduceScatterAlgorithm::Ll, ReduceOp::Avg),
        0 => Coll::AllGather(AllGatherAlgorithm::CePull),
        1 => Coll::AllGather(AllGatherAlgorithm::CePush),
        2 => Coll::AllGather(AllGatherAlgorithm::SmOneshot),
        3 => Coll::ReduceScatter(ReduceScatterAlgorithm::CeReduce, ReduceOp::Sum),
        4 => Coll::ReduceScatter(ReduceScatterAlgorithm::TmaReduce, ReduceOp::Sum),
        _ => Coll::ReduceScatter(ReduceScatterAlgorithm::SmDirect, ReduceOp::Max),
    };
    Case { coll, dtype: DType::Bf16, count, symmetric: i.is_multiple_of(3), misalign: 0, sync, channel }
}

/// `iters` back-to-back calls on one GPU stream (in blocks of 8, enqueued without
/// synchronising between them), cycling through every algorithm, each call with fresh
/// data, every output checked. With `streams == 2`, two threads do this at once on two
/// streams and channels. Everything collective (symmetric allocations, workspace
/// growth) happens before the threads start: collective set-up must not race.
pub fn gpu_stress(r: &GpuRunner, iters: usize, streams: usize, sync: SyncMethod) -> Result<String, String> {
    const BLOCK: usize = 8;
    let count = 4093;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let bytes = count * world * DType::Bf16.size() + 64;
    let mut pools = Vec::new();
    for ch in 0..streams as u32 {
        r.g.reserve_workspace(ch, 16 << 20).map_err(e)?;
        let mut pool = Vec::new();
        for k in 0..BLOCK {
            let sym = k % 3 == 0;
            pool.push((GpuMem::new(&r.g, &r.stream, sym, bytes)?, GpuMem::new(&r.g, &r.stream, sym, bytes)?));
        }
        pools.push(pool);
    }
    let base = r.shared_seed("stress-seed")?;
    let work = |ch: usize, pool: &[(GpuMem, GpuMem)]| -> Result<usize, String> {
        let stream = if ch == 0 { r.stream.clone() } else { r.g.device().stream(StreamPriority::High).map_err(e)? };
        let mut checked = 0;
        let mut i = 0;
        while i < iters {
            let n = BLOCK.min(iters - i);
            let cases: Vec<Case> = (i..i + n)
                .map(|k| Case { symmetric: (k - i) % 3 == 0, ..stress_case(k, ch as u32, sync, count) })
                .collect();
            let seeds: Vec<u64> = (i..i + n).map(|k| base ^ ((ch as u64) << 40) ^ (k as u64 * 0x9E37)).collect();
            for ((c, s), (inp, out)) in cases.iter().zip(&seeds).zip(pool) {
                let input = input_bytes(c.dtype, *s, rank, 0, c.in_count(world));
                // SAFETY: the pool buffers hold `bytes` >= every case's input and output;
                // the copies are ordered on `stream` and synchronised below.
                unsafe {
                    raw::mem_op::copy_from_host(stream.raw(), inp.ptr(), &input).map_err(e)?;
                    raw::mem_op::fill(stream.raw(), out.ptr(), 0xFF, bytes).map_err(e)?;
                }
            }
            for (c, (inp, out)) in cases.iter().zip(pool) {
                r.enqueue(c, &stream, inp, out)?;
            }
            r.g.synchronize(&stream).map_err(e)?;
            for ((c, s), (_, out)) in cases.iter().zip(&seeds).zip(pool) {
                let mut got = vec![0u8; c.out_count(world) * c.dtype.size()];
                // SAFETY: `out` holds at least this many bytes; synchronous copy.
                unsafe { raw::mem_op::copy_to_host(stream.raw(), &mut got, out.ptr()) }.map_err(e)?;
                let (wrong, first) = compare(c, *s, rank, world, &got);
                if wrong > 0 {
                    return Err(format!("rank {rank}: stream {ch}: {}: {wrong} wrong; first: {first}", c.name()));
                }
                checked += got.len() / c.dtype.size();
            }
            i += n;
        }
        Ok(checked)
    };
    let t = Instant::now();
    let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let work = &work;
        let hs: Vec<_> = pools.iter().enumerate().map(|(ch, pool)| s.spawn(move || work(ch, pool))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect()
    });
    let mut total = 0;
    for res in results {
        total += res?;
    }
    Ok(format!(
        "{iters} calls x {streams} stream(s), {total} elements checked, 0 wrong ({:.1} s)",
        t.elapsed().as_secs_f64()
    ))
}

/// As [`gpu_stress`] on the host backend (threads instead of streams).
pub fn host_stress(r: &HostRunner, iters: usize, threads: usize) -> Result<String, String> {
    let count = 1021;
    let base = r.shared_seed("stress-seed")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    // Workspaces grow collectively: run one call per channel first, one thread at a time.
    let warm = |ch: u32| -> Result<(), String> {
        for k in 0..8 {
            let c = Case { symmetric: false, ..stress_case(k, ch, SyncMethod::Kernel, count) };
            let input = input_bytes(c.dtype, base, rank, 0, c.in_count(world));
            let mut out = vec![0u8; c.out_count(world) * 2];
            host_call(&r.g, &c, HostInput::Plain(&input), &mut out).map_err(e)?;
        }
        Ok(())
    };
    for ch in 0..threads as u32 {
        warm(ch)?;
    }
    let work = |ch: usize| -> Result<usize, String> {
        let mut checked = 0;
        for i in 0..iters {
            let c = Case { symmetric: false, ..stress_case(i, ch as u32, SyncMethod::Kernel, count) };
            let seed = base ^ ((ch as u64) << 40) ^ (i as u64 * 0x9E37);
            let input = input_bytes(c.dtype, seed, rank, 0, c.in_count(world));
            let mut out = vec![0xFFu8; c.out_count(world) * c.dtype.size()];
            host_call(&r.g, &c, HostInput::Plain(&input), &mut out)
                .map_err(|m| format!("rank {rank}: thread {ch} call {i}: {m}"))?;
            let (wrong, first) = compare(&c, seed, rank, world, &out);
            if wrong > 0 {
                return Err(format!("rank {rank}: thread {ch} call {i}: {}: {wrong} wrong; first: {first}", c.name()));
            }
            checked += out.len() / c.dtype.size();
        }
        Ok(checked)
    };
    let t = Instant::now();
    let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads).map(|ch| s.spawn(move || work(ch))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect()
    });
    let mut total = 0;
    for res in results {
        total += res?;
    }
    Ok(format!(
        "{iters} calls x {threads} thread(s), {total} elements checked, 0 wrong ({:.1} s)",
        t.elapsed().as_secs_f64()
    ))
}

/// Expects `res` to be an `InvalidArgument` whose message contains every one of `want`.
fn expect_refused(what: &str, res: lowcon::Result<()>, want: &[&str]) -> Result<String, String> {
    match res {
        Err(err @ lowcon::Error::InvalidArgument(_)) => {
            let m = err.to_string();
            match want.iter().find(|w| !m.contains(*w)) {
                None => Ok(m),
                Some(w) => Err(format!("{what}: the message does not mention {w:?}: {m}")),
            }
        }
        Err(other) => Err(format!("{what}: expected InvalidArgument, got {other}")),
        Ok(()) => Err(format!("{what}: accepted")),
    }
}

/// Bad calls on the host backend: each must be refused with a clear message, and the
/// group must still work afterwards (nothing half-done, no epoch advanced).
pub fn host_bad_input() -> Result<String, String> {
    let mut r = HostRunner::from_env(None)?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let rk = format!("rank {rank}");
    let input = vec![1u8; 64];
    let mut small = vec![0u8; 64 * world - 4];
    let mut out = vec![0u8; 64 * world];
    let mut notes = Vec::new();
    let ag = AllGatherOptions::default();
    notes.push(expect_refused(
        "short all-gather output",
        r.g.all_gather(HostInput::Plain(&input), &mut small, DType::F32, &ag),
        &[&rk, &format!("{} elements", 16 * world - 1)],
    )?);
    let mut rs_out = vec![0u8; 64];
    let rs = ReduceScatterOptions::default();
    notes.push(expect_refused(
        "i32 reduce-scatter",
        r.g.reduce_scatter(HostInput::Plain(&out), &mut rs_out, DType::I32, ReduceOp::Sum, &rs),
        &["dtype i32"],
    )?);
    let push = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::TmaPushReduce, ..rs };
    notes.push(expect_refused(
        "tma-push-reduce with max",
        r.g.reduce_scatter(HostInput::Plain(&out), &mut rs_out, DType::F32, ReduceOp::Max, &push),
        &[&rk, "op max", "tma-push-reduce"],
    )?);
    let mut rs_short = vec![0u8; 60];
    notes.push(expect_refused(
        "reduce-scatter output of the wrong size",
        r.g.reduce_scatter(HostInput::Plain(&out), &mut rs_short, DType::F32, ReduceOp::Sum, &rs),
        &[&rk, "needs"],
    )?);
    let no_stage = AllGatherOptions { algorithm: AllGatherAlgorithm::CePull, allow_staging: false, ..ag };
    notes.push(expect_refused(
        "ordinary input with staging disabled",
        r.g.all_gather(HostInput::Plain(&input), &mut out, DType::F32, &no_stage),
        &[&rk, "needs a symmetric input"],
    )?);
    notes.push(expect_refused(
        "channel out of range",
        r.g.all_gather(HostInput::Plain(&input), &mut out, DType::F32, &AllGatherOptions { channel: 99, ..ag }),
        &["channel 99"],
    )?);
    // The group is intact: a real call still works.
    let ok = Case {
        coll: Coll::ReduceScatter(ReduceScatterAlgorithm::Auto, ReduceOp::Sum),
        dtype: DType::F32,
        count: 100,
        symmetric: false,
        misalign: 0,
        sync: SyncMethod::Kernel,
        channel: 0,
    };
    check_case(&mut r, &ok, "after-bad")?;
    Ok(format!("{} bad calls refused, group still works; e.g. {}", notes.len(), notes[0]))
}

/// Bad calls on the GPU backend, as [`host_bad_input`], plus buffers on another GPU and
/// host memory passed as device memory.
pub fn gpu_bad_input() -> Result<String, String> {
    let mut r = GpuRunner::from_env(None)?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let rk = format!("rank {rank}");
    let st = r.stream.clone();
    let input = st.alloc_zeros::<f32>(16).map_err(e)?;
    let mut out = st.alloc_zeros::<f32>(16 * world).map_err(e)?;
    let mut short = st.alloc_zeros::<f32>(16 * world - 1).map_err(e)?;
    let ints = st.alloc_zeros::<i32>(16 * world).map_err(e)?;
    let mut int_out = st.alloc_zeros::<i32>(16).map_err(e)?;
    let ag = AllGatherOptions::default();
    let rs = ReduceScatterOptions::default();
    let mut notes = Vec::new();
    notes.push(expect_refused(
        "short all-gather output",
        r.g.all_gather(DeviceBuf::slice(&input), DeviceBuf::slice_mut(&mut short), &st, &ag),
        &[&rk, &format!("{} elements", 16 * world - 1)],
    )?);
    notes.push(expect_refused(
        "i32 reduce-scatter",
        r.g.reduce_scatter(DeviceBuf::slice(&ints), DeviceBuf::slice_mut(&mut int_out), ReduceOp::Sum, &st, &rs),
        &["dtype i32"],
    )?);
    let no_stage = ReduceScatterOptions { allow_staging: false, ..rs };
    let mut rs_out = st.alloc_zeros::<f32>(4).map_err(e)?;
    let rs_in = st.alloc_zeros::<f32>(4 * world).map_err(e)?;
    notes.push(expect_refused(
        "ordinary input with staging disabled",
        r.g.reduce_scatter(DeviceBuf::slice(&rs_in), DeviceBuf::slice_mut(&mut rs_out), ReduceOp::Sum, &st, &no_stage),
        &[&rk, "needs a symmetric input"],
    )?);
    let push = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::TmaPushReduce, ..rs };
    notes.push(expect_refused(
        "tma-push-reduce with avg",
        r.g.reduce_scatter(DeviceBuf::slice(&rs_in), DeviceBuf::slice_mut(&mut rs_out), ReduceOp::Avg, &st, &push),
        &[&rk, "op avg", "tma-push-reduce"],
    )?);
    let host_mem = [0f32; 16];
    // SAFETY: deliberately wrong (host memory); the call must refuse it before any use.
    let host_buf = unsafe { DeviceBuf::from_raw(host_mem.as_ptr() as u64, 16, DType::F32) };
    notes.push(expect_refused(
        "host memory as input",
        r.g.all_gather(host_buf, DeviceBuf::slice_mut(&mut out), &st, &ag),
        &[&rk, "not device memory"],
    )?);
    let count = lowcon::cuda::device_count().map_err(e)?;
    if count > 1 {
        let other = (r.g.device().index() + 1) % count;
        let dev = lowcon::cuda::Device::open(other).map_err(e)?;
        let os = dev.stream(StreamPriority::Default).map_err(e)?;
        let foreign = os.alloc_zeros::<f32>(16).map_err(e)?;
        r.g.device().bind_to_thread().map_err(e)?;
        notes.push(expect_refused(
            "input on another GPU",
            r.g.all_gather(DeviceBuf::slice(&foreign), DeviceBuf::slice_mut(&mut out), &st, &ag),
            &[&rk, &format!("on device {other}")],
        )?);
    }
    let ok = Case {
        coll: Coll::AllGather(AllGatherAlgorithm::SmOneshot),
        dtype: DType::F32,
        count: 100,
        symmetric: true,
        misalign: 0,
        sync: SyncMethod::Kernel,
        channel: 0,
    };
    check_case(&mut r, &ok, "after-bad")?;
    Ok(format!("{} bad calls refused, group still works; e.g. {}", notes.len(), notes[0]))
}
