//! [`Group`]: a group on either backend, for code that serves both (the bindings, the
//! scenarios).
//!
//! NOTE [either backend]: what both backends share (rank and world, check, abort,
//! shrink, the store's exchanges, allocation, counters, the collectives) is dispatched
//! here, once, instead of in every caller. A collective takes [`CollBufs`], whose kind
//! follows the caller's data (device memory and a stream, or host memory): a call whose
//! buffers are not of the group's backend is refused, naming both. What only one backend
//! has (streams and graphs, the pool's device memory) goes through [`Group::gpu`], which
//! refuses a host group with a message naming the operation.

use std::time::Duration;

use super::{GpuGroup, HostGroup};
use crate::coll::{AllGatherOptions, CollStats, DType, DeviceBuf, HostInput, ReduceOp, ReduceScatterOptions};
use crate::cuda::Stream;
use crate::error::{Error, Result};
use crate::memory::{HostBuffer, SymmetricBuffer};
use crate::sync::SyncMethod;

/// A group on the GPU backend or on the host backend (NOTE [either backend]).
pub enum Group {
    /// One GPU per rank.
    Gpu(GpuGroup),
    /// CPU shared memory.
    Host(Box<HostGroup>),
}

/// A symmetric allocation of either backend ([`Group::alloc`]).
pub enum Buffer {
    /// Device memory every rank maps.
    Gpu(SymmetricBuffer),
    /// Shared host memory.
    Host(HostBuffer),
}

/// The buffers of one collective call: device buffers and the stream the call is
/// enqueued on, or host memory (the call is synchronous). `dtypes` are the input's and
/// the output's element types (they differ only for a bf16 input reduced into f32).
pub enum CollBufs<'a> {
    /// A GPU call.
    Gpu {
        /// The input.
        input: DeviceBuf<'a>,
        /// The output.
        output: DeviceBuf<'a>,
        /// The stream the call is enqueued on.
        stream: &'a Stream,
    },
    /// A host call.
    Host {
        /// The input.
        input: HostInput<'a>,
        /// The output's bytes.
        output: &'a mut [u8],
        /// The input's and the output's element types.
        dtypes: (DType, DType),
    },
}

impl Buffer {
    /// This rank's address of the buffer (a device pointer, or a host one).
    pub fn base_addr(&self) -> usize {
        match self {
            Buffer::Gpu(b) => b.local_ptr() as usize,
            Buffer::Host(b) => b.local_ptr() as usize,
        }
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        match self {
            Buffer::Gpu(b) => b.len(),
            Buffer::Host(b) => b.len(),
        }
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device buffer, if this is one.
    pub fn as_gpu(&self) -> Option<&SymmetricBuffer> {
        match self {
            Buffer::Gpu(b) => Some(b),
            Buffer::Host(_) => None,
        }
    }

    /// The host buffer, if this is one.
    pub fn as_host(&self) -> Option<&HostBuffer> {
        match self {
            Buffer::Gpu(_) => None,
            Buffer::Host(b) => Some(b),
        }
    }

    /// Releases it now, reporting a failure ([`SymmetricBuffer::close`]); a host buffer
    /// is unmapped.
    pub fn close(self) -> Result<()> {
        match self {
            Buffer::Gpu(b) => b.close(),
            Buffer::Host(b) => {
                drop(b);
                Ok(())
            }
        }
    }
}

impl crate::memory::pool::Segment for Buffer {
    fn base(&self) -> u64 {
        self.base_addr() as u64
    }
    fn len(&self) -> usize {
        Buffer::len(self)
    }
}

impl From<GpuGroup> for Group {
    fn from(g: GpuGroup) -> Self {
        Group::Gpu(g)
    }
}

impl From<HostGroup> for Group {
    fn from(g: HostGroup) -> Self {
        Group::Host(Box::new(g))
    }
}

impl Group {
    /// `"gpu"` or `"host"`.
    pub fn backend(&self) -> &'static str {
        match self {
            Group::Gpu(_) => "gpu",
            Group::Host(_) => "host",
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        match self {
            Group::Gpu(g) => g.rank(),
            Group::Host(g) => g.rank(),
        }
    }

    /// Where this rank's host time in collective calls went (NOTE [host time]):
    /// (calls, their ns, the ns of host rendezvous, of those the ns of mailbox waits),
    /// read without a device call.
    pub fn host_clock(&self) -> (u64, u64, u64, u64) {
        match self {
            Group::Gpu(g) => g.host_clock(),
            Group::Host(g) => g.host_clock(),
        }
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        match self {
            Group::Gpu(g) => g.world_size(),
            Group::Host(g) => g.world_size(),
        }
    }

    /// The group's timeout.
    pub fn timeout(&self) -> Duration {
        match self {
            Group::Gpu(g) => g.timeout(),
            Group::Host(g) => g.timeout(),
        }
    }

    /// The CUDA device index of a GPU group; `None` on the host backend.
    pub fn device_index(&self) -> Option<usize> {
        self.device().map(|d| d.index())
    }

    /// The CUDA device of a GPU group; `None` on the host backend.
    pub fn device(&self) -> Option<&crate::cuda::Device> {
        self.as_gpu().map(|g| g.device())
    }

    /// The GPU group, if this is one.
    pub fn as_gpu(&self) -> Option<&GpuGroup> {
        match self {
            Group::Gpu(g) => Some(g),
            Group::Host(_) => None,
        }
    }

    /// The host group, if this is one.
    pub fn as_host(&self) -> Option<&HostGroup> {
        match self {
            Group::Gpu(_) => None,
            Group::Host(g) => Some(g),
        }
    }

    /// The GPU group, for `what`, which only GPU groups have: a host group is refused
    /// with [`Error::InvalidArgument`] naming it.
    pub fn gpu(&self, what: &str) -> Result<&GpuGroup> {
        self.as_gpu().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "rank {}: {what} is for GPU groups; this group is on the host backend",
                self.rank()
            ))
        })
    }

    /// The group's failure, if it has one; `Ok` while healthy. Never waits.
    pub fn check(&self) -> Result<()> {
        match self {
            Group::Gpu(g) => g.check(),
            Group::Host(g) => g.check(),
        }
    }

    /// Fails the group now: every later call errors.
    pub fn abort(&self) {
        match self {
            Group::Gpu(g) => g.abort(),
            Group::Host(g) => g.abort(),
        }
    }

    /// Collective among the survivors of a failed group: a new group of the ranks still
    /// alive ([`GpuGroup::shrink`], [`HostGroup::shrink`]).
    pub fn shrink(&self) -> Result<Group> {
        Ok(match self {
            Group::Gpu(g) => Group::Gpu(g.shrink()?),
            Group::Host(g) => Group::Host(Box::new(g.shrink()?)),
        })
    }

    /// Collective: every rank's `data` under `name`, in rank order, through the store.
    pub fn all_gather_bytes(&self, name: &str, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        match self {
            Group::Gpu(g) => g.all_gather_bytes(name, data),
            Group::Host(g) => g.all_gather_bytes(name, data),
        }
    }

    /// Publishes this rank's `data` under `name` without waiting.
    pub fn publish(&self, name: &str, data: &[u8]) -> Result<()> {
        match self {
            Group::Gpu(g) => g.publish(name, data),
            Group::Host(g) => g.publish(name, data),
        }
    }

    /// Every rank's published `name`, in rank order.
    pub fn published(&self, name: &str) -> Result<Vec<Vec<u8>>> {
        match self {
            Group::Gpu(g) => g.published(name),
            Group::Host(g) => g.published(name),
        }
    }

    /// Collective: a barrier through the store.
    pub fn store_barrier(&self, name: &str) -> Result<()> {
        match self {
            Group::Gpu(g) => g.store_barrier(name),
            Group::Host(g) => g.store_barrier(name),
        }
    }

    /// Collective: a barrier of every rank on `channel`. A GPU group enqueues it on
    /// `stream` with `method` ([`GpuGroup::barrier`]: work before it is visible to every
    /// rank's work after it); a host group returns once every rank reached it.
    pub fn barrier(&self, channel: u32, stream: Option<&Stream>, method: SyncMethod) -> Result<()> {
        match (self, stream) {
            (Group::Gpu(g), Some(s)) => g.barrier(s, channel, method),
            (Group::Gpu(g), None) => Err(Error::InvalidArgument(format!(
                "rank {}: a barrier on a GPU group needs the stream to enqueue it on",
                g.rank()
            ))),
            (Group::Host(g), _) => g.barrier(channel),
        }
    }

    /// Collective: a symmetric allocation of `bytes` on every rank.
    pub fn alloc(&self, bytes: usize) -> Result<Buffer> {
        Ok(match self {
            Group::Gpu(g) => Buffer::Gpu(g.alloc(bytes)?),
            Group::Host(g) => Buffer::Host(g.alloc(bytes)?),
        })
    }

    /// The planner that decides the group's calls (NOTE [one planner]).
    pub fn planner(&self) -> &crate::plan::Planner {
        match self {
            Group::Gpu(g) => g.planner(),
            Group::Host(g) => g.planner(),
        }
    }

    /// The bytes this rank's calls moved to and from peers.
    pub fn stats(&self) -> Result<CollStats> {
        match self {
            Group::Gpu(g) => g.stats(),
            Group::Host(g) => Ok(g.stats()),
        }
    }

    /// Collective (GPU): reserves `bytes` of channel `channel`'s workspace; nothing on
    /// the host backend, whose calls allocate as they go.
    pub fn reserve_workspace(&self, channel: u32, bytes: usize) -> Result<()> {
        match self {
            Group::Gpu(g) => g.reserve_workspace(channel, bytes),
            Group::Host(_) => Ok(()),
        }
    }

    /// Waits for the calls enqueued on `stream` (GPU), naming a dead or late peer; on
    /// the host backend, whose calls are synchronous, the group's failure if any.
    pub fn synchronize(&self, stream: Option<&Stream>) -> Result<()> {
        match (self, stream) {
            (Group::Gpu(g), Some(s)) => g.synchronize(s),
            (Group::Gpu(g), None) => Err(Error::InvalidArgument(format!(
                "rank {}: synchronize on a GPU group needs the stream to wait for",
                g.rank()
            ))),
            (Group::Host(g), _) => g.check(),
        }
    }

    /// All-gather on either backend: `output[p * n .. (p + 1) * n]` receives rank `p`'s
    /// input ([`GpuGroup::all_gather`], [`HostGroup::all_gather`]).
    pub fn all_gather(&self, bufs: CollBufs<'_>, opts: &AllGatherOptions) -> Result<()> {
        match (self, bufs) {
            (Group::Gpu(g), CollBufs::Gpu { input, output, stream }) => {
                g.coll.all_gather(input, output, stream, opts, None)
            }
            (Group::Host(g), CollBufs::Host { input, output, dtypes }) => {
                g.coll.all_gather(input, output, dtypes, opts)
            }
            (_, bufs) => Err(self.mismatch(&bufs)),
        }
    }

    /// Reduce-scatter on either backend ([`GpuGroup::reduce_scatter`],
    /// [`HostGroup::reduce_scatter_typed`]).
    pub fn reduce_scatter(&self, bufs: CollBufs<'_>, op: ReduceOp, opts: &ReduceScatterOptions) -> Result<()> {
        match (self, bufs) {
            (Group::Gpu(g), CollBufs::Gpu { input, output, stream }) => {
                g.coll.reduce_scatter(input, output, op, stream, opts)
            }
            (Group::Host(g), CollBufs::Host { input, output, dtypes }) => {
                g.coll.reduce_scatter(input, output, dtypes, op, opts)
            }
            (_, bufs) => Err(self.mismatch(&bufs)),
        }
    }

    /// The refusal of a call whose buffers are of the other backend.
    fn mismatch(&self, bufs: &CollBufs<'_>) -> Error {
        self.mismatched(matches!(bufs, CollBufs::Gpu { .. }))
    }

    /// The refusal of a call with device buffers (`device`) or host memory on a group
    /// of the other backend.
    pub(super) fn mismatched(&self, device: bool) -> Error {
        let theirs = if device { "device buffers and a stream" } else { "host memory" };
        Error::InvalidArgument(format!(
            "rank {}: a collective with {theirs} on a group of the {} backend",
            self.rank(),
            self.backend()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::host::HostGroupOptions;

    /// A group of one rank on the host backend, meeting through an in-process store.
    fn one_rank() -> (Group, lowcon_store::StoreServer) {
        let server = lowcon_store::StoreServer::start("127.0.0.1:0", Default::default()).expect("a store");
        let client =
            lowcon_store::StoreClient::connect(server.local_addr().to_string(), Default::default()).expect("connect");
        let g = HostGroup::new(client, 0, 1, HostGroupOptions::default()).expect("a group of one");
        (g.into(), server)
    }

    #[test]
    fn a_host_group_serves_the_shared_operations() {
        let (g, _server) = one_rank();
        assert_eq!((g.backend(), g.rank(), g.world_size(), g.device_index()), ("host", 0, 1, None));
        g.check().unwrap();
        assert_eq!(g.all_gather_bytes("x", b"abc").unwrap(), vec![b"abc".to_vec()]);
        let e = g.gpu("track_replay").err().expect("a host group refuses a GPU-only call").to_string();
        assert!(e.contains("track_replay is for GPU groups") && e.contains("rank 0"), "{e}");
        // A collective through the either-backend call, checked against its input.
        let input: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        let mut out = vec![0xAAu8; 64];
        let bufs =
            CollBufs::Host { input: HostInput::Plain(&input), output: &mut out, dtypes: (DType::F32, DType::F32) };
        g.all_gather(bufs, &AllGatherOptions::default()).unwrap();
        assert_eq!(out, input);
        g.barrier(0, None, SyncMethod::Kernel).unwrap();
        g.abort();
        assert!(g.check().is_err());
    }
}
