//! Every tunable lowcon reads from the environment, in one place, each with its
//! default and meaning (NCCL's `NCCL_PARAM` habit). Explicit options in code win over
//! the environment; the environment wins over the defaults.

use std::time::Duration;

/// `LOWCON_TIMEOUT_MS`: how long any wait for a peer (signal, barrier, handle exchange)
/// may take before it fails with an error naming the peer. Default 60 000 ms.
pub fn timeout() -> Duration {
    Duration::from_millis(env_u64("LOWCON_TIMEOUT_MS").unwrap_or(60_000))
}

/// `LOWCON_SETUP_TIMEOUT_MS`: bound on collective set-up steps (group creation,
/// symmetric allocation), which include CUDA context start-up on every rank and so can
/// take far longer than a barrier. Never shorter than [`timeout`]. Default 300 000 ms.
pub fn setup_timeout() -> Duration {
    Duration::from_millis(env_u64("LOWCON_SETUP_TIMEOUT_MS").unwrap_or(300_000)).max(timeout())
}

/// `LOWCON_MEM_HANDLES`: how the GPU backend shares memory: `vmm` (CUDA VMM, POSIX file
/// descriptors over Unix sockets), `ipc` (legacy `cuIpcGetMemHandle` through the
/// store), or `auto` (VMM, falling back to IPC with the reason logged). Default `auto`.
pub fn mem_handles() -> String {
    std::env::var("LOWCON_MEM_HANDLES").unwrap_or_else(|_| "auto".into())
}

/// `LOWCON_DEBUG=1`: log rendezvous decisions (fallbacks, mappings) and failure handling
/// (see [`trace`]) to stderr.
pub fn debug() -> bool {
    std::env::var("LOWCON_DEBUG").is_ok_and(|v| v == "1")
}

/// With `LOWCON_DEBUG=1`, prints `what` to stderr with the rank and the time since the
/// process first traced (failure paths: detection, release of stuck waits, teardown).
pub fn trace(rank: usize, what: &str) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    if debug() {
        let t = START.get_or_init(std::time::Instant::now).elapsed();
        eprintln!("lowcon[rank {rank} +{:.3}s]: {what}", t.as_secs_f64());
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => {
            eprintln!("lowcon: ignoring {name}={v:?}: not a non-negative integer");
            None
        }
    }
}
