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
        // The whole pad buffer's layout, though only the slots, the piece words and the
        // bf16 wire's flags are used here.
        let pads = alloc(&core, pad::buffer_bytes(core.world as u32), "the signal pads")?;
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

    /// The `u32` at byte `offset` of `owner`'s pad.
    fn word(&self, owner: usize, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= self.pads.len() && offset.is_multiple_of(4), "pad word {offset} out of range");
        // SAFETY: in bounds and aligned (checked; page-aligned base), the mapping lives as
        // long as `self`, and pad words are only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.pads.peer_ptr(owner).add(offset).cast::<u32>()) }
    }

    /// The bf16 wire's signal of `piece` on `channel` to `peer`, after its inexact
    /// `flag` (NOTE [bf16 wire]): the flag into `peer`'s pad, then this rank's byte of
    /// `peer`'s piece word, with release ordering (the packed planes before it).
    pub(crate) fn signal_piece(&self, peer: usize, channel: u32, piece: u32, flag: bool) {
        let (rank, world) = (self.core.rank as u32, self.core.world as u32);
        let fo = pad::wire_flag_offset(world, channel, piece, rank);
        self.word(peer, fo).store(u32::from(flag), Ordering::Relaxed);
        let word = pad::piece_slot(channel, piece, rank, world) as usize * 4;
        let byte = 1u32 << (8 * (rank % pad::RANKS_PER_WORD));
        self.word(peer, word).fetch_or(byte, Ordering::Release);
    }

    /// Waits for every peer's signal of `piece` on `channel` (peer by peer, each wait
    /// bounded and watching that peer's socket), then returns their inexact flags, by
    /// rank, and resets this rank's piece words (NOTE [bf16 wire]).
    pub(crate) fn wait_piece(&self, channel: u32, piece: u32) -> Result<Vec<bool>> {
        let (rank, world) = (self.core.rank, self.core.world as u32);
        for p in (0..self.core.world).filter(|&p| p != rank) {
            let word = self.word(rank, pad::piece_slot(channel, piece, p as u32, world) as usize * 4);
            let byte = 1u32 << (8 * (p as u32 % pad::RANKS_PER_WORD));
            self.core.spin_until(
                p,
                || (word.load(Ordering::Acquire) & byte != 0).then_some(()),
                |seen| format!("its signal of bf16-wire piece {piece} on channel {channel} (word {seen:#x})"),
                || word.load(Ordering::Relaxed),
            )?;
        }
        let flags = (0..self.core.world)
            .map(|p| {
                p != rank
                    && self.word(rank, pad::wire_flag_offset(world, channel, piece, p as u32)).load(Ordering::Relaxed)
                        != 0
            })
            .collect();
        for w in 0..pad::piece_words(world) {
            let slot = pad::piece_slot(channel, piece, w * pad::RANKS_PER_WORD, world) as usize;
            self.word(rank, slot * 4).store(0, Ordering::Release);
        }
        Ok(flags)
    }

    /// Collective: returns once every rank reached the barrier on `channel`. Everything
    /// a rank wrote to any buffer before the barrier is visible to every rank after it.
    pub fn barrier(&self, channel: u32) -> Result<()> {
        let epoch = self.arrive(channel)?;
        for p in (0..self.core.world).filter(|&p| p != self.core.rank) {
            self.await_peer(p, channel, epoch)?;
        }
        Ok(())
    }

    /// The first half of a barrier split per peer (NOTE [arrival-driven all-gather] in
    /// `coll::gpu`): this rank's signal to every peer; returns the epoch that
    /// [`HostSync::await_peer`] waits for. With a wait for every peer it is [`HostSync::barrier`].
    pub(crate) fn arrive(&self, channel: u32) -> Result<u32> {
        self.core.check_usable()?;
        Epochs::check_channel(channel)?;
        let epoch = self.epochs().next_barrier(channel);
        for p in (0..self.core.world).filter(|&p| p != self.core.rank) {
            self.signal(p, channel, pad::BARRIER, epoch);
        }
        Ok(epoch)
    }

    /// The second half, for one peer: returns once `peer` made its [`HostSync::arrive`]
    /// of `epoch` on `channel`, and everything it wrote before is visible.
    pub(crate) fn await_peer(&self, peer: usize, channel: u32, epoch: u32) -> Result<()> {
        self.wait(peer, channel, pad::BARRIER, epoch, "barrier arrival")
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
