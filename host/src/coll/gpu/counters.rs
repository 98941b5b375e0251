//! A GPU group's counters (`stats()`): what its calls moved to and from peers, as they
//! were enqueued, with the fallbacks the device counted (`coll::counters`).

use super::GpuColl;
use crate::coll::counters::{CollStats, Moved};
use crate::error::Result;

impl GpuColl {
    /// Counts what a call moves to and from peers, as it is enqueued (a captured call
    /// counts once, when captured; NOTE [bf16 wire]).
    pub(super) fn count(&self, moved: Moved) {
        self.counters.add(moved);
    }

    /// The counters: the host's, plus the fallbacks the GPU counted (read from the pad
    /// on the side stream, bounded).
    pub(crate) fn stats(&self) -> Result<CollStats> {
        use std::sync::atomic::Ordering::Relaxed;
        let maps = &self.mapping.maps;
        Ok(CollStats {
            predicted_calls: maps.predicted.load(Relaxed),
            mispredicted_calls: maps.mispredicted.load(Relaxed),
            ..self.counters.read(self.sync.read_stats()?)
        }
        .with_host_time(&self.sync.core))
    }
}
