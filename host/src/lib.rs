//! lowcon: low-contention collectives for single-node NVLink GPU boxes.
//!
//! The pipeline, in the order a newcomer should read it: store → rendezvous →
//! symmetric memory → sync → algorithms → bench. This crate holds the GPU side:
//!
//! - [`cuda`]: the CUDA driver (loaded at run time through cudarc), devices, streams,
//!   events, and lowcon's kernels, written in Rust (`gpu-kernels/`) and embedded as PTX.
//! - [`Error`]: the one error type; a machine without a driver gets
//!   [`Error::NoDriver`], never a panic.
//!
//! See `docs/design.md` for why it is built this way.

pub mod coll;
mod coll_gpu;
mod coll_host;
pub mod config;
pub mod cuda;
mod error;
mod fdpass;
mod group;
pub mod shm;
pub mod symm;
pub mod sync;

pub use coll::{
    AllGatherAlgorithm, AllGatherOptions, CollOptions, DType, Element, ReduceOp, ReduceScatterAlgorithm,
    ReduceScatterOptions,
};
pub use coll_gpu::DeviceBuf;
pub use coll_host::HostInput;
pub use error::{Error, Result};
pub use shm::{HostBuffer, HostGroup, HostGroupOptions};
pub use symm::{GpuGroup, GpuGroupOptions, HandleKind, SymmetricBuffer};
pub use sync::SyncMethod;
