//! lowcon's multi-process scenarios, shipped in `lowcon selftest` and run by the
//! integration tests: every collective against a CPU reference (`coll`: the cases, the
//! runners of both backends, bad input, graphs, the bf16 wire, mapped memory), barriers
//! and signals across ranks (`ranks`, `gpu_ranks`), dead peers (`dead_peer`, `dying`),
//! shrinking a group (`shrink`) and enqueue-only calls (`enqueue`).
//!
//! Every check uses fresh random data, poisons outputs before the call, and compares
//! with a CPU reference; each returns `Err` with a message naming the rank on failure.

pub mod coll;
pub mod dead_peer;
pub mod dying;
pub mod enqueue;
pub mod gpu_ranks;
pub mod ranks;
pub mod shrink;

/// Survivors of a dead-peer scenario wait here for each other (through the launcher's
/// store, with a world of `survivors`), so that no survivor exits (and so looks dead)
/// before every other survivor has detected the victim.
pub fn survivors_barrier(name: &str, survivors: usize) -> Result<(), String> {
    let addr = std::env::var("LOWCON_STORE_ADDR").map_err(|_| "LOWCON_STORE_ADDR is not set".to_string())?;
    let mut c =
        lowcon_store::StoreClient::connect(addr, lowcon_store::ClientOptions::from_env()).map_err(|e| e.to_string())?;
    c.barrier(name, survivors, std::time::Duration::from_secs(60)).map_err(|e| e.to_string())
}
