//! The synchronisation steps of one call, eager or captured into a CUDA graph (NOTE
//! [graph flags] in `crate::sync::gpu::graph`): its entry and exit barriers (fused into
//! a one-shot kernel with kernel sync), and its registration with the watchdog.

use super::GpuColl;
use crate::cuda::Stream;
use crate::cuda::kernels::FusedArgs;
use crate::error::Result;
use crate::memory::mapped::Exchanged;
use crate::sync::SyncMethod;
use crate::sync::gpu::graph::Mode;

impl GpuColl {
    /// The fused barriers' arguments of a one-shot kernel: with kernel sync, eager
    /// epochs or (captured) the graph flags; with memop sync, none (`fused == 0`: the
    /// host enqueues the barriers around the kernel).
    pub(super) fn fused(&self, channel: u32, sync: SyncMethod, mode: Mode) -> FusedArgs {
        let graph = mode == Mode::Captured;
        let (epochs, fused) = if sync == SyncMethod::Kernel && graph {
            self.sync.note_wait_method(channel, lowcon_abi::pad::GRAPH_ENTRY, SyncMethod::Kernel);
            self.sync.note_wait_method(channel, lowcon_abi::pad::GRAPH_EXIT, SyncMethod::Kernel);
            self.sync.mark_graph_channel(channel);
            ((0, 0), true)
        } else if sync == SyncMethod::Kernel {
            self.sync.note_wait_method(channel, lowcon_abi::pad::BARRIER, SyncMethod::Kernel);
            let mut ep = self.sync.epochs();
            ((ep.next_barrier(channel), ep.next_barrier(channel)), true)
        } else {
            ((0, 0), false)
        };
        let counter =
            self.sync.pads.local_ptr() + lowcon_abi::pad::counter_offset(self.sync.core.world as u32, channel) as u64;
        FusedArgs::new(self.sync.pad_args(), channel, epochs, counter, fused, graph)
    }

    /// The entry barrier of a call: an eager barrier, or a captured one's.
    pub(super) fn enter(&self, stream: &Stream, channel: u32, sync: SyncMethod, mode: Mode) -> Result<()> {
        match mode {
            Mode::Eager => self.sync.barrier_eager(stream, channel, sync),
            Mode::Captured => self.sync.graph_barrier(stream, channel, sync, lowcon_abi::pad::GRAPH_ENTRY),
        }
    }

    /// The exit barrier of a call (after [`GpuColl::enter`]).
    pub(super) fn exit(&self, stream: &Stream, channel: u32, sync: SyncMethod, mode: Mode) -> Result<()> {
        match mode {
            Mode::Eager => self.sync.barrier_eager(stream, channel, sync),
            Mode::Captured => self.sync.graph_barrier(stream, channel, sync, lowcon_abi::pad::GRAPH_EXIT),
        }
    }

    /// Registers an eager call with the watchdog (and its mapped inputs); a captured
    /// call is registered by each replay instead (`track_replay`).
    pub(super) fn finish(&self, stream: &Stream, mode: Mode, peers: Option<&Exchanged>) -> Result<u64> {
        match mode {
            Mode::Eager => self.track_mapped(stream, peers),
            Mode::Captured => Ok(0),
        }
    }

    /// Enqueues a one-shot kernel (`launch`) with its entry and exit barriers: inside the
    /// kernel with kernel sync, as stream-memop barriers around it otherwise.
    pub(super) fn one_shot(
        &self,
        stream: &Stream,
        (channel, sync, mode): (u32, SyncMethod, Mode),
        launch: impl FnOnce(FusedArgs) -> Result<()>,
    ) -> Result<()> {
        let f = self.fused(channel, sync, mode);
        if !f.fused() {
            self.enter(stream, channel, sync, mode)?;
        }
        launch(f)?;
        if !f.fused() {
            self.exit(stream, channel, sync, mode)?;
        }
        Ok(())
    }
}
