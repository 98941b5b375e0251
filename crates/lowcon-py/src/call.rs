//! A collective call's arguments, parsed once per call: the options, and what the
//! native call needs of each tensor once the GIL is released.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::dlpack::View;
use crate::errors::to_py;
use lowcon::{AllGatherAlgorithm, CollOptions, DType, ReduceOp, ReduceScatterAlgorithm};

#[allow(clippy::too_many_arguments)]
pub(crate) fn options<A: std::str::FromStr<Err = lowcon::Error> + Default>(
    algorithm: &str,
    (sync, graph_sync): (&str, &str),
    ctas: Option<u32>,
    pipeline: Option<u32>,
    channel: Option<u32>,
    allow_staging: bool,
    map_ordinary: bool,
    (wire, reduce_launch): (Option<&str>, &str),
) -> PyResult<CollOptions<A>> {
    Ok(CollOptions {
        algorithm: algorithm.parse().map_err(to_py)?,
        sync: crate::sync_method(sync)?,
        graph_sync: crate::sync_method(graph_sync)?,
        ctas,
        pipeline,
        // Resolved per call from the stream when not given (`Channels::for_stream`).
        channel: channel.unwrap_or(u32::MAX),
        allow_staging,
        map_ordinary,
        wire: wire.map(str::parse::<DType>).transpose().map_err(to_py)?,
        reduce_launch: reduce_launch.parse().map_err(to_py)?,
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
