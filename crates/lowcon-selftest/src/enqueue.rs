//! A collective call never waits for the GPU: `lowcon selftest coll-enqueue`.
//!
//! Every rank enqueues `calls` back-to-back collectives (cycling through every
//! algorithm, on two streams from two threads, channels 0 and 1) at two sizes, and
//! times the host side of the enqueues against the GPU time of the same calls. The
//! same calls are then issued one at a time with a synchronize after each, for
//! comparison. The check (kernel sync): at the large size the enqueue takes a small
//! fraction of the GPU time, and it does not grow with the GPU time between the sizes
//! (within 2x and 25 ms, while the GPU time grows over 10x). With stream-memop sync the
//! driver's queue limits how far calls run ahead (see `MAX_ENQUEUE_SHARE_MEMOP`).

use std::time::{Duration, Instant};

use lowcon::cuda::{Stream, StreamPriority};
use lowcon::{
    AllGatherAlgorithm, AllGatherOptions, DType, DeviceBuf, GpuGroup, ReduceOp, ReduceScatterAlgorithm,
    ReduceScatterOptions, SymmetricBuffer, SyncMethod,
};

use crate::coll::e;

/// Fraction of the GPU time the enqueue of the large size may take, with kernel sync.
const MAX_ENQUEUE_SHARE: f64 = 0.25;

/// The same with stream-memop sync, which enqueues about 10 stream operations per call
/// against 6: the driver's per-stream queue fills after a few hundred calls and then
/// blocks the enqueue itself until the GPU catches up (`lowcon bench queue-depth`
/// measures where; NCCL meets the same limit). lowcon's own code still never waits;
/// the check is that the calls ran ahead of the GPU by at least the driver's queue.
const MAX_ENQUEUE_SHARE_MEMOP: f64 = 0.8;

struct StreamBufs {
    stream: Stream,
    inp: SymmetricBuffer,
    out: SymmetricBuffer,
}

/// Enqueues call `i` (algorithm `i % 5`) of `n` bf16 elements per rank on `b`.
fn enqueue(g: &GpuGroup, b: &StreamBufs, ch: u32, i: usize, n: usize, sync: SyncMethod) -> lowcon::Result<()> {
    let w = g.world_size();
    let whole = DeviceBuf::symmetric(&b.inp, 0, n * w, DType::Bf16)?;
    let part = DeviceBuf::symmetric(&b.inp, 0, n, DType::Bf16)?;
    let out_whole = DeviceBuf::symmetric(&b.out, 0, n * w, DType::Bf16)?;
    let out_part = DeviceBuf::symmetric(&b.out, 0, n, DType::Bf16)?;
    let ag = |a| AllGatherOptions { algorithm: a, sync: Some(sync), channel: ch, ..Default::default() };
    let rs = |a| ReduceScatterOptions { algorithm: a, sync: Some(sync), channel: ch, ..Default::default() };
    match i % 5 {
        0 => g.all_gather(part, out_whole, &b.stream, &ag(AllGatherAlgorithm::CePull)),
        1 => g.all_gather(part, out_whole, &b.stream, &ag(AllGatherAlgorithm::CePush)),
        2 => g.all_gather(part, out_whole, &b.stream, &ag(AllGatherAlgorithm::SmOneshot)),
        3 => g.reduce_scatter(whole, out_part, ReduceOp::Sum, &b.stream, &rs(ReduceScatterAlgorithm::CeReduce)),
        _ => g.reduce_scatter(whole, out_part, ReduceOp::Sum, &b.stream, &rs(ReduceScatterAlgorithm::SmDirect)),
    }
}

/// Host time of the enqueues and wall time until both streams finished (the GPU
/// time), max over the two threads; or, with `one_at_a_time`, the wall time of
/// enqueue-and-synchronize per call.
fn timed(
    g: &GpuGroup,
    bufs: &[StreamBufs],
    per_stream: usize,
    n: usize,
    sync: SyncMethod,
    one_at_a_time: bool,
) -> Result<(Duration, Duration), String> {
    g.store_barrier(&format!("enqueue-{n}-{one_at_a_time}-{sync:?}")).map_err(e)?;
    let run = |ch: usize| -> Result<(Duration, Duration), String> {
        let b = &bufs[ch];
        let t0 = Instant::now();
        for i in 0..per_stream {
            enqueue(g, b, ch as u32, i, n, sync).map_err(e)?;
            if one_at_a_time {
                g.synchronize(&b.stream).map_err(e)?;
            }
        }
        let enq = t0.elapsed();
        g.synchronize(&b.stream).map_err(e)?;
        Ok((enq, t0.elapsed()))
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..bufs.len()).map(|ch| s.spawn(move || run(ch))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect()
    });
    let mut worst = (Duration::ZERO, Duration::ZERO);
    for r in results {
        let (a, b) = r?;
        worst = (worst.0.max(a), worst.1.max(b));
    }
    Ok(worst)
}

/// The scenario: `calls` collectives in all (half per stream), at a shard of `small`
/// and of `large` bf16 elements per rank.
pub fn gpu_enqueue(calls: usize, small: usize, large: usize, sync: SyncMethod) -> Result<String, String> {
    let g = GpuGroup::from_env(Default::default()).map_err(e)?;
    let w = g.world_size();
    let bytes = large * w * DType::Bf16.size();
    let mut bufs = Vec::new();
    for _ in 0..2 {
        let stream = g.device().stream(StreamPriority::High).map_err(e)?;
        let (inp, out) = (g.alloc(bytes).map_err(e)?, g.alloc(bytes).map_err(e)?);
        // Random-ish input (the values do not matter here; coll-check verifies them).
        let noise: Vec<u8> = (0..bytes).map(|i| (i * 131 + g.rank() * 17) as u8 & 0x3f).collect();
        // SAFETY: `inp` holds `bytes`; synchronous copy.
        unsafe { stream.copy_from_host(inp.local_ptr(), &noise) }.map_err(e)?;
        bufs.push(StreamBufs { stream, inp, out });
    }
    // Warm-up, one stream at a time: grows each channel's workspace (collective) and
    // loads the kernels before anything is timed.
    for (ch, b) in bufs.iter().enumerate() {
        for i in 0..5 {
            enqueue(&g, b, ch as u32, i, large, sync).map_err(e)?;
            enqueue(&g, b, ch as u32, i, small, sync).map_err(e)?;
        }
        g.synchronize(&b.stream).map_err(e)?;
    }
    let per_stream = calls / 2;
    let mut rows = Vec::new();
    let mut report = Vec::new();
    for n in [small, large] {
        let (enq, gpu) = timed(&g, &bufs, per_stream, n, sync, false)?;
        let (_, seq) = timed(&g, &bufs, per_stream, n, sync, true)?;
        report.push(format!(
            "{} KiB shard: enqueue {:.1} ms, GPU {:.1} ms (queued), {:.1} ms one at a time",
            n * 2 / 1024,
            enq.as_secs_f64() * 1e3,
            gpu.as_secs_f64() * 1e3,
            seq.as_secs_f64() * 1e3
        ));
        rows.push((enq.as_secs_f64(), gpu.as_secs_f64()));
    }
    // The watchdog's cost at idle: this process's CPU time over a second with nothing
    // in flight (the watchdog, and whatever threads the CUDA driver keeps).
    let cpu = || {
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
            .map(|u| {
                let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 * 1e-6;
                t(u.user_time()) + t(u.system_time())
            })
            .map_err(e)
    };
    let (c0, t0) = (cpu()?, Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let idle_cpu = (cpu()? - c0) / t0.elapsed().as_secs_f64();
    report.push(format!("process CPU at idle {:.3}% of a core", idle_cpu * 100.0));
    let detail = format!("{sync:?}, {calls} calls on 2 streams: {}", report.join("; "));
    let ((enq_s, gpu_s), (enq_l, gpu_l)) = (rows[0], rows[1]);
    let share = if sync == SyncMethod::Kernel { MAX_ENQUEUE_SHARE } else { MAX_ENQUEUE_SHARE_MEMOP };
    if enq_l > share * gpu_l {
        return Err(format!("rank {}: the enqueue took over {share} of the GPU time: {detail}", g.rank()));
    }
    if gpu_l < 2.0 * gpu_s {
        return Err(format!("rank {}: the sizes do not differ enough in GPU time to judge: {detail}", g.rank()));
    }
    if sync == SyncMethod::Kernel && enq_l > 2.0 * enq_s + 0.025 {
        return Err(format!("rank {}: the enqueue grew with the GPU time: {detail}", g.rank()));
    }
    Ok(detail)
}
