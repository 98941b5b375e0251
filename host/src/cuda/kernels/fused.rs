//! The fused kernels' head ([`FusedArgs`]): `lowcon_abi::FusedHead`, the one parameter
//! every fused kernel takes first, by value (NOTE [fused head by value] in `lowcon_abi`).

use super::PadArgs;

/// Where a fused one-shot kernel synchronises (entry and exit barriers inside the
/// kernel), or `fused == 0` when the host enqueues the barriers around it. A newtype:
/// cudarc's `DeviceRepr` and the head are both foreign to this crate.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub(crate) struct FusedArgs(pub lowcon_abi::FusedHead);

// SAFETY: `FusedHead` is `#[repr(C)]` plain data (`Pod`: no padding, no pointers the
// host owns), and the fused kernels take it by value with the same layout (the ABI
// crate is shared; NOTE [fused head by value]), so its bytes are the parameter.
unsafe impl cudarc::driver::DeviceRepr for FusedArgs {}

impl FusedArgs {
    /// The head of a call on `channel` with these pads: `epochs` (in, out) for eager
    /// barriers, `counter` this rank's CTA counter word for the channel, `fused` whether
    /// the kernel runs its barriers, `graph` whether the call is captured (the barriers
    /// then use the graph flags, not the epochs: NOTE [graph flags],
    /// `host/src/sync/gpu/graph.rs`).
    pub(crate) fn new(pad: PadArgs, channel: u32, epochs: (u32, u32), counter: u64, fused: bool, graph: bool) -> Self {
        FusedArgs(lowcon_abi::FusedHead {
            pads: pad.pads,
            timeout_ns: pad.timeout_ns,
            err: pad.err,
            counter,
            rank: pad.rank,
            world: pad.world,
            channel,
            epoch_in: epochs.0,
            epoch_out: epochs.1,
            fused: fused.into(),
            graph: graph.into(),
            pad: 0,
        })
    }

    /// Whether the kernel runs its own barriers.
    pub(crate) fn fused(&self) -> bool {
        self.0.fused != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_carries_every_field_where_the_kernels_read_it() {
        let pad = PadArgs { pads: 0x1000, rank: 3, world: 8, err: 0x2000, timeout_ns: 77 };
        let f = FusedArgs::new(pad, 5, (11, 12), 0x3000, true, false);
        let h = f.0;
        assert_eq!((h.pads, h.timeout_ns, h.err, h.counter), (0x1000, 77, 0x2000, 0x3000));
        assert_eq!((h.rank, h.world, h.channel, h.epoch_in, h.epoch_out), (3, 8, 5, 11, 12));
        assert_eq!((h.fused, h.graph, h.pad), (1, 0, 0));
        assert!(f.fused());
        assert!(!FusedArgs::new(pad, 0, (0, 0), 0, false, true).fused());
        assert_eq!(FusedArgs::new(pad, 0, (0, 0), 0, false, true).0.graph, 1);
        // The launch passes these bytes as the kernels' first, 64-byte parameter.
        assert_eq!(std::mem::size_of::<FusedArgs>(), 64);
    }
}
