//! lowcon: low-contention collectives for single-node NVLink GPU boxes.
//!
//! The modules follow the pipeline, in the order a newcomer should read it (the store
//! itself is the `lowcon-store` crate, the benchmark `lowcon-bench`):
//!
//! | stage | module | holds |
//! |---|---|---|
//! | driver | [`cuda`] | the CUDA driver (loaded at run time through cudarc), devices, streams, events, lowcon's kernels (Rust, `gpu-kernels/`, embedded as PTX) |
//! | rendezvous | [`rendezvous`] | how ranks meet through the store, one host check, the group id, the socket mesh that passes memory handles, the failed state |
//! | symmetric memory | [`memory`] | GPU buffers mapped on every peer (VMM or IPC), host shared-memory buffers, pinned memory |
//! | sync | [`sync`] | epochs, signal pads, barriers and signals (kernel or stream-memop), failure detection and release |
//! | algorithms | [`coll`] | all-gather and reduce-scatter: types, options, checks, `auto`, the CPU reference, one file per backend |
//! | groups | [`GpuGroup`], [`HostGroup`], [`Group`] | the public types that compose the stages for one backend, and either of them |
//! | instruments | [`instruments`] | benchmark instruments: lowcon's kernels driven alone, outside any collective, for `lowcon bench` (no collective uses them) |
//!
//! Each stage uses only the stages above it. [`Error`] is the one error type; a machine
//! without a driver gets [`Error::NoDriver`], never a panic. Logging goes through
//! `tracing` ([`log`]). See `docs/design.md` for why it is built this way.

pub mod coll;
pub mod config;
pub mod cuda;
mod error;
mod group;
pub mod instruments;
pub mod log;
pub mod memory;
pub mod plan;
pub mod rendezvous;
pub mod sync;

pub use coll::{
    AgAlgo, AllGatherAlgorithm, AllGatherOptions, Arrival, ArrivalForm, Arrivals, CollOptions, CollStats, Context,
    DType, DeviceBuf, Element, HostInput, LaunchForm, ReduceLaunch, ReduceOp, ReduceScatterAlgorithm,
    ReduceScatterOptions, RsAlgo,
};
pub use error::{Error, Result};
pub use group::{
    Buffer, Call, CollBufs, GpuGroup, GpuGroupOptions, Group, HostGroup, HostGroupOptions, Memory, NoSymmetric, RawBuf,
    Registry, Symmetric,
};
pub use memory::mapped::MAX_OPEN_PER_PEER as MAX_PEER_MAPPINGS;
pub use memory::pool::{Fingerprint, Pool, PoolBlock, PoolStats};
pub use memory::{HandleKind, HostBuffer, SymmetricBuffer};
pub use plan::{AgPlan, Planner, RsPlan};
pub use sync::{CHANNELS, SyncMethod};
