//! Symmetric memory: a buffer of the same size on every rank, every rank's copy mapped
//! into every rank's address space, so copy engines, kernels and CPU copies reach the
//! peers' copies directly.
//!
//! - `gpu`: [`SymmetricBuffer`], CUDA VMM (or legacy IPC) allocations mapped over
//!   NVLink, and how their release waits for the device ([`gpu::Drain`]);
//! - `pinned`: pinned host memory the device writes and the host polls;
//! - `host`: [`HostBuffer`], the host backend's shared-memory buffers.
//!
//! Allocation is collective and goes through the group's rendezvous
//! ([`crate::rendezvous`]): the ranks agree on the size first, then exchange handles.

pub(crate) mod gpu;
pub(crate) mod host;
pub(crate) mod pinned;

pub use gpu::{HandleKind, SymmetricBuffer};
pub use host::HostBuffer;
