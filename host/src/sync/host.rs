//! Barriers and signals on the host backend: signals are `AtomicU32` stores with
//! release ordering into the peer's pad, and waits are acquire loads of the own pad
//! with the same epoch rules and timeouts as the GPU kernels. A wait also polls the
//! peer's socket, so a peer that died is reported at once, by rank.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use lowcon_abi::pad;

use super::{Epochs, epoch_reached};
use crate::error::Result;
use crate::memory::host::{HostBuffer, alloc};
use crate::rendezvous::GroupCore;

/// A host-backend group's synchronisation: its rendezvous, epochs and signal pads.
pub(crate) struct HostSync {
    pub(crate) core: GroupCore,
    epochs: Mutex<Epochs>,
    pads: HostBuffer,
}

impl HostSync {
    /// Collective: allocates the pads.
    pub(crate) fn new(core: GroupCore) -> Result<Self> {
        let pads = alloc(&core, pad::bytes(core.world as u32))?;
        Ok(Self { epochs: Mutex::new(Epochs::new(core.world)), core, pads })
    }

    fn epochs(&self) -> MutexGuard<'_, Epochs> {
        self.epochs.lock().unwrap_or_else(|p| p.into_inner())
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
        self.core.spin_until(
            peer,
            || epoch_reached(slot.load(Ordering::Acquire), epoch).then_some(()),
            |seen| format!("its {what} on channel {channel} (epoch {epoch}, saw {seen})"),
            || slot.load(Ordering::Relaxed),
        )
    }

    /// Collective: returns once every rank reached the barrier on `channel`. Everything
    /// a rank wrote to any buffer before the barrier is visible to every rank after it.
    pub fn barrier(&self, channel: u32) -> Result<()> {
        self.core.check_usable()?;
        Epochs::check_channel(channel)?;
        let epoch = self.epochs().next_barrier(channel);
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
        super::check_peer(&self.core, peer, channel)?;
        let epoch = self.epochs().next_send(channel, peer);
        self.signal(peer, channel, pad::P2P, epoch);
        Ok(())
    }

    /// Waits for `peer`'s next `put_signal` on `channel`.
    pub fn wait_signal(&self, peer: usize, channel: u32) -> Result<()> {
        self.core.check_usable()?;
        super::check_peer(&self.core, peer, channel)?;
        let epoch = self.epochs().next_receive(channel, peer);
        self.wait(peer, channel, pad::P2P, epoch, "signal")
    }
}
