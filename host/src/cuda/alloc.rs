//! Memory that one process owns and no peer maps, freed on drop: device memory
//! ([`DeviceAlloc`]: `cuMemAlloc`, or VMM memory without an IPC handle) and pinned host
//! memory mapped into the device ([`MappedHostAlloc`]). The symmetric buffers that peers
//! map are `crate::memory`'s; these are for the benchmarks and the selftest (ordinary
//! memory of the kind PyTorch's caching allocator hands out, memory a collective must
//! refuse to map, flags the host writes), and for instruments that need memory which
//! stream memory operations accept (the stream-ordered pool's they refuse).
//!
//! Dropping one frees it at once: its user synchronises the work that uses it first.
//! Reading or writing it goes through [`Stream`](super::Stream)'s `unsafe` copies at
//! raw addresses, or kernels.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::{Device, raw};
use crate::error::{Error, Result};

/// How a [`DeviceAlloc`] was made, for its drop.
#[derive(Debug)]
enum Kind {
    /// `cuMemAlloc`.
    Plain,
    /// `cuMemCreate` mapped at `ptr` for `size` bytes (the granularity's multiple).
    Vmm { handle: sys::CUmemGenericAllocationHandle, size: usize },
}

/// Device memory of one process that no peer maps, freed on drop (after its user has
/// synchronised the work that uses it). Its contents start undefined.
#[derive(Debug)]
pub struct DeviceAlloc {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    device: Device,
    kind: Kind,
}

impl DeviceAlloc {
    /// `cuMemAlloc` of `bytes` on `device` (made current on this thread): ordinary device
    /// memory, as PyTorch's caching allocator makes it, with an IPC handle, which stream
    /// memory operations accept.
    pub fn new(device: &Device, bytes: usize) -> Result<Self> {
        device.bind_to_thread()?;
        // SAFETY: the device's context is current (bound above).
        let ptr = unsafe { raw::ipc::alloc(bytes)? };
        Ok(Self { ptr, bytes, device: device.clone(), kind: Kind::Plain })
    }

    /// VMM memory (`cuMemCreate`, exportable as a POSIX file descriptor only) of at least
    /// `bytes` on `device` (made current on this thread), mapped read/write for it:
    /// memory that `cuIpcGetMemHandle` refuses. The size is rounded up to the
    /// allocation granularity.
    pub fn vmm(device: &Device, bytes: usize) -> Result<Self> {
        device.bind_to_thread()?;
        let ordinal = i32::try_from(device.index())
            .map_err(|_| Error::InvalidArgument(format!("device index {} out of range", device.index())))?;
        // SAFETY: the driver is initialised (the device is open).
        let size = bytes.max(1).next_multiple_of(unsafe { raw::vmm::granularity(ordinal)? });
        // SAFETY: the device's context is current; `size` is a multiple of the granularity.
        let handle = unsafe { raw::vmm::create(ordinal, size)? };
        // SAFETY: as above; `handle` is live and holds `size` bytes.
        match unsafe { raw::vmm::map(handle, size, ordinal) } {
            Ok(ptr) => Ok(Self { ptr, bytes, device: device.clone(), kind: Kind::Vmm { handle, size } }),
            Err(e) => {
                // SAFETY: created just above, never mapped, released once.
                let _ = unsafe { raw::vmm::release(handle) };
                Err(e)
            }
        }
    }

    /// The device address of the first byte.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The bytes asked for (a VMM allocation may hold more).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The device the memory is on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        let _ = self.device.bind_to_thread();
        let freed = match self.kind {
            // SAFETY: from `cuMemAlloc`, freed once; its user synchronised the work using it.
            Kind::Plain => unsafe { raw::ipc::free(self.ptr) },
            // SAFETY: mapped and created in `vmm`, undone once; no work uses it (as above).
            Kind::Vmm { handle, size } => unsafe { raw::vmm::unmap(self.ptr, size).and(raw::vmm::release(handle)) },
        };
        if let Err(e) = freed {
            tracing::warn!(target: "lowcon", "freeing {} bytes of device memory: {e}", self.bytes);
        }
    }
}

/// Pinned host memory mapped into the device (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`):
/// the host writes it through [`MappedHostAlloc::host_ptr`] (volatile writes) while the
/// device reads it at [`MappedHostAlloc::ptr`], e.g. a flag that a stream waits on.
/// Freed on drop, after its user has synchronised the work that uses it.
#[derive(Debug)]
pub struct MappedHostAlloc {
    host: *mut c_void,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

// SAFETY: plain pinned host memory, with no thread affinity; every access goes through
// the raw pointers, whose users synchronise it themselves.
unsafe impl Send for MappedHostAlloc {}
// SAFETY: as above (`&self` hands out only addresses).
unsafe impl Sync for MappedHostAlloc {}

impl MappedHostAlloc {
    /// `bytes` of pinned host memory, mapped into `device` (made current on this thread).
    pub fn new(device: &Device, bytes: usize) -> Result<Self> {
        device.bind_to_thread()?;
        // SAFETY: the device's context is current (bound above).
        let (host, ptr) = unsafe { raw::host_mem::alloc_mapped(bytes)? };
        Ok(Self { host, ptr, bytes })
    }

    /// The host address of the first byte (page-aligned).
    pub fn host_ptr(&self) -> *mut u8 {
        self.host.cast()
    }

    /// The device address of the first byte.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for MappedHostAlloc {
    fn drop(&mut self) {
        // SAFETY: from `alloc_mapped`, freed once; its user synchronised the work using it.
        if let Err(e) = unsafe { raw::host_mem::free(self.host) } {
            tracing::warn!(target: "lowcon", "freeing {} bytes of mapped host memory: {e}", self.bytes);
        }
    }
}
