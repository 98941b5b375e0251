//! Collectives: all-gather and reduce-scatter, on both backends.
//!
//! This module executes the plans `crate::plan` makes: a call's vocabulary (element
//! types, operators, algorithms, options) lives there and is re-exported here. Its
//! children:
//!
//! - `geometry`: the algorithms' geometry (LL rounds, tma rings, pipeline pieces, staging);
//! - `check`: argument checks and the workspace layout helpers;
//! - `reference`: the CPU reduction (the host backend's arithmetic, the GPU's reference);
//! - `device_buf`: [`DeviceBuf`], the GPU backend's buffer argument;
//! - `gpu`: the GPU backend's schedules (copy engines, kernels, signal pads);
//! - `host`: the host backend's schedules (CPU copies over shared memory).
//!
//! The algorithms (see `docs/design.md` for the why):
//!
//! | collective | algorithm | data moved by | needs symmetric |
//! |---|---|---|---|
//! | all-gather | `ce-pull` | copy engine, each rank reads the peers' shards in rotated order | input |
//! | all-gather | `ce-push` | copy engine, each rank writes its shard into every peer | output |
//! | all-gather | `sm-oneshot` | one kernel reading every peer with 16-byte loads | input |
//! | reduce-scatter | `ce-reduce` | copy engine into local staging, pipelined with a few-CTA reduction | input |
//! | reduce-scatter | `sm-direct` | one few-CTA kernel reading and reducing the peers' chunks | input |
//! | reduce-scatter | `tma-reduce` | bulk copies of every rank's tiles into a shared-memory ring, reduced on ≤ 8 CTAs | input |
//! | reduce-scatter | `tma-reduce-evict` | `tma-reduce` with evict-first L2 hints on the streamed loads | input |
//! | all-gather | `ll` | one kernel per round pushes the shard, a flag beside every 4 bytes, into every peer's LL buffer; no barrier | neither |
//! | reduce-scatter | `ll` | one kernel per round pushes chunk `p` into rank `p`'s LL buffer; the owner reduces in rank order | neither |
//! | reduce-scatter | `tma-push-reduce` | bulk loads of the own input into shared memory, `cp.reduce.async.bulk` adds into the owners' workspace (opt-in, sum, not deterministic) | neither |
//!
//! A buffer that must be symmetric but is ordinary memory is staged through the group's
//! workspace (one local copy), unless the options forbid it.

mod check;
pub(crate) mod counters;
mod device_buf;
mod geometry;
pub(crate) mod gpu;
pub(crate) mod host;
mod reference;
pub(crate) mod wire;

pub use crate::plan::vocab::{
    AgAlgo, AllGatherAlgorithm, AllGatherOptions, Arrival, ArrivalForm, CollOptions, Context, DType, Element,
    LaunchForm, MAX_CTAS, ReduceLaunch, ReduceOp, ReduceScatterAlgorithm, ReduceScatterOptions, RsAlgo, RsCaps,
};
pub use counters::CollStats;
pub use device_buf::DeviceBuf;
pub use gpu::per_piece::arrivals::Arrivals;
pub use host::HostInput;
