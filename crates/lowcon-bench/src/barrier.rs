//! `lowcon bench barrier`: barrier latency of the two sync methods (kernel and
//! stream-memop), median, p99 and back-to-back, max over ranks.

use lowcon::{GpuGroup, GpuGroupOptions, SyncMethod};

use crate::Res;

/// Measures `iters` timed barriers per method after `warmup` untimed ones, as one rank;
/// rank 0 prints the table, with `json` also a JSON object after each row.
pub fn run(iters: usize, warmup: usize, json: bool) -> Res<()> {
    let g = GpuGroup::from_env(GpuGroupOptions::default())?;
    let (rank, world) = (g.rank(), g.world_size());
    if rank == 0 {
        println!("# barrier latency, {world} GPUs, {iters} timed barriers after {warmup} warm-up, max over ranks");
        println!("{:<8} {:>6} {:>12} {:>10} {:>18}", "method", "ranks", "median (us)", "p99 (us)", "back-to-back (us)");
    }
    for method in [SyncMethod::Kernel, SyncMethod::StreamMemop] {
        let l = lowcon_selftest::gpu_ranks::barrier_latency(&g, method, iters, warmup)?;
        let mx = crate::stats::gather_max(
            &g,
            &format!("bench-barrier-{method:?}"),
            &[l.median_us, l.p99_us, l.back_to_back_us],
        )?;
        let max = |k: usize| mx[k];
        if rank == 0 {
            let name = method.name();
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
