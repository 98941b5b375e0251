//! The groups: the public types that compose the pipeline's stages for one backend.
//!
//! - `gpu`: [`GpuGroup`], one GPU per rank, NVLink-mapped symmetric memory;
//! - `host`: [`HostGroup`], CPU shared memory (CI, and machines without GPUs);
//! - `either`: [`Group`], either of them, for code that serves both (NOTE [either
//!   backend]);
//! - `call`: [`Group::call`], one collective call as a binding hands it over, checked
//!   and dispatched once for both bindings (NOTE [one dispatch]).

pub(crate) mod dispatch;
pub(crate) mod either;
pub(crate) mod gpu;
pub(crate) mod host;

pub use dispatch::{Call, Memory, NoSymmetric, RawBuf, Registry, Symmetric};
pub use either::{Buffer, CollBufs, Group};
pub use gpu::{GpuGroup, GpuGroupOptions};
pub use host::{HostGroup, HostGroupOptions};
