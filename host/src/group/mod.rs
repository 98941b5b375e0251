//! The groups: the public types that compose the pipeline's stages for one backend.
//!
//! - `gpu`: [`GpuGroup`], one GPU per rank, NVLink-mapped symmetric memory;
//! - `host`: [`HostGroup`], CPU shared memory (CI, and machines without GPUs);
//! - `either`: [`Group`], either of them, for code that serves both (NOTE [either
//!   backend]).

pub(crate) mod either;
pub(crate) mod gpu;
pub(crate) mod host;

pub use either::{Buffer, CollBufs, Group};
pub use gpu::{GpuGroup, GpuGroupOptions};
pub use host::{HostGroup, HostGroupOptions};
