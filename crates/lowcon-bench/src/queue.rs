//! `lowcon bench queue-depth`: where the CUDA driver's per-stream queue makes an enqueue
//! block, for lowcon and for NCCL alike.
//!
//! Each rank holds its stream with a stream-memop wait on a device flag, then enqueues
//! small collectives back to back and times each enqueue on the host. A helper thread
//! writes the flag from another stream after `hold`, so the stream drains. The first
//! call whose enqueue took longer than `hold / 4` is where the driver's queue was full:
//! the calls before it are how many fit behind a stalled stream. lowcon's own code never
//! waits (the watchdog), so whatever blocks here is the driver.

use std::time::{Duration, Instant};

use lowcon::cuda::{MappedHostAlloc, Stream, StreamPriority};
use lowcon::{
    AllGatherAlgorithm, AllGatherOptions, DType, DeviceBuf, GpuGroup, GpuGroupOptions, ReduceOp,
    ReduceScatterAlgorithm, ReduceScatterOptions, SyncMethod,
};

use crate::{Res, nccl};

/// One measured configuration.
struct Outcome {
    /// Index of the first call whose enqueue blocked (`None`: none did).
    blocked_at: Option<usize>,
    /// Its enqueue time.
    blocked_for: Duration,
    /// Median enqueue time of the calls that did not block.
    median_us: f64,
}

/// The word a held stream waits on: pinned host memory mapped into the device, so the
/// release is a plain store from a thread, with no driver call (a driver call can wait
/// behind an enqueue the driver blocks: on H200, creating a stream did, and with NCCL
/// even a stream-memop write never returned).
struct Flag {
    host: usize,
    dev: u64,
}

/// Holds `stream` on `flag` (a word that only grows; `value` is the value to wait for),
/// enqueues `calls` calls, and times each enqueue.
#[allow(clippy::too_many_arguments)]
fn measure(
    g: &GpuGroup,
    stream: &Stream,
    flag: &Flag,
    value: u32,
    name: &str,
    calls: usize,
    hold: Duration,
    mut call: impl FnMut() -> Result<(), String>,
) -> Result<Outcome, String> {
    let flag_ptr = flag.dev;
    let host = flag.host;
    g.store_barrier(&format!("queue-depth-{name}")).map_err(|e| e.to_string())?;
    if g.rank() == 0 {
        eprintln!("# measuring {name}");
    }
    // SAFETY: `flag` is live device memory until after the synchronize below.
    unsafe { stream.wait_geq_u32(flag_ptr, value) }.map_err(|e| e.to_string())?;
    let releaser = std::thread::spawn(move || -> Result<(), String> {
        std::thread::sleep(hold);
        // SAFETY: `host` is the live, aligned pinned word of `flag` (freed only at the
        // end of `run`, after this thread is joined); the device only reads it.
        unsafe { std::ptr::write_volatile(host as *mut u32, value) };
        Ok(())
    });
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        call()?;
        times.push(t.elapsed());
    }
    releaser.join().map_err(|_| "the releasing thread panicked".to_string())??;
    g.synchronize(stream).map_err(|e| e.to_string())?;
    let blocked_at = times.iter().position(|t| *t > hold / 4);
    let mut quick: Vec<f64> = times.iter().filter(|t| **t <= hold / 4).map(|t| t.as_secs_f64() * 1e6).collect();
    quick.sort_by(f64::total_cmp);
    Ok(Outcome {
        blocked_at,
        blocked_for: blocked_at.map_or(Duration::ZERO, |i| times[i]),
        median_us: quick.get(quick.len() / 2).copied().unwrap_or(0.0),
    })
}

/// Runs every configuration with `calls` calls of `shard` bytes per rank behind a hold
/// of `hold`; rank 0 prints the table (max over ranks of the blocked index's earliest).
pub fn run(calls: usize, shard: usize, hold: Duration) -> Res<()> {
    let g = GpuGroup::from_env(GpuGroupOptions::default())?;
    let (rank, world) = (g.rank(), g.world_size());
    let stream = g.device().stream(StreamPriority::High)?;
    let n = shard / 2;
    let inp = g.alloc(shard * world)?;
    let out = g.alloc(shard * world)?;
    // Freed at the end of this function only: after an error, a releasing thread may
    // still write it, so it is leaked.
    let mapped = std::mem::ManuallyDrop::new(MappedHostAlloc::new(g.device(), 4096)?);
    let flag = Flag { host: mapped.host_ptr() as usize, dev: mapped.ptr() };
    let mut value = 0u32;
    let mut next = || {
        value += 1;
        value
    };
    if rank == 0 {
        println!(
            "# queue depth: {calls} calls of {} KiB per rank behind a stalled stream (held {:.1} s), {world} GPUs",
            shard / 1024,
            hold.as_secs_f64()
        );
        println!("{:<34} {:>16} {:>14} {:>18}", "implementation", "first blocked", "blocked (ms)", "enqueue p50 (us)");
    }
    let print = |name: &str, o: &Outcome| -> Res<()> {
        let mine = [
            o.blocked_at.map_or(f64::INFINITY, |i| i as f64),
            o.blocked_for.as_micros() as f64,
            o.median_us as u64 as f64,
        ];
        let all = crate::stats::gather(&g, &format!("queue-depth-row-{name}"), &mine)?;
        let first = crate::stats::min_over_ranks(&all)[0];
        let mx = crate::stats::max_over_ranks(&all);
        let (blocked, med) = (mx[1] as u64, mx[2] as u64);
        if rank == 0 {
            let first = if first.is_infinite() { format!("none of {calls}") } else { format!("call {first}") };
            println!("{name:<34} {first:>16} {:>14.1} {med:>18}", blocked as f64 / 1e3);
        }
        Ok(())
    };
    for sync in [SyncMethod::Kernel, SyncMethod::StreamMemop] {
        let m = if sync == SyncMethod::Kernel { "kernel" } else { "memop" };
        for (label, ag) in [("all-gather ce-push", true), ("reduce-scatter sm-direct", false)] {
            let name = format!("lowcon {label} ({m})");
            let o = measure(&g, &stream, &flag, next(), &name, calls, hold, || {
                let r = (|| {
                    if ag {
                        let opts = AllGatherOptions {
                            algorithm: AllGatherAlgorithm::CePush,
                            sync: Some(sync),
                            ..Default::default()
                        };
                        let i = DeviceBuf::symmetric(&inp, 0, n, DType::Bf16)?;
                        let o = DeviceBuf::symmetric(&out, 0, n * world, DType::Bf16)?;
                        g.all_gather(i, o, &stream, &opts)
                    } else {
                        let opts = ReduceScatterOptions {
                            algorithm: ReduceScatterAlgorithm::SmDirect,
                            sync: Some(sync),
                            ..Default::default()
                        };
                        let i = DeviceBuf::symmetric(&inp, 0, n * world, DType::Bf16)?;
                        let o = DeviceBuf::symmetric(&out, 0, n, DType::Bf16)?;
                        g.reduce_scatter(i, o, ReduceOp::Sum, &stream, &opts)
                    }
                })();
                r.map_err(|e| e.to_string())
            })?;
            print(&name, &o)?;
        }
    }
    match nccl::version() {
        Err(why) => {
            if rank == 0 {
                println!("# NCCL skipped: {why}");
            }
        }
        Ok(_) => {
            // If NCCL never returns from an enqueue behind the stalled stream, say so
            // instead of hanging the job.
            let limit = hold + Duration::from_secs(20);
            std::thread::spawn(move || {
                std::thread::sleep(2 * limit);
                if rank == 0 {
                    println!(
                        "NCCL: an enqueue was still blocked {:.0} s after the stream was released",
                        limit.as_secs_f64()
                    );
                }
                std::process::exit(0);
            });
            let c = nccl::Comm::new(&g, "queue-depth", false)?;
            let (si, so) = (inp.local_ptr(), out.local_ptr());
            // NCCL sets up its connections at a communicator's first collectives, and that
            // waits for the stream: warm both collectives up before a stream is held (the
            // first version measured that set-up, blocked at call 0).
            // SAFETY: as in the measured calls below.
            unsafe {
                c.all_gather(si, so, shard, stream.raw() as _)?;
                c.reduce_scatter(si, so, n, DType::Bf16, ReduceOp::Sum, stream.raw() as _)?;
            }
            g.synchronize(&stream)?;
            let o = measure(&g, &stream, &flag, next(), "nccl-ag", calls, hold, || {
                // SAFETY: `inp` holds `shard` bytes and `out` `world * shard` on this GPU.
                unsafe { c.all_gather(si, so, shard, stream.raw() as _) }
            })?;
            print("NCCL all-gather", &o)?;
            let o = measure(&g, &stream, &flag, next(), "nccl-rs", calls, hold, || {
                // SAFETY: `inp` holds `world * n` bf16 elements, `out` `n`.
                unsafe { c.reduce_scatter(si, so, n, DType::Bf16, ReduceOp::Sum, stream.raw() as _) }
            })?;
            print("NCCL reduce-scatter", &o)?;
        }
    }
    g.store_barrier("queue-depth-done")?;
    // Every stream that waited on it has been synchronised, every releasing thread joined.
    drop(std::mem::ManuallyDrop::into_inner(mapped));
    Ok(())
}
