//! Which channel a call uses when it names none: one per stream, in order of first use,
//! and named claims (`Group.channel`) among them.

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::prelude::*;

use crate::errors::invalid;

/// Stream (or claimed name) → channel, by first use.
#[derive(Default)]
pub(crate) struct Channels(Mutex<HashMap<u64, u32>>);

impl Channels {
    /// The channel for a call on `stream` that names none: one per stream, in order of
    /// first use (the same on every rank when every rank uses its streams in the same
    /// order), so collectives on different streams never share a channel. A key with
    /// the top bit set is a named claim (`named`), which no stream handle is.
    pub(crate) fn for_stream(&self, rank: usize, stream: u64) -> PyResult<u32> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.len() as u32;
        let c = *m.entry(stream).or_insert(n);
        if c >= lowcon::CHANNELS {
            m.remove(&stream);
            return Err(invalid(format!(
                "rank {rank}: calls on more than {} streams: pass channel= explicitly (channels may be shared by \
                 streams that never run collectives at the same time)",
                lowcon::CHANNELS
            )));
        }
        Ok(c)
    }

    /// A channel of its own for `name`, claimed like a stream's; the same name gives
    /// the same channel.
    pub(crate) fn named(&self, rank: usize, name: &str) -> PyResult<u32> {
        // FNV-1a: stable across processes (std's hasher is seeded per process).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.for_stream(rank, h | 1 << 63)
    }
}
