//! `lowcon bench overlap --mode burst`: the first overlap benchmark, kept for the
//! never-block check (`--colls 110`): every collective is enqueued before the GEMMs, so
//! a library whose enqueue blocks its caller shows it as GEMM slowdown. It does not
//! measure interference well (a few collectives next to a long window; see
//! [`crate::saturated`], the default mode, for that). Also home of the cuBLAS GEMM both
//! modes use.
//!
//! Per implementation (each lowcon algorithm × sync method, NCCL default, NCCL
//! copy-engine): a bf16 GEMM (cuBLAS, runtime-loaded) repeated to about `gemm_ms` on a
//! compute stream, and `colls` collectives on a high-priority comm stream. Three
//! measurements, each the median of `trials`, max over ranks, all with CUDA events:
//! the GEMMs alone, the collectives alone, and both enqueued together (the ranks start
//! each trial together through a store barrier). Reported: GEMM slowdown, collective
//! time alone and overlapped, and the overlapped total against the serial sum and the
//! ideal max(GEMM, comm).

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as blas};
use half::bf16;
use lowcon::cuda::{Event, Stream, StreamPriority};
use lowcon::{
    AllGatherOptions, DType, DeviceBuf, GpuGroup, GpuGroupOptions, ReduceOp, ReduceScatterOptions, SyncMethod,
};

use crate::report::{self, OverlapRow};
use crate::sweep::Kind;
use crate::{Res, nccl};

/// What the overlap benchmark measures for one collective (the flags of
/// `lowcon bench overlap`).
#[derive(Clone, Debug)]
pub struct OverlapOptions {
    pub kind: Kind,
    /// GEMM size M = N = K.
    pub m: usize,
    /// GEMM time to aim for (ms); GEMMs are repeated to about this.
    pub gemm_ms: f64,
    /// Shard (bytes per rank) of each collective.
    pub shard_bytes: usize,
    /// Collectives per trial.
    pub colls: usize,
    /// Trials (medians are reported).
    pub trials: usize,
    /// lowcon algorithms by name.
    pub algorithms: Vec<String>,
    pub methods: Vec<SyncMethod>,
    /// CTA counts of lowcon's SM parts (`None`: the library's default).
    pub ctas: Vec<Option<u32>>,
    /// Measure NCCL too.
    pub nccl: bool,
}

/// bf16 GEMMs of m×m×m through cuBLAS on one stream.
pub(crate) struct Gemm8 {
    blas: CudaBlas,
    a: cudarc::driver::CudaSlice<bf16>,
    b: cudarc::driver::CudaSlice<bf16>,
    c: cudarc::driver::CudaSlice<bf16>,
    m: usize,
}

impl Gemm8 {
    pub(crate) fn new(stream: &Stream, m: usize) -> Res<Self> {
        // SAFETY: only probes for the shared library.
        if !unsafe { blas::is_culib_present() } {
            return Err("libcublas is not on the library path; the overlap benchmark needs it".into());
        }
        let blas = CudaBlas::new(stream.cuda_stream().clone())?;
        let host: Vec<bf16> =
            (0..m * m).map(|i| bf16::from_f32(((i * 2654435761) % 1000) as f32 / 1000.0 - 0.5)).collect();
        Ok(Self { a: stream.upload(&host)?, b: stream.upload(&host)?, c: stream.alloc_zeros(m * m)?, blas, m })
    }

    /// Enqueues `reps` GEMMs on the stream it was made with.
    pub(crate) fn run(&mut self, reps: usize) -> Res<()> {
        let n = self.m as i32;
        let cfg = GemmConfig {
            transa: blas::cublasOperation_t::CUBLAS_OP_N,
            transb: blas::cublasOperation_t::CUBLAS_OP_N,
            m: n,
            n,
            k: n,
            alpha: bf16::ONE,
            lda: n,
            ldb: n,
            beta: bf16::ZERO,
            ldc: n,
        };
        for _ in 0..reps {
            // SAFETY: all three matrices hold m*m elements, as the config says.
            unsafe { self.blas.gemm(cfg, &self.a, &self.b, &mut self.c)? };
        }
        Ok(())
    }
}

pub(crate) fn ms(a: &Event, b: &Event) -> Res<f64> {
    Ok(a.elapsed_ms(b)? as f64)
}

/// How many GEMMs make about `gemm_ms` on `compute` (rank 0's measurement, so every
/// rank runs the same count), and one GEMM's time in ms.
pub(crate) fn calibrate(g: &GpuGroup, compute: &Stream, gemm: &mut Gemm8, gemm_ms: f64) -> Res<(usize, f64)> {
    let (e0, e1) = (compute.event(true)?, compute.event(true)?);
    gemm.run(3)?;
    compute.record(&e0)?;
    gemm.run(5)?;
    compute.record(&e1)?;
    e1.synchronize()?;
    let one = ms(&e0, &e1)? / 5.0;
    let one0 = crate::stats::gather(g, "overlap-gemm", &[one])?[0][0];
    Ok((((gemm_ms / one0).ceil() as usize).max(1), one0))
}

/// Runs the overlap benchmark `a` asks for as one rank; prints the table (rank 0) and
/// returns the rows.
pub fn run(a: &OverlapOptions) -> Res<Vec<OverlapRow>> {
    let g = GpuGroup::from_env(GpuGroupOptions::default())?;
    let (rank, world) = (g.rank(), g.world_size());
    let compute = g.device().stream(StreamPriority::Default)?;
    let comm = g.device().stream(StreamPriority::High)?;
    let mut gemm = Gemm8::new(&compute, a.m)?;
    // How many GEMMs make about gemm_ms (rank 0 decides, everyone uses it).
    let (e0, e1, e2, e3) = (compute.event(true)?, compute.event(true)?, compute.event(true)?, compute.event(true)?);
    let (gemms, one0) = calibrate(&g, &compute, &mut gemm, a.gemm_ms)?;

    let count = a.shard_bytes / 2; // bf16
    let (in_bytes, out_bytes) = match a.kind {
        Kind::AllGather => (a.shard_bytes, a.shard_bytes * world),
        Kind::ReduceScatter => (a.shard_bytes * world, a.shard_bytes),
    };
    let sym_in = g.alloc(in_bytes)?;
    let sym_out = g.alloc(out_bytes)?;
    // SAFETY: fills the two live buffers on `comm` (synchronised next).
    unsafe {
        comm.fill(sym_in.local_ptr(), 0x3c, in_bytes)?;
        comm.fill(sym_out.local_ptr(), 0x3c, out_bytes)?;
    }
    comm.synchronize()?;

    if rank == 0 {
        println!(
            "# lowcon bench overlap: {} of {} MiB shards x {} on a high-priority stream, next to {} bf16 GEMMs of {}^3 \
             ({:.1} ms); {world} GPUs, median of {} trials, max over ranks",
            a.kind.name(),
            a.shard_bytes >> 20,
            a.colls,
            gemms,
            a.m,
            one0 * gemms as f64,
            a.trials
        );
        report::print_overlap_columns();
    }
    let mut rows = Vec::new();
    let mut measure = |name: &str, colls: &mut dyn FnMut(&Stream) -> Res<()>| -> Res<()> {
        let mut v = [Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        colls(&comm)?; // warm-up (grows workspaces, loads kernels)
        g.synchronize(&comm)?;
        for t in 0..a.trials.max(1) {
            // GEMM alone.
            compute.record(&e0)?;
            gemm.run(gemms)?;
            compute.record(&e1)?;
            e1.synchronize()?;
            v[0].push(ms(&e0, &e1)?);
            // Collectives alone.
            g.store_barrier(&format!("ov/{name}/{t}/a"))?;
            comm.record(&e2)?;
            colls(&comm)?;
            comm.record(&e3)?;
            g.synchronize(&comm)?;
            v[1].push(ms(&e2, &e3)?);
            // Together.
            g.store_barrier(&format!("ov/{name}/{t}/b"))?;
            comm.record(&e2)?;
            compute.record(&e0)?;
            colls(&comm)?;
            gemm.run(gemms)?;
            comm.record(&e3)?;
            compute.record(&e1)?;
            g.synchronize(&comm)?;
            compute.synchronize()?;
            v[2].push(ms(&e0, &e1)?);
            v[3].push(ms(&e2, &e3)?);
            let start = ms(&e0, &e2)?.min(0.0);
            let end = ms(&e0, &e1)?.max(ms(&e0, &e3)?);
            v[4].push(end - start);
        }
        let mine: Vec<f64> = v.iter().map(|x| crate::stats::median(x)).collect();
        let mx = crate::stats::gather_max(&g, &format!("ov/{name}/stats"), &mine)?;
        let (ga, ca, go, co, tot) = (mx[0], mx[1], mx[2], mx[3], mx[4]);
        let ideal = ga.max(ca);
        let r = OverlapRow {
            bench: format!("overlap-{}", a.kind.name()),
            implementation: name.to_string(),
            ranks: world,
            shard_bytes: a.shard_bytes,
            colls: a.colls,
            gemms,
            gemm_alone_ms: ga,
            gemm_overlapped_ms: go,
            gemm_slowdown_pct: (go / ga - 1.0) * 100.0,
            comm_alone_ms: ca,
            comm_overlapped_ms: co,
            total_ms: tot,
            serial_ms: ga + ca,
            ideal_ms: ideal,
            total_over_ideal_pct: (tot / ideal - 1.0) * 100.0,
        };
        if rank == 0 {
            report::print_overlap_row(&r);
        }
        rows.push(r);
        Ok(())
    };
    for algo in &a.algorithms {
        for &m in &a.methods {
            for &ctas in &a.ctas {
                let c = ctas.map(|c| format!(" ctas={c}")).unwrap_or_default();
                let name = format!("lowcon {algo} {}{c}", m.name());
                let (ic, oc) = (in_bytes / 2, out_bytes / 2);
                let mut colls = |s: &Stream| -> Res<()> {
                    for _ in 0..a.colls {
                        let ib = DeviceBuf::symmetric(&sym_in, 0, ic, DType::Bf16)?;
                        let ob = DeviceBuf::symmetric(&sym_out, 0, oc, DType::Bf16)?;
                        match a.kind {
                            Kind::AllGather => {
                                let (algorithm, arrival) = crate::ag_variant(algo)?;
                                let o =
                                    AllGatherOptions { algorithm, arrival, sync: Some(m), ctas, ..Default::default() };
                                g.all_gather(ib, ob, s, &o)?
                            }
                            Kind::ReduceScatter => {
                                let o = ReduceScatterOptions {
                                    algorithm: algo.parse()?,
                                    sync: Some(m),
                                    ctas,
                                    ..Default::default()
                                };
                                g.reduce_scatter(ib, ob, ReduceOp::Sum, s, &o)?
                            }
                        }
                    }
                    Ok(())
                };
                measure(&name, &mut colls)?;
            }
        }
    }
    if a.nccl {
        match nccl::version() {
            Err(why) => {
                if rank == 0 {
                    println!("# NCCL baseline skipped: {why}");
                }
            }
            Ok(v) => {
                for (mode, ce) in [("nccl", false), ("nccl-ce", true)] {
                    if ce && v < 22800 {
                        continue;
                    }
                    let res = (|| -> Res<()> {
                        let mut c = nccl::Comm::new(&g, &format!("ov-{mode}"), ce)?;
                        let (wi, wo) = if ce {
                            (Some(c.alloc_window(in_bytes)?), Some(c.alloc_window(out_bytes)?))
                        } else {
                            (None, None)
                        };
                        let (pi, po) = (
                            wi.as_ref().map_or(sym_in.local_ptr(), |m| m.ptr()),
                            wo.as_ref().map_or(sym_out.local_ptr(), |m| m.ptr()),
                        );
                        let mut colls = |s: &Stream| -> Res<()> {
                            for _ in 0..a.colls {
                                // SAFETY: the buffers hold in_bytes / out_bytes.
                                unsafe {
                                    match a.kind {
                                        Kind::AllGather => c.all_gather(pi, po, a.shard_bytes, s.raw() as _)?,
                                        Kind::ReduceScatter => {
                                            c.reduce_scatter(pi, po, count, DType::Bf16, ReduceOp::Sum, s.raw() as _)?
                                        }
                                    }
                                }
                            }
                            Ok(())
                        };
                        measure(mode, &mut colls)?;
                        comm.synchronize()?;
                        drop(c);
                        Ok(())
                    })();
                    if let Err(e) = res {
                        if rank == 0 {
                            println!("# {mode} skipped: {e}");
                        }
                        eprintln!("rank {rank}: {mode}: {e}");
                    }
                }
            }
        }
    }
    g.store_barrier("overlap-done")?;
    Ok(rows)
}
