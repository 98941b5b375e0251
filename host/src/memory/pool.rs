//! A pool of symmetric memory: blocks carved from collectively allocated segments, so a
//! framework can hand out tensors that peers reach directly (no staging copy), without
//! a rendezvous per allocation.
//!
//! NOTE [pool determinism]: a peer addresses a block of this rank by the block's
//! (segment, offset) in its own mapping, so every rank must place the n-th allocation at
//! the same offset. No rank asks another: every decision of [`PoolCore`] depends only on
//! the sequence of `alloc` and `free` calls (sizes, and which stream each call names, by
//! the order streams first appear), never on timing, addresses or whether the GPU has
//! finished something. In particular reuse on another stream does not wait to see
//! whether an event has completed (that would be timing): the allocating stream is made
//! to wait on the event recorded when the block was freed, which is a decision that
//! depends on the sequence only.
//!
//! What the sequence cannot guarantee is that frees arrive in the same order relative
//! to allocations on every rank (a tensor's deleter may run on another thread, e.g.
//! autograd's). So every placement is folded into a running [`Fingerprint`] that the
//! ranks compare before every growth and, cheaply, every N-th collective on pool memory
//! ([`Pool::note_collective`]); a mismatch is an error naming the ranks, never silent.
//!
//! Reuse follows torch's caching allocator: a block belongs to the stream it was
//! allocated on; freed, it is reused at once by allocations on that stream (best fit,
//! then lowest offset). Another stream takes only a whole free segment, when it has no
//! block of its own that fits, after waiting for the free's event (splitting other
//! streams' blocks fragmented FSDP2's working sets so that the pool grew every step).
//! Adjacent free blocks of one stream merge.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};

/// Every block's size and offset are multiples of this many bytes.
pub const BLOCK_ALIGN: usize = 512;

/// Segments are multiples of this (the VMM granularity of current GPUs).
pub const SEGMENT_GRAIN: usize = 2 << 20;

/// Where a block lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Index of the segment (in order of growth).
    pub segment: usize,
    /// Byte offset in the segment.
    pub offset: usize,
    /// Bytes reserved (the request rounded up to [`BLOCK_ALIGN`]).
    pub bytes: usize,
}

#[path = "pool_agree.rs"]
mod agree;
pub use agree::{Fingerprint, agree_on_trim, compare_fingerprints, trim_message};

/// What [`PoolCore::plan`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan<E> {
    /// Use this block. With `wait`, the block was last used on another stream: the
    /// allocating stream must wait for that event before touching it.
    Use {
        /// The block's id, for [`PoolCore::free`].
        id: u64,
        /// Where it is.
        at: Placement,
        /// The free's event on the block's previous stream, if that was another.
        wait: Option<E>,
    },
    /// Nothing free fits: grow by a segment of this many bytes (collectively), then call
    /// [`PoolCore::take_new_segment`].
    Grow {
        /// Segment size.
        bytes: usize,
    },
}

#[derive(Debug)]
struct FreeBlock<E> {
    at: Placement,
    stream: u32,
    /// Recorded on `stream` when the block was freed (none for fresh space).
    event: Option<E>,
    /// Order of frees: of two blocks of one stream, the later event covers the earlier.
    seq: u64,
}

#[derive(Clone, Copy, Debug)]
struct LiveBlock {
    at: Placement,
    stream: u32,
}

/// Bytes a pool holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of all segments (what the pool holds on this GPU).
    pub reserved: usize,
    /// Bytes in live blocks.
    pub in_use: usize,
    /// The most `in_use` has been.
    pub peak_in_use: usize,
    /// Segments.
    pub segments: usize,
    /// Live blocks.
    pub live_blocks: usize,
    /// Allocations so far.
    pub allocs: u64,
}

/// The pool's bookkeeping, with no memory and no CUDA: pure decisions over offsets.
/// `E` is what a free leaves for a later user on another stream (a CUDA event; `()` on
/// the host backend).
#[derive(Debug)]
pub struct PoolCore<E> {
    segments: Vec<usize>,
    /// Sorted by (segment, offset).
    free: Vec<FreeBlock<E>>,
    live: HashMap<u64, LiveBlock>,
    /// Stream key → ordinal, by first appearance (keys differ between ranks; ordinals
    /// do not).
    streams: HashMap<u64, u32>,
    next_id: u64,
    free_seq: u64,
    fingerprint: Fingerprint,
    segment_min: usize,
    in_use: usize,
    peak_in_use: usize,
}

fn round_up(n: usize, to: usize) -> Option<usize> {
    n.checked_add(to - 1).map(|v| v / to * to)
}

impl<E: Clone> PoolCore<E> {
    /// An empty pool that grows by segments of at least `segment_min` bytes.
    pub fn new(segment_min: usize) -> Self {
        Self {
            segments: Vec::new(),
            free: Vec::new(),
            live: HashMap::new(),
            streams: HashMap::new(),
            next_id: 1,
            free_seq: 0,
            fingerprint: Fingerprint { allocs: 0, hash: 0 },
            segment_min: round_up(segment_min.max(1), SEGMENT_GRAIN).unwrap_or(SEGMENT_GRAIN),
            in_use: 0,
            peak_in_use: 0,
        }
    }

    fn ordinal(&mut self, stream: u64) -> u32 {
        let n = self.streams.len() as u32;
        *self.streams.entry(stream).or_insert(n)
    }

    fn rounded(bytes: usize) -> Result<usize> {
        round_up(bytes.max(1), BLOCK_ALIGN)
            .ok_or_else(|| Error::InvalidArgument(format!("a pool block of {bytes} bytes is too large")))
    }

    /// Decides where an allocation of `bytes` on `stream` goes (see the module notes).
    /// On [`Plan::Use`] the block is taken; on [`Plan::Grow`] nothing changed.
    pub fn plan(&mut self, bytes: usize, stream: u64) -> Result<Plan<E>> {
        let need = Self::rounded(bytes)?;
        let ord = self.ordinal(stream);
        let fits = |f: &&FreeBlock<E>| f.at.bytes >= need;
        let key = |f: &&FreeBlock<E>| (f.at.bytes, f.at.segment, f.at.offset);
        let own = self.free.iter().filter(fits).filter(|f| f.stream == ord).min_by_key(key);
        // Another stream's memory only as a whole free segment: splitting another
        // stream's blocks fragments both streams' working sets, and then every step
        // grows the pool (a collective rendezvous on the host) while memory sits idle.
        let whole = |f: &&FreeBlock<E>| f.at.offset == 0 && f.at.bytes == self.segments[f.at.segment];
        let pick = own.or_else(|| self.free.iter().filter(fits).filter(whole).min_by_key(key)).map(|f| f.at);
        let Some(at) = pick else {
            let bytes = round_up(need, SEGMENT_GRAIN)
                .ok_or_else(|| Error::InvalidArgument(format!("a pool block of {bytes} bytes is too large")))?
                .max(self.segment_min);
            return Ok(Plan::Grow { bytes });
        };
        let i = self.free.iter().position(|f| f.at == at).expect("picked from the free list");
        let block = self.free.remove(i);
        let wait = if block.stream == ord { None } else { block.event.clone() };
        Ok(self.take(block, need, ord, wait))
    }

    /// Adds a segment of `len` bytes (just allocated after [`Plan::Grow`]) and places the
    /// allocation of `bytes` on `stream` at its start. Placing it directly, rather than
    /// planning again, keeps the decision independent of frees that arrived meanwhile.
    pub fn take_new_segment(&mut self, len: usize, bytes: usize, stream: u64) -> Result<Plan<E>> {
        let need = Self::rounded(bytes)?;
        if need > len {
            return Err(Error::InvalidArgument(format!("a {len}-byte segment cannot hold a {need}-byte block")));
        }
        let ord = self.ordinal(stream);
        self.segments.push(len);
        let block = FreeBlock {
            at: Placement { segment: self.segments.len() - 1, offset: 0, bytes: len },
            stream: ord,
            event: None,
            seq: 0,
        };
        Ok(self.take(block, need, ord, None))
    }

    fn take(&mut self, block: FreeBlock<E>, need: usize, ord: u32, wait: Option<E>) -> Plan<E> {
        let at = Placement { bytes: need, ..block.at };
        if block.at.bytes > need {
            let rest = FreeBlock {
                at: Placement { segment: at.segment, offset: at.offset + need, bytes: block.at.bytes - need },
                ..block
            };
            self.insert_free(rest);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(id, LiveBlock { at, stream: ord });
        self.in_use += need;
        self.peak_in_use = self.peak_in_use.max(self.in_use);
        self.fingerprint.fold([need as u64, at.segment as u64, at.offset as u64, ord as u64]);
        Plan::Use { id, at, wait }
    }

    fn insert_free(&mut self, b: FreeBlock<E>) {
        let i = self.free.partition_point(|f| (f.at.segment, f.at.offset) < (b.at.segment, b.at.offset));
        self.free.insert(i, b);
    }

    /// The stream key block `id` is used on (to record its free's event there).
    pub fn stream_of(&self, id: u64) -> Option<u64> {
        let ord = self.live.get(&id)?.stream;
        self.streams.iter().find(|&(_, &o)| o == ord).map(|(&k, _)| k)
    }

    /// Returns block `id`; `event` was recorded on its stream at the free.
    pub fn free(&mut self, id: u64, event: Option<E>) -> Result<Placement> {
        let live = self
            .live
            .remove(&id)
            .ok_or_else(|| Error::InvalidArgument(format!("pool block {id} is not allocated (freed twice?)")))?;
        self.in_use -= live.at.bytes;
        self.free_seq += 1;
        let mut b = FreeBlock { at: live.at, stream: live.stream, event, seq: self.free_seq };
        // Merge with free neighbours of the same stream; the later free's event covers
        // the earlier one's work on that stream.
        let i = self.free.partition_point(|f| (f.at.segment, f.at.offset) < (b.at.segment, b.at.offset));
        if i < self.free.len() {
            let n = &self.free[i];
            if n.at.segment == b.at.segment && n.at.offset == b.at.offset + b.at.bytes && n.stream == b.stream {
                let n = self.free.remove(i);
                b = Self::merge(b, n);
            }
        }
        if i > 0 {
            let p = &self.free[i - 1];
            if p.at.segment == b.at.segment && p.at.offset + p.at.bytes == b.at.offset && p.stream == b.stream {
                let p = self.free.remove(i - 1);
                b = Self::merge(p, b);
            }
        }
        self.insert_free(b);
        Ok(live.at)
    }

    /// Merges two adjacent free blocks of one stream (`lo` before `hi`).
    fn merge(lo: FreeBlock<E>, hi: FreeBlock<E>) -> FreeBlock<E> {
        let (event, seq) = if lo.seq >= hi.seq { (lo.event, lo.seq) } else { (hi.event, hi.seq) };
        FreeBlock { at: Placement { bytes: lo.at.bytes + hi.at.bytes, ..lo.at }, stream: lo.stream, event, seq }
    }

    /// Segments added so far, released ones included (growths are numbered by this).
    pub fn growths(&self) -> usize {
        self.segments.len()
    }

    /// Segments that are wholly free (no live block), in index order: what
    /// [`PoolCore::release`] may give back.
    pub fn free_segments(&self) -> Vec<usize> {
        self.whole_free(None)
    }

    /// Wholly free segments last used by `stream` (all of them with `None`).
    fn whole_free(&self, stream: Option<u32>) -> Vec<usize> {
        self.free
            .iter()
            .filter(|f| f.at.offset == 0 && f.at.bytes == self.segments[f.at.segment] && f.at.bytes > 0)
            .filter(|f| stream.is_none_or(|s| f.stream == s))
            .map(|f| f.at.segment)
            .collect()
    }

    /// What a growth for `stream` may release (NOTE [release on growth]): the wholly free
    /// segments that stream last used, none of which fits its request. Other streams'
    /// free segments stay: they fit their own streams' working sets.
    pub fn outgrown_segments(&mut self, stream: u64) -> Vec<usize> {
        let ord = self.ordinal(stream);
        self.whole_free(Some(ord))
    }

    /// Forgets segments `which` (each wholly free, else an error and nothing changes):
    /// they hold no bytes from now on, and later growths add new indices (a placement's
    /// segment index never changes meaning). Returns the bytes released. Folded into the
    /// fingerprint, since later placements depend on it.
    pub fn release(&mut self, which: &[usize]) -> Result<usize> {
        let free = self.free_segments();
        if let Some(&bad) = which.iter().find(|i| !free.contains(i)) {
            return Err(Error::InvalidArgument(format!(
                "pool segment {bad} is not wholly free: it cannot be released"
            )));
        }
        let mut bytes = 0;
        for &i in which {
            bytes += std::mem::take(&mut self.segments[i]);
            self.free.retain(|f| f.at.segment != i);
            self.fingerprint.mix([u64::MAX, i as u64, 0, 0]);
        }
        Ok(bytes)
    }

    /// The running fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// What the pool holds.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            reserved: self.segments.iter().sum(),
            in_use: self.in_use,
            peak_in_use: self.peak_in_use,
            segments: self.segments.iter().filter(|&&b| b > 0).count(),
            live_blocks: self.live.len(),
            allocs: self.fingerprint.allocs,
        }
    }
}

/// A segment of a pool: a symmetric buffer of either backend.
pub trait Segment {
    /// This rank's address of the segment.
    fn base(&self) -> u64;
    /// Bytes.
    fn len(&self) -> usize;
    /// Whether it has no bytes (never, for an allocated segment).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The offset of `[ptr, ptr + bytes)` in `segment`, if it lies inside: the one test of
/// every lookup of symmetric memory (the pool's, and `group::Registry`'s).
pub(crate) fn holds(segment: &impl Segment, ptr: u64, bytes: usize) -> Option<usize> {
    let (base, len) = (segment.base(), segment.len() as u64);
    (ptr >= base && ptr.checked_add(bytes as u64)? <= base.checked_add(len)?).then(|| (ptr - base) as usize)
}

/// A block handed out by [`Pool::alloc`].
#[derive(Debug)]
pub struct PoolBlock<E> {
    /// For [`Pool::free`].
    pub id: u64,
    /// This rank's address.
    pub ptr: u64,
    /// Where it lies (the same on every rank while the pools agree).
    pub at: Placement,
    /// Wait for this (on the allocating stream) before use: the block was last used on
    /// another stream.
    pub wait: Option<E>,
}

struct PoolState<S, E> {
    core: PoolCore<E>,
    /// By segment index; `None` once released ([`Pool::trim`]).
    segments: Vec<Option<S>>,
    collectives: u64,
    trims: u64,
}

impl<S: Segment, E: Clone> PoolState<S, E> {
    /// This rank's address of a segment the core placed a block in (never a released one).
    fn base(&self, segment: usize) -> u64 {
        self.segments[segment].as_ref().expect("the core places blocks only in live segments").base()
    }

    /// Releases segments `which` (agreed by every rank): the bytes, and the segments to
    /// drop once the lock is released.
    fn release(&mut self, which: &[usize]) -> Result<(usize, Vec<S>)> {
        let bytes = self.core.release(which)?;
        Ok((bytes, which.iter().filter_map(|&i| self.segments[i].take()).collect()))
    }
}

/// A thread-safe pool over segments `S` (e.g. `Arc<SymmetricBuffer>`), growing through
/// a collective allocation the caller supplies. Frees may come from any thread.
pub struct Pool<S, E> {
    rank: usize,
    check_every: u64,
    state: Mutex<PoolState<S, E>>,
}

impl<S: Segment + Clone, E: Clone> Pool<S, E> {
    /// An empty pool of this rank, growing by at least `segment_min` bytes, comparing
    /// fingerprints every `check_every` collectives on its memory (0: only on growth).
    pub fn new(rank: usize, segment_min: usize, check_every: u64) -> Self {
        Self {
            rank,
            check_every,
            state: Mutex::new(PoolState {
                core: PoolCore::new(segment_min),
                segments: Vec::new(),
                collectives: 0,
                trims: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState<S, E>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of at least `bytes` for use on `stream` if one is free, without growing
    /// (`None`: [`Pool::alloc`] must grow the pool, collectively). Never waits.
    pub fn try_alloc(&self, bytes: usize, stream: u64) -> Result<Option<PoolBlock<E>>> {
        let mut st = self.lock();
        match st.core.plan(bytes, stream)? {
            Plan::Use { id, at, wait } => {
                let ptr = st.base(at.segment) + at.offset as u64;
                Ok(Some(PoolBlock { id, ptr, at, wait }))
            }
            Plan::Grow { .. } => Ok(None),
        }
    }

    /// Collective when it grows (every rank allocates in the same order): a block of at
    /// least `bytes` for use on `stream`. When nothing free fits, the ranks first agree:
    /// `agree(fingerprint, n, mine)` gets this rank's wholly free segments of `stream`
    /// (none of which fits) and must compare the ranks' fingerprints and return the segments free on
    /// every rank, after every rank with such segments has finished its GPU work (NOTE
    /// [release on growth]); those are released, then `grow(bytes)` allocates the new
    /// segment collectively. The pool's lock is not held meanwhile, so frees from other
    /// threads go on.
    pub fn alloc(
        &self,
        bytes: usize,
        stream: u64,
        agree: impl FnOnce(Fingerprint, u64, &[usize]) -> Result<Vec<usize>>,
        grow: impl FnOnce(usize) -> Result<S>,
    ) -> Result<PoolBlock<E>> {
        let (seg_bytes, fp, n, mine) = {
            let mut st = self.lock();
            match st.core.plan(bytes, stream)? {
                Plan::Use { id, at, wait } => {
                    let ptr = st.base(at.segment) + at.offset as u64;
                    return Ok(PoolBlock { id, ptr, at, wait });
                }
                // Growths are numbered by the segment they add: the same on every rank
                // while the pools agree, and never confused with collective checks.
                Plan::Grow { bytes } => {
                    (bytes, st.core.fingerprint(), st.core.growths() as u64 + 1, st.core.outgrown_segments(stream))
                }
            }
        };
        // NOTE [release on growth]: a segment of the growing stream, free on every rank
        // when that stream must grow anyway, is one its request does not fit; keeping it
        // would leave the pool the sum of every size it ever held on a stream (FSDP2's
        // modules of two sizes made it hold both). Other streams' free segments stay:
        // they fit their own working sets (releasing them made the pool grow every step). Growth is already a rendezvous, so the ranks agree on such segments
        // there and release them before the new one is allocated: the pool converges to
        // segments that fit the largest working set. Only a rank with candidates drains
        // its device first (a segment free here may still be read by queued copies, here
        // or, for its peers, there): a one-time stall in the steps that grow the pool.
        let released = agree(fp, n, &mine)?;
        if !released.is_empty() {
            let (_, dropped) = self.lock().release(&released)?;
            drop(dropped);
        }
        let seg = grow(seg_bytes)?;
        if seg.len() < seg_bytes {
            return Err(Error::InvalidArgument(format!(
                "rank {}: the pool asked for a {seg_bytes}-byte segment and got {}",
                self.rank,
                seg.len()
            )));
        }
        let mut st = self.lock();
        let base = seg.base();
        let len = seg.len();
        st.segments.push(Some(seg));
        match st.core.take_new_segment(len, bytes, stream)? {
            Plan::Use { id, at, wait } => Ok(PoolBlock { id, ptr: base + at.offset as u64, at, wait }),
            Plan::Grow { .. } => unreachable!("take_new_segment always places"),
        }
    }

    /// Returns block `id` (from any thread). `record(stream)` records and returns an
    /// event on the block's stream, for a later user on another stream; it runs under
    /// the pool's lock. If it fails, the block is never reused (leaked, not raced on).
    pub fn free(&self, id: u64, record: impl FnOnce(u64) -> Result<Option<E>>) -> Result<()> {
        // The event is recorded under the lock that orders frees: merging keeps the event
        // of the later free, which must also be the later record on the stream (two
        // threads freeing neighbours could otherwise record in one order and free in the
        // other, and a later user would wait on the earlier event only). Recording an
        // event does not wait for the GPU.
        let mut st = self.lock();
        let stream = st.core.stream_of(id).ok_or_else(|| {
            Error::InvalidArgument(format!("rank {}: pool block {id} is not allocated (freed twice?)", self.rank))
        })?;
        let event = record(stream)?;
        st.core.free(id, event).map(|_| ())
    }

    /// The segment holding `bytes` at this rank's address `ptr`, and the offset in it.
    pub fn find(&self, ptr: u64, bytes: usize) -> Option<(S, usize)> {
        let st = self.lock();
        st.segments.iter().flatten().find_map(|s| holds(s, ptr, bytes).map(|off| (s.clone(), off)))
    }

    /// Collective: gives back the segments that are wholly free on every rank, and
    /// returns the bytes released here. `agree(fingerprint, n, mine)` is as in
    /// [`Pool::alloc`] (`n` numbers the trims), with every wholly free segment of any
    /// stream, and must be called after every rank has finished its GPU work on pool
    /// memory (a peer's copy may still read this rank's segment otherwise). The pool's
    /// lock is held meanwhile, so no block is taken or freed in between; the segments are
    /// dropped (unmapped, freed) after the lock is released.
    pub fn trim(&self, agree: impl FnOnce(Fingerprint, u64, &[usize]) -> Result<Vec<usize>>) -> Result<usize> {
        let (bytes, dropped) = {
            let mut st = self.lock();
            let mine = st.core.free_segments();
            st.trims += 1;
            let agreed = agree(st.core.fingerprint(), st.trims, &mine)?;
            st.release(&agreed)?
        };
        drop(dropped);
        Ok(bytes)
    }

    /// Counts a collective on pool memory; every `check_every`-th returns the
    /// fingerprint and a check number (collectives / `check_every`), which the caller
    /// compares across ranks (every rank counts the same collectives, so all check at
    /// the same call with the same number).
    pub fn note_collective(&self) -> Option<(Fingerprint, u64)> {
        let mut st = self.lock();
        st.collectives += 1;
        if self.check_every == 0 || !st.collectives.is_multiple_of(self.check_every) {
            return None;
        }
        Some((st.core.fingerprint(), st.collectives / self.check_every))
    }

    /// The running fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.lock().core.fingerprint()
    }

    /// What the pool holds.
    pub fn stats(&self) -> PoolStats {
        self.lock().core.stats()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
