//! The sweep on the host backend (`--backend host`).

use std::time::Instant;

use lowcon::{AllGatherOptions, HostGroup, HostGroupOptions, HostInput, ReduceScatterOptions};

use super::*;

/// The same sweep on the host backend (CPU shared memory; wall-clock timing, since
/// there are no device events). For checking the tool and the algorithms without a GPU;
/// the numbers say nothing about GPUs.
pub fn host(a: &SweepOptions) -> Res<Vec<SweepRow>> {
    let g = HostGroup::from_env(HostGroupOptions::default())?;
    let (rank, world) = (g.rank(), g.world_size());
    let runner = lowcon_selftest::coll::Runner::new(g)?;
    let g = runner.g.as_host().ok_or("the host sweep on a GPU group")?;
    if rank == 0 {
        header(a, world, "host-backend ranks (CPU shared memory, wall-clock timing)");
    }
    let mut rows = Vec::new();
    for algo in &a.algorithms {
        for &size in &sizes(a) {
            if algo == "ll" && size > LL_SWEEP_MAX {
                continue; // as on GPUs: a small-message algorithm
            }
            let count = size / a.dtype.size();
            let (ic, oc) = match a.kind {
                Kind::AllGather => (count, count * world),
                Kind::ReduceScatter => (count * world, count),
            };
            let mut input = vec![0x3cu8; ic * a.dtype.size()];
            if a.wire.is_some() && !a.inexact {
                // bf16-exact f32s (see `gpu`).
                input.chunks_exact_mut(4).for_each(|w| w.copy_from_slice(&0x3c3c_0000u32.to_le_bytes()));
            }
            let mut out = vec![0u8; oc * a.dtype.size()];
            // As on GPUs: the input in symmetric memory (peers read it in place) unless
            // `--staged` asks for ordinary memory, which each call stages.
            let sym = match a.staged {
                true => None,
                false => {
                    let b = g.alloc(input.len())?;
                    b.write(rank, 0, &input)?;
                    Some(b)
                }
            };
            let inp = || match &sym {
                Some(buf) => HostInput::Symmetric { buf, offset: 0, len: input.len() },
                None => HostInput::Plain(&input),
            };
            let mut call = || -> lowcon::Result<()> {
                match a.kind {
                    Kind::AllGather => {
                        let (algorithm, arrival) = crate::ag_variant(algo)?;
                        let o = AllGatherOptions { algorithm, arrival, ..Default::default() };
                        g.all_gather(inp(), &mut out, a.dtype, &o)
                    }
                    Kind::ReduceScatter => {
                        let (algorithm, reduce_launch) = crate::rs_variant(algo)?;
                        let o = ReduceScatterOptions { algorithm, reduce_launch, wire: a.wire, ..Default::default() };
                        g.reduce_scatter(inp(), &mut out, a.dtype, a.op, &o)
                    }
                }
            };
            for _ in 0..a.warmup {
                call()?;
            }
            let mut per = Vec::new();
            for _ in 0..a.reps.max(1) {
                let t = Instant::now();
                for _ in 0..a.iters.max(1) {
                    call()?;
                }
                per.push(t.elapsed().as_secs_f64() * 1e6 / a.iters.max(1) as f64);
            }
            let us = median(&per);
            let wrong = if a.check {
                let case = case_for(a, algo, SyncMethod::Kernel, count)?;
                let case = Case { symmetric: false, ..case };
                Some(count_wrong(&runner, &case, &format!("check/{algo}/{size}"))?.0 as u64)
            } else {
                None
            };
            // The batches' spread, folded as on GPUs (`Timed::values`).
            let lo = per.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = per.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mut values = vec![us, wrong.unwrap_or(0) as f64, lo, hi];
            values.extend(&per);
            let mx = gather_max(g, &format!("sweep/{algo}/{size}"), &values)?;
            let r = row(a, world, "lowcon", algo, "host", None, size, mx[0], wrong.map(|_| mx[1] as u64));
            let r = SweepRow {
                time_us_min: Some(mx[2]),
                time_us_max: Some(mx[3]),
                batches_us: super::batches_text(&mx[4..]),
                ..with_wire(r, a.wire, a.dtype)
            };
            if rank == 0 {
                report::print_sweep_row(&r);
            }
            rows.push(r);
        }
    }
    runner.g.store_barrier("sweep-done")?;
    Ok(rows)
}
