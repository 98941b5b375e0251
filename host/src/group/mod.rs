//! The groups: the public types that compose the pipeline's stages for one backend.
//!
//! - `gpu`: [`GpuGroup`], one GPU per rank, NVLink-mapped symmetric memory;
//! - `host`: [`HostGroup`], CPU shared memory (CI, and machines without GPUs).

pub(crate) mod gpu;
pub(crate) mod host;

pub use gpu::{GpuGroup, GpuGroupOptions};
pub use host::{HostGroup, HostGroupOptions};
