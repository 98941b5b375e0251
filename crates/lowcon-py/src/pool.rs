//! The group's symmetric pool ([`lowcon::Pool`]) seen from Python: blocks exported as
//! DLPack capsules (producer side) whose deleter returns the block, from whatever thread
//! the framework frees its tensor on, and the lookups that let a collective on pool
//! memory run without staging.
//!
//! A block belongs to the stream it was allocated on. Its free records an event there
//! (never a synchronisation), which an allocation on another stream waits for before it
//! reuses the block (`docs/python.md`, "Memory model").

use std::ffi::{CStr, c_void};
use std::sync::Arc;

use pyo3::prelude::*;

use crate::Backend;
use crate::dlpack::{DLDevice, DLManagedTensor, DLTensor, dl_dtype};
use lowcon::cuda::{Device, Event, Stream};
use lowcon::{Buffer, DType, Pool, PoolStats};

/// Collectives on pool memory between fingerprint checks (`LOWCON_POOL_CHECK_EVERY`).
fn check_every() -> u64 {
    std::env::var("LOWCON_POOL_CHECK_EVERY").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(64)
}

/// Smallest segment the pool grows by (`LOWCON_POOL_SEGMENT_MB`, default 64 MiB).
fn segment_min() -> usize {
    std::env::var("LOWCON_POOL_SEGMENT_MB").ok().and_then(|v| v.trim().parse::<usize>().ok()).unwrap_or(64) << 20
}

/// One rank's pool of the group's symmetric buffers (device or host memory: the
/// either-backend [`lowcon::Buffer`]). `device` is the GPU group's device: blocks freed
/// there record an event on their stream, which another stream waits for before it
/// reuses them; host blocks need no event (host calls are synchronous).
pub(crate) struct GroupPool {
    pool: Pool<Arc<Buffer>, Arc<Event>>,
    device: Option<Device>,
}

impl GroupPool {
    pub(crate) fn new(b: &Backend) -> Self {
        GroupPool {
            pool: Pool::new(b.rank(), segment_min(), check_every()),
            device: b.as_gpu().map(|g| g.device().clone()),
        }
    }

    fn rank(&self) -> usize {
        self.pool.rank()
    }

    pub(crate) fn stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// The stream a block belongs to: the caller's on a GPU (a raw `CUstream`, 0 the
    /// legacy default stream), 0 on the host backend, which has none.
    fn stream(&self, stream: u64) -> u64 {
        if self.device.is_some() { stream } else { 0 }
    }

    /// A free block for `bytes` on `stream` without growing: `None` when the pool must
    /// grow (collectively, [`Self::alloc`]). Cheap: no thread, no waiting (the common case).
    pub(crate) fn try_alloc(&self, bytes: usize, stream: u64) -> lowcon::Result<Option<(u64, u64)>> {
        let stream = self.stream(stream);
        let Some(b) = self.pool.try_alloc(bytes, stream)? else { return Ok(None) };
        self.trace_alloc(bytes, stream, b.id, b.at, "free");
        self.wait_for(&b.wait, stream)?;
        Ok(Some((b.id, b.ptr)))
    }

    fn tag(&self) -> usize {
        self as *const Self as usize
    }

    fn trace_alloc(&self, bytes: usize, stream: u64, id: u64, at: lowcon::memory::pool::Placement, how: &str) {
        crate::trace::line(|| {
            let after = if how == "grew" { format!("\t{}", self.stats().reserved) } else { String::new() };
            format!("alloc\t{:x}\t{id}\t{bytes}\t{stream:x}\t{}\t{}\t{how}{after}", self.tag(), at.segment, at.offset)
        });
    }

    /// Collective when the pool grows: a block for `bytes` on `stream` (GPU: a raw
    /// `CUstream`, 0 the legacy default stream; host: ignored). Before growing, the ranks
    /// compare their fingerprints and release the segments free on all of them (NOTE
    /// [release on growth]). Returns (id, address).
    pub(crate) fn alloc(&self, b: &Backend, bytes: usize, stream: u64) -> lowcon::Result<(u64, u64)> {
        let stream = self.stream(stream);
        let agree = |fp: lowcon::Fingerprint, n: u64, mine: &[usize]| {
            if !mine.is_empty() {
                self.drain()?;
            }
            self.agree_on_release(b, &format!("pool-grow/{n}"), "before the pool grew", fp, mine)
        };
        let blk = self.pool.alloc(bytes, stream, agree, |seg| b.alloc(seg).map(Arc::new))?;
        self.trace_alloc(bytes, stream, blk.id, blk.at, "grew");
        self.wait_for(&blk.wait, stream)?;
        Ok((blk.id, blk.ptr))
    }

    /// Collective: gives back the segments free on every rank (after every rank's device
    /// finished its work, so no peer's copy still reads them). Returns the bytes released
    /// on this rank.
    pub(crate) fn trim(&self, b: &Backend) -> lowcon::Result<usize> {
        self.drain()?;
        let agree = |fp: lowcon::Fingerprint, n: u64, mine: &[usize]| {
            self.agree_on_release(b, &format!("pool-trim/{n}"), "before the pool was trimmed", fp, mine)
        };
        let released = self.pool.trim(agree)?;
        crate::trace::line(|| format!("trim\t{:x}\t{released}", self.tag()));
        Ok(released)
    }

    /// Waits for this rank's GPU work (GPU pool), so that no queued copy still uses a
    /// segment about to be released.
    fn drain(&self) -> lowcon::Result<()> {
        if let Some(device) = &self.device {
            device.bind_to_thread()?;
            device.synchronize()?;
        }
        Ok(())
    }

    /// The ranks' exchange before a release (growth or trim, keyed `key`): fingerprints
    /// compared, the segments free on every rank returned.
    fn agree_on_release(
        &self,
        b: &Backend,
        key: &str,
        when: &str,
        fp: lowcon::Fingerprint,
        mine: &[usize],
    ) -> lowcon::Result<Vec<usize>> {
        let all = b.all_gather_bytes(key, &lowcon::memory::pool::trim_message(fp, mine))?;
        lowcon::memory::pool::agree_on_trim(self.rank(), when, &all)
    }

    /// Makes `stream` wait for the free's event of a block last used on another stream.
    fn wait_for(&self, event: &Option<Arc<Event>>, stream: u64) -> lowcon::Result<()> {
        if let (Some(ev), Some(device)) = (event, &self.device) {
            // SAFETY: the caller's live stream of this device (see `Group::empty`).
            let s = unsafe { Stream::wrap_borrowed(device, stream as usize as _) }?;
            s.wait(ev)?;
        }
        Ok(())
    }

    /// Returns a block; any thread, no GIL needed.
    fn free(&self, id: u64) -> lowcon::Result<()> {
        crate::trace::line(|| format!("free\t{:x}\t{id}", self.tag()));
        self.pool.free(id, |stream| {
            let Some(device) = &self.device else { return Ok(None) };
            // SAFETY: the stream the block was allocated on, which its owner keeps
            // alive while its tensors are (as torch's caching allocator assumes).
            let s = unsafe { Stream::wrap_borrowed(device, stream as usize as _) }?;
            let ev = s.event(false)?;
            s.record(&ev)?;
            Ok(Some(Arc::new(ev)))
        })
    }

    /// The pool as the library's lookup of symmetric memory (NOTE [one dispatch]).
    pub(crate) fn symmetric(&self) -> &Pool<Arc<Buffer>, Arc<Event>> {
        &self.pool
    }

    /// N of the fingerprint checks (every N-th collective on pool memory).
    pub(crate) fn check_every(&self) -> u64 {
        check_every()
    }

    /// Counts a collective on pool memory; every N-th, the fingerprint to compare.
    pub(crate) fn note_collective(&self) -> Option<(lowcon::Fingerprint, u64)> {
        self.pool.note_collective()
    }
}

/// What a block's deleter needs: the pool (kept alive by its blocks) and the id.
struct Owner {
    shape: Vec<i64>,
    pool: Arc<GroupPool>,
    id: u64,
}

impl Owner {
    fn release(self) {
        // Never unwind into C.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if let Err(err) = self.pool.free(self.id) {
                lowcon::log::trace(self.pool.rank(), &format!("freeing pool block {}: {err}", self.id));
            }
        }));
    }
}

/// DLPack 0.x: a legacy managed tensor for one pool block (torch takes these).
#[repr(C)]
struct Exported {
    // First, so a `*mut DLManagedTensor` is a `*mut Exported`.
    managed: DLManagedTensor,
    owner: Owner,
}

/// DLPack 1.x's versioned managed tensor (numpy makes arrays of legacy capsules
/// read-only; versioned ones carry flags, here none: writable, not a copy).
#[repr(C)]
struct DLManagedTensorVersioned {
    version: [u32; 2],
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

#[repr(C)]
struct ExportedVersioned {
    managed: DLManagedTensorVersioned,
    owner: Owner,
}

/// The DLPack deleters: return the block to the pool. Called by the consumer (torch,
/// CuPy, numpy) when its tensor dies, on any thread, or by the capsule's destructor
/// when nobody consumed it.
unsafe extern "C" fn release(m: *mut DLManagedTensor) {
    if !m.is_null() {
        // SAFETY: `m` came from `Box::into_raw` of an `Exported` in `export` (repr(C),
        // the managed tensor first), and DLPack calls the deleter exactly once.
        unsafe { Box::from_raw(m.cast::<Exported>()) }.owner.release();
    }
}

unsafe extern "C" fn release_versioned(m: *mut DLManagedTensorVersioned) {
    if !m.is_null() {
        // SAFETY: as `release`, for `ExportedVersioned`.
        unsafe { Box::from_raw(m.cast::<ExportedVersioned>()) }.owner.release();
    }
}

const DLTENSOR: &CStr = c"dltensor";
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";

/// The capsule destructors: free the block if the capsule was never consumed (a
/// consumer renames it to "used_dltensor[_versioned]" and calls the deleter itself).
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed (the GIL is held).
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let p = pyo3::ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            if let Some(d) = p.as_ref().and_then(|m| m.deleter) {
                d(p);
            }
        } else if pyo3::ffi::PyCapsule_IsValid(capsule, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let p = pyo3::ffi::PyCapsule_GetPointer(capsule, DLTENSOR_VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(d) = p.as_ref().and_then(|m| m.deleter) {
                d(p);
            }
        }
        // Otherwise a consumed capsule: the consumer owns the tensor now. (IsValid sets no
        // error, so there is nothing to clear; clearing would drop an exception in flight.)
    }
}

/// A DLPack capsule (`"dltensor_versioned"` when `versioned`, else `"dltensor"`) for
/// block `id` at `ptr` (shape `shape`, contiguous), on CUDA device `cuda` (or the CPU
/// when `None`). The block is freed with the capsule, or by the consumer's tensor.
#[allow(clippy::too_many_arguments)]
pub(crate) fn export(
    py: Python<'_>,
    pool: Arc<GroupPool>,
    id: u64,
    ptr: u64,
    shape: Vec<i64>,
    dtype: DType,
    cuda: Option<i32>,
    versioned: bool,
) -> PyResult<Py<PyAny>> {
    let device = match cuda {
        Some(d) => DLDevice { device_type: 2, device_id: d },
        None => DLDevice { device_type: 1, device_id: 0 },
    };
    let tensor = DLTensor {
        data: ptr as *mut c_void,
        device,
        ndim: shape.len() as i32,
        dtype: dl_dtype(dtype),
        shape: std::ptr::null(),
        strides: std::ptr::null(),
        byte_offset: 0,
    };
    let owner = Owner { shape, pool, id };
    // SAFETY: (both arms) the boxed value is valid; its shape Vec's buffer does not
    // move with the Box; the capsule owns the box until consumed, and its destructor
    // (above) handles both outcomes. If the capsule cannot be made, the box is released
    // here.
    unsafe {
        let (raw, name): (*mut c_void, &CStr) = if versioned {
            let mut e = Box::new(ExportedVersioned {
                managed: DLManagedTensorVersioned {
                    version: [1, 0],
                    manager_ctx: std::ptr::null_mut(),
                    deleter: Some(release_versioned),
                    flags: 0,
                    dl_tensor: tensor,
                },
                owner,
            });
            e.managed.dl_tensor.shape = e.owner.shape.as_ptr();
            let raw = Box::into_raw(e);
            (*raw).managed.manager_ctx = raw.cast();
            (raw.cast(), DLTENSOR_VERSIONED)
        } else {
            let mut e = Box::new(Exported {
                managed: DLManagedTensor {
                    dl_tensor: tensor,
                    manager_ctx: std::ptr::null_mut(),
                    deleter: Some(release),
                },
                owner,
            });
            e.managed.dl_tensor.shape = e.owner.shape.as_ptr();
            let raw = Box::into_raw(e);
            (*raw).managed.manager_ctx = raw.cast();
            (raw.cast(), DLTENSOR)
        };
        let cap = pyo3::ffi::PyCapsule_New(raw, name.as_ptr(), Some(capsule_destructor));
        if cap.is_null() {
            if versioned {
                release_versioned(raw.cast());
            } else {
                release(raw.cast());
            }
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, cap).unbind())
    }
}
