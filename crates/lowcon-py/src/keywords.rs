//! A collective call's options, converted once per call from Python's keywords.

use pyo3::prelude::*;

use crate::errors::to_py;
use lowcon::{CollOptions, Context, DType};

/// A sync method by name, or `None` for "auto" (the planner's choice).
fn sync_choice(s: &str) -> Result<Option<lowcon::SyncMethod>, lowcon::Error> {
    match s {
        "auto" => Ok(None),
        _ => s.parse().map(Some).map_err(|_| {
            lowcon::Error::InvalidArgument(format!("sync {s:?}: expected \"auto\", \"kernel\" or \"memop\""))
        }),
    }
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
    rank: usize,
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
    // Every refusal names the rank, as the library's own errors do.
    let on_rank = |e: lowcon::Error| {
        to_py(match e {
            lowcon::Error::InvalidArgument(m) => lowcon::Error::InvalidArgument(format!("rank {rank}: {m}")),
            e => e,
        })
    };
    Ok(CollOptions {
        algorithm: algorithm.parse().map_err(on_rank)?,
        sync: sync_choice(sync).map_err(on_rank)?,
        graph_sync: sync_choice(graph_sync).map_err(on_rank)?,
        ctas,
        pipeline,
        // Resolved per call from the stream when not given (`Channels::for_stream`).
        channel: channel.unwrap_or(u32::MAX),
        allow_staging,
        map_ordinary,
        wire: wire.map(str::parse::<DType>).transpose().map_err(on_rank)?,
        reduce_launch: reduce_launch.parse().map_err(on_rank)?,
        arrival: lowcon::Arrival::Auto,
        context: hints.context.parse::<Context>().map_err(on_rank)?,
        bf16_exact: hints.bf16_exact,
        traffic: false,
    })
}
