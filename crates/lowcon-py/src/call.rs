//! A collective call's arguments, parsed once per call: the options, and what the
//! native call needs of each tensor once the GIL is released.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::dlpack::View;
use crate::errors::to_py;
use lowcon::{AllGatherAlgorithm, CollOptions, Context, DType, ReduceOp, ReduceScatterAlgorithm};

/// A sync method by name, or `None` for "auto" (the planner's choice).
fn sync_choice(s: &str) -> PyResult<Option<lowcon::SyncMethod>> {
    if s == "auto" { Ok(None) } else { crate::sync_method(s).map(Some) }
}

/// The hints a call passes to the planner (NOTE [one planner]).
#[derive(Clone, Copy)]
pub(crate) struct Hints<'a> {
    pub(crate) context: &'a str,
    pub(crate) bf16_exact: bool,
}

impl Default for Hints<'_> {
    fn default() -> Self {
        Hints { context: "alone", bf16_exact: false }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn options<A: std::str::FromStr<Err = lowcon::Error> + Default>(
    algorithm: &str,
    (sync, graph_sync): (&str, &str),
    ctas: Option<u32>,
    pipeline: Option<u32>,
    channel: Option<u32>,
    allow_staging: bool,
    map_ordinary: Option<bool>,
    (wire, reduce_launch): (Option<&str>, &str),
    hints: Hints<'_>,
) -> PyResult<CollOptions<A>> {
    Ok(CollOptions {
        algorithm: algorithm.parse().map_err(to_py)?,
        sync: sync_choice(sync)?,
        graph_sync: sync_choice(graph_sync)?,
        ctas,
        pipeline,
        // Resolved per call from the stream when not given (`Channels::for_stream`).
        channel: channel.unwrap_or(u32::MAX),
        allow_staging,
        map_ordinary,
        wire: wire.map(str::parse::<DType>).transpose().map_err(to_py)?,
        reduce_launch: reduce_launch.parse().map_err(to_py)?,
        context: hints.context.parse::<Context>().map_err(to_py)?,
        bf16_exact: hints.bf16_exact,
        traffic: false,
    })
}

/// What a collective needs of a view once the GIL is released.
#[derive(Clone, Copy)]
pub(crate) struct Raw {
    pub(crate) ptr: u64,
    pub(crate) count: usize,
    pub(crate) dtype: DType,
}

impl From<&View<'_>> for Raw {
    fn from(v: &View<'_>) -> Self {
        Raw { ptr: v.ptr, count: v.count, dtype: v.dtype }
    }
}

pub(crate) enum Which {
    /// An all-gather, recording these arrivals as pieces land (NOTE [per-piece arrivals]).
    AllGather(CollOptions<AllGatherAlgorithm>, Option<Arc<lowcon::Arrivals>>),
    ReduceScatter(ReduceOp, CollOptions<ReduceScatterAlgorithm>),
    /// A released reduce-scatter (NOTE [release rounds]): `produce(d)` writes chunk `d`
    /// of the input, on the call's stream (GPU only).
    Released(ReduceOp, CollOptions<ReduceScatterAlgorithm>, Py<PyAny>),
    /// The traffic floor of an all-gather (`true`) or a reduce-scatter (`false`): the
    /// bytes alone, no sync, garbage results (`lowcon::GpuGroup::all_gather_traffic`);
    /// the channel is unused (no barrier).
    Traffic(bool, u32),
}

impl Which {
    pub(crate) fn channel_mut(&mut self) -> &mut u32 {
        match self {
            Which::AllGather(o, _) => &mut o.channel,
            Which::ReduceScatter(_, o) | Which::Released(_, o, _) => &mut o.channel,
            Which::Traffic(_, c) => c,
        }
    }
}
