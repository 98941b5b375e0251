//! lowcon's GPU checks, written once and run two ways:
//!
//! - from `cargo test` (`tests/tests/gpu.rs`), where each check skips with a printed
//!   reason when no GPU is present (unless `LOWCON_REQUIRE_GPU=1`);
//! - from the `lowcon-gpu-tests` binary that `scripts/gpu-bundle.sh` carries to a GPU
//!   machine, which runs them all and prints a table.
//!
//! Every check uses fresh random data, poisons outputs before the kernel runs, and
//! compares with a CPU reference; each returns `Err` with a message on failure.

pub mod gpu;

use std::time::Instant;

/// The outcome of one check.
#[derive(Debug)]
pub struct Outcome {
    /// Short name, e.g. `vec_add_f32[n=1]`.
    pub name: String,
    /// `Ok(detail)` or `Err(what went wrong)`.
    pub result: Result<String, String>,
    /// Wall time of the whole check (setup included), for the table only.
    pub seconds: f64,
}

/// Runs `f`, timing it, and turns a panic-free `Result` into an [`Outcome`].
pub fn run_check(name: impl Into<String>, f: impl FnOnce() -> Result<String, String>) -> Outcome {
    let t = Instant::now();
    let result = f();
    Outcome { name: name.into(), result, seconds: t.elapsed().as_secs_f64() }
}

/// Why GPU checks cannot run here, or `None` when a GPU is usable.
pub fn gpu_unavailable() -> Option<String> {
    match lowcon::cuda::device_count() {
        Ok(0) => Some("no CUDA device visible".into()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// Whether a missing GPU must fail the tests instead of skipping them (`LOWCON_REQUIRE_GPU=1`,
/// set by the GPU bundle's run script).
pub fn gpu_required() -> bool {
    std::env::var("LOWCON_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Prints why a test is skipped. Written to the stderr handle directly, which libtest
/// does not capture (it captures only the `print!` family), so the reason shows in every
/// `cargo test` run.
pub fn print_skip(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped {test}: {why}");
}

/// Formats outcomes as a fixed-width table; returns (table, number failed).
pub fn table(outcomes: &[Outcome]) -> (String, usize) {
    let w = outcomes.iter().map(|o| o.name.len()).max().unwrap_or(4).max(4);
    let mut s = format!("{:<w$}  {:<6}  {:>9}  detail\n", "test", "result", "seconds");
    s.push_str(&format!("{}\n", "-".repeat(w + 30)));
    let mut failed = 0;
    for o in outcomes {
        let (status, detail) = match &o.result {
            Ok(d) => ("ok", d.as_str()),
            Err(e) => {
                failed += 1;
                ("FAILED", e.as_str())
            }
        };
        s.push_str(&format!("{:<w$}  {:<6}  {:>9.3}  {}\n", o.name, status, o.seconds, detail));
    }
    s.push_str(&format!("{} passed, {} failed\n", outcomes.len() - failed, failed));
    (s, failed)
}
