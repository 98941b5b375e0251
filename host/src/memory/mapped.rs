//! Ordinary device memory that peers read in place: a per-call exchange of addresses
//! and a cache of opened IPC handles (`map_ordinary`, NOTE [mapped ordinary memory]).
//!
//! NOTE [mapped ordinary memory]: a framework's own allocator (torch's caching
//! allocator) hands out blocks of large `cudaMalloc` segments, and reuses freed blocks
//! for activations, which is why NCCL's buffers cost it no memory of their own. lowcon's
//! copy engines need the peers' addresses of the data they read, so an ordinary buffer
//! is either staged through symmetric memory (a local copy) or, with `map_ordinary`,
//! mapped: every rank publishes, in a shared host mailbox, the allocation that holds its
//! buffer (its IPC handle, its process-unique buffer id, the buffer's offset in it and
//! its size), waits for every peer's entry of the same call, opens the handles it has
//! not opened yet, then publishes a verdict word and reads every peer's (so that a rank
//! whose open failed makes every rank stage). The allocator's segments live long, so
//! after the first step no handle is opened any more and a call costs two host
//! rendezvous (no GPU sync, no store).
//!
//! Safety of the cache: an entry is keyed by (peer, buffer id). A segment freed and
//! re-allocated by the peer at the same address gets a new id, so a stale mapping is
//! never used; the first time a peer publishes an allocation overlapping a cached one
//! with another id, the old one is closed (no work of ours can still read it: the peer
//! only freed it after the calls that used it, and those end with a barrier). At most
//! `MAX_OPEN_PER_PEER` stay open per peer: beyond, the least recently used ones that no
//! call in flight uses (pinned from the exchange until the call is registered with the
//! watchdog, then until the watchdog saw it complete) are closed. The
//! mailbox of each channel has two slots per rank, used alternately: a rank writes its
//! slot for call k + 2 only after it read every peer's entry of call k + 1, which every
//! peer writes only after it read everything of call k.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cudarc::driver::sys;

use crate::cuda::{Device, raw};
use crate::error::{Error, Result};
use crate::memory::gpu::Drain;
use crate::memory::host::{HostBuffer, alloc};
use crate::rendezvous::GroupCore;

/// Bytes of one mailbox entry: the seq word, the fields below, the ack word at the end.
const ENTRY: usize = 128;
/// Bytes of the fields.
const BODY: usize = 112;
/// Entries per rank: two per channel.
const SLOTS: usize = 2 * lowcon_abi::pad::CHANNELS as usize;
/// Entry flag: this rank could not share its buffer (its log says why).
const UNSHAREABLE: u64 = 1;
/// More exported handles than this (allocations come and go) and the list starts anew.
const MAX_EXPORTS: usize = 4096;

// The fields after the seq word fit an entry.
const _: () = assert!(BODY >= 48 + raw::ipc::HANDLE_BYTES && 8 + BODY <= ENTRY - 8);

/// What a rank publishes for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    buffer_id: u64,
    /// The allocation's base and size in the owner's address space.
    base: u64,
    size: u64,
    /// The buffer's offset in the allocation, and its bytes.
    offset: u64,
    bytes: u64,
    flags: u64,
    handle: [u8; raw::ipc::HANDLE_BYTES],
}

impl Entry {
    fn to_bytes(self) -> [u8; BODY] {
        let mut b = [0u8; BODY];
        for (i, w) in [self.buffer_id, self.base, self.size, self.offset, self.bytes, self.flags].iter().enumerate() {
            b[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        b[48..48 + raw::ipc::HANDLE_BYTES].copy_from_slice(&self.handle);
        b
    }

    fn from_bytes(b: &[u8; BODY]) -> Self {
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        let mut handle = [0u8; raw::ipc::HANDLE_BYTES];
        handle.copy_from_slice(&b[48..48 + raw::ipc::HANDLE_BYTES]);
        Self { buffer_id: w(0), base: w(1), size: w(2), offset: w(3), bytes: w(4), flags: w(5), handle }
    }
}

/// A peer's allocation opened in this process.
struct Opened {
    peer_base: u64,
    size: u64,
    local: sys::CUdeviceptr,
    /// Calls between their exchange and their registration with the watchdog.
    pins: u32,
    /// Every call that used it has a watchdog sequence number below this.
    used_before: u64,
}

/// Peer allocations kept open per peer; beyond it the least recently used ones whose
/// calls completed are closed (and opened again if used again).
pub const MAX_OPEN_PER_PEER: usize = 64;

#[derive(Default)]
struct Cache {
    opened: HashMap<(usize, u64), Opened>,
    exported: HashMap<u64, [u8; raw::ipc::HANDLE_BYTES]>,
}

/// Where one call's buffer is on every rank, and the mappings it pinned.
pub(crate) struct Exchanged {
    /// Every rank's buffer, as this process reaches it.
    pub(crate) addrs: Vec<u64>,
    keys: Vec<(usize, u64)>,
}

/// What an exchange found: every rank's buffer mapped, or a rank that cannot share its
/// own (every rank learns the same, so all stage the call, or all refuse it).
pub(crate) enum Shared {
    Mapped(Exchanged),
    Unshareable {
        /// Which rank (the first that cannot share), and on that rank why.
        why: String,
    },
}

/// A GPU group's mailbox and its cache of opened peer allocations.
pub(crate) struct PeerMaps {
    mailbox: HostBuffer,
    cache: Mutex<Cache>,
    device: Device,
    drain: Drain,
    rank: usize,
    /// Whether this rank has logged that it cannot share (once per group).
    warned: AtomicBool,
}

impl PeerMaps {
    /// Collective: the mailbox (a few KiB of shared host memory per rank).
    pub(crate) fn new(core: &GroupCore, device: &Device) -> Result<Self> {
        let mailbox = alloc(core, SLOTS * ENTRY)?;
        Ok(Self {
            mailbox,
            cache: Mutex::new(Cache::default()),
            device: device.clone(),
            drain: Drain::new(core),
            rank: core.rank,
            warned: AtomicBool::new(false),
        })
    }

    /// The word at byte `off` of `owner`'s mailbox entry `slot`: 0 the seq (written last
    /// of the entry), `ENTRY - 8` the ack of the second round.
    fn word(&self, owner: usize, slot: usize, off: usize) -> &AtomicU64 {
        // SAFETY: `slot` < SLOTS and `off` is 0 or ENTRY - 8, so the word is inside the
        // owner's mapping, which lives as long as `self`; page-aligned base and 8-byte
        // multiples, so aligned; these words are only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.mailbox.peer_ptr(owner).add(slot * ENTRY + off).cast::<u64>()) }
    }

    fn seq_of(&self, owner: usize, slot: usize) -> &AtomicU64 {
        self.word(owner, slot, 0)
    }

    fn ack_of(&self, owner: usize, slot: usize) -> &AtomicU64 {
        self.word(owner, slot, ENTRY - 8)
    }

    /// Exchanges this call's buffer (`bytes` at `ptr`, this rank's `what`) with every
    /// peer; returns where every rank's buffer is mapped in this process (this rank's
    /// own: `ptr`). `seq` is the channel's count of such calls, starting at 1, the same
    /// on every rank. Every rank gets the same answer when a rank cannot share its buffer
    /// (`Shared::Unshareable`, logged once by that rank), and the same error when the
    /// sizes differ.
    ///
    /// The peers' allocations it used stay pinned (never closed) until [`PeerMaps::settle`]
    /// gives the watchdog's sequence number of the call; `done_before(s)` says whether
    /// every call numbered below `s` has completed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn exchange(
        &self,
        core: &GroupCore,
        channel: u32,
        seq: u64,
        ptr: u64,
        bytes: usize,
        what: &str,
        done_before: &dyn Fn(u64) -> bool,
    ) -> Result<Shared> {
        let (rank, world) = (core.rank, core.world);
        let slot = 2 * channel as usize + (seq % 2) as usize;
        self.device.bind_to_thread()?;
        // The cache is locked only around its own use, never while waiting for peers:
        // threads driving other channels exchange meanwhile (holding it across the wait
        // deadlocks two ranks whose threads reach two channels in opposite orders).
        let described = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            self.describe(&mut cache, ptr, bytes)
        };
        let (mine, local_err) = match described {
            Ok(e) => (e, None),
            Err(e) => (
                Entry {
                    buffer_id: 0,
                    base: 0,
                    size: 0,
                    offset: 0,
                    bytes: bytes as u64,
                    flags: UNSHAREABLE,
                    handle: [0; raw::ipc::HANDLE_BYTES],
                },
                Some(e),
            ),
        };
        self.mailbox.write(rank, slot * ENTRY + 8, &mine.to_bytes())?;
        self.seq_of(rank, slot).store(seq, Ordering::Release);
        let mut entries = Vec::with_capacity(world);
        for p in 0..world {
            if p == rank {
                entries.push(mine);
                continue;
            }
            self.wait_for(core, p, slot, 0, seq, channel, &format!("its {what}'s address"))?;
            let mut b = [0u8; BODY];
            self.mailbox.read(p, slot * ENTRY + 8, &mut b)?;
            entries.push(Entry::from_bytes(&b));
        }
        // Decided alike on every rank, from the same entries, before anything is opened.
        if let Some(first) = entries.iter().position(|e| e.flags & UNSHAREABLE != 0) {
            let why = match local_err {
                Some(e) => self.warn_once(format!("rank {rank}: the {what}: {e}")),
                None => format!("rank {first} could not share its {what} with its peers (its log says why)"),
            };
            return Ok(Shared::Unshareable { why });
        }
        if let Some((p, e)) = entries.iter().enumerate().find(|(_, e)| e.bytes != bytes as u64) {
            return Err(Error::InvalidArgument(format!(
                "rank {rank}: rank {p}'s {what} has {} bytes, this rank's {bytes}: every rank must pass the same sizes",
                e.bytes
            )));
        }
        // Open what is not open yet, and pin it; then a second round, so that a rank
        // whose open failed makes every rank stage rather than wait in barriers for it.
        let mut addrs = Vec::with_capacity(world);
        let mut keys = Vec::with_capacity(world);
        let opened: Result<()> = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut r = Ok(());
            for (p, e) in entries.iter().enumerate() {
                if p == rank {
                    addrs.push(ptr);
                    continue;
                }
                match self.open(&mut cache, rank, p, e, done_before) {
                    Ok(local) => {
                        cache.opened.get_mut(&(p, e.buffer_id)).expect("just opened").pins += 1;
                        keys.push((p, e.buffer_id));
                        addrs.push(local + e.offset);
                    }
                    Err(err) => {
                        r = Err(err);
                        break;
                    }
                }
            }
            r
        };
        let ok = opened.is_ok();
        self.ack_of(rank, slot).store(seq << 1 | ok as u64, Ordering::Release);
        let mut failed = (!ok).then_some(rank);
        for p in (0..world).filter(|&p| p != rank) {
            let ack =
                self.wait_for(core, p, slot, ENTRY - 8, seq << 1, channel, "its mapping of this rank's buffer")?;
            if ack & 1 == 0 && failed.is_none() {
                failed = Some(p);
            }
        }
        let ex = Exchanged { addrs, keys };
        match (failed, opened) {
            (None, _) => Ok(Shared::Mapped(ex)),
            (Some(first), opened) => {
                self.unpin(&ex);
                let why = match opened {
                    Err(e) => self.warn_once(format!("rank {rank}: mapping the peers' {what}: {e}")),
                    Ok(()) => format!("rank {first} could not map its peers' {what} (its log says why)"),
                };
                Ok(Shared::Unshareable { why })
            }
        }
    }

    /// Spins until peer `p`'s word at `off` of mailbox `slot` reaches `want` (a call's
    /// seq, or seq << 1 for acks, whose low bit is a verdict); returns the word.
    #[allow(clippy::too_many_arguments)]
    fn wait_for(
        &self,
        core: &GroupCore,
        p: usize,
        slot: usize,
        off: usize,
        want: u64,
        channel: u32,
        what: &str,
    ) -> Result<u64> {
        let word = self.word(p, slot, off);
        let strip = |w: u64| if off == 0 { w } else { w & !1 };
        let seen = core.spin_until(
            p,
            || {
                let w = word.load(Ordering::Acquire);
                (strip(w) >= want).then_some(w)
            },
            |w: u64| format!("{what} on channel {channel} (mailbox word {want:#x}, saw {w:#x})"),
            || word.load(Ordering::Relaxed),
        )?;
        if strip(seen) != want {
            return Err(core.fail(Error::GroupFailed(format!(
                "rank {}: rank {p} is at another call of channel {channel}'s address exchange ({seen:#x}, this rank \
                 {want:#x}): the ranks' calls with map_ordinary differ",
                core.rank
            ))));
        }
        Ok(seen)
    }

    fn warn_once(&self, why: String) -> String {
        if !self.warned.swap(true, Ordering::Relaxed) {
            crate::log::warn(&format!("{why} (staged instead; warned once)"));
        }
        why
    }

    /// Closes a peer allocation opened here (a failure is only logged: the mapping is
    /// gone from the cache either way, and the driver reclaims it at exit).
    ///
    /// # Safety
    /// No pending work uses `o`'s mapping.
    unsafe fn close(rank: usize, o: Opened) {
        // SAFETY: opened by `open_handle`; unused, by the caller's contract.
        if let Err(e) = unsafe { raw::ipc::close_handle(o.local) } {
            crate::log::trace(rank, &format!("closing a peer mapping failed: {e}"));
        }
    }

    /// Undoes the pins of an exchange whose call will not run.
    fn unpin(&self, ex: &Exchanged) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for k in &ex.keys {
            if let Some(o) = cache.opened.get_mut(k) {
                o.pins = o.pins.saturating_sub(1);
            }
        }
    }

    /// Closes every opened peer allocation no call in flight uses (`done_before`); returns
    /// how many. A peer's freed segment goes back to its driver only once every importer
    /// closed it: call on every rank before the peers empty their allocator's cache.
    pub(crate) fn release_idle(&self, done_before: &dyn Fn(u64) -> bool) -> Result<usize> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let idle: Vec<(usize, u64)> =
            cache.opened.iter().filter(|(_, o)| o.pins == 0 && done_before(o.used_before)).map(|(k, _)| *k).collect();
        if idle.is_empty() {
            return Ok(0);
        }
        self.device.bind_to_thread()?;
        for k in &idle {
            if let Some(o) = cache.opened.remove(k) {
                // SAFETY: unpinned, and every call that used it has completed
                // (`done_before`).
                unsafe { Self::close(self.rank, o) };
            }
        }
        Ok(idle.len())
    }

    /// The call that used `ex` is registered with the watchdog as `call`: its mappings
    /// may be closed once calls below `call + 1` completed.
    pub(crate) fn settle(&self, ex: &Exchanged, call: u64) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for k in &ex.keys {
            if let Some(o) = cache.opened.get_mut(k) {
                o.pins = o.pins.saturating_sub(1);
                o.used_before = o.used_before.max(call + 1);
            }
        }
    }

    /// This rank's entry for `bytes` at `ptr`.
    fn describe(&self, cache: &mut Cache, ptr: u64, bytes: usize) -> Result<Entry> {
        let rank_hint = "map_ordinary needs memory from cudaMalloc or cuMemAlloc (torch's default caching \
                         allocator; not expandable segments, cudaMallocAsync or a memory pool)";
        // SAFETY: the group's context is current (`exchange`).
        let (base, size) = unsafe { raw::device::address_range(ptr) }
            .map_err(|e| Error::InvalidArgument(format!("the buffer at {ptr:#x} is not device memory ({e})")))?;
        // SAFETY: as above.
        let buffer_id = unsafe { raw::device::buffer_id(ptr) }.map_err(|e| {
            Error::InvalidArgument(format!("the buffer at {ptr:#x} cannot be shared: {e}; {rank_hint}"))
        })?;
        let offset = ptr - base;
        if offset + bytes as u64 > size as u64 {
            return Err(Error::InvalidArgument(format!(
                "the {bytes}-byte buffer at {ptr:#x} runs past the end of its allocation ({size} bytes at {base:#x})"
            )));
        }
        let handle = match cache.exported.get(&buffer_id) {
            Some(h) => *h,
            None => {
                // SAFETY: `base` is the base of a live allocation of this context.
                let h = unsafe { raw::ipc::get_handle(base) }.map_err(|e| {
                    Error::InvalidArgument(format!(
                        "the allocation at {base:#x} ({size} bytes) that holds the buffer cannot be shared: {e}; \
                         {rank_hint}"
                    ))
                })?;
                if cache.exported.len() >= MAX_EXPORTS {
                    cache.exported.clear();
                }
                cache.exported.insert(buffer_id, h);
                h
            }
        };
        Ok(Entry { buffer_id, base, size: size as u64, offset, bytes: bytes as u64, flags: 0, handle })
    }

    /// Peer `p`'s allocation `e`, opened here (cached).
    fn open(
        &self,
        cache: &mut Cache,
        rank: usize,
        p: usize,
        e: &Entry,
        done_before: &dyn Fn(u64) -> bool,
    ) -> Result<sys::CUdeviceptr> {
        if let Some(o) = cache.opened.get(&(p, e.buffer_id)) {
            return Ok(o.local);
        }
        if e.offset + e.bytes > e.size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank}: rank {p} published a buffer that runs past its allocation (offset {}, {} bytes, \
                 allocation {} bytes)",
                e.offset, e.bytes, e.size
            )));
        }
        // The peer freed what overlaps this allocation: close the old mappings.
        let mut stale: Vec<(usize, u64)> = cache
            .opened
            .iter()
            .filter(|((q, _), o)| *q == p && o.peer_base < e.base + e.size && e.base < o.peer_base + o.size)
            .map(|(k, _)| *k)
            .collect();
        // Too many open: the least recently used whose calls all completed.
        let mut idle: Vec<(u64, (usize, u64))> = cache
            .opened
            .iter()
            .filter(|((q, _), o)| *q == p && o.pins == 0 && done_before(o.used_before))
            .map(|(k, o)| (o.used_before, *k))
            .collect();
        let open_after = cache.opened.keys().filter(|(q, _)| *q == p).count() + 1 - stale.len();
        if open_after > MAX_OPEN_PER_PEER {
            idle.retain(|(_, k)| !stale.contains(k));
            idle.sort_unstable();
            stale.extend(idle.iter().take(open_after - MAX_OPEN_PER_PEER).map(|(_, k)| *k));
        }
        for k in stale {
            if let Some(o) = cache.opened.remove(&k) {
                // SAFETY: either the peer freed the allocation after the calls that read
                // it, which ended with a barrier (module docs), or every call that used
                // it has completed (`done_before`).
                unsafe { Self::close(self.rank, o) };
            }
        }
        // SAFETY: a handle another process exported; the context is current.
        let local = unsafe { raw::ipc::open_handle(&e.handle) }.map_err(|err| {
            Error::InvalidArgument(format!(
                "rank {rank}: opening rank {p}'s allocation ({} bytes, buffer id {}) failed: {err}",
                e.size, e.buffer_id
            ))
        })?;
        cache
            .opened
            .insert((p, e.buffer_id), Opened { peer_base: e.base, size: e.size, local, pins: 0, used_before: 0 });
        Ok(local)
    }

    /// Peer allocations opened now (for tests and stats).
    pub(crate) fn opened(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).opened.len()
    }
}

impl Drop for PeerMaps {
    /// Closes every opened peer allocation once the device is idle (if it does not drain
    /// in time they stay open until the process exits; `Drain` says so).
    fn drop(&mut self) {
        let rank = self.rank;
        let cache = self.cache.get_mut().unwrap_or_else(|p| p.into_inner());
        if cache.opened.is_empty() || self.device.bind_to_thread().is_err() {
            return;
        }
        if self.drain.wait(&self.device, "the group's peer mappings").is_err() {
            return;
        }
        for (_, o) in cache.opened.drain() {
            // SAFETY: the device is idle.
            unsafe { Self::close(rank, o) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let mut handle = [0u8; raw::ipc::HANDLE_BYTES];
        for (i, b) in handle.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        let e = Entry { buffer_id: 7, base: 0x7f00_0000, size: 1 << 30, offset: 4096, bytes: 123, flags: 0, handle };
        assert_eq!(Entry::from_bytes(&e.to_bytes()), e);
    }
}
