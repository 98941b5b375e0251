//! [`Typed`]: one reduce-scatter with its own input and output types and wire (the bf16
//! wire's checks, `wire.rs`, and the runner's `run_typed`).

use super::*;

/// One reduce-scatter with its own input and output types and wire.
#[derive(Clone, Copy, Debug)]
pub struct Typed {
    /// Algorithm.
    pub algorithm: ReduceScatterAlgorithm,
    /// Operator.
    pub op: ReduceOp,
    /// Input element type.
    pub input: DType,
    /// Output element type.
    pub output: DType,
    /// The wire (`None`: the input's type).
    pub wire: Option<DType>,
    /// Output elements per rank.
    pub count: usize,
    /// Symmetric buffers (else ordinary memory).
    pub symmetric: bool,
    /// Shift both buffers by this many elements.
    pub misalign: usize,
    /// Sync method (GPU).
    pub sync: SyncMethod,
    /// Channel.
    pub channel: u32,
    /// Pieces (`None`: the default).
    pub pipeline: Option<u32>,
    /// `map_ordinary` (`None`: the plan's): for a bf16 input on sm-direct, whether the
    /// peers read it where it is instead of packing it (NOTE [bf16 input read in place]).
    pub map: Option<bool>,
}

impl Typed {
    pub(crate) fn name(&self) -> String {
        let w = self.wire.map_or(String::new(), |w| format!(" wire {w}"));
        let p = self.pipeline.map_or(String::new(), |p| format!(" {p} pieces"));
        let m = self.map.map_or(String::new(), |m| format!(" map_ordinary={m}"));
        format!(
            "reduce-scatter/{}/{} {} -> {}{w} x{}{p}{m} {}{} {:?}",
            self.algorithm,
            self.op,
            self.input,
            self.output,
            self.count,
            if self.symmetric { "symmetric" } else { "plain" },
            if self.misalign > 0 { format!(" +{}", self.misalign) } else { String::new() },
            self.sync
        )
    }

    pub(crate) fn opts(&self) -> ReduceScatterOptions {
        ReduceScatterOptions {
            algorithm: self.algorithm,
            channel: self.channel,
            pipeline: self.pipeline,
            wire: self.wire,
            map_ordinary: self.map,
            ..Default::default()
        }
        .with_sync(self.sync)
    }

    /// The same call on lowcon's f32 path: f32 in and out, no wire, ce-reduce.
    pub(crate) fn f32_twin(&self) -> Self {
        Self {
            algorithm: ReduceScatterAlgorithm::CeReduce,
            input: DType::F32,
            output: DType::F32,
            wire: None,
            map: None,
            ..*self
        }
    }
}
