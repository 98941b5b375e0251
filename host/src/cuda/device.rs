//! An open CUDA device: its primary context, plus the kernels loaded into it.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use cudarc::driver::{CudaContext, sys};

use super::{Kernels, Stream, StreamPriority, device_count, init};
use crate::error::{Error, Result, drv};

/// A CUDA device opened by index, with its primary context. Cheap to clone.
///
/// NOTE [one Device per index]: every `open` of an index while a handle to it is alive
/// returns that handle's device, so groups on one GPU in a process (a shrink's new group
/// beside the old one, the torch backend's group beside the FSDP2 hooks') share one
/// loaded module: the PTX is JIT-compiled once, not once per group (tens of ms, and a
/// module's device memory, per group).
///
/// lowcon disables cudarc's per-allocation event tracking on the contexts it opens:
/// collectives order their work explicitly (events, signals), and hidden cross-stream
/// synchronisation would both cost time and mask ordering bugs in tests.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    ctx: Arc<CudaContext>,
    index: usize,
    kernels: OnceLock<Kernels>,
}

/// What a device is, as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device index within this process (after `CUDA_VISIBLE_DEVICES`).
    pub index: usize,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Number of streaming multiprocessors.
    pub sm_count: u32,
    /// Total device memory in bytes.
    pub total_memory: usize,
    /// PCI bus id, e.g. `0000:18:00.0`: stable across processes, unlike `index`.
    pub pci_bus_id: String,
}

impl Device {
    /// Opens device `index` (within `CUDA_VISIBLE_DEVICES`).
    pub fn open(index: usize) -> Result<Self> {
        init()?;
        let count = device_count()?;
        if index >= count {
            return Err(Error::NoSuchDevice { index, count });
        }
        static OPEN: Mutex<Vec<(usize, Weak<DeviceInner>)>> = Mutex::new(Vec::new());
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(inner) = open.iter().find(|(i, _)| *i == index).and_then(|(_, w)| w.upgrade()) {
            return Ok(Self { inner });
        }
        let ctx = CudaContext::new(index).map_err(drv("cuDevicePrimaryCtxRetain"))?;
        // SAFETY: no allocation or stream exists on this handle to the context yet (we
        // just retained it, and `OPEN` hands out no other handle to this index while one
        // lives); lowcon orders its work explicitly, so cudarc's implicit event tracking
        // is not relied upon.
        unsafe { ctx.disable_event_tracking() };
        let inner = Arc::new(DeviceInner { ctx, index, kernels: OnceLock::new() });
        open.push((index, Arc::downgrade(&inner)));
        Ok(Self { inner })
    }

    /// The device index this handle was opened with.
    pub fn index(&self) -> usize {
        self.inner.index
    }

    /// The underlying cudarc context, for interoperating with other cudarc code.
    pub fn cuda_context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// Makes this device's context current on the calling thread.
    pub fn bind_to_thread(&self) -> Result<()> {
        self.inner.ctx.bind_to_thread().map_err(drv("cuCtxSetCurrent"))
    }

    /// Name, compute capability, SM count, memory and PCI bus id.
    pub fn info(&self) -> Result<DeviceInfo> {
        let ctx = &self.inner.ctx;
        let attr = |a| ctx.attribute(a).map_err(drv("cuDeviceGetAttribute"));
        use sys::CUdevice_attribute as A;
        let pci_bus_id = format!(
            "{:04x}:{:02x}:{:02x}.0",
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
        );
        Ok(DeviceInfo {
            index: self.inner.index,
            name: ctx.name().map_err(drv("cuDeviceGetName"))?,
            compute_capability: ctx.compute_capability().map_err(drv("cuDeviceGetAttribute"))?,
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            total_memory: ctx.total_mem().map_err(drv("cuDeviceTotalMem"))?,
            pci_bus_id,
        })
    }

    /// (free, total) device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.inner.ctx.mem_get_info().map_err(drv("cuMemGetInfo"))
    }

    /// A new event on this device; `timing` enables `Event::elapsed_ms`.
    pub fn event(&self, timing: bool) -> Result<super::Event> {
        super::Event::new(self, timing)
    }

    /// A new non-blocking stream with the given priority.
    pub fn stream(&self, priority: StreamPriority) -> Result<Stream> {
        Stream::new(self, priority)
    }

    /// lowcon's kernels, loaded (JIT-compiled from the embedded PTX) on first use.
    pub fn kernels(&self) -> Result<&Kernels> {
        if let Some(k) = self.inner.kernels.get() {
            return Ok(k);
        }
        let k = Kernels::load(&self.inner.ctx)?;
        // Another thread may have won the race; either value is equivalent.
        Ok(self.inner.kernels.get_or_init(|| k))
    }

    /// Waits for all work on this device's context to finish.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.ctx.synchronize().map_err(drv("cuCtxSynchronize"))
    }

    /// Like [`Device::synchronize`], but gives up after `limit`: `Ok(false)` if the device
    /// was still busy. The driver has no bounded device-wide wait, so a helper thread
    /// makes it; on `Ok(false)` that thread stays blocked until the work ends (or the
    /// process exits). Used where a stream may be stuck for good, on a peer that died.
    pub fn synchronize_within(&self, limit: std::time::Duration) -> Result<bool> {
        let dev = self.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("lowcon-drain".into())
            .spawn(move || {
                super::raw::capture::relax_this_thread();
                let r = dev.bind_to_thread().and_then(|()| dev.synchronize());
                let _ = tx.send(r);
            })
            .map_err(|e| Error::Rendezvous(format!("cannot start a thread to wait for the device: {e}")))?;
        match rx.recv_timeout(limit) {
            Ok(r) => r.map(|()| true),
            Err(_) => Ok(false),
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("index", &self.inner.index).finish()
    }
}
