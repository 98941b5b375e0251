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
//! its size) and opens the peers' handles it has not opened yet. The allocator's
//! segments live long, so after the first step no handle is opened any more, and a call
//! the rank made before (same channel, address and size) predicts where the peers'
//! buffers are instead of waiting for their entries (NOTE [addresses predicted]): in
//! steady state a call makes no host rendezvous. A first call waits for every peer's
//! entry (one rendezvous).
//!
//! Safety of the cache: an entry is keyed by (peer, buffer id). A segment freed and
//! re-allocated by the peer at the same address gets a new id, so a stale mapping never
//! serves a result (a predicted copy may read one, and is then copied over before the
//! call completes). The driver opens such a new segment only once the old mapping is
//! closed (CUDA_ERROR_ALREADY_MAPPED). A mapping is closed only when no call in flight
//! uses it: pinned from the exchange until the call is registered with the watchdog,
//! then until the watchdog saw it complete. Beyond `MAX_OPEN_PER_PEER` per peer, and
//! when a peer publishes an allocation overlapping a cached one with another id (it
//! freed the old one), the idle ones are closed, least recently used first.
//!
//! The mailbox of each channel has `DEPTH` entries per rank, used in turn: a rank writes
//! its entry of call k + `DEPTH` only once every peer has read its entry of call k (each
//! rank publishes, per channel and peer, the seq up to which it read every entry).
//! Since the addresses are predicted (NOTE [addresses predicted]), a rank usually posts
//! without waiting, and reads the peers' entries later, off the calling thread. A post
//! that must wait (a peer `DEPTH` calls of the channel behind) is a host rendezvous, and
//! counts as one and as a mailbox wait (`stats()`). `DEPTH` bounds how far a rank's host
//! runs ahead of its peers' on a channel, and so how much work its streams hold: with
//! 64, `coll-mapped`'s two threads (channels 5 and 6, kernel sync) timed out at 4 ranks
//! on 4x H200 (2026-11-27: a rank's verify wait on channel 6 never saw its word while a
//! peer was 24 calls ahead; not analysed further; the same case also timed out once in 5
//! runs with 8), so it stays 8.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cudarc::driver::sys;

use crate::cuda::{Device, raw};
use crate::error::{Error, Result};
use crate::memory::gpu::Drain;
use crate::memory::host::{HostBuffer, alloc};
use crate::rendezvous::GroupCore;

/// Bytes of one mailbox entry: the seq word, then the fields below.
const ENTRY: usize = 128;
/// Bytes of the fields.
const BODY: usize = 112;
/// Entries per channel and rank: a rank may post this many calls of a channel ahead of
/// the slowest peer's reading of them (NOTE [addresses predicted]).
pub(crate) const DEPTH: usize = 8;
/// Entries per rank.
const SLOTS: usize = DEPTH * lowcon_abi::pad::CHANNELS as usize;
/// Entry flag: this rank could not share its buffer (its log says why).
const UNSHAREABLE: u64 = 1;
/// More exported handles than this (allocations come and go) and the list starts anew.
const MAX_EXPORTS: usize = 4096;
/// More remembered predictions than this and the list starts anew.
const MAX_PREDICTIONS: usize = 4096;

// The fields after the seq word fit an entry.
const _: () = assert!(BODY >= 48 + raw::ipc::HANDLE_BYTES && 8 + BODY <= ENTRY);

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

    fn unshareable(bytes: usize) -> Self {
        Self {
            buffer_id: 0,
            base: 0,
            size: 0,
            offset: 0,
            bytes: bytes as u64,
            flags: UNSHAREABLE,
            handle: [0; raw::ipc::HANDLE_BYTES],
        }
    }

    /// Where the buffer is, as a prediction compares it.
    fn place(&self) -> Place {
        Place { buffer_id: self.buffer_id, offset: self.offset, bytes: self.bytes }
    }
}

/// A peer buffer's place: its allocation (buffer id), its offset there, its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    buffer_id: u64,
    offset: u64,
    bytes: u64,
}

/// A peer's allocation opened in this process.
struct Opened {
    peer_base: u64,
    size: u64,
    local: sys::CUdeviceptr,
    /// Calls between their exchange (or a verifier's fix) and their registration with the
    /// watchdog.
    pins: u32,
    /// Every call that used it has a watchdog sequence number below this.
    used_before: u64,
}

/// Peer allocations kept open per peer; beyond it the least recently used ones whose
/// calls completed are closed (and opened again if used again).
pub const MAX_OPEN_PER_PEER: usize = 64;

/// A peer allocation no call used for this many of the group's calls (the watchdog's
/// numbers) is closed at the next exchange that waits for the peers, so that a segment
/// its owner freed (`empty_cache()`) goes back to the owner's driver instead of staying
/// alive through this rank's mapping. A training step uses its allocations every step
/// (FSDP2: about 40 calls a step at 4096x12), so only what a step stopped using ages out;
/// one aged out wrongly costs a rendezvous and an open when used again.
pub const MAX_IDLE_CALLS: u64 = 1024;

/// The key of a prediction: this rank's call (channel, buffer address, bytes, and the
/// allocation's buffer id: a segment freed and made again, as after `empty_cache()`,
/// is a new call, so the peers' allocations of the old one are not predicted).
type PredictionKey = (u32, u64, u64, u64);

#[derive(Default)]
struct Cache {
    opened: HashMap<(usize, u64), Opened>,
    exported: HashMap<u64, [u8; raw::ipc::HANDLE_BYTES]>,
    /// Every rank's place (this rank's: unused) the last time this rank made this call.
    predictions: HashMap<PredictionKey, Vec<Place>>,
}

/// Where one call's buffer is on every rank, and the mappings it pinned.
pub(crate) struct Exchanged {
    /// Every rank's buffer, as this process reaches it.
    pub(crate) addrs: Vec<u64>,
    keys: Vec<(usize, u64)>,
    /// The places the addresses were predicted from, when they were (NOTE [addresses
    /// predicted]); `None` when every peer's entry of the call was read.
    predicted: Option<(PredictionKey, Vec<Place>)>,
}

impl Exchanged {
    /// What [`PeerMaps::verify`] checks: the places predicted from, when they were.
    pub(crate) fn prediction(&self) -> Option<Prediction> {
        self.predicted.clone().map(|(key, places)| Prediction { key, places })
    }
}

/// The places a call's peer addresses were predicted from (NOTE [addresses predicted]).
pub(crate) struct Prediction {
    key: PredictionKey,
    places: Vec<Place>,
}

/// The watchdog's number of a predicted call. The verifier may check the call before
/// it is registered (its job is submitted right after the wait for it is enqueued, before
/// the call ends: NOTE [nothing between the wait and its job] in `coll::gpu::verify`), so
/// a mapping it opens for a missed prediction stays pinned until the number is known
/// ([`PeerMaps::registered`]), then waits for the call's end.
#[derive(Default)]
pub(crate) struct CallNumber(Mutex<Numbered>);

/// [`CallNumber`]'s state: the number once known, and the mappings pinned until then.
#[derive(Default)]
struct Numbered {
    call: Option<u64>,
    pinned: Vec<(usize, u64)>,
}

impl CallNumber {
    /// The number is `call`: returns what was pinned for the call until now.
    fn set(&self, call: u64) -> Vec<(usize, u64)> {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.call = Some(call);
        std::mem::take(&mut g.pinned)
    }

    /// Mapping `o` (key `k`), read by the call's fix: kept open until the call ended.
    fn keep(&self, k: (usize, u64), o: &mut Opened) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match g.call {
            Some(n) => o.used_before = o.used_before.max(n + 1),
            None => {
                o.pins += 1;
                g.pinned.push(k);
            }
        }
    }
}

/// What an exchange found: every rank's buffer mapped (or predicted), or a rank that
/// cannot share its own (every rank that read the entries learns the same, so all stage
/// the call, or all refuse it).
pub(crate) enum Shared {
    Mapped(Exchanged),
    Unshareable {
        /// Which rank (the first that cannot share), and on that rank why.
        why: String,
    },
}

/// What [`PeerMaps::verify`] found.
pub(crate) enum Verified {
    /// This peer has not posted its entry of the call yet.
    Pending(usize),
    /// The peers whose buffers were elsewhere (none: every prediction held).
    Done(Vec<Miss>),
}

/// A peer whose buffer was not where this rank predicted: where it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Miss {
    pub(crate) peer: usize,
    pub(crate) addr: u64,
}

/// The entries this rank has read of each (channel, peer), as the lowest seq below which
/// all are read (what the peer may overwrite) and the ones read above it.
#[derive(Default)]
struct Consumed {
    floor: u64,
    above: BTreeSet<u64>,
}

/// A GPU group's mailbox and its cache of opened peer allocations.
pub(crate) struct PeerMaps {
    mailbox: HostBuffer,
    cache: Mutex<Cache>,
    /// Duplicate mappings the verifier made and must not close (closed at drop).
    leaked: Mutex<Vec<Opened>>,
    consumed: Mutex<HashMap<(u32, usize), Consumed>>,
    device: Device,
    drain: Drain,
    rank: usize,
    world: usize,
    /// Whether this rank has logged that it cannot share (once per group).
    warned: AtomicBool,
    /// Whether calls that allow it are predicted (NOTE [addresses predicted]).
    pub(crate) predicting: AtomicBool,
    /// Calls whose addresses were predicted, and those whose prediction missed.
    pub(crate) predicted: AtomicU64,
    pub(crate) mispredicted: AtomicU64,
}

impl PeerMaps {
    /// Collective: the mailbox (a few tens of KiB of shared host memory per rank).
    pub(crate) fn new(core: &GroupCore, device: &Device) -> Result<Self> {
        let consumed = lowcon_abi::pad::CHANNELS as usize * core.world * 8;
        let mailbox = alloc(core, SLOTS * ENTRY + consumed, "the mapping mailbox")?;
        Ok(Self {
            mailbox,
            cache: Mutex::new(Cache::default()),
            leaked: Mutex::new(Vec::new()),
            consumed: Mutex::new(HashMap::new()),
            device: device.clone(),
            drain: Drain::new(core),
            rank: core.rank,
            world: core.world,
            warned: AtomicBool::new(false),
            predicting: AtomicBool::new(true),
            predicted: AtomicU64::new(0),
            mispredicted: AtomicU64::new(0),
        })
    }

    /// The word at byte `off` of `owner`'s mailbox.
    fn word(&self, owner: usize, off: usize) -> &AtomicU64 {
        // SAFETY: every caller passes an 8-byte multiple inside the owner's mapping
        // (entries' seq words, consumed words), which lives as long as `self`;
        // page-aligned base, so aligned; these words are only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.mailbox.peer_ptr(owner).add(off).cast::<u64>()) }
    }

    fn slot(channel: u32, seq: u64) -> usize {
        channel as usize * DEPTH + (seq % DEPTH as u64) as usize
    }

    fn seq_of(&self, owner: usize, slot: usize) -> &AtomicU64 {
        self.word(owner, slot * ENTRY)
    }

    /// In `owner`'s mailbox: the seq below which `owner` has read every entry of `src`'s
    /// on `channel`.
    fn consumed_of(&self, owner: usize, channel: u32, src: usize) -> &AtomicU64 {
        self.word(owner, SLOTS * ENTRY + (channel as usize * self.world + src) * 8)
    }

    /// Records that this rank read peer `p`'s entry `seq` of `channel`.
    fn mark_read(&self, channel: u32, p: usize, seq: u64) {
        let mut all = self.consumed.lock().unwrap_or_else(|e| e.into_inner());
        let c = all.entry((channel, p)).or_default();
        c.above.insert(seq);
        while c.above.remove(&(c.floor + 1)) {
            c.floor += 1;
        }
        self.consumed_of(self.rank, channel, p).store(c.floor, Ordering::Release);
    }

    /// Writes this rank's entry of call `seq` of `channel`, once every peer has read the
    /// entry it replaces (a wait only when a peer is `DEPTH` calls of the channel behind).
    fn post(&self, core: &GroupCore, channel: u32, seq: u64, mine: &Entry) -> Result<()> {
        let slot = Self::slot(channel, seq);
        if seq > DEPTH as u64 {
            let want = seq - DEPTH as u64;
            let behind = (0..self.world)
                .any(|p| p != self.rank && self.consumed_of(p, channel, self.rank).load(Ordering::Acquire) < want);
            // A wait for a peer's host: a host rendezvous, counted apart too (NOTE [host
            // time]).
            let _waiting = behind.then(|| core.clock.mailbox_wait());
            for p in (0..self.world).filter(|&p| p != self.rank) {
                let w = self.consumed_of(p, channel, self.rank);
                core.spin_until(
                    p,
                    || (w.load(Ordering::Acquire) >= want).then_some(()),
                    |s: u64| {
                        format!(
                            "its reading of this rank's address of call {want} on channel {channel} (it read up to \
                             {s})"
                        )
                    },
                    || w.load(Ordering::Relaxed),
                )?;
            }
        }
        self.mailbox.write(self.rank, slot * ENTRY + 8, &mine.to_bytes())?;
        self.seq_of(self.rank, slot).store(seq, Ordering::Release);
        Ok(())
    }

    /// Every rank's entry of call `seq` of `channel` (this rank's: `mine`), waiting for
    /// the peers that have not posted it yet.
    fn read_entries(&self, core: &GroupCore, channel: u32, seq: u64, mine: Entry, what: &str) -> Result<Vec<Entry>> {
        let slot = Self::slot(channel, seq);
        let mut entries = Vec::with_capacity(self.world);
        for p in 0..self.world {
            if p == self.rank {
                entries.push(mine);
                continue;
            }
            let word = self.seq_of(p, slot);
            let seen = core.spin_until(
                p,
                || {
                    let w = word.load(Ordering::Acquire);
                    (w >= seq).then_some(w)
                },
                |w: u64| format!("its {what}'s address on channel {channel} (call {seq}, its mailbox holds {w})"),
                || word.load(Ordering::Relaxed),
            )?;
            if seen != seq {
                return Err(core.fail(Error::GroupFailed(format!(
                    "rank {}: rank {p} is at another call of channel {channel}'s address exchange ({seen}, this rank \
                     {seq}): the ranks' calls with map_ordinary differ",
                    core.rank
                ))));
            }
            let mut b = [0u8; BODY];
            self.mailbox.read(p, slot * ENTRY + 8, &mut b)?;
            entries.push(Entry::from_bytes(&b));
            self.mark_read(channel, p, seq);
        }
        Ok(entries)
    }

    /// Publishes this call's buffer (`bytes` at `ptr`, this rank's `what`, call `seq` of
    /// `channel`, counted from 1 alike on every rank; `predict`: whether the caller can
    /// have a prediction checked) and returns where every rank's
    /// buffer is mapped in this process (this rank's own: `ptr`).
    ///
    /// NOTE [addresses predicted]. When this rank made the same call (channel, address,
    /// bytes) before, the peers' addresses are predicted from what they were then, and
    /// the call does not wait for anyone: the returned [`Exchanged`] says so, and the
    /// caller has [`PeerMaps::verify`] check it against the peers' entries (off the
    /// calling thread) before anything reads what the predicted copies wrote. Otherwise
    /// it waits for every peer's entry of the call and opens what is not open yet: an
    /// open that fails fails the group (every peer then fails its call, naming this
    /// rank), and a rank that cannot share its buffer makes every rank that read the
    /// entries stage the call (`Shared::Unshareable`).
    ///
    /// The peers' allocations it used stay pinned (never closed) until [`PeerMaps::settle`]
    /// gives the watchdog's sequence number of the call; `done_before(s)` says whether
    /// every call numbered below `s` has completed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn exchange(
        &self,
        core: &GroupCore,
        (channel, seq): (u32, u64),
        (ptr, bytes): (u64, usize),
        (what, predict): (&str, bool),
        done_before: &dyn Fn(u64) -> bool,
    ) -> Result<Shared> {
        let (rank, world) = (core.rank, core.world);
        self.device.bind_to_thread()?;
        // The cache is locked only around its own use, never while waiting for peers:
        // threads driving other channels exchange meanwhile (holding it across the wait
        // deadlocks two ranks whose threads reach two channels in opposite orders).
        let described = self.describe(ptr, bytes);
        let predicted = match &described {
            Ok(e) if predict && self.predicting.load(Ordering::Relaxed) => {
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                Self::predict(&mut cache, rank, (channel, ptr, bytes as u64, e.buffer_id), ptr)
            }
            _ => None,
        };
        let key: PredictionKey = (channel, ptr, bytes as u64, described.as_ref().map_or(0, |e| e.buffer_id));
        let (mine, local_err) = match described {
            Ok(e) => (e, None),
            Err(e) => (Entry::unshareable(bytes), Some(e)),
        };
        if let Err(e) = self.post(core, channel, seq, &mine) {
            if let Some(ex) = &predicted {
                self.unpin(ex);
            }
            return Err(e);
        }
        if let Some(ex) = predicted {
            self.predicted.fetch_add(1, Ordering::Relaxed);
            return Ok(Shared::Mapped(ex));
        }
        // A host rendezvous: the calling thread waits for every peer's entry.
        let waiting = core.clock.rendezvous();
        let entries = self.read_entries(core, channel, seq, mine, what)?;
        drop(waiting);
        // Decided alike on every rank that read the entries, before anything is opened.
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
        let mut addrs = Vec::with_capacity(world);
        let mut keys = Vec::with_capacity(world);
        // First the idle mappings the opens retire, closed without the cache's lock
        // (`open`), and before the opens: the driver refuses to open an allocation at
        // the address of one still open.
        let retired: Vec<Opened> = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut retired = Vec::new();
            for (p, e) in entries.iter().enumerate().filter(|(p, _)| *p != rank) {
                Self::retire_for(&mut cache, p, e, done_before, &mut retired);
            }
            Self::retire_aged(&mut cache, done_before, &mut retired);
            retired
        };
        self.close_all(retired);
        let mut failed = None;
        let mut extra = Vec::new();
        let mut opened = Vec::with_capacity(world);
        for (p, e) in entries.iter().enumerate() {
            if p == rank {
                opened.push(ptr);
                continue;
            }
            match self.open((rank, p), e, &mut extra) {
                Ok(local) => opened.push(local),
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            }
        }
        self.close_all(extra);
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            for (p, e) in entries.iter().enumerate().take(opened.len()) {
                if p == rank {
                    addrs.push(ptr);
                    continue;
                }
                // Opened just above; pinned now, so that nothing closes it before the
                // call is registered (`settle`). Another thread's `retire_for` may have
                // taken it out meanwhile only if idle and unpinned: then open again.
                match cache.opened.get_mut(&(p, e.buffer_id)) {
                    Some(o) => {
                        o.pins += 1;
                        keys.push((p, e.buffer_id));
                        addrs.push(o.local + e.offset);
                    }
                    None => {
                        failed.get_or_insert(Error::GroupFailed(format!(
                            "rank {rank}: rank {p}'s allocation was closed by another thread while this call opened it"
                        )));
                        break;
                    }
                }
            }
            if failed.is_none() {
                Self::remember(&mut cache, key, entries.iter().map(Entry::place).collect());
            }
        }
        let ex = Exchanged { addrs, keys, predicted: None };
        match failed {
            None => Ok(Shared::Mapped(ex)),
            Some(err) => {
                self.unpin(&ex);
                // The peers will wait for this rank in the call's barriers: the group
                // fails, and they name this rank.
                Err(core.fail(Error::GroupFailed(format!("rank {rank}: mapping the peers' {what}: {err}"))))
            }
        }
    }

    /// The addresses of call `key` from the places its last run found, pinned; `None`
    /// when it never ran or a peer's allocation is no longer open.
    fn predict(cache: &mut Cache, rank: usize, key: PredictionKey, ptr: u64) -> Option<Exchanged> {
        let places = cache.predictions.get(&key)?.clone();
        let mut addrs = Vec::with_capacity(places.len());
        let mut keys = Vec::with_capacity(places.len());
        for (p, pl) in places.iter().enumerate() {
            if p == rank {
                addrs.push(ptr);
                continue;
            }
            let o = cache.opened.get(&(p, pl.buffer_id))?;
            addrs.push(o.local + pl.offset);
            keys.push((p, pl.buffer_id));
        }
        for k in &keys {
            cache.opened.get_mut(k).expect("looked up above").pins += 1;
        }
        Some(Exchanged { addrs, keys, predicted: Some((key, places)) })
    }

    fn remember(cache: &mut Cache, key: PredictionKey, places: Vec<Place>) {
        if cache.predictions.len() >= MAX_PREDICTIONS && !cache.predictions.contains_key(&key) {
            cache.predictions.clear();
        }
        cache.predictions.insert(key, places);
    }

    /// Checks the predicted addresses of call `seq` of `channel` (NOTE [addresses
    /// predicted]) against the peers' entries, without waiting: `Pending(p)` while peer
    /// `p` has not posted its entry yet. Otherwise returns the peers whose buffer is
    /// elsewhere, with where it is mapped now (opened if needed, kept open until the call
    /// completed: `call` gives the watchdog's number of the call once it is registered,
    /// [`CallNumber`]), and
    /// updates the prediction. A peer that cannot share its buffer any more, posted
    /// another size, or made its allocation at the address of one still mapped here,
    /// fails the group. Never closes a mapping (closing waits for the device).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn verify(
        &self,
        core: &GroupCore,
        (channel, seq): (u32, u64),
        prediction: &Prediction,
        call: &CallNumber,
        what: &str,
    ) -> Result<Verified> {
        let rank = core.rank;
        let (key, places) = (&prediction.key, &prediction.places);
        let slot = Self::slot(channel, seq);
        if let Some(p) = (0..self.world).find(|&p| p != rank && self.seq_of(p, slot).load(Ordering::Acquire) < seq) {
            return Ok(Verified::Pending(p));
        }
        // Every peer posted: this reads at once (and names a peer at another call).
        let entries = self.read_entries(core, channel, seq, Entry::unshareable(0), what)?;
        let mut misses = Vec::new();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for (p, e) in entries.iter().enumerate() {
            if p == rank || e.place() == places[p] {
                continue;
            }
            if e.flags & UNSHAREABLE != 0 || e.bytes != key.2 {
                let why = if e.flags & UNSHAREABLE != 0 {
                    format!("rank {p} could not share its {what} of call {seq} on channel {channel} any more")
                } else {
                    format!("rank {p}'s {what} has {} bytes, this rank's {}", e.bytes, key.2)
                };
                return Err(core.fail(Error::GroupFailed(format!(
                    "rank {rank}: {why}, after this rank predicted where it was (NOTE [addresses predicted]): every \
                     rank must make the same calls, from memory that stays shareable"
                ))));
            }
            if !cache.opened.contains_key(&(p, e.buffer_id)) && Self::overlapped(&cache, p, e) {
                // The peer freed an allocation this rank still has open and made this one
                // at its address: the driver opens it only once the old mapping is
                // closed, and closing waits for the device, which waits for this call.
                return Err(core.fail(Error::GroupFailed(format!(
                    "rank {rank}: rank {p}'s {what} of call {seq} on channel {channel} is in an allocation made at \
                     the address of one this rank mapped and predicted from (NOTE [addresses predicted]): a rank \
                     freed memory its peers still read; call set_address_prediction(False), or release_mappings() \
                     on every rank after freeing"
                ))));
            }
            if !cache.opened.contains_key(&(p, e.buffer_id)) {
                // Opened without the cache's lock (`open`); a duplicate another thread
                // made meanwhile stays open until the group ends (closing waits for the
                // device, which the verifier must never do).
                drop(cache);
                let mut extra = Vec::new();
                let opened = self.open((rank, p), e, &mut extra);
                self.leaked.lock().unwrap_or_else(|p| p.into_inner()).extend(extra);
                if let Err(err) = opened {
                    return Err(core.fail(Error::GroupFailed(format!("rank {rank}: mapping the peers' {what}: {err}"))));
                }
                cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            }
            let Some(o) = cache.opened.get_mut(&(p, e.buffer_id)) else {
                return Err(core.fail(Error::GroupFailed(format!(
                    "rank {rank}: rank {p}'s allocation was closed by another thread while the verifier opened it"
                ))));
            };
            call.keep((p, e.buffer_id), o);
            misses.push(Miss { peer: p, addr: o.local + e.offset });
        }
        if !misses.is_empty() {
            self.mispredicted.fetch_add(1, Ordering::Relaxed);
            let mut now = places.clone();
            for m in &misses {
                now[m.peer] = entries[m.peer].place();
            }
            Self::remember(&mut cache, *key, now);
        }
        Ok(Verified::Done(misses))
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
        let retired: Vec<Opened> = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let idle: Vec<(usize, u64)> = cache
                .opened
                .iter()
                .filter(|(_, o)| o.pins == 0 && done_before(o.used_before))
                .map(|(k, _)| *k)
                .collect();
            idle.iter().filter_map(|k| cache.opened.remove(k)).collect()
        };
        if retired.is_empty() {
            return Ok(0);
        }
        let n = retired.len();
        self.device.bind_to_thread()?;
        // Not under the cache's lock (`open`).
        self.close_all(retired);
        Ok(n)
    }

    /// A predicted call is registered with the watchdog as `call` (`u64::MAX / 2`: never
    /// registered, its mappings never closed): what its verifier pinned for it
    /// ([`CallNumber`]) now waits for its end instead.
    pub(crate) fn registered(&self, number: &CallNumber, call: u64) {
        let pinned = number.set(call);
        Self::unpin_for(&mut self.cache.lock().unwrap_or_else(|p| p.into_inner()), &pinned, call);
    }

    /// The mappings `pinned` for call `call` until its number was known: unpinned, kept
    /// until it ended.
    fn unpin_for(cache: &mut Cache, pinned: &[(usize, u64)], call: u64) {
        for k in pinned {
            if let Some(o) = cache.opened.get_mut(k) {
                o.pins = o.pins.saturating_sub(1);
                o.used_before = o.used_before.max(call + 1);
            }
        }
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

    /// This rank's entry for `bytes` at `ptr`. Takes the cache's lock only around its
    /// map: no driver call is made under it (NOTE [addresses predicted]: a driver call
    /// that waits for the device would hold up the verifier, which the device may be
    /// waiting for).
    fn describe(&self, ptr: u64, bytes: usize) -> Result<Entry> {
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
        let known = self.cache.lock().unwrap_or_else(|p| p.into_inner()).exported.get(&buffer_id).copied();
        let handle = match known {
            Some(h) => h,
            None => {
                // SAFETY: `base` is the base of a live allocation of this context.
                let h = unsafe { raw::ipc::get_handle(base) }.map_err(|e| {
                    Error::InvalidArgument(format!(
                        "the allocation at {base:#x} ({size} bytes) that holds the buffer cannot be shared: {e}; \
                         {rank_hint}"
                    ))
                })?;
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                if cache.exported.len() >= MAX_EXPORTS {
                    cache.exported.clear();
                }
                cache.exported.insert(buffer_id, h);
                h
            }
        };
        Ok(Entry { buffer_id, base, size: size as u64, offset, bytes: bytes as u64, flags: 0, handle })
    }

    /// Takes out of the cache, into `retired`, the idle mappings that opening peer `p`'s
    /// allocation `e` retires: the peer's freed allocations that overlap it (the driver
    /// refuses to open an allocation at the address of one still open), and the least
    /// recently used beyond `MAX_OPEN_PER_PEER`. Idle: no call in flight uses it (a
    /// predicted call may still read a freed one: it goes once idle). The caller closes
    /// them once it no longer holds the cache's lock (`close_all`): closing may wait for
    /// the device, and the device may be waiting for the verifier, which takes the lock.
    fn retire_for(
        cache: &mut Cache,
        p: usize,
        e: &Entry,
        done_before: &dyn Fn(u64) -> bool,
        retired: &mut Vec<Opened>,
    ) {
        if cache.opened.contains_key(&(p, e.buffer_id)) {
            return;
        }
        let idle = |o: &Opened| o.pins == 0 && done_before(o.used_before);
        let mut stale: Vec<(usize, u64)> = cache
            .opened
            .iter()
            .filter(|((q, _), o)| *q == p && o.peer_base < e.base + e.size && e.base < o.peer_base + o.size)
            .filter(|(_, o)| idle(o))
            .map(|(k, _)| *k)
            .collect();
        let mut lru: Vec<(u64, (usize, u64))> =
            cache.opened.iter().filter(|((q, _), o)| *q == p && idle(o)).map(|(k, o)| (o.used_before, *k)).collect();
        let open_after = cache.opened.keys().filter(|(q, _)| *q == p).count() + 1 - stale.len();
        if open_after > MAX_OPEN_PER_PEER {
            lru.retain(|(_, k)| !stale.contains(k));
            lru.sort_unstable();
            stale.extend(lru.iter().take(open_after - MAX_OPEN_PER_PEER).map(|(_, k)| *k));
        }
        retired.extend(stale.iter().filter_map(|k| cache.opened.remove(k)));
    }

    /// Takes out of the cache, into `retired`, the idle mappings that no call used for
    /// [`MAX_IDLE_CALLS`] calls, counted from the latest use of any mapping (the
    /// watchdog's numbers, `used_before`). Under allocator churn (a new sequence length
    /// every step, `empty_cache()` every few dozen) the segments the peers freed stayed
    /// mapped until the least recently used went past [`MAX_OPEN_PER_PEER`]: on 4x H200
    /// (2026-11-26) the device memory in use grew from 1.06x to 1.35x NCCL's in 300 steps,
    /// with 12 more mappings per 100 steps.
    fn retire_aged(cache: &mut Cache, done_before: &dyn Fn(u64) -> bool, retired: &mut Vec<Opened>) {
        let Some(now) = cache.opened.values().map(|o| o.used_before).max() else { return };
        let aged: Vec<(usize, u64)> = cache
            .opened
            .iter()
            .filter(|(_, o)| o.pins == 0 && done_before(o.used_before) && o.used_before + MAX_IDLE_CALLS < now)
            .map(|(k, _)| *k)
            .collect();
        retired.extend(aged.iter().filter_map(|k| cache.opened.remove(k)));
    }

    /// Whether a mapping of peer `p` that overlaps its allocation `e` is still open.
    fn overlapped(cache: &Cache, p: usize, e: &Entry) -> bool {
        cache.opened.iter().any(|((q, id), o)| {
            *q == p && *id != e.buffer_id && o.peer_base < e.base + e.size && e.base < o.peer_base + o.size
        })
    }

    /// Peer `p`'s allocation `e`, opened here and cached, without holding the cache's
    /// lock across the driver's call (`describe`). Closes nothing (`retire_for`). An
    /// allocation another thread opened meanwhile keeps that thread's mapping; this
    /// one's goes into `extra` (closed by the caller, outside the lock, or at drop).
    fn open(&self, (rank, p): (usize, usize), e: &Entry, extra: &mut Vec<Opened>) -> Result<sys::CUdeviceptr> {
        if let Some(o) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).opened.get(&(p, e.buffer_id)) {
            return Ok(o.local);
        }
        if e.offset + e.bytes > e.size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank}: rank {p} published a buffer that runs past its allocation (offset {}, {} bytes, \
                 allocation {} bytes)",
                e.offset, e.bytes, e.size
            )));
        }
        // SAFETY: a handle another process exported; the context is current.
        let local = unsafe { raw::ipc::open_handle(&e.handle) }.map_err(|err| {
            Error::InvalidArgument(format!(
                "rank {rank}: opening rank {p}'s allocation ({} bytes, buffer id {}) failed: {err}",
                e.size, e.buffer_id
            ))
        })?;
        let fresh = Opened { peer_base: e.base, size: e.size, local, pins: 0, used_before: 0 };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        match cache.opened.get(&(p, e.buffer_id)) {
            Some(o) => {
                let kept = o.local;
                extra.push(fresh);
                Ok(kept)
            }
            None => {
                cache.opened.insert((p, e.buffer_id), fresh);
                Ok(local)
            }
        }
    }

    /// Closes mappings taken out of the cache (without its lock held).
    fn close_all(&self, retired: Vec<Opened>) {
        for o in retired {
            // SAFETY: taken out of the cache unpinned, with every call that used it
            // completed (`done_before`), so no pending work uses it.
            unsafe { Self::close(self.rank, o) };
        }
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
        let leaked = std::mem::take(self.leaked.get_mut().unwrap_or_else(|p| p.into_inner()));
        for o in cache.opened.drain().map(|(_, o)| o).chain(leaked) {
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

    fn opened(used_before: u64, pins: u32) -> Opened {
        Opened { peer_base: 0x7000_0000 + used_before * 0x10_0000, size: 0x10_0000, local: 0, pins, used_before }
    }

    #[test]
    fn mappings_unused_for_long_age_out_when_idle() {
        let mut cache = Cache::default();
        let now = 5 * MAX_IDLE_CALLS;
        // (peer, buffer id) -> last used, pins.
        cache.opened.insert((1, 1), opened(now, 0)); // in use
        cache.opened.insert((1, 2), opened(now - MAX_IDLE_CALLS, 0)); // at the limit: kept
        cache.opened.insert((2, 3), opened(now - MAX_IDLE_CALLS - 1, 0)); // past it: closed
        cache.opened.insert((2, 4), opened(1, 0)); // long unused: closed
        cache.opened.insert((3, 5), opened(2, 1)); // long unused but pinned: kept
        let mut retired = Vec::new();
        PeerMaps::retire_aged(&mut cache, &|_| true, &mut retired);
        let mut gone: Vec<u64> = retired.iter().map(|o| o.used_before).collect();
        gone.sort_unstable();
        assert_eq!(gone, vec![1, now - MAX_IDLE_CALLS - 1]);
        let mut kept: Vec<(usize, u64)> = cache.opened.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, vec![(1, 1), (1, 2), (3, 5)]);
        // A call still in flight keeps what it used (the watchdog has not seen it done).
        cache.opened.insert((2, 6), opened(3, 0));
        let mut retired = Vec::new();
        PeerMaps::retire_aged(&mut cache, &|s| s <= 2, &mut retired);
        assert!(retired.is_empty() && cache.opened.contains_key(&(2, 6)));
        // Nothing open: nothing to do.
        PeerMaps::retire_aged(&mut Cache::default(), &|_| true, &mut retired);
        assert!(retired.is_empty());
    }

    #[test]
    fn a_fix_checked_before_its_call_is_numbered_pins_the_mapping_until_it_is() {
        // NOTE [nothing between the wait and its job]: the verifier may check a call
        // before the caller registers it with the watchdog.
        let mut cache = Cache::default();
        cache.opened.insert((1, 7), opened(3, 0));
        let number = CallNumber::default();
        number.keep((1, 7), cache.opened.get_mut(&(1, 7)).unwrap());
        let o = &cache.opened[&(1, 7)];
        assert_eq!((o.pins, o.used_before), (1, 3), "pinned: nothing closes it before the call is numbered");
        let mut retired = Vec::new();
        PeerMaps::retire_aged(&mut cache, &|_| true, &mut retired);
        assert!(retired.is_empty(), "a pinned mapping is not retired");
        let pinned = number.set(40);
        assert_eq!(pinned, vec![(1, 7)]);
        PeerMaps::unpin_for(&mut cache, &pinned, 40);
        let o = &cache.opened[&(1, 7)];
        assert_eq!((o.pins, o.used_before), (0, 41), "then kept until call 40 ended");
        // Known before the check: no pin, the call's end directly.
        cache.opened.insert((2, 8), opened(5, 0));
        number.keep((2, 8), cache.opened.get_mut(&(2, 8)).unwrap());
        let o = &cache.opened[&(2, 8)];
        assert_eq!((o.pins, o.used_before), (0, 41));
        assert!(number.set(40).is_empty());
    }
}
