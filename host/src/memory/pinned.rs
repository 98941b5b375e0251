//! Pinned host memory mapped into the device: kernels and copies write it, the host
//! reads it with volatile reads, without synchronising (the error record, the pad
//! mirror of failure handling).

use std::ffi::c_void;

use cudarc::driver::sys;

use super::gpu::Drain;
use crate::cuda::{Device, raw};
use crate::error::Result;

/// Pinned host memory mapped into the device: kernels and copies write it, the host
/// reads it with volatile reads, without synchronising.
pub(crate) struct Pinned {
    pub(crate) host: *mut c_void,
    pub(crate) dev: sys::CUdeviceptr,
    device: Device,
    drain: Drain,
}

// SAFETY: plain pinned memory; the host only reads it with volatile reads (and writes
// the error record's code word, see `HostRecord::abort`).
unsafe impl Send for Pinned {}
// SAFETY: as above.
unsafe impl Sync for Pinned {}

impl Pinned {
    pub(crate) fn new(device: &Device, bytes: usize, drain: Drain) -> Result<Self> {
        device.bind_to_thread()?;
        // SAFETY: the device's context is current.
        let (host, dev) = unsafe { raw::host_mem::alloc_mapped(bytes)? };
        Ok(Self { host, dev, device: device.clone(), drain })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.device.bind_to_thread().is_ok() && self.drain.wait(&self.device, "pinned host memory").is_ok() {
            // SAFETY: allocated by alloc_mapped; the device is idle.
            let _ = unsafe { raw::host_mem::free(self.host) };
        }
    }
}
