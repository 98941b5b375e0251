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
//! | [`overlap`] | GEMM slowdown next to a stream of collectives (cuBLAS GEMMs), lowcon vs NCCL | `overlap` |
//! | [`barrier`] | barrier latency, kernel vs stream-memop | `barrier` |
//! | [`queue`] | where the driver's per-stream queue makes an enqueue block, lowcon and NCCL | `queue-depth` |
//! | [`nccl`] | the NCCL baseline, loaded at run time (default and copy-engine communicators) | used by `all-gather`, `reduce-scatter`, `overlap` |
//! | [`report`] | result rows, their table lines, and the `--json` / `--csv` / `--plot` files | every subcommand; `plot` reads `--json` files back |
//! | [`plot`] | the PNG: busbw vs size per collective, overlap slowdowns as bars | `--plot`, `plot`, `quick` |

pub mod barrier;
pub mod nccl;
pub mod overlap;
pub mod plot;
pub mod queue;
pub mod report;
pub mod sweep;

pub use report::{Output, OverlapRow, SweepRow};
pub use sweep::Kind;

/// The benchmarks' result type: errors are reported to the user as they are.
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Whether this process is rank 0 (or runs outside a launched job): the one that prints
/// tables and writes files.
pub fn is_rank0() -> bool {
    std::env::var("RANK").map_or(true, |r| r == "0")
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
