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
}

impl Typed {
    pub(crate) fn name(&self) -> String {
        let w = self.wire.map_or(String::new(), |w| format!(" wire {w}"));
        let p = self.pipeline.map_or(String::new(), |p| format!(" {p} pieces"));
        format!(
            "reduce-scatter/{}/{} {} -> {}{w} x{}{p} {}{} {:?}",
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
            ..Default::default()
        }
        .with_sync(self.sync)
    }

    /// The same call on lowcon's f32 path: f32 in and out, no wire, ce-reduce.
    pub(crate) fn f32_twin(&self) -> Self {
        Self { algorithm: ReduceScatterAlgorithm::CeReduce, input: DType::F32, output: DType::F32, wire: None, ..*self }
    }
}
