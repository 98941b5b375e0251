//! `lowcon store ...`: serve a store, or use one from a shell script (the address comes
//! from `--addr` or `LOWCON_STORE_ADDR`, the token from `LOWCON_STORE_TOKEN`).

use std::io::Write;
use std::time::Duration;

use clap::Subcommand;
use lowcon_store::{ClientOptions, ServerOptions, StoreClient, StoreServer};

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Run a standalone store until SIGINT/SIGTERM. Prints `serving on ADDR` first.
    Serve {
        /// Address to bind; 127.0.0.1 unless another is asked for. Port 0 picks one.
        #[arg(long, default_value = "127.0.0.1:29400")]
        bind: String,
    },
    /// Store a value.
    Set {
        key: String,
        value: String,
        #[arg(long)]
        addr: Option<String>,
    },
    /// Print a value (waits up to --timeout seconds for it).
    Get {
        key: String,
        #[arg(long)]
        addr: Option<String>,
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
    },
    /// Add to a counter and print the new value.
    Add {
        key: String,
        delta: i64,
        #[arg(long)]
        addr: Option<String>,
    },
    /// Wait until `--world-size` ranks (default: WORLD_SIZE from the environment) reach
    /// the barrier NAME.
    Barrier {
        name: String,
        #[arg(long)]
        addr: Option<String>,
        #[arg(long)]
        world_size: Option<usize>,
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
    },
}

fn connect(addr: Option<String>) -> Result<StoreClient, Box<dyn std::error::Error>> {
    let addr = match addr.or_else(|| std::env::var(lowcon_store::env::STORE_ADDR_ENV).ok()) {
        Some(a) => a,
        None => return Err("no store address: pass --addr HOST:PORT or set LOWCON_STORE_ADDR".into()),
    };
    Ok(StoreClient::connect(
        addr,
        ClientOptions { connect_timeout: Duration::from_secs(20), ..ClientOptions::from_env() },
    )?)
}

fn secs(s: f64) -> Result<Duration, Box<dyn std::error::Error>> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("--timeout {s}: expected non-negative seconds").into())
}

pub fn run(cmd: StoreCommand) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        StoreCommand::Serve { bind } => {
            let mut signals =
                signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
            let server = StoreServer::start(&bind, ServerOptions { log_errors: true, ..ServerOptions::from_env() })?;
            println!("lowcon store: serving on {}", server.local_addr());
            std::io::stdout().flush()?;
            if let Some(sig) = signals.forever().next() {
                eprintln!("lowcon store: signal {sig}, shutting down");
            }
            server.shutdown();
        }
        StoreCommand::Set { key, value, addr } => connect(addr)?.set(&key, value.as_bytes())?,
        StoreCommand::Get { key, addr, timeout } => {
            let v = connect(addr)?.get_timeout(&key, secs(timeout)?)?;
            std::io::stdout().write_all(&v)?;
            println!();
        }
        StoreCommand::Add { key, delta, addr } => println!("{}", connect(addr)?.add(&key, delta)?),
        StoreCommand::Barrier { name, addr, world_size, timeout } => {
            let world = match world_size {
                Some(w) => w,
                None => match std::env::var("WORLD_SIZE") {
                    Ok(w) => w.trim().parse().map_err(|_| format!("WORLD_SIZE={w:?}: expected a number of ranks"))?,
                    Err(_) => return Err("store barrier: give --world-size, or set WORLD_SIZE".into()),
                },
            };
            connect(addr)?.barrier(&name, world, secs(timeout)?)?;
        }
    }
    Ok(())
}
