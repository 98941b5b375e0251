//! Multi-process GPU scenarios (one rank per GPU, started by `lowcon launch
//! --nproc-per-node gpu -- lowcon selftest gpu-...`). Each runs with either sync method,
//! checks results on the host, and returns `Err` with a message on any deviation.

use std::time::{Duration, Instant};

use cudarc::driver::sys;
use lowcon::cuda::StreamPriority;
use lowcon::{Error, GpuGroup, GpuGroupOptions, SyncMethod};
use lowcon_abi::payload_word;
use rand::Rng;

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

fn group(timeout: Option<Duration>) -> Result<GpuGroup, String> {
    let mut opts = GpuGroupOptions::default();
    if let Some(t) = timeout {
        opts.timeout = t;
    }
    GpuGroup::from_env(opts).map_err(e)
}

fn seed(g: &GpuGroup, name: &str) -> Result<u64, String> {
    let mine = rand::rng().random::<u64>().to_le_bytes();
    let all = g.all_gather_bytes(name, &mine).map_err(e)?;
    Ok(u64::from_le_bytes(all[0].as_slice().try_into().map_err(e)?))
}

fn dtoh(stream: &lowcon::cuda::Stream, src: sys::CUdeviceptr, out: &mut [u32]) -> Result<(), String> {
    // SAFETY: `src` is a live symmetric buffer of at least `out.len()` words (callers);
    // the copy is ordered after the stream's earlier work and waited for.
    unsafe { stream.copy_to_host(out, src) }.map_err(e)
}

/// `iters` barriers with random host-side delays. Every barrier is checked: before
/// barrier `i` each rank writes `i` into its buffer (stream memop); after it, each rank
/// copies every peer's word (copy engine) into a check area, which the host verifies in
/// blocks: every value must be `i` or `i + 1`.
pub fn barrier_stress(method: SyncMethod, iters: u64, max_delay_us: u64) -> Result<String, String> {
    let g = group(None)?;
    let (rank, world) = (g.rank(), g.world_size());
    let stream = g.device().stream(StreamPriority::High).map_err(e)?;
    const BLOCK: usize = 1000;
    let counter = g.alloc(4).map_err(e)?;
    let check = g.alloc(BLOCK * world * 4).map_err(e)?;
    let mut host = vec![0u32; BLOCK * world];
    let mut rng = rand::rng();
    let start = Instant::now();
    let mut i = 0u64;
    while i < iters {
        let block = BLOCK.min((iters - i) as usize);
        for k in 0..block {
            let it = (i + k as u64 + 1) as u32;
            if max_delay_us > 0 && rng.random_ratio(1, 64) {
                std::thread::sleep(Duration::from_micros(rng.random_range(0..=max_delay_us)));
            }
            // SAFETY: `counter` and `check` are live symmetric buffers of the sizes
            // used; all operations are ordered on `stream`, synchronised below.
            unsafe { stream.write_u32(counter.local_ptr(), it) }.map_err(e)?;
            g.barrier(&stream, it % 4, method).map_err(e)?;
            for p in 0..world {
                let dst = check.local_ptr() + ((k * world + p) * 4) as u64;
                // SAFETY: as above.
                unsafe { stream.copy(dst, counter.peer_ptr(p), 4) }.map_err(e)?;
            }
        }
        dtoh(&stream, check.local_ptr(), &mut host[..block * world])?;
        g.synchronize(&stream).map_err(e)?;
        for k in 0..block {
            let it = (i + k as u64 + 1) as u32;
            for p in 0..world {
                let v = host[k * world + p];
                if v != it && v != it + 1 {
                    return Err(format!("rank {rank}: after barrier {it}, rank {p}'s counter read {v}"));
                }
            }
        }
        i += block as u64;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    Ok(format!("{iters} checked {method:?} barriers over {world} GPUs, {us:.1} us per iteration"))
}

/// Ring publish-then-signal on the GPU: each round rank r copies fresh pseudo-random
/// words with the copy engine into rank r+1's buffer, signals (channel 1); r+1 waits,
/// copies its buffer to the host and checks every word, poisons it, and acknowledges
/// (channel 2) before r may write again.
pub fn publish_signal(method: SyncMethod, rounds: u32, words: usize) -> Result<String, String> {
    let g = group(None)?;
    let (rank, world) = (g.rank(), g.world_size());
    if world < 2 {
        return Err("publish-signal needs at least 2 GPUs".into());
    }
    let seed = seed(&g, "publish-signal-seed")?;
    let stream = g.device().stream(StreamPriority::High).map_err(e)?;
    let buf = g.alloc(words * 4).map_err(e)?;
    let mut staging = stream.alloc_zeros::<u32>(words).map_err(e)?;
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
    let mut out = vec![0u32; words];
    let mut inp = vec![0u32; words];
    let mut checked = 0u64;
    let staging_ptr = lowcon::cuda::device_ptr(&staging);
    for round in 1..=rounds {
        for (i, w) in out.iter_mut().enumerate() {
            *w = payload_word(seed ^ rank as u64, round, i as u32);
        }
        stream.write(&out, &mut staging).map_err(e)?;
        if round > 1 {
            g.wait_signal(&stream, next, 2, method).map_err(e)?;
        }
        // SAFETY: staging and the peer's buffer hold `words` u32s; stream-ordered.
        unsafe { stream.copy(buf.peer_ptr(next), staging_ptr, words * 4) }.map_err(e)?;
        g.put_signal(&stream, next, 1, method).map_err(e)?;
        g.wait_signal(&stream, prev, 1, method).map_err(e)?;
        dtoh(&stream, buf.local_ptr(), &mut inp)?;
        g.synchronize(&stream).map_err(e)?;
        for (i, &got) in inp.iter().enumerate() {
            let want = payload_word(seed ^ prev as u64, round, i as u32);
            if got != want {
                return Err(format!(
                    "rank {rank}: round {round} word {i} from rank {prev}: got {got:#x}, want {want:#x}"
                ));
            }
        }
        checked += words as u64;
        // SAFETY: poisons this rank's own live buffer, stream-ordered after the read.
        unsafe { sys::cuMemsetD8Async(buf.local_ptr(), 0xAB, words * 4, stream.raw()) }
            .result()
            .map_err(|x| format!("{x:?}"))?;
        g.put_signal(&stream, prev, 2, method).map_err(e)?;
    }
    g.wait_signal(&stream, next, 2, method).map_err(e)?;
    g.synchronize(&stream).map_err(e)?;
    Ok(format!("{method:?}: {rounds} rounds, {checked} words checked, 0 wrong"))
}

/// Rank `skipper` never enters the barrier; the others' synchronize must fail within
/// the timeout naming it, and the group must refuse further work.
pub fn skip_barrier(method: SyncMethod, skipper: usize, timeout: Duration) -> Result<String, String> {
    let g = group(Some(timeout))?;
    let rank = g.rank();
    if rank == skipper {
        std::thread::sleep(timeout * 3 + Duration::from_secs(2));
        return Ok(format!("rank {rank} skipped the barrier"));
    }
    let stream = g.device().stream(StreamPriority::High).map_err(e)?;
    let t = Instant::now();
    g.barrier(&stream, 0, method).map_err(e)?;
    let r = g.synchronize(&stream);
    let took = t.elapsed();
    let named = match &r {
        Err(Error::DeviceTimeout(rec)) => rec.peer as usize == skipper,
        Err(Error::PeerTimeout { peer, .. }) => *peer == skipper,
        _ => false,
    };
    if !named {
        return Err(format!("rank {rank}: expected a timeout naming rank {skipper}, got {r:?}"));
    }
    if took > timeout * 3 + Duration::from_secs(2) {
        return Err(format!("rank {rank}: a {timeout:?} timeout took {took:?}"));
    }
    match g.barrier(&stream, 0, method) {
        Err(Error::GroupFailed(_)) => {}
        other => return Err(format!("rank {rank}: group still usable after a timeout: {other:?}")),
    }
    // The stream must have drained (stuck waits released).
    stream.synchronize().map_err(e)?;
    Ok(format!("{method:?}: {} (after {:.2} s)", r.unwrap_err(), took.as_secs_f64()))
}

/// Rank `victim` exits abruptly; the others' synchronize must name it quickly.
pub fn dead_peer(method: SyncMethod, victim: usize) -> Result<String, String> {
    let g = group(Some(Duration::from_secs(60)))?;
    let rank = g.rank();
    let stream = g.device().stream(StreamPriority::High).map_err(e)?;
    g.barrier(&stream, 0, method).map_err(e)?;
    g.synchronize(&stream).map_err(e)?;
    g.store_barrier("dead-peer-ready").map_err(e)?;
    if rank == victim {
        std::process::exit(0);
    }
    let t = Instant::now();
    g.barrier(&stream, 0, method).map_err(e)?;
    let r = match g.synchronize(&stream) {
        Err(err @ Error::PeerGone { peer, .. }) if peer == victim && t.elapsed() < Duration::from_secs(15) => {
            stream.synchronize().map_err(e)?;
            Ok(format!("{method:?}: noticed in {:.0} ms: {err}", t.elapsed().as_secs_f64() * 1e3))
        }
        other => Err(format!("rank {rank}: expected PeerGone naming rank {victim}, got {other:?}")),
    };
    crate::survivors_barrier(&format!("gpu-dead-peer-survivors-{method:?}"), g.world_size() - 1)?;
    r
}

/// Every rank stamps its buffer with its rank; every rank reads every peer's stamp
/// through its own mapping (copy engine) and through a peer-pointer table, so a mapping
/// that points at the wrong rank's memory is caught directly.
pub fn mapping() -> Result<String, String> {
    let g = group(None)?;
    let (rank, world) = (g.rank(), g.world_size());
    let stream = g.device().stream(StreamPriority::High).map_err(e)?;
    let buf = g.alloc(1 << 20).map_err(e)?;
    let stamp = |r: usize| 0x1000_0000u32 + r as u32;
    // SAFETY: stamps this rank's own live buffer (1 MiB = 256 Ki words).
    unsafe { sys::cuMemsetD32Async(buf.local_ptr(), stamp(rank), 1 << 18, stream.raw()) }
        .result()
        .map_err(|x| format!("{x:?}"))?;
    g.synchronize(&stream).map_err(e)?;
    g.store_barrier("mapping-stamped").map_err(e)?;
    let scratch = stream.alloc_zeros::<u32>(world).map_err(e)?;
    let scratch_ptr = lowcon::cuda::device_ptr(&scratch);
    for p in 0..world {
        // Read the last word of each peer's buffer (the far end of the mapping).
        // SAFETY: both ranges are live; stream-ordered; synchronised below.
        unsafe { stream.copy(scratch_ptr + 4 * p as u64, buf.peer_ptr(p) + (1 << 20) - 4, 4) }.map_err(e)?;
    }
    let got = stream.download(&scratch).map_err(e)?;
    let table = stream.download(buf.device_peer_ptrs()).map_err(e)?;
    g.store_barrier("mapping-checked").map_err(e)?;
    for p in 0..world {
        if got[p] != stamp(p) {
            return Err(format!(
                "rank {rank}: the mapping of rank {p}'s buffer holds stamp {:#x}, not {:#x}",
                got[p],
                stamp(p)
            ));
        }
        if table[p] != buf.peer_ptr(p) {
            return Err(format!("rank {rank}: the device pointer table's entry {p} differs from the host's"));
        }
    }
    Ok(format!("all {world} mappings point at the right rank's memory"))
}

/// Ranks ask for different sizes: every rank gets an error naming them.
pub fn mismatched_size() -> Result<String, String> {
    let g = group(None)?;
    match g.alloc(4096 * (g.rank() + 1)) {
        Ok(_) => Err("mismatched allocation succeeded".into()),
        Err(err @ Error::Rendezvous(_)) if err.to_string().contains("asked for") => Ok(err.to_string()),
        Err(other) => Err(format!("wrong error: {other}")),
    }
}

/// Run with every rank on one GPU (`LOWCON_DEVICE=0`): without the opt-in, group
/// creation must fail naming the ranks, the GPU and the opt-in (`LOWCON_SHARE_GPU=1`).
pub fn same_device() -> Result<String, String> {
    let made = GpuGroup::from_env(GpuGroupOptions { share_gpu: Some(false), ..Default::default() });
    match made {
        Ok(_) => Err("two ranks on one GPU were accepted".into()),
        Err(err @ Error::Rendezvous(_))
            if err.to_string().contains("both use the GPU") && err.to_string().contains("LOWCON_SHARE_GPU=1") =>
        {
            Ok(err.to_string())
        }
        Err(other) => Err(format!("wrong error: {other}")),
    }
}

/// Creating a group and 3 x 256 MiB of symmetric memory, then dropping everything, must
/// give the device's free memory back. A first group (the witness) lines the ranks up
/// around each reading, so that with ranks sharing a GPU (whose free memory counts them
/// all) every rank's context exists before the first reading and everything is dropped
/// before the last.
pub fn memory_release() -> Result<String, String> {
    let witness = GpuGroup::from_env(GpuGroupOptions { name: "memory-release-witness".into(), ..Default::default() })
        .map_err(e)?;
    let dev = witness.device().clone();
    dev.synchronize().map_err(e)?;
    witness.store_barrier("memory-release-before").map_err(e)?;
    let (before, _) = dev.memory_info().map_err(e)?;
    witness.store_barrier("memory-release-measured").map_err(e)?;
    let during;
    {
        let g = group(None)?;
        let bufs: Vec<_> = (0..3).map(|_| g.alloc(256 << 20)).collect::<Result<_, _>>().map_err(e)?;
        g.store_barrier("memory-release-allocated").map_err(e)?;
        during = dev.memory_info().map_err(e)?.0;
        g.store_barrier("memory-release-dropping").map_err(e)?;
        drop(bufs);
        g.store_barrier("memory-release-dropped").map_err(e)?;
    }
    witness.store_barrier("memory-release-after").map_err(e)?;
    dev.synchronize().map_err(e)?;
    let (after, _) = dev.memory_info().map_err(e)?;
    witness.store_barrier("memory-release-read").map_err(e)?;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let used = before.saturating_sub(during);
    if used < 3 * (256 << 20) {
        return Err(format!("only {:.0} MiB in use during the test: the allocations were not made?", mib(used)));
    }
    let leaked = before as i64 - after as i64;
    // 8 MiB of slack for the driver's own bookkeeping, per rank on this GPU (free memory
    // counts them all when ranks share it).
    let on_this_gpu = if witness.shares_gpu() { witness.world_size() } else { 1 };
    if leaked.unsigned_abs() > (8 << 20) * on_this_gpu as u64 {
        return Err(format!(
            "free memory {:.0} MiB before, {:.0} MiB after: {:.1} MiB not returned",
            mib(before),
            mib(after),
            leaked as f64 / (1 << 20) as f64
        ));
    }
    Ok(format!(
        "{:.0} MiB used during, free memory back to within {:.1} MiB",
        mib(used),
        leaked as f64 / (1 << 20) as f64
    ))
}

/// Barrier latency on this rank: per-barrier device time from CUDA events around each
/// barrier (median and p99 over `iters`, after `warmup`), and the mean of `iters`
/// back-to-back barriers between two events.
pub struct BarrierLatency {
    pub median_us: f64,
    pub p99_us: f64,
    pub back_to_back_us: f64,
}

/// Measures [`BarrierLatency`] for `method` on an existing group.
pub fn barrier_latency(
    g: &GpuGroup,
    method: SyncMethod,
    iters: usize,
    warmup: usize,
) -> Result<BarrierLatency, String> {
    let stream = g.device().stream(StreamPriority::High).map_err(e)?;
    for _ in 0..warmup {
        g.barrier(&stream, 3, method).map_err(e)?;
    }
    g.synchronize(&stream).map_err(e)?;
    let events: Vec<_> = (0..2 * iters).map(|_| stream.event(true)).collect::<Result<_, _>>().map_err(e)?;
    g.store_barrier(&format!("barrier-latency-{method:?}-start")).map_err(e)?;
    for i in 0..iters {
        stream.record(&events[2 * i]).map_err(e)?;
        g.barrier(&stream, 3, method).map_err(e)?;
        stream.record(&events[2 * i + 1]).map_err(e)?;
    }
    g.synchronize(&stream).map_err(e)?;
    let mut t: Vec<f64> = (0..iters)
        .map(|i| events[2 * i].elapsed_ms(&events[2 * i + 1]).map(|ms| ms as f64 * 1e3))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    t.sort_by(f64::total_cmp);
    let (a, b) = (stream.event(true).map_err(e)?, stream.event(true).map_err(e)?);
    g.store_barrier(&format!("barrier-latency-{method:?}-b2b")).map_err(e)?;
    stream.record(&a).map_err(e)?;
    for _ in 0..iters {
        g.barrier(&stream, 3, method).map_err(e)?;
    }
    stream.record(&b).map_err(e)?;
    g.synchronize(&stream).map_err(e)?;
    let b2b = a.elapsed_ms(&b).map_err(e)? as f64 * 1e3 / iters as f64;
    Ok(BarrierLatency {
        median_us: t[iters / 2],
        p99_us: t[((iters - 1) as f64 * 0.99) as usize],
        back_to_back_us: b2b,
    })
}
