//! `lowcon`: the command-line front end.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "lowcon", version, about = "Low-contention collectives for NVLink GPU boxes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the CUDA driver, the visible GPUs and the embedded kernels.
    Info,
    /// Write the embedded PTX to a directory (usable as LOWCON_PTX_DIR on machines
    /// without a nightly toolchain).
    Ptx {
        /// Directory to write lowcon_kernels.ptx into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Info => info(),
        Command::Ptx { out } => ptx(&out),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lowcon: {e}");
            ExitCode::FAILURE
        }
    }
}

fn info() -> Result<(), Box<dyn std::error::Error>> {
    let kernels = lowcon::cuda::PTX.matches(".visible .entry ").count();
    let target = lowcon::cuda::PTX.lines().find_map(|l| l.strip_prefix(".target ")).unwrap_or("?");
    println!("lowcon {}: {kernels} kernels embedded, PTX target {target}", env!("CARGO_PKG_VERSION"));
    match lowcon::cuda::device_count() {
        Err(lowcon::Error::NoDriver) => {
            println!("{}", lowcon::Error::NoDriver);
            return Ok(());
        }
        Err(e) => return Err(e.into()),
        Ok(n) => {
            let (maj, min) = lowcon::cuda::driver_version()?;
            println!("CUDA driver {maj}.{min}, {n} device(s)");
            for i in 0..n {
                let d = lowcon::cuda::Device::open(i)?.info()?;
                println!(
                    "  [{i}] {} sm_{}{} {} SMs {:.0} GiB pci {}",
                    d.name,
                    d.compute_capability.0,
                    d.compute_capability.1,
                    d.sm_count,
                    d.total_memory as f64 / (1u64 << 30) as f64,
                    d.pci_bus_id
                );
            }
        }
    }
    Ok(())
}

fn ptx(out: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let path = out.join("lowcon_kernels.ptx");
    std::fs::write(&path, lowcon::cuda::PTX).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
