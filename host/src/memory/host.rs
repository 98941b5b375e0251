//! Symmetric memory on the host backend: `memfd`s passed between the ranks' processes
//! with the same `SCM_RIGHTS` mesh the GPU backend uses for VMM handles, and mapped
//! `MAP_SHARED` by every rank. The signal pads of the host backend
//! ([`crate::sync`]) live in one such buffer.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

use crate::error::{Error, Result};
use crate::rendezvous::GroupCore;

/// One `mmap` of a memfd; unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is a plain address range; all access goes through raw-pointer
// copies and atomics in `HostBuffer`/`HostGroup`, which are the synchronisation.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` exposes no references into the memory.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(fd: &OwnedFd, len: usize) -> Result<Self> {
        let nz = NonZeroUsize::new(len).ok_or_else(|| Error::InvalidArgument("zero-sized mapping".into()))?;
        // SAFETY: mapping a memfd we hold, shared, with no fixed address: it cannot
        // alias existing Rust objects.
        let ptr = unsafe { mmap(None, nz, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, fd, 0) }
            .map_err(|e| Error::Os { call: format!("mmap of a {len}-byte shared buffer"), source: e })?;
        Ok(Self { ptr: ptr.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from our own successful mmap, and no reference into
        // the range outlives the owning buffer.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// A symmetric buffer on the host backend: the same size on every rank, every rank's
/// copy mapped into every rank's address space.
pub struct HostBuffer {
    rank: usize,
    len: usize,
    maps: Vec<Mapping>,
}

impl HostBuffer {
    /// Bytes in each rank's buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: zero-sized allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The base address of rank `peer`'s buffer in this process.
    pub fn peer_ptr(&self, peer: usize) -> *mut u8 {
        self.maps[peer].ptr.as_ptr()
    }

    /// The base address of this rank's own buffer.
    pub fn local_ptr(&self) -> *mut u8 {
        self.peer_ptr(self.rank)
    }

    fn check(&self, peer: usize, offset: usize, bytes: usize) -> Result<()> {
        if peer >= self.maps.len() {
            return Err(Error::InvalidArgument(format!("peer {peer} is not in a world of {}", self.maps.len())));
        }
        if offset.checked_add(bytes).is_none_or(|end| end > self.len) {
            return Err(Error::InvalidArgument(format!(
                "range {offset}..{offset}+{bytes} is outside the {}-byte symmetric buffer",
                self.len
            )));
        }
        Ok(())
    }

    /// Copies `data` into rank `peer`'s buffer at `offset`.
    pub fn write(&self, peer: usize, offset: usize, data: &[u8]) -> Result<()> {
        self.check(peer, offset, data.len())?;
        // SAFETY: bounds checked above; the mapping is live while `self` is, and a
        // shared mapping is only accessed through raw copies (never through references),
        // so concurrent writers race only at the byte level, which the protocols order
        // with release/acquire signals.
        // `copy`, not `copy_nonoverlapping`: in-place collectives pass a slice of this very
        // buffer.
        unsafe { std::ptr::copy(data.as_ptr(), self.peer_ptr(peer).add(offset), data.len()) };
        Ok(())
    }

    /// Rank `peer`'s bytes `offset .. offset + len`, read where they are.
    ///
    /// # Safety
    /// Nobody writes that range while the slice lives (a collective's input between its
    /// barriers), and the caller holds no `&mut` to it.
    pub(crate) unsafe fn peer_slice(&self, peer: usize, offset: usize, len: usize) -> Result<&[u8]> {
        self.check(peer, offset, len)?;
        // SAFETY: inside the mapping (checked); no writer meanwhile (the caller's contract).
        Ok(unsafe { std::slice::from_raw_parts(self.peer_ptr(peer).add(offset), len) })
    }

    /// Copies `out.len()` bytes from rank `peer`'s buffer at `offset`.
    pub fn read(&self, peer: usize, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(peer, offset, out.len())?;
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy(self.peer_ptr(peer).add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

/// Collective: a symmetric buffer of `bytes` on every rank of `core` (all must ask the
/// same, for the same `purpose`: NOTE [allocations agreed]), zero-filled.
pub(crate) fn alloc(core: &GroupCore, bytes: usize, purpose: &str) -> Result<HostBuffer> {
    if bytes == 0 {
        return Err(Error::InvalidArgument("symmetric buffers must hold at least one byte".into()));
    }
    // NOTE [allocations agreed]: the tag and the exchange in one order.
    let _serial = core.alloc_serial.lock().unwrap_or_else(|p| p.into_inner());
    let tag = core.agree_on_alloc(bytes, purpose)?;
    let name = format!("lowcon-{}-{tag}", core.group_id);
    let fd = nix::sys::memfd::memfd_create(name.as_str(), nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map_err(|e| Error::Os { call: format!("memfd_create for a {bytes}-byte buffer"), source: e })?;
    nix::unistd::ftruncate(&fd, bytes as i64)
        .map_err(|e| Error::Os { call: format!("ftruncate of a memfd to {bytes} bytes"), source: e })?;
    let peers = core.mesh.exchange_fds(tag, fd.as_fd())?;
    let mut maps = Vec::with_capacity(core.world);
    for (p, peer_fd) in peers.into_iter().enumerate() {
        let f = if p == core.rank { &fd } else { peer_fd.as_ref().expect("exchange_fds fills every peer") };
        let st = nix::sys::stat::fstat(f)
            .map_err(|e| Error::Os { call: format!("fstat of rank {p}'s buffer"), source: e })?;
        if st.st_size as usize != bytes {
            return Err(Error::Rendezvous(format!("rank {p}'s buffer has {} bytes, expected {bytes}", st.st_size)));
        }
        maps.push(Mapping::map(f, bytes)?);
    }
    Ok(HostBuffer { rank: core.rank, len: bytes, maps })
}
