//! `lowcon`: the command-line front end.

mod bench;
mod info;
mod launch;
mod selftest;
mod store_cmd;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

/// Where a collective runs (`selftest`'s and `bench`'s `--backend`): a misspelt value is
/// refused, never taken for the host backend (a GPU check must not pass on the CPU).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// lowcon's host backend: CPU shared memory, no GPU.
    Host,
    /// GPUs, one per rank (or shared with LOWCON_SHARE_GPU=1).
    Gpu,
}

#[derive(Parser)]
#[command(name = "lowcon", version, about = "Low-contention collectives for NVLink GPU boxes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start N ranks with the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
    /// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), hosting lowcon's store; fail fast.
    Launch {
        /// Ranks to start: a number, or `gpu` for one per visible GPU.
        #[arg(long, value_name = "N|gpu")]
        nproc_per_node: String,
        /// Address the store binds and MASTER_ADDR names.
        #[arg(long, default_value = "127.0.0.1")]
        master_addr: String,
        /// MASTER_PORT given to the ranks (left free for torch.distributed's own store).
        #[arg(long, default_value_t = 29500)]
        master_port: u16,
        /// Port of lowcon's store (0: any free port); the ranks get it as LOWCON_STORE_ADDR.
        #[arg(long, default_value_t = 0)]
        store_port: u16,
        /// Prefix every line the ranks print with `[rank k]`.
        #[arg(long)]
        tee: bool,
        /// Seconds between SIGTERM and SIGKILL when stopping ranks.
        #[arg(long, default_value_t = 5.0)]
        grace_period: f64,
        /// Place the ranks round-robin on M GPUs (rank k gets LOWCON_DEVICE = k mod M; `gpu`:
        /// every visible GPU). With more ranks than GPUs it also sets LOWCON_SHARE_GPU=1, so
        /// ranks share GPUs: for correctness checks on fewer GPUs (best under MPS), never for
        /// timings.
        #[arg(long, value_name = "M|gpu")]
        gpus: Option<String>,
        /// A rank killed by a signal does not stop the others (for survivors that shrink
        /// the group and go on); the job succeeds if every other rank exits 0. A rank
        /// that exits non-zero still stops the job.
        #[arg(long)]
        keep_going: bool,
        /// The command each rank runs, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// The store: serve one, or use one from a shell script.
    #[command(subcommand)]
    Store(store_cmd::StoreCommand),
    /// Benchmarks (run every rank under `lowcon launch`).
    #[command(subcommand)]
    Bench(Box<bench::BenchCommand>),
    /// Run one rank of a multi-process check (start it with `lowcon launch`); exits 1
    /// with the reason if the check fails.
    Selftest {
        #[command(subcommand)]
        scenario: selftest::Scenario,
    },
    /// Show the CUDA driver, the visible GPUs, the embedded kernels, and what the planner
    /// would pick for a few sizes, from which tuning table or model.
    Info {
        /// Ranks to plan for (default: WORLD_SIZE, else the visible GPUs, else 2).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
        world: Option<u16>,
    },
    /// Write the embedded PTX to a directory (usable as LOWCON_PTX_DIR on machines
    /// without a nightly toolchain).
    Ptx {
        /// Directory to write lowcon_kernels.ptx into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Logs (`tracing` events, the library's and its dependencies') go to stderr, one compact
/// line each: `RUST_LOG` filters them when set (`tracing-subscriber`'s `EnvFilter`
/// syntax); otherwise warnings and errors, and with `LOWCON_DEBUG=1` lowcon's debug
/// events too.
fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(dirs) if !dirs.trim().is_empty() => EnvFilter::new(dirs),
        _ if std::env::var("LOWCON_DEBUG").is_ok_and(|v| v == "1") => EnvFilter::new("warn,lowcon=debug"),
        _ => EnvFilter::new("warn"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time() // lowcon's debug events carry their own `t` (seconds since the first)
        .compact()
        .init();
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let r: Result<i32, Box<dyn std::error::Error>> = match cli.command {
        Command::Launch {
            nproc_per_node,
            master_addr,
            master_port,
            store_port,
            tee,
            grace_period,
            gpus,
            keep_going,
            command,
        } => (|| {
            let nproc = parse_nproc("--nproc-per-node", &nproc_per_node)?;
            let gpus = gpus.map(|m| parse_nproc("--gpus", &m)).transpose()?;
            if let (Some(m), Ok(n)) = (gpus, lowcon::cuda::device_count())
                && m > n
                && n > 0
            {
                return Err(format!("--gpus {m}: only {n} GPU(s) are visible").into());
            }
            if !(0.0..=3600.0).contains(&grace_period) {
                return Err(format!("--grace-period {grace_period} must be between 0 and 3600 seconds").into());
            }
            let opts = launch::LaunchOptions {
                nproc,
                master_addr,
                master_port,
                store_port,
                tee,
                grace: Duration::from_secs_f64(grace_period),
                gpus,
                keep_going,
                command,
            };
            Ok(launch::launch(&opts)?)
        })(),
        Command::Store(cmd) => store_cmd::run(cmd).map(|()| 0),
        Command::Selftest { scenario } => selftest::run(scenario),
        Command::Bench(b) => bench::run(*b).map(|()| 0),
        Command::Info { world } => info::info(world.map(usize::from)).map(|()| 0),
        Command::Ptx { out } => ptx(&out).map(|()| 0),
    };
    match r {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code.clamp(1, 255) as u8),
        Err(e) => {
            eprintln!("lowcon: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A count flag: a positive number, or `gpu` for the number of visible GPUs.
fn parse_nproc(flag: &str, v: &str) -> Result<usize, Box<dyn std::error::Error>> {
    if v == "gpu" {
        let n = lowcon::cuda::device_count().map_err(|e| format!("{flag} gpu: {e}"))?;
        if n == 0 {
            return Err(format!("{flag} gpu: no CUDA device is visible").into());
        }
        return Ok(n);
    }
    match v.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{flag} {v:?}: expected a positive number or `gpu`").into()),
    }
}

fn ptx(out: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let path = out.join("lowcon_kernels.ptx");
    std::fs::write(&path, lowcon::cuda::PTX).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
