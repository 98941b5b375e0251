//! The LL algorithms on the host backend: the GPU's protocol with CPU stores
//! (`gpu-kernels/kernels/src/ll.rs`, NOTE [LL protocol]). Same buffer layout, rounds, halves
//! and flags; each 8-byte half of a line (4 bytes of data, the flag) is one atomic
//! `u64` store, as on GPUs, and the receiver polls until both halves carry the round's
//! flag. No barrier runs after the first call on a channel; a round's pushes may only
//! follow the previous round's receipt, which a synchronous call gives for free.

use std::sync::atomic::{AtomicU64, Ordering};

use lowcon_abi::ll;

use super::{HostColl, HostInput};
use crate::coll::check::rotated;
use crate::coll::geometry::ll_rounds;
use crate::coll::reference::reduce_into;
use crate::coll::{DType, ReduceOp};
use crate::error::Result;
use crate::memory::host::{HostBuffer, alloc};

/// A channel's LL state on the host backend.
#[derive(Default)]
pub(crate) struct LlState {
    buf: Option<HostBuffer>,
    seq: u64,
}

/// The two atomic words of line `i` of source `src`'s slot, half `seq & 1`, in `owner`'s
/// LL buffer.
fn line(buf: &HostBuffer, owner: usize, world: u32, seq: u64, src: usize, i: u64) -> [&AtomicU64; 2] {
    let off = ll::slot_offset(world, seq, src as u32) + i * ll::LINE_BYTES;
    assert!(off + ll::LINE_BYTES <= buf.len() as u64, "LL line outside the buffer");
    // SAFETY: the line is inside the mapping (asserted), which lives as long as `buf`;
    // its base is page aligned and lines are 16-byte aligned, so both words are 8-byte
    // aligned; LL lines are only ever accessed through these atomics.
    unsafe {
        let p = buf.peer_ptr(owner).add(off as usize).cast::<u64>();
        [AtomicU64::from_ptr(p), AtomicU64::from_ptr(p.add(1))]
    }
}

/// The 8 payload bytes of a line as two `(data, flag)` words.
fn words(payload: &[u8], flag: u32) -> [u64; 2] {
    let mut b = [0u8; 8];
    b[..payload.len()].copy_from_slice(payload);
    let lo = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
    let hi = u32::from_le_bytes(b[4..].try_into().expect("4 bytes"));
    [lo as u64 | (flag as u64) << 32, hi as u64 | (flag as u64) << 32]
}

impl HostColl {
    /// Runs the rounds of an LL collective on `channel`: `push(seq, flag, first, n)` then
    /// `receive(seq, flag, first, n)` for each round (the first call on the channel
    /// allocates the buffer, collectively, and passes one barrier).
    fn ll_rounds(
        &self,
        channel: u32,
        bytes: usize,
        mut round: impl FnMut(&HostBuffer, u64, u64, u64) -> Result<()>,
    ) -> Result<()> {
        let world = self.sync.core.world as u32;
        let mut st = self.ll[channel as usize].lock().unwrap_or_else(|p| p.into_inner());
        if st.buf.is_none() {
            // Fresh shared memory is zeroed: no line holds a flag yet.
            st.buf =
                Some(alloc(&self.sync.core, ll::BUFFER_BYTES as usize, &format!("channel {channel}'s LL buffer"))?);
            st.seq = 1;
            self.sync.barrier(channel)?;
        }
        for (first, n) in ll_rounds(bytes, world) {
            let seq = st.seq;
            round(st.buf.as_ref().expect("allocated"), seq, first, n)?;
            st.seq += 1;
        }
        Ok(())
    }

    /// Pushes lines `first .. first + n` of `data` (the payload for `peer`) into slot
    /// `rank` of `peer`'s buffer.
    fn ll_push(&self, buf: &HostBuffer, peer: usize, seq: u64, data: &[u8], first: u64, n: u64) {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world as u32);
        for i in 0..n {
            let off = ((first + i) * 8) as usize;
            let w = words(&data[off..(off + 8).min(data.len())], ll::flag(seq));
            let [a, b] = line(buf, peer, world, seq, rank, i);
            a.store(w[0], Ordering::Release);
            b.store(w[1], Ordering::Release);
        }
    }

    /// Receives lines `first .. first + n` from `src` into `out` (the payload's bytes
    /// from `first * 8` on), waiting for the round's flag in both words of every line.
    #[allow(clippy::too_many_arguments)]
    fn ll_receive(
        &self,
        buf: &HostBuffer,
        channel: u32,
        src: usize,
        seq: u64,
        out: &mut [u8],
        first: u64,
        n: u64,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world as u32);
        let flag = ll::flag(seq);
        for i in 0..n {
            let [a, b] = line(buf, rank, world, seq, src, i);
            let got = |x: u64| ((x >> 32) as u32 == flag).then_some(x as u32);
            let ready = || Some((got(a.load(Ordering::Acquire))?, got(b.load(Ordering::Acquire))?));
            // Most lines have arrived by the time they are read: no spin set-up for those.
            let (lo, hi) = match ready() {
                Some(v) => v,
                None => self.sync.core.spin_until(
                    src,
                    ready,
                    |seen: u32| {
                        format!("its LL line {} on channel {channel} (round {seq}, flag {flag}, saw {seen})", first + i)
                    },
                    || (a.load(Ordering::Relaxed) >> 32) as u32,
                )?,
            };
            let off = (i * 8) as usize;
            let mut b8 = [0u8; 8];
            b8[..4].copy_from_slice(&lo.to_le_bytes());
            b8[4..].copy_from_slice(&hi.to_le_bytes());
            let len = 8.min(out.len() - off);
            out[off..off + len].copy_from_slice(&b8[..len]);
        }
        Ok(())
    }

    /// LL all-gather of `shard` bytes per rank (arguments checked; `output` holds
    /// `world * shard` bytes). In place, the own shard is already in its slot.
    pub(super) fn ll_all_gather(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        channel: u32,
        shard: usize,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let mine = input.local(rank)?.into_owned();
        self.ll_rounds(channel, shard, |buf, seq, first, n| {
            for p in rotated(rank, world).filter(|&p| p != rank) {
                self.ll_push(buf, p, seq, &mine, first, n);
            }
            let (a, b) = ((first * 8) as usize, (((first + n) * 8) as usize).min(shard));
            output[rank * shard + a..rank * shard + b].copy_from_slice(&mine[a..b]);
            for p in rotated(rank, world).filter(|&p| p != rank) {
                self.ll_receive(buf, channel, p, seq, &mut output[p * shard + a..p * shard + b], first, n)?;
            }
            Ok(())
        })
    }

    /// LL reduce-scatter of `chunk` bytes per rank: the owner reduces, in rank order in
    /// f32, its own chunk and the received ones.
    pub(super) fn ll_reduce_scatter(
        &self,
        input: HostInput<'_>,
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
        channel: u32,
        chunk: usize,
    ) -> Result<()> {
        let (rank, world) = (self.sync.core.rank, self.sync.core.world);
        let local = input.local(rank)?.into_owned();
        self.ll_rounds(channel, chunk, |buf, seq, first, n| {
            for p in rotated(rank, world).filter(|&p| p != rank) {
                self.ll_push(buf, p, seq, &local[p * chunk..(p + 1) * chunk], first, n);
            }
            let (a, b) = ((first * 8) as usize, (((first + n) * 8) as usize).min(chunk));
            let mut got = vec![vec![0u8; b - a]; world];
            for p in rotated(rank, world) {
                if p == rank {
                    got[p].copy_from_slice(&local[rank * chunk + a..rank * chunk + b]);
                } else {
                    self.ll_receive(buf, channel, p, seq, &mut got[p], first, n)?;
                }
            }
            let srcs: Vec<&[u8]> = got.iter().map(|g| &g[..]).collect();
            reduce_into(dtype, op, world, &srcs, &mut output[a..b]);
            Ok(())
        })
    }
}
