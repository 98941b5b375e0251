//! Symmetric memory on GPUs: every rank allocates the same size on its GPU, the ranks
//! exchange handles, and each maps every peer's allocation into its own address space,
//! so copy engines and kernels reach peers over NVLink. Signal pads in such memory
//! carry the synchronisation ([`crate::sync`] for the epoch rules).
//!
//! NOTE [handles]: the default path is CUDA VMM: `cuMemCreate` with a POSIX
//! file-descriptor handle type, exported, passed with `SCM_RIGHTS` over the group's
//! socket mesh, imported and mapped by every peer. When VMM export or import is refused
//! (old drivers, some containers), the ranks fall back together to legacy IPC handles
//! (`cuIpcGetMemHandle`, exchanged through the store), and the reason is logged.
//! `LOWCON_MEM_HANDLES=vmm|ipc|auto` selects.
//!
//! Ownership: a [`GpuGroup`] owns its pads and error record; a [`SymmetricBuffer`]
//! owns its allocation and every mapping of its peers' allocations, and releases them
//! on drop (after synchronising the device, so no enqueued work still uses them). Both
//! hand kernels plain pointers; the owner must outlive the work that uses them.

use std::ffi::c_void;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaSlice, sys};
use lowcon_abi::{ErrorRecord, pad, status};
use lowcon_store::StoreClient;

use crate::cuda::kernels::PadArgs;
use crate::cuda::raw;
use crate::cuda::{Device, Stream, StreamPriority};
use crate::error::{Error, Result};
use crate::group::GroupCore;
use crate::sync::{Epochs, SyncMethod, epoch_reached};

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

/// Options for [`GpuGroup::new`].
#[derive(Clone, Debug)]
pub struct GpuGroupOptions {
    /// Group name; ranks creating groups with one name in the same order meet.
    pub name: String,
    /// Bound on every wait for a peer (device waits and host waits).
    pub timeout: Duration,
    /// Device index; default `LOWCON_DEVICE`, else `LOCAL_RANK`, else the rank.
    pub device: Option<usize>,
    /// How memory is shared; default from `LOWCON_MEM_HANDLES`.
    pub handles: HandleKind,
}

impl Default for GpuGroupOptions {
    fn default() -> Self {
        Self {
            name: "default".into(),
            timeout: crate::config::timeout(),
            device: None,
            handles: crate::config::mem_handles().parse().unwrap_or_default(),
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

    fn new(core: &GroupCore) -> Self {
        Self { rank: core.rank, timeout: core.timeout, broken: core.broken.clone() }
    }

    /// Waits (bounded) until the device is idle; errors, naming the rank and `what`, if
    /// it stays busy.
    fn wait(&self, device: &Device, what: &str) -> Result<()> {
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
        crate::config::trace(self.rank, &e.to_string());
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

    fn release(&mut self) -> Result<()> {
        match self.backing.take() {
            Some(b) => release_backing(&self.device, b, &self.drain),
            None => Ok(()),
        }
    }
}

/// Unmaps and releases everything `backing` holds (after the device drained, so no
/// enqueued work still uses it; if it does not drain in time, leaves it all mapped and
/// errors); reports the first error but attempts every step.
fn release_backing(device: &Device, backing: Backing, drain: &Drain) -> Result<()> {
    device.bind_to_thread()?;
    drain.wait(device, "a symmetric buffer")?;
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
        if let Err(e) = self.release()
            && crate::config::debug()
        {
            eprintln!("lowcon: releasing a symmetric buffer failed: {e}");
        }
    }
}

/// Pinned host memory mapped into the device: kernels and copies write it, the host
/// reads it with volatile reads, without synchronising.
struct Pinned {
    host: *mut c_void,
    dev: sys::CUdeviceptr,
    device: Device,
    drain: Drain,
}

// SAFETY: plain pinned memory; the host only reads it with volatile reads (and writes
// the error record's code word, see `HostRecord::abort`).
unsafe impl Send for Pinned {}
// SAFETY: as above.
unsafe impl Sync for Pinned {}

impl Pinned {
    fn new(device: &Device, bytes: usize, drain: Drain) -> Result<Self> {
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

/// The group's error record in pinned memory: kernels write it, the host reads it
/// without synchronising.
struct HostRecord(Pinned);

impl HostRecord {
    fn new(device: &Device, drain: Drain) -> Result<Self> {
        Pinned::new(device, size_of::<ErrorRecord>(), drain).map(Self)
    }

    /// Marks the record as failed (if nothing claimed it yet) so that queued kernels'
    /// waits give up instead of each waiting out its timeout.
    fn abort(&self) {
        let code = self.0.host.cast::<u32>();
        // SAFETY: `code` is the record's first field in live pinned memory; kernels only
        // CAS it from OK, so a racing claim by a kernel at worst loses to this write,
        // which the group (already failed) no longer reports.
        unsafe {
            if std::ptr::read_volatile(code) == status::OK {
                std::ptr::write_volatile(code, status::ABORTED);
            }
        }
    }

    fn read(&self) -> ErrorRecord {
        // SAFETY: `host` points to a live, aligned ErrorRecord-sized pinned allocation;
        // a volatile read sees what kernels wrote (a torn record is impossible once
        // the writing stream completed; a racing read only delays detection).
        unsafe { std::ptr::read_volatile(self.0.host.cast::<ErrorRecord>()) }
    }
}

/// A group of ranks, one GPU each, on one host.
pub struct GpuGroup {
    pub(crate) core: GroupCore,
    pub(crate) device: Device,
    handles: HandleKind,
    pub(crate) pads: SymmetricBuffer,
    err: HostRecord,
    /// Where `read_own_pad` copies this rank's pad (pinned, so the copy is truly
    /// asynchronous and its wait can be bounded).
    pad_mirror: Pinned,
    /// For failure handling only: reads and releases of this rank's pad, which must
    /// not queue behind the (possibly stuck) collective streams.
    side: Stream,
    /// Per channel: the collectives' workspace, copy stream and events.
    pub(crate) channels: Vec<std::sync::Mutex<crate::coll_gpu::ChannelState>>,
    /// Completion events of the latest collective calls, oldest first (bounds how far
    /// the host runs ahead of the GPU; see `coll_gpu`).
    pub(crate) inflight: std::sync::Mutex<std::collections::VecDeque<crate::cuda::Event>>,
}

impl GpuGroup {
    /// Collective: creates the group from a connected store client. Checks before
    /// anything is mapped: all ranks on one host, no two ranks on one GPU, every pair
    /// of GPUs can access each other.
    pub fn new(store: StoreClient, rank: usize, world: usize, opts: GpuGroupOptions) -> Result<Self> {
        let index = match opts.device {
            Some(d) => d,
            None => std::env::var("LOWCON_DEVICE")
                .ok()
                .or_else(|| std::env::var("LOCAL_RANK").ok())
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(rank),
        };
        let device = Device::open(index)?;
        let info = device.info()?;
        let extra = vec![
            ("backend".to_string(), "gpu".to_string()),
            ("pci".to_string(), info.pci_bus_id.clone()),
            ("device_index".to_string(), index.to_string()),
        ];
        let core = GroupCore::new(store, rank, world, &opts.name, extra, opts.timeout)?;
        // Every rank evaluates the same checks on the same facts, so all fail together.
        for a in 0..world {
            if core.infos[a].get("backend") != "gpu" {
                return Err(Error::Rendezvous(format!("rank {a} is not using the GPU backend")));
            }
            for b in a + 1..world {
                if core.infos[a].get("pci") == core.infos[b].get("pci") {
                    return Err(Error::Rendezvous(format!(
                        "ranks {a} and {b} both use the GPU at PCI {} (device index {} and {}): give each rank \
                         its own GPU (lowcon launch sets LOCAL_RANK; or set LOWCON_DEVICE)",
                        core.infos[a].get("pci"),
                        core.infos[a].get("device_index"),
                        core.infos[b].get("device_index")
                    )));
                }
            }
        }
        // Peer access is checked locally; the verdicts are shared so every rank fails
        // with the same message instead of some waiting for the others.
        let verdict = peer_access_verdict(&core, &device);
        let verdicts = core.store().all_gather(
            &format!("group/{}/peer-access", core.group_id),
            rank,
            world,
            verdict.as_bytes(),
            core.setup_timeout,
        )?;
        if let Some(bad) = verdicts.iter().find(|v| !v.is_empty()) {
            return Err(Error::Rendezvous(String::from_utf8_lossy(bad).into_owned()));
        }
        device.kernels()?;
        let handles = opts.handles;
        let pads = alloc_on(&core, &device, handles, pad::buffer_bytes(world as u32))?;
        let err = HostRecord::new(&device, Drain::new(&core))?;
        let pad_mirror = Pinned::new(&device, pad::bytes(world as u32), Drain::new(&core))?;
        let side = device.stream(StreamPriority::High)?;
        let channels = (0..pad::CHANNELS).map(|_| std::sync::Mutex::new(Default::default())).collect();
        Ok(Self { core, device, handles, pads, err, pad_mirror, side, channels, inflight: Default::default() })
    }

    /// Collective: creates the group from the `lowcon launch` environment.
    pub fn from_env(opts: GpuGroupOptions) -> Result<Self> {
        let (store, rank, world) = crate::group::connect_from_env("GpuGroup", opts.timeout)?;
        Self::new(store, rank, world, opts)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.core.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.core.world
    }

    /// This rank's GPU.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The wait bound.
    pub fn timeout(&self) -> Duration {
        self.core.timeout
    }

    /// Collective: a symmetric buffer of `bytes` on every rank (all must ask the same),
    /// zero-filled.
    pub fn alloc(&self, bytes: usize) -> Result<SymmetricBuffer> {
        self.core.check_usable()?;
        alloc_on(&self.core, &self.device, self.handles, bytes)
    }

    /// Collective: every rank contributes `data` (a small blob) through the store and
    /// gets all ranks' contributions in rank order.
    pub fn all_gather_bytes(&self, name: &str, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.core.all_gather(name, data, self.core.setup_timeout)
    }

    /// Collective: a barrier through the store (host-side; for setup and teardown).
    pub fn store_barrier(&self, name: &str) -> Result<()> {
        self.core.barrier(name, self.core.setup_timeout)
    }

    pub(crate) fn pad_args(&self) -> PadArgs {
        PadArgs {
            pads: crate::cuda::device_ptr(self.pads.device_peer_ptrs()),
            rank: self.core.rank as u32,
            world: self.core.world as u32,
            err: self.err.0.dev,
            timeout_ns: self.core.timeout.as_nanos().min(u64::MAX as u128) as u64,
        }
    }

    pub(crate) fn check_stream(&self, stream: &Stream) -> Result<()> {
        self.core.check_usable()?;
        if stream.device().index() != self.device.index() {
            return Err(Error::InvalidArgument(format!(
                "rank {}: the stream is on device {} but the group uses device {}",
                self.core.rank,
                stream.device().index(),
                self.device.index()
            )));
        }
        self.device.bind_to_thread()
    }

    fn slot_ptr(&self, owner: usize, channel: u32, kind: u32, from: usize) -> sys::CUdeviceptr {
        self.pads.ptrs[owner] + 4 * pad::slot(channel, kind, from as u32, self.core.world as u32) as u64
    }

    fn stage_ptr(&self, channel: u32) -> sys::CUdeviceptr {
        self.pads.ptrs[self.core.rank] + pad::stage_offset(self.core.world as u32, channel) as u64
    }

    /// Memop signal: write the epoch into this rank's staging word, then copy the 4 bytes
    /// into the peer's slot with the copy engine (no SM; the driver's write-value barrier
    /// and stream order put it after everything enqueued before).
    fn memop_signal(&self, stream: &Stream, peer: usize, channel: u32, kind: u32, epoch: u32) -> Result<()> {
        let stage = self.stage_ptr(channel);
        let dst = self.slot_ptr(peer, channel, kind, self.core.rank);
        // SAFETY: both addresses are inside the live pad buffers owned by `self`.
        unsafe {
            raw::mem_op::write_u32(stream.raw(), stage, epoch)?;
            raw::mem_op::copy(stream.raw(), dst, stage, 4)
        }
    }

    fn memop_wait(&self, stream: &Stream, peer: usize, channel: u32, kind: u32, epoch: u32) -> Result<()> {
        let slot = self.slot_ptr(self.core.rank, channel, kind, peer);
        // SAFETY: `slot` is inside this rank's live pad buffer.
        unsafe { raw::mem_op::wait_geq_u32(stream.raw(), slot, epoch) }
    }

    /// Enqueues a barrier of all ranks on `channel`. Work enqueued on `stream` before it
    /// (kernels, copies into peers' buffers) is visible to every rank's work after it.
    /// Asynchronous: a peer that never arrives shows in [`GpuGroup::synchronize`].
    pub fn barrier(&self, stream: &Stream, channel: u32, method: SyncMethod) -> Result<()> {
        self.check_stream(stream)?;
        Epochs::check_channel(channel)?;
        let epoch = self.core.epochs().next_barrier(channel);
        let peers = (0..self.core.world).filter(|&p| p != self.core.rank);
        match method {
            // SAFETY: pad pointers and the error record are owned by `self`.
            SyncMethod::Kernel => unsafe { self.device.kernels()?.barrier(stream, self.pad_args(), channel, epoch) },
            SyncMethod::StreamMemop => {
                for p in peers.clone() {
                    self.memop_signal(stream, p, channel, pad::BARRIER, epoch)?;
                }
                for p in peers {
                    self.memop_wait(stream, p, channel, pad::BARRIER, epoch)?;
                }
                Ok(())
            }
        }
    }

    /// Enqueues a signal to `peer` on `channel`, after everything enqueued before.
    pub fn put_signal(&self, stream: &Stream, peer: usize, channel: u32, method: SyncMethod) -> Result<()> {
        self.check_stream(stream)?;
        self.core.check_peer(peer, channel)?;
        let epoch = self.core.epochs().next_send(channel, peer);
        match method {
            // SAFETY: pad pointers and the error record are owned by `self`; peer < world.
            SyncMethod::Kernel => unsafe {
                self.device.kernels()?.put_signal(stream, self.pad_args(), peer as u32, channel, epoch)
            },
            SyncMethod::StreamMemop => self.memop_signal(stream, peer, channel, pad::P2P, epoch),
        }
    }

    /// Enqueues a wait for `peer`'s next signal on `channel`; work after it sees what
    /// the peer did before signalling.
    pub fn wait_signal(&self, stream: &Stream, peer: usize, channel: u32, method: SyncMethod) -> Result<()> {
        self.check_stream(stream)?;
        self.core.check_peer(peer, channel)?;
        let epoch = self.core.epochs().next_receive(channel, peer);
        match method {
            // SAFETY: pad pointers and the error record are owned by `self`; peer < world.
            SyncMethod::Kernel => unsafe {
                self.device.kernels()?.wait_signal(stream, self.pad_args(), peer as u32, channel, epoch)
            },
            SyncMethod::StreamMemop => self.memop_wait(stream, peer, channel, pad::P2P, epoch),
        }
    }

    /// Errors if a kernel of this group has reported a timeout (without waiting).
    pub fn check(&self) -> Result<()> {
        self.core.check_usable()?;
        let rec = self.err.read();
        if rec.code != status::OK {
            return Err(self.core.fail(Error::DeviceTimeout(rec)));
        }
        Ok(())
    }

    /// Waits for `stream`, bounded by the group's timeout, watching for peers that died
    /// and for kernel-reported timeouts. On a timeout the error names the peer(s) whose
    /// signals are missing, the stuck waits are released so the stream drains, and the
    /// group refuses further work.
    pub fn synchronize(&self, stream: &Stream) -> Result<()> {
        self.check_stream(stream)?;
        let done = stream.event(false)?;
        stream.record(&done)?;
        self.wait_event(&done)
    }

    /// Waits for `done`, bounded by the group's timeout, watching for dead peers and
    /// kernel-reported timeouts (see [`GpuGroup::synchronize`]).
    pub(crate) fn wait_event(&self, done: &crate::cuda::Event) -> Result<()> {
        let start = Instant::now();
        let mut polls = 0u64;
        while !done.is_complete()? {
            polls += 1;
            if polls.is_multiple_of(64) {
                for p in (0..self.core.world).filter(|&p| p != self.core.rank) {
                    if self.core.mesh.peer_hung_up(p) {
                        let e = Error::PeerGone {
                            rank: self.core.rank,
                            peer: p,
                            what: "its signals were awaited on the GPU".into(),
                        };
                        self.release_waits(done);
                        return Err(self.core.fail(e));
                    }
                }
            }
            if start.elapsed() > self.core.timeout + Duration::from_secs(1) {
                let e = self.diagnose_timeout();
                self.release_waits(done);
                return Err(self.core.fail(e));
            }
            if polls < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        self.check()
    }

    /// Every pad slot this rank has issued a wait on, with the epoch it awaits: the
    /// facts behind both the timeout diagnosis and the release of stuck waits.
    fn awaited(&self) -> Vec<Awaited> {
        let world = self.core.world;
        let ep = self.core.epochs();
        let mut v = Vec::new();
        for channel in 0..pad::CHANNELS {
            for peer in (0..world).filter(|&p| p != self.core.rank) {
                for (kind, epoch, what) in [
                    (pad::BARRIER, ep.barrier_epoch(channel), "barrier arrival"),
                    (pad::P2P, ep.received_epoch(channel, peer), "signal"),
                ] {
                    if epoch != 0 {
                        let slot = pad::slot(channel, kind, peer as u32, world as u32) as usize;
                        v.push(Awaited { slot, epoch, channel, peer, what });
                    }
                }
            }
        }
        v
    }

    /// Reads this rank's pad and names the first (channel, peer) whose signal is behind
    /// what this rank expects.
    fn diagnose_timeout(&self) -> Error {
        let secs = self.core.timeout.as_secs_f64();
        let slots = match self.read_own_pad() {
            Ok(s) => s,
            Err(e) => {
                return Error::Rendezvous(format!(
                    "rank {}: timed out, and the pad is unreadable: {e}",
                    self.core.rank
                ));
            }
        };
        for a in self.awaited() {
            let seen = slots[a.slot];
            if !epoch_reached(seen, a.epoch) {
                return Error::PeerTimeout {
                    rank: self.core.rank,
                    peer: a.peer,
                    what: format!("its {} on channel {} (epoch {}, saw {seen})", a.what, a.channel, a.epoch),
                    secs,
                };
            }
        }
        Error::Rendezvous(format!(
            "rank {}: the stream did not finish within {secs:.1} s, yet every peer signalled",
            self.core.rank
        ))
    }

    /// Bound on each failure-handling step on the side stream.
    const SIDE_LIMIT: Duration = Duration::from_secs(2);

    /// Waits, at most [`Self::SIDE_LIMIT`], for what was enqueued on the side stream.
    fn side_wait(&self, what: &str) -> Result<()> {
        let done = self.side.event(false)?;
        self.side.record(&done)?;
        let start = Instant::now();
        while !done.is_complete()? {
            if start.elapsed() > Self::SIDE_LIMIT {
                return Err(Error::Rendezvous(format!(
                    "rank {}: {what} did not finish within {:.0} s",
                    self.core.rank,
                    Self::SIDE_LIMIT.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// This rank's pad as it is now, copied on the side stream into pinned memory
    /// (bounded: never waits behind a stuck stream for long).
    fn read_own_pad(&self) -> Result<Vec<u32>> {
        let bytes = pad::bytes(self.core.world as u32);
        // SAFETY: copies this rank's live pad into the pinned mirror of the same size;
        // the mirror is only read after the copy completed (side_wait).
        unsafe { raw::mem_op::copy(self.side.raw(), self.pad_mirror.dev, self.pads.local_ptr(), bytes)? };
        self.side_wait("reading this rank's signal pad")?;
        let words = self.pad_mirror.host.cast::<u32>();
        // SAFETY: the mirror holds `bytes / 4` aligned words, written by the completed
        // copy; volatile because the device wrote them.
        Ok((0..bytes / 4).map(|i| unsafe { std::ptr::read_volatile(words.add(i)) }).collect())
    }

    /// Releases every wait this rank has enqueued so the streams drain: kernels give up
    /// their waits (error record), and stream-memop waits see their epoch written into
    /// this rank's own pad by stream write-value operations on the side stream (no
    /// copy engine, no SM, nothing read first). Only used once the group has failed.
    ///
    /// The writes are repeated until `done` and every call in flight completed (at
    /// most [`Self::SIDE_LIMIT`]): a live peer that had enqueued fewer calls keeps
    /// signalling older epochs into this pad while its own stream drains, and each such
    /// signal overwrites a released slot with a value below what a later wait here
    /// needs (seen on 4x H200: one survivor one call ahead of the others stayed stuck).
    fn release_waits(&self, done: &crate::cuda::Event) {
        let rank = self.core.rank;
        // Queued kernels of this group give up their waits at once from now on.
        self.err.abort();
        let awaited = self.awaited();
        let start = Instant::now();
        for round in 1.. {
            for a in &awaited {
                let addr = self.pads.local_ptr() + 4 * a.slot as u64;
                // SAFETY: `addr` is a 4-byte slot inside this rank's live pad.
                if let Err(e) = unsafe { raw::mem_op::write_u32(self.side.raw(), addr, a.epoch) } {
                    crate::config::trace(rank, &format!("releasing slot {}: {e}", a.slot));
                }
            }
            if let Err(e) = self.side_wait("releasing the stuck waits") {
                crate::config::trace(rank, &e.to_string());
                return;
            }
            if done.is_complete().unwrap_or(true) && self.inflight_drained() {
                crate::config::trace(rank, &format!("{} awaited pad slots released ({round} rounds)", awaited.len()));
                return;
            }
            if start.elapsed() > Self::SIDE_LIMIT {
                crate::config::trace(rank, &format!("streams still busy after {round} rounds of releasing waits"));
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Whether every collective call still in the in-flight queue has completed.
    fn inflight_drained(&self) -> bool {
        let q = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().all(|e| e.is_complete().unwrap_or(true))
    }
}

/// One wait this rank has issued: the slot in its own pad and the epoch it awaits.
struct Awaited {
    slot: usize,
    epoch: u32,
    channel: u32,
    peer: usize,
    what: &'static str,
}

fn peer_access_verdict(core: &GroupCore, device: &Device) -> String {
    for p in (0..core.world).filter(|&p| p != core.rank) {
        let pci = core.infos[p].get("pci");
        // SAFETY: the driver is initialised (the device is open).
        let peer_dev = match unsafe { raw::device::by_pci_bus_id(pci) } {
            Ok(d) => d,
            Err(e) => {
                return format!(
                    "rank {}: the GPU of rank {p} (PCI {pci}) is not visible to this process ({e}); every rank \
                     must see every GPU (check CUDA_VISIBLE_DEVICES)",
                    core.rank
                );
            }
        };
        let me = device.cuda_context().cu_device();
        // SAFETY: both are valid device handles.
        match unsafe { raw::device::can_access_peer(me, peer_dev) } {
            Ok(true) => {}
            Ok(false) => {
                return format!(
                    "GPUs of rank {} (PCI {}) and rank {p} (PCI {pci}) cannot access each other's memory \
                     (cuDeviceCanAccessPeer is false): lowcon needs peer access (NVLink or PCIe P2P) between all GPUs",
                    core.rank,
                    core.infos[core.rank].get("pci")
                );
            }
            Err(e) => return format!("rank {}: {e}", core.rank),
        }
    }
    String::new()
}

fn alloc_on(core: &GroupCore, device: &Device, handles: HandleKind, bytes: usize) -> Result<SymmetricBuffer> {
    if bytes == 0 {
        return Err(Error::InvalidArgument("symmetric buffers must hold at least one byte".into()));
    }
    let tag = core.agree_on_alloc(bytes)?;
    device.bind_to_thread()?;
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
    let verdicts = core.store().all_gather(
        &format!("group/{}/alloc/{tag}/vmm", core.group_id),
        core.rank,
        world,
        why_not.as_bytes(),
        core.setup_timeout,
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
        eprintln!(
            "lowcon: falling back to CUDA IPC handles: rank {r} cannot export VMM memory: {}",
            String::from_utf8_lossy(v)
        );
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
            unsafe { sys::cuMemsetD8_v2(own_ptr, 0, size) }.result().map_err(|e| Error::driver("cuMemsetD8", e))?;
            // cuMemsetD8 runs on the legacy stream, which lowcon's non-blocking streams
            // do not wait for: finish it before any peer can write into the buffer.
            device.synchronize()?;
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
                let _ = release_backing(device, backing, &Drain::new(core));
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
            unsafe { sys::cuMemsetD8_v2(own, 0, bytes) }.result().map_err(|e| Error::driver("cuMemsetD8", e))?;
            device.synchronize()?;
            // SAFETY: `own` is the base of a cuMemAlloc allocation.
            let handle = unsafe { raw::ipc::get_handle(own)? };
            let all = core.store().all_gather(
                &format!("group/{}/alloc/{tag}/ipc", core.group_id),
                core.rank,
                world,
                &handle,
                core.setup_timeout,
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
                let _ = release_backing(device, backing, &Drain::new(core));
                return Err(e);
            }
        }
    };
    let side = device.stream(StreamPriority::Default)?;
    let ptrs_u64: Vec<u64> = ptrs.clone();
    let dev_ptrs = match side.upload(&ptrs_u64) {
        Ok(d) => d,
        Err(e) => {
            let _ = release_backing(device, backing, &Drain::new(core));
            return Err(e);
        }
    };
    side.synchronize()?;
    // Nobody signals into a pad, or copies into a buffer, before every rank mapped it.
    core.store().barrier(&format!("group/{}/alloc/{tag}/mapped", core.group_id), world, core.setup_timeout)?;
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
