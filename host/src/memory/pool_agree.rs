//! How the ranks' pools check that they agree: the running fingerprint of every
//! placement (NOTE [pool determinism] in the parent), compared before growths, every
//! N-th collective and trims, and the exchange that picks the segments a trim releases.

use crate::error::{Error, Result};

/// The running fingerprint of a pool's decisions: how many allocations, and a hash of
/// every placement in order. Equal on every rank while the pools agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// Allocations so far.
    pub allocs: u64,
    /// Hash of (size, segment, offset, stream ordinal) of every allocation, in order.
    pub hash: u64,
}

impl Fingerprint {
    /// 16 bytes, for exchange through the store.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.allocs.to_le_bytes());
        b[8..].copy_from_slice(&self.hash.to_le_bytes());
        b
    }

    /// The inverse of [`Fingerprint::to_bytes`]; `None` for a blob of the wrong size.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; 16] = b.try_into().ok()?;
        Some(Self {
            allocs: u64::from_le_bytes(b[..8].try_into().ok()?),
            hash: u64::from_le_bytes(b[8..].try_into().ok()?),
        })
    }

    pub(super) fn fold(&mut self, words: [u64; 4]) {
        self.allocs += 1;
        self.mix(words);
    }

    /// Folds a decision that is not an allocation (a release) into the hash.
    pub(super) fn mix(&mut self, words: [u64; 4]) {
        for w in words {
            // splitmix64's finaliser over the running state: order-sensitive, cheap.
            let mut z = self.hash ^ w.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            self.hash = z ^ (z >> 31);
        }
    }
}

/// Checks every rank's fingerprint (in rank order, as the store's all-gather returns
/// them) against this rank's; the error names the first rank that differs.
pub fn compare_fingerprints(rank: usize, when: &str, all: &[Vec<u8>]) -> Result<()> {
    let mine = all.get(rank).and_then(|b| Fingerprint::from_bytes(b));
    for (peer, blob) in all.iter().enumerate() {
        let theirs = Fingerprint::from_bytes(blob);
        if theirs != mine || theirs.is_none() {
            return Err(Error::GroupFailed(format!(
                "rank {rank}: the symmetric pool's offsets no longer agree {when}: rank {peer} has made {} \
                 allocations (fingerprint {:016x}), this rank {} ({:016x}). Every rank must allocate and free \
                 pool memory in the same order (a tensor freed on another thread, or kept alive on one rank \
                 only, changes where later blocks go); results computed since the last check may be wrong",
                theirs.map_or(0, |f| f.allocs),
                theirs.map_or(0, |f| f.hash),
                mine.map_or(0, |f| f.allocs),
                mine.map_or(0, |f| f.hash),
            )));
        }
    }
    Ok(())
}

/// What a rank sends for [`super::Pool::trim`]: its fingerprint, then its wholly free segments
/// (little-endian u32 each).
pub fn trim_message(fp: Fingerprint, free: &[usize]) -> Vec<u8> {
    let mut b = fp.to_bytes().to_vec();
    for &i in free {
        b.extend_from_slice(&(i as u32).to_le_bytes());
    }
    b
}

/// The segments free on every rank, from every rank's [`trim_message`] (in rank order;
/// `when` says at which step, for the error);
/// an error naming the first rank whose pool disagrees with this one, or whose message
/// is malformed.
pub fn agree_on_trim(rank: usize, when: &str, all: &[Vec<u8>]) -> Result<Vec<usize>> {
    let fps: Vec<Vec<u8>> = all.iter().map(|m| m.get(..16).unwrap_or(m).to_vec()).collect();
    compare_fingerprints(rank, when, &fps)?;
    let mut common: Option<Vec<usize>> = None;
    for (peer, m) in all.iter().enumerate() {
        let rest = &m[16..];
        if !rest.len().is_multiple_of(4) {
            return Err(Error::GroupFailed(format!(
                "rank {rank}: rank {peer}'s list of free pool segments is malformed ({} bytes)",
                rest.len()
            )));
        }
        let free: Vec<usize> =
            rest.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize).collect();
        common = Some(match common {
            None => free,
            Some(c) => c.into_iter().filter(|i| free.contains(i)).collect(),
        });
    }
    Ok(common.unwrap_or_default())
}
