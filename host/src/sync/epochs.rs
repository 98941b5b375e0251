//! The epoch counters of one group (see the parent module for the rules).

use lowcon_abi::pad;

use crate::error::{Error, Result};

/// The next epoch of every counter of one group.
#[derive(Debug)]
pub(crate) struct Epochs {
    world: usize,
    barrier: Vec<u32>,
    sent: Vec<u32>,
    received: Vec<u32>,
}

impl Epochs {
    pub(crate) fn new(world: usize) -> Self {
        let n = pad::CHANNELS as usize;
        Self { world, barrier: vec![0; n], sent: vec![0; n * world], received: vec![0; n * world] }
    }

    pub(crate) fn check_channel(channel: u32) -> Result<()> {
        if channel >= pad::CHANNELS {
            return Err(Error::InvalidArgument(format!(
                "channel {channel}: groups have channels 0 to {}",
                pad::CHANNELS - 1
            )));
        }
        Ok(())
    }

    fn bump(v: &mut u32) -> u32 {
        // Epoch 0 is the pads' initial value, so skip it when wrapping.
        *v = v.wrapping_add(1);
        if *v == 0 {
            *v = 1;
        }
        *v
    }

    /// The epoch of the latest barrier issued on `channel` (0: none yet).
    pub(crate) fn barrier_epoch(&self, channel: u32) -> u32 {
        self.barrier[channel as usize]
    }

    /// The epoch of the latest wait issued for `peer` on `channel` (0: none yet).
    pub(crate) fn received_epoch(&self, channel: u32, peer: usize) -> u32 {
        self.received[channel as usize * self.world + peer]
    }

    /// The epoch of the next barrier on `channel`.
    pub(crate) fn next_barrier(&mut self, channel: u32) -> u32 {
        Self::bump(&mut self.barrier[channel as usize])
    }

    /// The epoch of the next signal from this rank to `peer` on `channel`.
    pub(crate) fn next_send(&mut self, channel: u32, peer: usize) -> u32 {
        Self::bump(&mut self.sent[channel as usize * self.world + peer])
    }

    /// The epoch the next wait for `peer` on `channel` expects.
    pub(crate) fn next_receive(&mut self, channel: u32, peer: usize) -> u32 {
        Self::bump(&mut self.received[channel as usize * self.world + peer])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::epoch_reached;

    #[test]
    fn epochs_compare_across_wraparound() {
        assert!(epoch_reached(5, 5));
        assert!(epoch_reached(6, 5));
        assert!(!epoch_reached(4, 5));
        assert!(epoch_reached(2, u32::MAX)); // wrapped past the expected value
        assert!(!epoch_reached(u32::MAX, 2));
    }

    #[test]
    fn counters_are_independent_and_skip_zero() {
        let mut e = Epochs::new(3);
        assert_eq!(e.next_barrier(0), 1);
        assert_eq!(e.next_barrier(0), 2);
        assert_eq!(e.next_barrier(1), 1);
        assert_eq!(e.next_send(0, 2), 1);
        assert_eq!(e.next_send(0, 1), 1);
        assert_eq!(e.next_receive(0, 2), 1);
        e.barrier[3] = u32::MAX;
        assert_eq!(e.next_barrier(3), 1);
        assert!(Epochs::check_channel(pad::CHANNELS).is_err());
    }
}
