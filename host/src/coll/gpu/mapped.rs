//! `map_ordinary`: the per-call address exchange of an ordinary input and the pinning
//! of its peer mappings until the watchdog has the call (NOTE [mapped ordinary memory]
//! in `memory::mapped`).

use super::{ChannelState, GpuColl};
use crate::cuda::Stream;
use crate::cuda::enqueued::{Phase, phase};
use crate::error::{Error, Result};
use crate::memory::mapped::{Exchanged, Shared};

impl GpuColl {
    /// Closes the peer allocations no call in flight uses; returns how many.
    pub(crate) fn release_mappings(&self) -> Result<usize> {
        self.mapping.maps.release_idle(&|s| self.sync.done_before(s))
    }

    /// NOTE [addresses predicted] on or off for this rank.
    pub(crate) fn set_address_prediction(&self, on: bool) {
        self.mapping.maps.predicting.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Peer allocations opened for `map_ordinary` calls.
    pub(crate) fn mapped_allocations(&self) -> usize {
        self.mapping.maps.opened()
    }

    /// The next exchange of the channel `st`: every rank's address of `bytes` at `ptr`
    /// (pinned until [`GpuColl::track_mapped`]), predicted when `predict` allows and
    /// this rank made the same call before (NOTE [addresses predicted]: the caller then
    /// has the verifier check it).
    /// `Ok(None)`: a rank cannot share its buffer, so the call stages it (every rank
    /// decides the same), or is refused when staging is off.
    pub(super) fn exchange(
        &self,
        st: &mut ChannelState,
        (allow_staging, predict): (bool, bool),
        channel: u32,
        (ptr, bytes): (u64, usize),
        what: &str,
    ) -> Result<Option<Exchanged>> {
        // NOTE [host phases].
        let _t = phase(Phase::Exchange);
        // Advanced on every rank alike even when the call then errs: every rank took
        // part in the exchange, so the sequence numbers stay equal.
        st.map_seq += 1;
        let done = |s: u64| self.sync.done_before(s);
        match self.mapping.maps.exchange(
            &self.sync.core,
            (channel, st.map_seq),
            (ptr, bytes),
            (what, predict),
            &done,
        )? {
            Shared::Mapped(ex) => Ok(Some(ex)),
            Shared::Unshareable { .. } if allow_staging => Ok(None),
            Shared::Unshareable { why, .. } => Err(Error::InvalidArgument(format!(
                "rank {}: map_ordinary: {why}; staging is disabled (allow_staging = false), so the call was \
                 refused on every rank",
                self.sync.core.rank
            ))),
        }
    }

    /// Registers the call just enqueued with the watchdog, and unpins its mappings;
    /// returns the watchdog's number of the call.
    pub(super) fn track_mapped(&self, stream: &Stream, ex: Option<&Exchanged>) -> Result<u64> {
        let call = self.sync.track(stream)?;
        if let Some(ex) = ex {
            self.mapping.maps.settle(ex, call);
        }
        Ok(call)
    }
}
