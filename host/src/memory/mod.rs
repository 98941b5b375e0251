//! Symmetric memory: a buffer of the same size on every rank, every rank's copy mapped
//! into every rank's address space, so copy engines, kernels and CPU copies reach the
//! peers' copies directly.
//!
//! - `gpu`: [`SymmetricBuffer`], CUDA VMM (or legacy IPC) allocations mapped over
//!   NVLink, and how their release waits for the device (`gpu::Drain`);
//! - `pinned`: pinned host memory the device writes and the host polls;
//! - `host`: [`HostBuffer`], the host backend's shared-memory buffers;
//! - `mapped`: ordinary device memory (a framework's allocator's) that peers read in
//!   place, through a per-call exchange of IPC handles (`map_ordinary`);
//! - `pool`: [`pool::Pool`], blocks of symmetric memory with offsets that agree on
//!   every rank without a rendezvous per allocation (for frameworks' tensors).
//!
//! Allocation is collective and goes through the group's rendezvous
//! ([`crate::rendezvous`]): the ranks agree on the size first, then exchange handles.

pub(crate) mod gpu;
pub(crate) mod host;
pub(crate) mod mapped;
pub(crate) mod pinned;
pub mod pool;

pub use gpu::{HandleKind, SymmetricBuffer};
pub use host::HostBuffer;

impl pool::Segment for SymmetricBuffer {
    fn base(&self) -> u64 {
        self.local_ptr()
    }
    fn len(&self) -> usize {
        self.len()
    }
}

impl pool::Segment for HostBuffer {
    fn base(&self) -> u64 {
        self.local_ptr() as u64
    }
    fn len(&self) -> usize {
        self.len()
    }
}

impl<T: pool::Segment> pool::Segment for std::sync::Arc<T> {
    fn base(&self) -> u64 {
        (**self).base()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
}
