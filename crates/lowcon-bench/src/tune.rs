//! `lowcon bench tune`: measures the planner's candidates on this box, at this world
//! size, and writes a tuning table (NOTE [tuning tables] in `lowcon::plan`) that the
//! planner loads (`LOWCON_TUNING=FILE`, or shipped under `host/src/plan/tables/`).
//!
//! What it measures, alone (nothing beside the collective), symmetric buffers, bf16:
//! - small messages (8 KiB to 1 MiB per rank, doubling): every small-message candidate,
//!   eager and replayed from a CUDA graph (`--graph` sweeps): the fastest eager one per
//!   size makes the eager rules, the fastest replayed one the `mode=captured` rules;
//! - large messages (4 MiB to 256 MiB per rank, x4): the copy-engine and SM candidates,
//!   eager, the reductions at the library's SM budget of 16 CTAs. More CTAs win alone
//!   (64 beat 16 by 11-36% for sm-direct at 2 ranks, 4 to 256 MiB, 2026-11-26), but lowcon's
//!   promise is the GEMM's speed beside it: more CTAs are a choice only where a paired
//!   run inside a training step showed them winning (the FSDP2 wire's 64).
//!
//! Each size's winner is the lowest time per call (the max over ranks of each rank's
//! median batch, `sweep`'s method); neighbouring sizes with the same winner merge into
//! one rule, whose range ends at the last size it won (`bytes=..S`: up to S included).
//! Rules for FSDP2 and TP (`context=fsdp|tp`) are not measured here: a choice that wins
//! beside a synthetic GEMM has lost inside FSDP2's step before (docs/algorithms.md), so
//! they come from paired FSDP2 runs, and the tuner carries them over from the table the
//! planner uses now, saying so in the table.

use lowcon::plan::{TableWriter, format_bytes};
use lowcon::{DType, GpuGroup, GpuGroupOptions, ReduceOp, SyncMethod};

use crate::report::SweepRow;
use crate::sweep::{Kind, SweepOptions};
use crate::{Res, is_rank0};

/// CTAs of the reductions the alone rules may choose (module docs).
pub const ALONE_CTAS: u32 = lowcon::plan::DEFAULT_REDUCE_CTAS;

/// What `lowcon bench tune` measures and where it writes.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// The table to write (rank 0).
    pub out: std::path::PathBuf,
    /// The `source` line: date, commit and machine (the run script passes them).
    pub source: String,
    /// Timed calls per batch, batches, warm-up calls.
    pub iters: usize,
    /// See [`TuneOptions::iters`].
    pub reps: usize,
    /// See [`TuneOptions::iters`].
    pub warmup: usize,
    /// Largest size per rank of the small-message sweep (its rules' range).
    pub small_max: usize,
    /// Largest size per rank of the large sweep.
    pub large_max: usize,
}

/// One size's winner.
#[derive(Clone, Debug, PartialEq)]
pub struct Win {
    /// Bytes per rank.
    pub size: usize,
    /// The algorithm's name.
    pub algorithm: String,
    /// CTAs asked for (None: the algorithm's default).
    pub ctas: Option<u32>,
    /// Sync method's name.
    pub sync: String,
    /// µs per call.
    pub us: f64,
}

/// The fastest lowcon row per size among `rows` (eager ones, or replayed with `graph`).
pub fn winners(rows: &[SweepRow], graph: bool) -> Vec<Win> {
    let mut sizes: Vec<usize> = rows.iter().filter(|r| r.implementation == "lowcon").map(|r| r.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|size| {
            rows.iter()
                .filter(|r| r.implementation == "lowcon" && r.size == size && r.graph == graph && r.time_us > 0.0)
                .min_by(|a, b| a.time_us.total_cmp(&b.time_us))
                .map(|r| Win {
                    size,
                    algorithm: r.algorithm.clone(),
                    ctas: r.ctas,
                    sync: r.sync.clone(),
                    us: r.time_us,
                })
        })
        .collect()
}

/// Rules (the words after the collective) for consecutive winners: one per run of sizes
/// with the same choice, from above the previous run's last size (`from`) up to its own
/// (the last run open-ended when `open_end`).
pub fn rules(wins: &[Win], from: usize, open_end: bool, extra: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lo = from;
    let mut i = 0;
    while i < wins.len() {
        let mut j = i;
        let same = |a: &Win, b: &Win| a.algorithm == b.algorithm && a.ctas == b.ctas && a.sync == b.sync;
        while j + 1 < wins.len() && same(&wins[j + 1], &wins[i]) {
            j += 1;
        }
        let hi = if open_end && j + 1 == wins.len() { String::new() } else { format_bytes(wins[j].size) };
        let lo_s = if lo == 0 { String::new() } else { format_bytes(lo) };
        let w = &wins[i];
        let mut r = format!("{extra}bytes={lo_s}..{hi} algorithm={}", w.algorithm);
        if let Some(c) = w.ctas {
            r.push_str(&format!(" ctas={c}"));
        }
        if w.sync != "kernel" {
            r.push_str(&format!(" sync={}", w.sync));
        }
        out.push(r.trim().to_string());
        lo = wins[j].size;
        i = j + 1;
    }
    out
}

/// A sweep of `kind` as the tuner runs it.
fn sweep(
    t: &TuneOptions,
    kind: Kind,
    (min, max, factor): (usize, usize, usize),
    algorithms: &[&str],
    ctas: &[Option<u32>],
    graph: bool,
) -> SweepOptions {
    SweepOptions {
        kind,
        min_bytes: min,
        max_bytes: max,
        factor,
        iters: t.iters,
        warmup: t.warmup,
        reps: t.reps,
        dtype: DType::Bf16,
        op: ReduceOp::Sum,
        algorithms: algorithms.iter().map(|a| a.to_string()).collect(),
        methods: vec![SyncMethod::Kernel],
        ctas: ctas.to_vec(),
        pipeline: vec![None],
        check: false,
        nccl: false,
        staged: false,
        backend_host: false,
        graph,
        wire: None,
        inexact: false,
        host_only: false,
    }
}

/// The short name of a GPU for a table's machine line (`NVIDIA H200` -> `H200`).
pub fn gpu_word(device: &str) -> String {
    device.split_whitespace().find(|w| w.chars().any(|c| c.is_ascii_digit())).unwrap_or(device).to_string()
}

/// Runs the tuner as one rank of a launched job; rank 0 writes the table.
pub fn run(t: &TuneOptions) -> Res<()> {
    let (device, world, carried) = {
        let g = GpuGroup::from_env(GpuGroupOptions::default())?;
        // The rules the planner uses now (the model's scaled ones where no table matched).
        let (table, _) = g.planner().table();
        let carried: Vec<String> = table.rule_lines().into_iter().filter(|l| l.contains("context=")).collect();
        (g.device().info()?.name, g.world_size(), carried)
    };
    let small = (8 << 10, t.small_max, 2);
    let large = ((t.small_max * 4).max(4 << 20), t.large_max, 4);
    // Small messages: the algorithms with SM parts at their default CTAs and at 64 and 128
    // (ll past 64 KiB and the one-shot kernels at 1 MiB are faster on more CTAs than their
    // defaults: 4x H200, 2026-11-26); the all-gather's copy-engine ones have no CTAs.
    let small_ctas = [None, Some(64), Some(128)];
    let mut ag_small = crate::sweep::gpu(&sweep(t, Kind::AllGather, small, &["ll", "sm-oneshot"], &small_ctas, true))?;
    ag_small.extend(crate::sweep::gpu(&sweep(t, Kind::AllGather, small, &["ce-pull", "ce-push"], &[None], true))?);
    let rs_small =
        crate::sweep::gpu(&sweep(t, Kind::ReduceScatter, small, &["ll", "sm-direct", "ce-reduce"], &small_ctas, true))?;
    let ag_large =
        crate::sweep::gpu(&sweep(t, Kind::AllGather, large, &["ce-pull", "ce-push", "sm-oneshot"], &[None], false))?;
    let rs_large = crate::sweep::gpu(&sweep(
        t,
        Kind::ReduceScatter,
        large,
        &["sm-direct", "ce-reduce"],
        &[Some(crate::tune::ALONE_CTAS)],
        false,
    ))?;
    if !is_rank0() {
        return Ok(());
    }
    let mut w = TableWriter::new(&gpu_word(&device), world, &t.source);
    w.comment(&format!(
        "Measured by lowcon bench tune on {world} ranks of {device}, alone, bf16, symmetric buffers: small\n\
         messages eager and replayed (mode=captured), large ones eager. FSDP2 and TP rules are carried\n\
         from the table in use (confirmed by paired FSDP2 runs, not by this tune)."
    ));
    use lowcon::plan::table::Coll;
    let (exact, other): (Vec<&String>, Vec<&String>) = carried.iter().partition(|r| r.contains("exact=yes"));
    for r in exact {
        let (coll, words) = split_coll(r)?;
        w.rule(coll, words)?;
    }
    for (coll, rows) in [(Coll::AllGather, &ag_small), (Coll::ReduceScatter, &rs_small)] {
        let captured = winners(rows, true);
        for r in rules(&captured, 0, false, "mode=captured ") {
            w.rule(coll, &r)?;
        }
        for r in rules(&winners(rows, false), 0, false, "") {
            w.rule(coll, &r)?;
        }
    }
    for r in other {
        let (coll, words) = split_coll(r)?;
        w.rule(coll, words)?;
    }
    let from = t.small_max;
    for r in rules(&winners(&ag_large, false), from, true, "mem=symmetric ") {
        w.rule(Coll::AllGather, &r)?;
    }
    w.rule(Coll::AllGather, "algorithm=ce-pull")?;
    for r in rules(&winners(&rs_large, false), from, true, "") {
        w.rule(Coll::ReduceScatter, &r)?;
    }
    let text = w.finish();
    std::fs::write(&t.out, &text).map_err(|e| format!("cannot write {}: {e}", t.out.display()))?;
    println!("# the table (written to {}):\n{text}", t.out.display());
    Ok(())
}

fn split_coll(rule: &str) -> Res<(lowcon::plan::table::Coll, &str)> {
    use lowcon::plan::table::Coll;
    let (head, rest) = rule.split_once(' ').unwrap_or((rule, ""));
    match head {
        "all-gather" => Ok((Coll::AllGather, rest)),
        "reduce-scatter" => Ok((Coll::ReduceScatter, rest)),
        _ => Err(format!("rule {rule:?}: no collective").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: usize, algorithm: &str, us: f64, graph: bool) -> SweepRow {
        SweepRow {
            bench: "all-gather".into(),
            implementation: "lowcon".into(),
            algorithm: algorithm.into(),
            sync: "kernel".into(),
            ctas: None,
            pipeline: None,
            ranks: 4,
            dtype: "bf16".into(),
            op: None,
            size,
            total: 4 * size,
            count: size / 2,
            time_us: us,
            algbw_gbs: 0.0,
            busbw_gbs: 0.0,
            wrong: None,
            graph,
            host_us: None,
            wire: None,
            wire_busbw_gbs: None,
            host_only: false,
            time_us_min: None,
            time_us_max: None,
            batches_us: None,
        }
    }

    #[test]
    fn winners_take_the_fastest_per_size_and_mode() {
        let rows = vec![
            row(8192, "ll", 6.0, false),
            row(8192, "sm-oneshot", 15.0, false),
            row(8192, "ll", 9.0, true),
            row(8192, "sm-oneshot", 4.0, true),
            row(16384, "ll", 7.0, false),
            row(16384, "sm-oneshot", 6.5, false),
        ];
        let w = winners(&rows, false);
        assert_eq!(
            w.iter().map(|w| (w.size, w.algorithm.as_str())).collect::<Vec<_>>(),
            [(8192, "ll"), (16384, "sm-oneshot")]
        );
        assert_eq!(winners(&rows, true)[0].algorithm, "sm-oneshot");
    }

    #[test]
    fn runs_of_one_winner_merge_into_a_rule() {
        let w = |size, a: &str| Win { size, algorithm: a.into(), ctas: None, sync: "kernel".into(), us: 1.0 };
        let wins = vec![w(8 << 10, "ll"), w(16 << 10, "ll"), w(32 << 10, "sm-oneshot"), w(64 << 10, "ll")];
        assert_eq!(
            rules(&wins, 0, false, ""),
            ["bytes=..16K algorithm=ll", "bytes=16K..32K algorithm=sm-oneshot", "bytes=32K..64K algorithm=ll"]
        );
        let big =
            vec![Win { ctas: Some(64), ..w(4 << 20, "sm-direct") }, Win { ctas: Some(64), ..w(16 << 20, "sm-direct") }];
        assert_eq!(
            rules(&big, 1 << 20, true, "mem=symmetric "),
            ["mem=symmetric bytes=1M.. algorithm=sm-direct ctas=64"]
        );
    }

    #[test]
    fn the_rules_parse_as_a_table() {
        let w = |size, a: &str| Win { size, algorithm: a.into(), ctas: None, sync: "memop".into(), us: 1.0 };
        let mut t = TableWriter::new("H200", 4, "test");
        for r in rules(&[w(8 << 10, "ll"), w(1 << 20, "ce-pull")], 0, true, "mode=captured ") {
            t.rule(lowcon::plan::table::Coll::AllGather, &r).unwrap();
        }
        let table = lowcon::plan::table::Table::parse("t", &t.finish()).unwrap();
        assert_eq!(table.rule_lines().len(), 2);
        assert_eq!(gpu_word("NVIDIA H200"), "H200");
        assert_eq!(gpu_word("NVIDIA H100 80GB HBM3"), "H100");
    }
}
