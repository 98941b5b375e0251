//! The host backend: the GPU backend's group / symmetric buffer / signal API over CPU
//! shared memory, so collectives run and are tested on machines without a GPU.
//!
//! Buffers are `memfd`s passed between the ranks' processes with the same `SCM_RIGHTS`
//! mesh the GPU backend uses for VMM handles, and mapped `MAP_SHARED` by every rank.
//! Signal pads live in one such buffer; signals are `AtomicU32` stores with release
//! ordering into the peer's pad, and waits are acquire loads of the own pad with the
//! same epoch rules ([`crate::sync`]) and timeouts as the GPU kernels. A wait also
//! polls the peer's socket, so a peer that died is reported at once, by rank.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lowcon_abi::pad;
use lowcon_store::StoreClient;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

use crate::error::{Error, Result};
use crate::group::GroupCore;
use crate::sync::{Epochs, epoch_reached};

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
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.peer_ptr(peer).add(offset), data.len()) };
        Ok(())
    }

    /// Copies `out.len()` bytes from rank `peer`'s buffer at `offset`.
    pub fn read(&self, peer: usize, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(peer, offset, out.len())?;
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.peer_ptr(peer).add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

/// Options for [`HostGroup::new`].
#[derive(Clone, Debug)]
pub struct HostGroupOptions {
    /// Group name; ranks creating groups with one name in the same order meet.
    pub name: String,
    /// Bound on every wait for a peer.
    pub timeout: Duration,
}

impl Default for HostGroupOptions {
    fn default() -> Self {
        Self { name: "default".into(), timeout: crate::config::timeout() }
    }
}

/// A group of ranks on the host backend.
pub struct HostGroup {
    pub(crate) core: GroupCore,
    pads: HostBuffer,
    /// Per channel: the collectives' workspace (grown collectively on demand).
    pub(crate) workspaces: Vec<std::sync::Mutex<Option<HostBuffer>>>,
}

impl HostGroup {
    /// Collective: creates the group from a connected store client.
    pub fn new(store: StoreClient, rank: usize, world: usize, opts: HostGroupOptions) -> Result<Self> {
        let core =
            GroupCore::new(store, rank, world, &opts.name, vec![("backend".into(), "host".into())], opts.timeout)?;
        let pads = alloc_on(&core, pad::bytes(world as u32))?;
        let workspaces = (0..pad::CHANNELS).map(|_| std::sync::Mutex::new(None)).collect();
        Ok(Self { core, pads, workspaces })
    }

    /// Collective: creates the group from the launcher/torchrun environment.
    pub fn from_env(opts: HostGroupOptions) -> Result<Self> {
        let (store, rank, world) = crate::group::connect_from_env("HostGroup", opts.timeout)?;
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

    /// The wait bound.
    pub fn timeout(&self) -> Duration {
        self.core.timeout
    }

    /// Collective: a symmetric buffer of `bytes` on every rank (all must ask the same).
    pub fn alloc(&self, bytes: usize) -> Result<HostBuffer> {
        self.core.check_usable()?;
        alloc_on(&self.core, bytes)
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

    fn slot(&self, owner: usize, channel: u32, kind: u32, from: usize) -> &AtomicU32 {
        let idx = pad::slot(channel, kind, from as u32, self.core.world as u32) as usize;
        // SAFETY: `idx` < pad::bytes(world)/4 (channel and ranks are checked by the
        // callers), the pad mapping lives as long as `self`, is 4-byte aligned (page
        // aligned base), and is only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.pads.peer_ptr(owner).cast::<u32>().add(idx)) }
    }

    fn signal(&self, peer: usize, channel: u32, kind: u32, epoch: u32) {
        self.slot(peer, channel, kind, self.core.rank).store(epoch, Ordering::Release);
    }

    fn wait(&self, peer: usize, channel: u32, kind: u32, epoch: u32, what: &str) -> Result<()> {
        let slot = self.slot(self.core.rank, channel, kind, peer);
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let seen = slot.load(Ordering::Acquire);
            if epoch_reached(seen, epoch) {
                return Ok(());
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            if spins.is_multiple_of(256) {
                if self.core.mesh.peer_hung_up(peer) {
                    return Err(self.core.fail(Error::PeerGone {
                        rank: self.core.rank,
                        peer,
                        what: format!("waiting for its {what} on channel {channel} (epoch {epoch}, saw {seen})"),
                    }));
                }
                if start.elapsed() > self.core.timeout {
                    return Err(self.core.fail(Error::PeerTimeout {
                        rank: self.core.rank,
                        peer,
                        what: format!("its {what} on channel {channel} (epoch {epoch}, saw {seen})"),
                        secs: self.core.timeout.as_secs_f64(),
                    }));
                }
            }
            if spins < 1024 { std::thread::yield_now() } else { std::thread::sleep(Duration::from_micros(20)) }
        }
    }

    /// Collective: returns once every rank reached the barrier on `channel`. Everything
    /// a rank wrote to any buffer before the barrier is visible to every rank after it.
    pub fn barrier(&self, channel: u32) -> Result<()> {
        self.core.check_usable()?;
        Epochs::check_channel(channel)?;
        let epoch = self.core.epochs().next_barrier(channel);
        for p in (0..self.core.world).filter(|&p| p != self.core.rank) {
            self.signal(p, channel, pad::BARRIER, epoch);
        }
        for p in (0..self.core.world).filter(|&p| p != self.core.rank) {
            self.wait(p, channel, pad::BARRIER, epoch, "barrier arrival")?;
        }
        Ok(())
    }

    /// Signals `peer` on `channel` (release: the peer's matching `wait_signal` sees
    /// everything this rank wrote before).
    pub fn put_signal(&self, peer: usize, channel: u32) -> Result<()> {
        self.core.check_usable()?;
        self.core.check_peer(peer, channel)?;
        let epoch = self.core.epochs().next_send(channel, peer);
        self.signal(peer, channel, pad::P2P, epoch);
        Ok(())
    }

    /// Waits for `peer`'s next `put_signal` on `channel`.
    pub fn wait_signal(&self, peer: usize, channel: u32) -> Result<()> {
        self.core.check_usable()?;
        self.core.check_peer(peer, channel)?;
        let epoch = self.core.epochs().next_receive(channel, peer);
        self.wait(peer, channel, pad::P2P, epoch, "signal")
    }
}

fn alloc_on(core: &GroupCore, bytes: usize) -> Result<HostBuffer> {
    if bytes == 0 {
        return Err(Error::InvalidArgument("symmetric buffers must hold at least one byte".into()));
    }
    let tag = core.agree_on_alloc(bytes)?;
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
