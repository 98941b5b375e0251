//! lowcon's benchmarks: the library behind `lowcon bench`. The `lowcon` command parses
//! the flags and calls in here; every measuring function runs as one rank of a job
//! started by `lowcon launch` (the torchrun environment), and rank 0 prints the table.
//! Every number is the max over ranks of each rank's median (or p99), timed with CUDA
//! events on the device (wall clock on the host backend).
//!
//! The modules, in the order a measurement goes through them:
//!
//! | module | what it holds | `lowcon bench ...` |
//! | --- | --- | --- |
//! | [`sweep`] | nccl-tests-style size sweeps of lowcon's algorithms (GPUs or the host backend), NCCL beside them | `all-gather`, `reduce-scatter`; `quick` runs both |
//! | [`saturated`] | interference: GEMM slowdown and bandwidth kept with the collective saturating the GEMM window, lowcon vs NCCL vs a null copy, clocks and energy | `overlap` (default mode) |
//! | [`stats`] | its arithmetic: pairwise ratios, medians and spreads, busbw, SM time per GB, the interleaved schedule | |
//! | [`nvml`] | SM clock, throttle reasons and energy through NVML loaded at run time | `overlap` |
//! | [`overlap`] | the first overlap test: every collective enqueued before the GEMMs (the never-block check) | `overlap --mode burst` |
//! | [`barrier`] | barrier latency, kernel vs stream-memop | `barrier` |
//! | [`queue`] | where the driver's per-stream queue makes an enqueue block, lowcon and NCCL | `queue-depth` |
//! | [`nccl`] | the NCCL baseline, loaded at run time (default and copy-engine communicators) | used by `all-gather`, `reduce-scatter`, `overlap` |
//! | [`report`] | result rows, their table lines, and the `--json` / `--csv` / `--plot` files | every subcommand; `plot` reads `--json` files back |
//! | [`plot`] | the PNG: busbw vs size per collective, overlap slowdowns as bars | `--plot`, `plot`, `quick` |
//! | [`tune`] | the planner's candidates on this box, alone, small (eager and replayed) and large, into a tuning table | `tune` |
//! | [`reduce_kernels`] | the reduction kernels (ce-reduce's, the bf16 wire's, bulk reduce-add) and two controls on one GPU, alone and beside a saturated GEMM, per launch shape, pieces and priority | `reduce-kernels` |

pub mod barrier;
mod contenders;
pub mod nccl;
pub mod nvml;
pub mod overlap;
pub mod plot;
pub mod queue;
pub mod reduce_kernels;
pub mod report;
pub mod rows;
pub mod saturated;
pub mod stats;
pub mod sweep;
pub mod tune;

pub use report::{Output, OverlapRow, SweepRow};

/// A variant as the benches name it: an algorithm, optionally with `/` and a second
/// choice of the call (its `Default` when absent).
fn variant<A, B>(name: &str) -> lowcon::Result<(A, B)>
where
    A: std::str::FromStr<Err = lowcon::Error>,
    B: std::str::FromStr<Err = lowcon::Error> + Default,
{
    match name.split_once('/') {
        Some((a, b)) => Ok((a.parse()?, b.parse()?)),
        None => Ok((name.parse()?, B::default())),
    }
}

/// A reduce-scatter variant: `/once` or `/pieces` for how ce-reduce launches its
/// reduction (`ce-reduce/once`; NOTE [one launch per call]).
pub fn rs_variant(name: &str) -> lowcon::Result<(lowcon::ReduceScatterAlgorithm, lowcon::ReduceLaunch)> {
    variant(name)
}

/// An all-gather variant: `/barrier`, `/in-order` or `/any-order` for what ce-pull's
/// copies wait for (`ce-pull/in-order`; NOTE [arrival-driven all-gather]).
pub fn ag_variant(name: &str) -> lowcon::Result<(lowcon::AllGatherAlgorithm, lowcon::Arrival)> {
    variant(name)
}
pub use sweep::Kind;

/// The benchmarks' result type: errors are reported to the user as they are.
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Whether this process is rank 0 (or runs outside a launched job): the one that prints
/// tables and writes files.
pub fn is_rank0() -> bool {
    std::env::var("RANK").map_or(true, |r| r == "0")
}

/// Sends NCCL's INIT log to a file per process (`NCCL_DEBUG=INFO`,
/// `NCCL_DEBUG_SUBSYS=INIT`, `NCCL_DEBUG_FILE=$TMPDIR/lowcon-nccl-debug.%p`) so that the
/// saturated benchmark can read the channel count, i.e. NCCL's CTAs per collective
/// ([`nccl::cta_count`]). Leaves everything alone when `NCCL_DEBUG` is already set or
/// the channels are pinned with `NCCL_MIN_NCHANNELS` = `NCCL_MAX_NCHANNELS`.
///
/// # Safety
/// Sets environment variables: no other thread may be running.
pub unsafe fn nccl_debug_to_file() {
    let env = |k| std::env::var(k).ok();
    if env("NCCL_DEBUG").is_some()
        || nccl::pinned_channels(env("NCCL_MIN_NCHANNELS").as_deref(), env("NCCL_MAX_NCHANNELS").as_deref()).is_some()
    {
        return;
    }
    let file = std::env::temp_dir().join("lowcon-nccl-debug.%p");
    // SAFETY: the caller guarantees no other thread is running.
    unsafe {
        std::env::set_var("NCCL_DEBUG", "INFO");
        std::env::set_var("NCCL_DEBUG_SUBSYS", "INIT");
        std::env::set_var("NCCL_DEBUG_FILE", file);
    }
}

/// Sets `NCCL_NVLS_ENABLE=0` unless it is already set: the NCCL baseline runs without
/// NVLink multicast (NVLS) unless asked to.
///
/// # Safety
/// Sets an environment variable: no other thread may be running (call it at the start
/// of a benchmark command, before anything starts threads).
pub unsafe fn no_nvls() {
    if std::env::var("NCCL_NVLS_ENABLE").is_err() {
        // SAFETY: the caller guarantees no other thread is running.
        unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    }
}
