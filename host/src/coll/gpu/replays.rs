//! NOTE [wire replays]: an eager split-wire reduce-scatter (NOTE [bf16 wire]; every call
//! that packs, `RsPlan::packs`, the same way) enqueues a
//! pack and a reduction per piece, their waits, and the events that fork and join its
//! streams: at 4 ranks, 16 launches and 14 stream-memop waits for 8192x4's layers of
//! 8 pieces. Each launch cost the host about 7 µs inside FSDP2 (NOTE [enqueue clock],
//! 4x H200, 2026-11-27), so the reduce-scatter hook spent 202 µs in the library
//! against NCCL's whole hook at 150-219. The call's work is the same at every step, so
//! it is captured once into a CUDA graph and launched as one: the kernels of a graph
//! cost the host nearly nothing at launch, and its memop waits about what eager ones
//! cost (NOTE [memop batches]), so the graph waits with kernels unless the caller or the
//! rule asks otherwise (NOTE [replay sync] in `plan`).
//!
//! What makes a replay safe:
//! - **every rank takes the same path.** A replayed call synchronises as a captured
//!   one (NOTE [graph flags]: its exit barrier on graph flags, not epochs), so an eager
//!   call on one rank and a replay on another would wait on different slots. The path
//!   is chosen from what every rank has alike: a call's shape (its channel, sizes,
//!   plan and operation; every rank makes the same calls) replays from its second call
//!   on. The buffers, which differ between ranks, only choose which graph: a rank whose
//!   graph for the shape was captured with other buffers captures again (updating an
//!   old graph in place where the driver can), so it still replays;
//! - **nothing stale.** A graph holds the call's buffers and the channel's workspace:
//!   it is found by the buffers' addresses and the workspace's generation, so a call
//!   with other buffers, or after the workspace grew, never runs an old graph. The
//!   caller's buffers are the caller's to keep alive until the call ran, as for any
//!   call;
//! - **failures.** The replay is registered with the watchdog like a user's replay
//!   (`track_replay`), so a dead peer is named and its waits released as for
//!   captured calls. A failed capture is an error of the call (a rank cannot fall back
//!   to the eager path alone);
//! - **memory.** The first call of a shape runs eagerly and sizes the workspace, so a
//!   capture never needs to grow it. Unlike a user's capture, lowcon's own do not keep
//!   an old workspace alive when a larger one replaces it: their graphs are dropped
//!   with it, and the watchdog frees it once the runs registered before are done.
//!
//! Off with `LOWCON_WIRE_REPLAYS=0` (part of the plan fingerprint every rank must
//! share) or `set_wire_replays(false)` on every rank alike: the plan's `replays` (NOTE
//! [plan settings]).

use std::collections::HashSet;

use super::{GpuColl, ReduceOp};
use crate::coll::device_buf::DeviceBuf;
use crate::cuda::{Exec, Stream, StreamPriority};
use crate::error::Result;
use crate::plan::RsPlan;
use crate::sync::SyncMethod;
use crate::sync::gpu::graph::Mode;

/// Graphs a channel keeps (least recently launched dropped first): one per layer of
/// FSDP2 models up to this many layers replays at every step.
const MAX_GRAPHS: usize = 96;
/// Shapes a channel remembers; past this, it forgets them all (every rank at the same
/// call) and each replays again from its second call.
const MAX_SHAPES: usize = 1024;

/// What makes two calls that pack on a channel the same work, apart from buffers and
/// CTAs: only what every rank has alike (the CTAs are capped per rank where ranks share a
/// GPU unevenly, NOTE [shared CTAs], so they choose a graph, not the path).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) struct Shape {
    n: usize,
    pieces: u32,
    memop: bool,
    algorithm: &'static str,
    /// What crosses the links (a bf16 input and an f32 one at the same address are
    /// different work).
    carry: &'static str,
    op: u32,
}

impl Shape {
    fn of(n: usize, plan: &RsPlan, op: ReduceOp) -> Self {
        Self {
            n,
            pieces: plan.pieces,
            memop: plan.replay_sync == SyncMethod::StreamMemop,
            algorithm: plan.algorithm.name(),
            carry: plan.carry.name(),
            op: op.code(),
        }
    }
}

/// Which graph runs a call: its shape, CTAs and buffers, and the workspace generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    shape: Shape,
    ctas: u32,
    src: u64,
    out: u64,
    generation: u64,
}

struct Cached<E> {
    key: Key,
    exec: E,
    used: u64,
}

/// A channel's replays: the shapes seen, the graphs (`E`: an executable graph; anything,
/// in the tests), the stream they are captured on.
pub(super) struct Replays<E = Exec> {
    seen: HashSet<Shape>,
    graphs: Vec<Cached<E>>,
    clock: u64,
    generation: u64,
    capture: Option<Stream>,
}

impl<E> Default for Replays<E> {
    fn default() -> Self {
        Self { seen: HashSet::new(), graphs: Vec::new(), clock: 0, generation: 0, capture: None }
    }
}

impl<E> Replays<E> {
    /// The channel's workspace was replaced: its graphs go with it.
    pub(super) fn workspace_replaced(&mut self) {
        self.generation += 1;
        self.graphs.clear();
    }

    /// Whether a call of `shape` is its first on the channel (then run eagerly): the
    /// shape is seen from now on, whatever the call's outcome, so that the path depends
    /// on the call sequence alone. Past `MAX_SHAPES` every shape is forgotten at once.
    fn first_call(&mut self, shape: Shape) -> bool {
        if self.seen.contains(&shape) {
            return false;
        }
        if self.seen.len() >= MAX_SHAPES {
            self.seen.clear();
        }
        self.seen.insert(shape);
        true
    }

    fn key(&self, shape: Shape, ctas: u32, src: u64, out: u64) -> Key {
        Key { shape, ctas, src, out, generation: self.generation }
    }

    fn find(&mut self, key: Key) -> Option<&E> {
        self.clock += 1;
        let now = self.clock;
        self.graphs.iter_mut().find(|c| c.key == key).map(|c| {
            c.used = now;
            &c.exec
        })
    }

    /// A graph to update for `key`: the one captured for its shape with other buffers
    /// when the channel is full, else the least recently launched (`None` below the cap).
    fn take_for_update(&mut self, key: Key) -> Option<E> {
        if self.graphs.len() < MAX_GRAPHS {
            return None;
        }
        let i =
            self.graphs.iter().enumerate().min_by_key(|(_, c)| (c.key.shape != key.shape, c.used)).map(|(i, _)| i)?;
        Some(self.graphs.swap_remove(i).exec)
    }

    /// Keeps `exec` as the graph of `key`, as just launched.
    fn insert(&mut self, key: Key, exec: E) {
        self.clock += 1;
        let used = self.clock;
        self.graphs.push(Cached { key, exec, used });
    }
}

impl GpuColl {
    /// An eager reduce-scatter that packs (as `wire_reduce_scatter`), launched as a
    /// graph from its shape's second call on (NOTE [wire replays]).
    pub(super) fn wire_replayed(
        &self,
        input: &DeviceBuf<'_>,
        output: &DeviceBuf<'_>,
        op: ReduceOp,
        stream: &Stream,
        (ch, plan): (u32, &RsPlan),
    ) -> Result<()> {
        let shape = Shape::of(output.count, plan, op);
        // NOTE [replay sync]: the graphs wait as captured calls do (kernel waits unless the
        // caller or the rule says otherwise); the first, eager, call as planned.
        let replayed = RsPlan { sync: plan.replay_sync, ..plan.clone() };
        let mut st = self.channel(ch);
        // The path depends on the call sequence alone: a shape is seen from its first call
        // on, whatever that call's outcome on this rank.
        if st.replays.first_call(shape) {
            drop(st);
            return self.wire_reduce_scatter(input, output, op, stream, (ch, plan), (Mode::Eager, false));
        }
        // Taken before any capture: a graph is keyed by the workspace it was captured on.
        let key = st.replays.key(shape, plan.ctas, input.ptr, output.ptr);
        if let Some(exec) = st.replays.find(key) {
            exec.launch(stream)?;
            // Registered before the channel is released, as every call.
            self.sync.track_replay(stream)?;
            drop(st);
            let (world, n) = (self.sync.core.world, output.count);
            let count = crate::coll::wire::pieces(self.sync.core.rank, n, plan.pieces)?.1;
            self.count(super::wire_steps::moved(world, n, count, plan.carry));
            self.counters.replayed(false);
            return Ok(());
        }
        // A shape seen before, with buffers this channel has no graph for: capture one.
        if st.replays.capture.is_none() {
            st.replays.capture = Some(self.sync.device.stream(StreamPriority::Default)?);
        }
        let capture = st.replays.capture.clone().expect("just made");
        let reuse = st.replays.take_for_update(key);
        let kept = st.captured;
        // `wire_reduce_scatter` takes the channel itself.
        drop(st);
        let exec = Exec::capture(&capture, reuse, |s| {
            self.wire_reduce_scatter(input, output, op, s, (ch, &replayed), (Mode::Captured, false))
        });
        let mut st = self.channel(ch);
        // Lowcon's own graphs do not pin the workspace (module docs).
        st.captured = kept;
        let exec = exec?;
        exec.launch(stream)?;
        self.sync.track_replay(stream)?;
        st.replays.insert(key, exec);
        drop(st);
        // The capture counted the call's bytes (`wire_reduce_scatter`).
        self.counters.replayed(true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(n: usize) -> Shape {
        Shape { n, pieces: 4, memop: true, algorithm: "sm-direct", carry: "split", op: 0 }
    }

    #[test]
    fn a_shape_replays_from_its_second_call_whatever_the_buffers() {
        let mut r = Replays::<u32>::default();
        assert!(r.first_call(shape(10)));
        assert!(!r.first_call(shape(10)));
        assert!(r.first_call(shape(11)), "another size is another shape");
        assert!(r.first_call(Shape { carry: "bf16-in", ..shape(10) }), "a bf16 input is another shape");
        // The path never looks at CTAs or buffers (they differ between ranks): a key does.
        let (a, b) = (r.key(shape(10), 64, 1, 2), r.key(shape(10), 32, 1, 2));
        assert_ne!(a, b);
        assert!(!r.first_call(shape(10)));
    }

    #[test]
    fn shapes_are_forgotten_all_at_once_past_the_cap() {
        let mut r = Replays::<u32>::default();
        for n in 0..MAX_SHAPES {
            assert!(r.first_call(shape(n)));
        }
        assert!(!r.first_call(shape(0)));
        // The next new shape clears the set: every rank forgets at the same call.
        assert!(r.first_call(shape(MAX_SHAPES)));
        assert!(r.first_call(shape(0)), "forgotten, so a first call again");
    }

    #[test]
    fn a_graph_is_found_by_its_buffers_and_the_workspace_generation() {
        let mut r = Replays::<u32>::default();
        let k = r.key(shape(10), 64, 0x1000, 0x2000);
        r.insert(k, 7);
        assert_eq!(r.find(k), Some(&7));
        assert_eq!(r.find(r.key(shape(10), 64, 0x1000, 0x3000)), None, "other output");
        assert_eq!(r.find(r.key(shape(10), 64, 0x1100, 0x2000)), None, "other input");
        r.workspace_replaced();
        assert_eq!(r.find(k), None, "the old graph went with the workspace");
        assert_eq!(r.find(r.key(shape(10), 64, 0x1000, 0x2000)), None, "a new key, no graph yet");
    }

    #[test]
    fn a_full_channel_updates_its_graph_of_the_same_shape_first_else_the_oldest() {
        let mut r = Replays::<u32>::default();
        assert!(r.take_for_update(r.key(shape(1), 64, 0, 0)).is_none(), "below the cap nothing is taken");
        for i in 0..MAX_GRAPHS as u64 {
            // Shape 1 for the first graph only; the rest are shape 2, launched later.
            let s = if i == 5 { shape(1) } else { shape(2) };
            let k = r.key(s, 64, i, i);
            r.insert(k, i as u32);
        }
        // A new buffer set of shape 1 takes shape 1's graph, though others are older.
        assert_eq!(r.take_for_update(r.key(shape(1), 64, 999, 999)), Some(5));
        r.insert(r.key(shape(1), 64, 999, 999), 5);
        // A shape with no graph takes the least recently launched: graph 0, unless found
        // since.
        let k0 = r.key(shape(2), 64, 0, 0);
        assert_eq!(r.find(k0), Some(&0));
        assert_eq!(r.take_for_update(r.key(shape(3), 64, 7, 7)), Some(1));
    }
}
