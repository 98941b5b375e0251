//! Symmetric memory on GPUs: every rank allocates the same size on its GPU, the ranks
//! exchange handles, and each maps every peer's allocation into its own address space,
//! so copy engines and kernels reach peers over NVLink. Signal pads in such memory
//! carry the synchronisation ([`crate::sync`]).
//!
//! NOTE [handles]: the default path is CUDA VMM: `cuMemCreate` with a POSIX
//! file-descriptor handle type, exported, passed with `SCM_RIGHTS` over the group's
//! socket mesh, imported and mapped by every peer. When VMM export or import is refused
//! (old drivers, some containers), the ranks fall back together to legacy IPC handles
//! (`cuIpcGetMemHandle`, exchanged through the store), and the reason is logged.
//! `LOWCON_MEM_HANDLES=vmm|ipc|auto` selects.
//!
//! Ownership: a [`crate::group::gpu::GpuGroup`] owns its pads and error record; a [`SymmetricBuffer`]
//! owns its allocation and every mapping of its peers' allocations, and releases them
//! on drop (after synchronising the device, so no enqueued work still uses them). Both
//! hand kernels plain pointers; the owner must outlive the work that uses them.

use std::os::fd::AsFd;
use std::time::Duration;

use cudarc::driver::{CudaSlice, sys};

use crate::cuda::raw;
use crate::cuda::{Device, StreamPriority};
use crate::error::{Error, Result};
use crate::rendezvous::GroupCore;

/// How the GPU backend shares memory between processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HandleKind {
    /// VMM, falling back to IPC (all ranks together) when VMM is refused.
    #[default]
    Auto,
    /// CUDA VMM with POSIX file descriptors only.
    Vmm,
    /// Legacy CUDA IPC handles only.
    Ipc,
}

impl std::str::FromStr for HandleKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Self::Auto),
            "vmm" => Ok(Self::Vmm),
            "ipc" => Ok(Self::Ipc),
            _ => Err(Error::InvalidArgument(format!("memory handles {s:?}: expected auto, vmm or ipc"))),
        }
    }
}

enum Backing {
    Vmm { size: usize, handles: Vec<sys::CUmemGenericAllocationHandle>, maps: Vec<sys::CUdeviceptr> },
    Ipc { own: sys::CUdeviceptr, opened: Vec<sys::CUdeviceptr> },
}

/// A buffer of the same size on every rank's GPU, with every peer's buffer mapped here.
pub struct SymmetricBuffer {
    device: Device,
    rank: usize,
    len: usize,
    ptrs: Vec<sys::CUdeviceptr>,
    dev_ptrs: CudaSlice<u64>,
    backing: Option<Backing>,
    /// How long release waits for the device: the group's timeout, or a moment once
    /// the group has failed.
    drain: Drain,
}

/// How long releasing group memory waits for the device to drain. Normally the group's
/// timeout; once the group has failed (a dead peer may leave a stream stuck for good,
/// e.g. on a stream-memop wait nobody will release), only [`Drain::AFTER_FAILURE`];
/// memory the device may still use is then left mapped (the driver reclaims it at
/// process exit) rather than hanging the caller.
#[derive(Clone)]
pub(crate) struct Drain {
    rank: usize,
    timeout: Duration,
    broken: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drain {
    const AFTER_FAILURE: Duration = Duration::from_secs(2);

    pub(crate) fn new(core: &GroupCore) -> Self {
        Self { rank: core.rank, timeout: core.timeout, broken: core.broken.clone() }
    }

    /// Waits (bounded) until the device is idle; errors, naming the rank and `what`, if
    /// it stays busy.
    pub(crate) fn wait(&self, device: &Device, what: &str) -> Result<()> {
        let failed = self.broken.load(std::sync::atomic::Ordering::Acquire);
        let limit = if failed { Self::AFTER_FAILURE } else { self.timeout };
        if device.synchronize_within(limit)? {
            return Ok(());
        }
        let e = Error::Rendezvous(format!(
            "rank {}: the GPU was still busy {:.1} s after {what} was released{}; it stays mapped until the \
             process exits",
            self.rank,
            limit.as_secs_f64(),
            if failed { " (the group had failed, so a stream may be stuck on a dead peer)" } else { "" }
        ));
        crate::log::trace(self.rank, &e.to_string());
        Err(e)
    }
}

impl SymmetricBuffer {
    /// Bytes in each rank's buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: zero-sized allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.ptrs.len()
    }

    /// Rank `peer`'s buffer as this process addresses it (own buffer at `rank`).
    pub fn peer_ptr(&self, peer: usize) -> sys::CUdeviceptr {
        self.ptrs[peer]
    }

    /// This rank's own buffer.
    pub fn local_ptr(&self) -> sys::CUdeviceptr {
        self.ptrs[self.rank]
    }

    /// Every rank's buffer, indexed by rank.
    pub fn peer_ptrs(&self) -> &[sys::CUdeviceptr] {
        &self.ptrs
    }

    /// A device array of [`SymmetricBuffer::peer_ptrs`], for kernels.
    pub fn device_peer_ptrs(&self) -> &CudaSlice<u64> {
        &self.dev_ptrs
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Unmaps and releases everything now, reporting errors (drop does the same and
    /// can only ignore them).
    pub fn close(mut self) -> Result<()> {
        self.release()
    }

    /// Unmaps and releases everything now without waiting for the device.
    ///
    /// # Safety
    /// No enqueued work, on this rank or a peer, may still use the buffer.
    pub(crate) unsafe fn close_unused(mut self) -> Result<()> {
        match self.backing.take() {
            Some(b) => release_backing(&self.device, b, None),
            None => Ok(()),
        }
    }

    fn release(&mut self) -> Result<()> {
        match self.backing.take() {
            Some(b) => release_backing(&self.device, b, Some(&self.drain)),
            None => Ok(()),
        }
    }
}

/// Unmaps and releases everything `backing` holds (after the device drained, so no
/// enqueued work still uses it; if it does not drain in time, leaves it all mapped and
/// errors; `drain: None` when the caller knows no work uses it); reports the first
/// error but attempts every step.
fn release_backing(device: &Device, backing: Backing, drain: Option<&Drain>) -> Result<()> {
    device.bind_to_thread()?;
    if let Some(d) = drain {
        d.wait(device, "a symmetric buffer")?;
    }
    let mut first: Result<()> = Ok(());
    let mut keep = |r: Result<()>| {
        if first.is_ok() {
            first = r;
        }
    };
    match backing {
        Backing::Vmm { size, handles, maps } => {
            for p in maps {
                // SAFETY: mapped by `raw::vmm::map` with `size`; the device is idle.
                keep(unsafe { raw::vmm::unmap(p, size) });
            }
            for h in handles {
                // SAFETY: created or imported by us, released once.
                keep(unsafe { raw::vmm::release(h) });
            }
        }
        Backing::Ipc { own, opened } => {
            for p in opened {
                // SAFETY: opened by `raw::ipc::open_handle`; the device is idle.
                keep(unsafe { raw::ipc::close_handle(p) });
            }
            // SAFETY: allocated by `raw::ipc::alloc`; the device is idle.
            keep(unsafe { raw::ipc::free(own) });
        }
    }
    first
}

impl Drop for SymmetricBuffer {
    fn drop(&mut self) {
        // Never panic in drop; `close()` reports errors to callers who want them.
        if let Err(e) = self.release() {
            crate::log::trace(self.rank, &format!("releasing a symmetric buffer failed: {e}"));
        }
    }
}

/// Collective: a symmetric buffer of `bytes` on every rank of `core` (all must ask the
/// same), zero-filled, every peer's copy mapped here.
pub(crate) fn alloc(
    core: &GroupCore,
    device: &Device,
    handles: HandleKind,
    bytes: usize,
    purpose: &str,
) -> Result<SymmetricBuffer> {
    if bytes == 0 {
        return Err(Error::InvalidArgument("symmetric buffers must hold at least one byte".into()));
    }
    // NOTE [allocations agreed]: the tag and the exchange in one order.
    let _serial = core.alloc_serial.lock().unwrap_or_else(|p| p.into_inner());
    let tag = core.agree_on_alloc(bytes, purpose)?;
    device.bind_to_thread()?;
    // Zero-fill and the pointer upload run here, so the allocation waits for nothing
    // but itself.
    let side = device.stream(StreamPriority::Default)?;
    let ordinal = device.index() as i32;
    let world = core.world;

    // Try VMM; every rank reports whether it could, and all take the same path.
    let mut vmm_attempt = None;
    let mut why_not = String::new();
    if handles != HandleKind::Ipc {
        // SAFETY: the device's context is current.
        let r = unsafe {
            raw::vmm::granularity(ordinal).and_then(|g| {
                let size = bytes.div_ceil(g) * g;
                let h = raw::vmm::create(ordinal, size)?;
                match raw::vmm::export_fd(h) {
                    Ok(fd) => Ok((size, h, fd)),
                    Err(e) => {
                        let _ = raw::vmm::release(h);
                        Err(e)
                    }
                }
            })
        };
        match r {
            Ok(v) => vmm_attempt = Some(v),
            Err(e) => why_not = e.to_string(),
        }
    }
    let verdicts = core.store().all_gather_watching(
        &format!("group/{}/alloc/{tag}/vmm", core.group_id),
        core.rank,
        world,
        why_not.as_bytes(),
        core.setup_timeout,
        &crate::rendezvous::hung_up(&core.mesh),
    )?;
    let refusal = verdicts.iter().enumerate().find(|(_, v)| !v.is_empty());
    let use_vmm = handles != HandleKind::Ipc && refusal.is_none();
    if handles == HandleKind::Vmm && !use_vmm {
        let (r, v) = refusal.expect("not use_vmm implies a refusal");
        return Err(Error::Rendezvous(format!(
            "rank {r} cannot export VMM memory ({}) and LOWCON_MEM_HANDLES=vmm forbids the IPC fallback",
            String::from_utf8_lossy(v)
        )));
    }
    if handles == HandleKind::Auto && !use_vmm && core.rank == 0 {
        let (r, v) = refusal.expect("not use_vmm implies a refusal");
        crate::log::warn(&format!(
            "falling back to CUDA IPC handles: rank {r} cannot export VMM memory: {}",
            String::from_utf8_lossy(v)
        ));
    }

    let (ptrs, backing) = if use_vmm {
        let (size, own, fd) = vmm_attempt.expect("use_vmm implies this rank succeeded");
        let mut handles_held = vec![own];
        let mut maps = Vec::new();
        let result = (|| -> Result<Vec<sys::CUdeviceptr>> {
            // SAFETY: own handle is live and `size` bytes.
            let own_ptr = unsafe { raw::vmm::map(own, size, ordinal)? };
            maps.push(own_ptr);
            // Zero before anyone can see it: peers map it only after the exchange.
            // SAFETY: `own_ptr` is mapped for `size` bytes.
            unsafe { raw::mem_op::fill(side.raw(), own_ptr, 0, size)? };
            // Finished before any peer can write into the buffer. Only this stream is
            // waited for: never the work already queued on the device (NOTE [never
            // block] in crate::sync::gpu::watchdog).
            side.synchronize()?;
            let fds = core.mesh.exchange_fds(tag, fd.as_fd())?;
            let mut ptrs = vec![0; world];
            ptrs[core.rank] = own_ptr;
            for (p, f) in fds.iter().enumerate() {
                let Some(f) = f else { continue };
                // SAFETY: `f` is a peer's exported VMM fd; the context is current.
                let h = unsafe { raw::vmm::import_fd(f)? };
                handles_held.push(h);
                // SAFETY: the peer allocated `size` bytes (sizes agreed above, same
                // granularity on identical GPUs; a mismatch fails cuMemMap).
                let ptr = unsafe { raw::vmm::map(h, size, ordinal)? };
                maps.push(ptr);
                ptrs[p] = ptr;
            }
            Ok(ptrs)
        })();
        let backing = Backing::Vmm { size, handles: handles_held, maps };
        match result {
            Ok(ptrs) => (ptrs, backing),
            Err(e) => {
                // Release what was made so far before reporting.
                let _ = release_backing(device, backing, Some(&Drain::new(core)));
                return Err(e);
            }
        }
    } else {
        if let Some((_, h, _)) = vmm_attempt {
            // SAFETY: created above and never mapped.
            let _ = unsafe { raw::vmm::release(h) };
        }
        // SAFETY: the context is current.
        let own = unsafe { raw::ipc::alloc(bytes)? };
        let mut opened = Vec::new();
        let result = (|| -> Result<Vec<sys::CUdeviceptr>> {
            // SAFETY: `own` is a live allocation of `bytes`.
            unsafe { raw::mem_op::fill(side.raw(), own, 0, bytes)? };
            side.synchronize()?;
            // SAFETY: `own` is the base of a cuMemAlloc allocation.
            let handle = unsafe { raw::ipc::get_handle(own)? };
            let all = core.store().all_gather_watching(
                &format!("group/{}/alloc/{tag}/ipc", core.group_id),
                core.rank,
                world,
                &handle,
                core.setup_timeout,
                &crate::rendezvous::hung_up(&core.mesh),
            )?;
            let mut ptrs = vec![0; world];
            ptrs[core.rank] = own;
            for (p, h) in all.iter().enumerate() {
                if p == core.rank {
                    continue;
                }
                let h: &[u8; raw::ipc::HANDLE_BYTES] = h
                    .as_slice()
                    .try_into()
                    .map_err(|_| Error::Rendezvous(format!("rank {p} sent an IPC handle of {} bytes", h.len())))?;
                // SAFETY: a peer's IPC handle; the context is current.
                let ptr = unsafe { raw::ipc::open_handle(h)? };
                opened.push(ptr);
                ptrs[p] = ptr;
            }
            Ok(ptrs)
        })();
        let backing = Backing::Ipc { own, opened };
        match result {
            Ok(ptrs) => (ptrs, backing),
            Err(e) => {
                let _ = release_backing(device, backing, Some(&Drain::new(core)));
                return Err(e);
            }
        }
    };
    let ptrs_u64: Vec<u64> = ptrs.clone();
    let dev_ptrs = match side.upload(&ptrs_u64) {
        Ok(d) => d,
        Err(e) => {
            let _ = release_backing(device, backing, Some(&Drain::new(core)));
            return Err(e);
        }
    };
    side.synchronize()?;
    // Nobody signals into a pad, or copies into a buffer, before every rank mapped it.
    // Watched: a rank that died meanwhile is named at once.
    core.store().all_gather_watching(
        &format!("group/{}/alloc/{tag}/mapped", core.group_id),
        core.rank,
        world,
        &[],
        core.setup_timeout,
        &crate::rendezvous::hung_up(&core.mesh),
    )?;
    Ok(SymmetricBuffer {
        device: device.clone(),
        rank: core.rank,
        len: bytes,
        ptrs,
        dev_ptrs,
        backing: Some(backing),
        drain: Drain::new(core),
    })
}
