//! The fused kernels' head: what the host knows of a call's barriers ([`FusedArgs`]) and
//! the one parameter the kernels take it as ([`Head`], NOTE [fused head by value] in
//! `lowcon_abi`).

use super::PadArgs;

/// Where a fused one-shot kernel synchronises (entry and exit barriers inside the
/// kernel), or `fused == 0` when the host enqueues the barriers around it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FusedArgs {
    pub pad: PadArgs,
    pub channel: u32,
    pub epoch_in: u32,
    pub epoch_out: u32,
    /// This rank's CTA counter word for the channel.
    pub counter: u64,
    pub fused: u32,
    /// A captured call: the fused barriers use the graph flags, not the epochs (NOTE
    /// [graph flags], `host/src/sync/gpu/graph.rs`).
    pub graph: u32,
}

impl FusedArgs {
    /// The kernels' first parameter (NOTE [fused head by value] in `lowcon_abi`).
    pub(crate) fn head(&self) -> Head {
        Head(lowcon_abi::FusedHead {
            pads: self.pad.pads,
            timeout_ns: self.pad.timeout_ns,
            err: self.pad.err,
            counter: self.counter,
            rank: self.pad.rank,
            world: self.pad.world,
            channel: self.channel,
            epoch_in: self.epoch_in,
            epoch_out: self.epoch_out,
            fused: self.fused,
            graph: self.graph,
            pad: 0,
        })
    }
}

/// [`lowcon_abi::FusedHead`] as a kernel argument: cudarc's `DeviceRepr` and the head
/// are both foreign to this crate, so a newtype carries the impl.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub(crate) struct Head(pub lowcon_abi::FusedHead);

// SAFETY: `FusedHead` is `#[repr(C)]` plain data (`Pod`: no padding, no pointers the
// host owns), and the fused kernels take it by value with the same layout (the ABI
// crate is shared; NOTE [fused head by value]), so its bytes are the parameter.
unsafe impl cudarc::driver::DeviceRepr for Head {}
