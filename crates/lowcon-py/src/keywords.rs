//! A collective call's options, converted once per call from Python's keywords.

use pyo3::prelude::*;

use crate::errors::to_py;
use lowcon::{CollOptions, Context, DType};

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
        arrival: lowcon::Arrival::Auto,
        context: hints.context.parse::<Context>().map_err(to_py)?,
        bf16_exact: hints.bf16_exact,
        traffic: false,
    })
}
