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
