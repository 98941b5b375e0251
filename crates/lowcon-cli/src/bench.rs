//! `lowcon bench ...`: measurements, run as one process per rank under `lowcon launch`.
//! Rank 0 prints the table (and `--json` lines); every number is the max over ranks of
//! each rank's median (or p99), timed with CUDA events on the device.

use clap::Subcommand;
use lowcon::{GpuGroup, GpuGroupOptions, SyncMethod};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Barrier latency, kernel vs stream-memop.
    Barrier {
        /// Timed barriers per method.
        #[arg(long, default_value_t = 2000)]
        iters: usize,
        /// Untimed barriers first.
        #[arg(long, default_value_t = 200)]
        warmup: usize,
        /// Also print one JSON object per row.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        BenchCommand::Barrier { iters, warmup, json } => barrier(iters.max(1), warmup, json),
    }
}

fn barrier(iters: usize, warmup: usize, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let g = GpuGroup::from_env(GpuGroupOptions::default())?;
    let (rank, world) = (g.rank(), g.world_size());
    if rank == 0 {
        println!("# barrier latency, {world} GPUs, {iters} timed barriers after {warmup} warm-up, max over ranks");
        println!("{:<8} {:>6} {:>12} {:>10} {:>18}", "method", "ranks", "median (us)", "p99 (us)", "back-to-back (us)");
    }
    for method in [SyncMethod::Kernel, SyncMethod::StreamMemop] {
        let l = lowcon_tests::gpu_ranks::barrier_latency(&g, method, iters, warmup)?;
        let mine = [l.median_us, l.p99_us, l.back_to_back_us].map(f64::to_le_bytes).concat();
        let all = g.all_gather_bytes(&format!("bench-barrier-{method:?}"), &mine)?;
        let max = |k: usize| {
            all.iter().map(|b| f64::from_le_bytes(b[8 * k..8 * k + 8].try_into().expect("8 bytes"))).fold(0.0, f64::max)
        };
        if rank == 0 {
            let name = match method {
                SyncMethod::Kernel => "kernel",
                SyncMethod::StreamMemop => "memop",
            };
            println!("{name:<8} {world:>6} {:>12.2} {:>10.2} {:>18.2}", max(0), max(1), max(2));
            if json {
                println!(
                    "{{\"bench\":\"barrier\",\"method\":\"{name}\",\"ranks\":{world},\"iters\":{iters},\"median_us\":{:.3},\"p99_us\":{:.3},\"back_to_back_us\":{:.3}}}",
                    max(0),
                    max(1),
                    max(2)
                );
            }
        }
    }
    g.store_barrier("bench-barrier-done")?;
    Ok(())
}
