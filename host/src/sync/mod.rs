//! Synchronisation: signal pads, barriers and point-to-point signals, and what happens
//! when a peer fails.
//!
//! - `epochs`: the counters both backends share (below, the rules);
//! - `gpu`: barriers and signals on GPU streams, by kernel or by stream memory
//!   operations, and (`gpu::failure`) detecting a dead or late peer and releasing the
//!   waits it left stuck;
//! - `host`: the same over CPU shared memory, with atomics.
//!
//! Epoch rules, shared by both backends:
//!
//! Signals are monotonic epochs, never set-and-clear: every barrier on a channel, and
//! every signal from one rank to one peer on a channel, uses the next value of its own
//! counter, and a wait completes when the slot holds that value *or a later one*
//! (compared modulo 2³², see [`epoch_reached`]). No slot is ever reset, so a late
//! reader can never mistake a stale handshake for a fresh one, and channels keep
//! independent operations apart (PyTorch's #192581/#189228 are what this avoids).
//! The host knows every epoch before it enqueues the operation that uses it.

pub(crate) mod epochs;
pub(crate) mod gpu;
pub(crate) mod host;

use crate::error::{Error, Result};
use crate::rendezvous::GroupCore;

/// Channels per group: independent sequences of barriers and signals, one per stream
/// that runs collectives concurrently with others.
pub const CHANNELS: u32 = lowcon_abi::pad::CHANNELS;
pub(crate) use epochs::Epochs;

/// How a synchronisation step runs on the GPU backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMethod {
    /// A one-CTA Rust kernel with system-scope release/acquire and a timeout.
    #[default]
    Kernel,
    /// Stream memory operations and 4-byte copy-engine writes: no SM at all, so it
    /// cannot queue behind a GEMM that fills every SM.
    StreamMemop,
}

impl SyncMethod {
    /// The name used in options, tables, plans and benchmark rows (what `FromStr` reads).
    pub const fn name(self) -> &'static str {
        match self {
            SyncMethod::Kernel => "kernel",
            SyncMethod::StreamMemop => "memop",
        }
    }
}

impl std::str::FromStr for SyncMethod {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "kernel" => Ok(Self::Kernel),
            "memop" | "stream-memop" => Ok(Self::StreamMemop),
            _ => Err(Error::InvalidArgument(format!("sync method {s:?}: expected `kernel` or `memop`"))),
        }
    }
}

/// `true` when `observed` is `expected` or later, modulo 2³² (the comparison
/// `cuStreamWaitValue32(GEQ)` and the kernels' waits make too).
pub const fn epoch_reached(observed: u32, expected: u32) -> bool {
    (observed.wrapping_sub(expected) as i32) >= 0
}

/// Checks that `peer` is another rank of `core`'s world and `channel` exists.
pub(crate) fn check_peer(core: &GroupCore, peer: usize, channel: u32) -> Result<()> {
    Epochs::check_channel(channel)?;
    if peer >= core.world || peer == core.rank {
        return Err(Error::InvalidArgument(format!(
            "peer {peer}: must be another rank of the world of {} (this is rank {})",
            core.world, core.rank
        )));
    }
    Ok(())
}
