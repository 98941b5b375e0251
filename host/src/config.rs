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
/// take far longer than a barrier. A group never uses less than its own timeout (the
/// `timeout` option, else [`timeout`]). Default 300 000 ms.
pub fn setup_timeout() -> Duration {
    Duration::from_millis(env_u64("LOWCON_SETUP_TIMEOUT_MS").unwrap_or(300_000))
}

/// `LOWCON_MEM_HANDLES`: how the GPU backend shares memory: `vmm` (CUDA VMM, POSIX file
/// descriptors over Unix sockets), `ipc` (legacy `cuIpcGetMemHandle` through the
/// store), or `auto` (VMM, falling back to IPC with the reason logged). Default `auto`.
pub fn mem_handles() -> String {
    std::env::var("LOWCON_MEM_HANDLES").unwrap_or_else(|_| "auto".into())
}

/// `LOWCON_DEBUG=1`: log rendezvous decisions (fallbacks, mappings) and failure handling
/// (see [`crate::log::trace`]) to stderr, where no `tracing` subscriber is installed.
pub fn debug() -> bool {
    std::env::var("LOWCON_DEBUG").is_ok_and(|v| v == "1")
}

/// `LOWCON_TMA_TILE_BYTES`: bytes of each rank's tile in a `tma-reduce` stage (rounded
/// up to 128). Default: 32 KiB per stage split over the ranks (`coll::select::tma_ring`).
/// For measuring the ring; results do not depend on it.
pub fn tma_tile_bytes() -> Option<u64> {
    env_u64("LOWCON_TMA_TILE_BYTES").filter(|&t| t > 0)
}

/// `LOWCON_TMA_STAGES`: stages of the `tma-reduce` ring (2 to 16, fewer where 227 KiB of
/// shared memory cannot hold them). Default: as many 32 KiB stages as fit in 224 KiB.
pub fn tma_stages() -> Option<u64> {
    env_u64("LOWCON_TMA_STAGES")
}

/// `LOWCON_COPY_ENGINE_HINT=1`: issue lowcon's device-to-device copies through
/// `cuMemcpyBatchAsync` with `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, which asks the
/// driver to use copy engines rather than SMs (a plain `cuMemcpyAsync` on one device may
/// run on SMs, and then waits behind a persistent GEMM). A hint the driver may ignore;
/// needs a CUDA 13 driver (older ones keep plain copies). Off by default until measured:
/// copy engines are slower than SMs for same-device copies when nothing else runs.
pub fn copy_engine_hint() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOWCON_COPY_ENGINE_HINT").is_ok_and(|v| v == "1"))
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => {
            // Once per variable (they are read often). Not `crate::log::warn`: the log
            // reads its switch from here (no module cycle).
            static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
            let mut w = WARNED.lock().unwrap_or_else(|p| p.into_inner());
            if !w.iter().any(|n| n == name) {
                w.push(name.to_string());
                tracing::warn!(target: "lowcon", "ignoring {name}={v:?}: not a non-negative integer");
                if !tracing::dispatcher::has_been_set() {
                    eprintln!("lowcon: ignoring {name}={v:?}: not a non-negative integer");
                }
            }
            None
        }
    }
}
