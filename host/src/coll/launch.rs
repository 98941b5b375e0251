//! [`ReduceLaunch`]: how ce-reduce launches its reduction, and which calls may choose
//! one launch per call (NOTE [one launch per call] in `coll::gpu::ce_reduce`).

use std::fmt;
use std::str::FromStr;

use super::wire::Plan;
use super::{DType, ReduceScatterAlgorithm};
use crate::error::{Error, Result};

/// How `ce-reduce` launches its reduction on the GPU backend. The host backend has no
/// launches: it accepts (and checks) the option and computes the same result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReduceLaunch {
    /// The library's choice: [`DEFAULT_REDUCE_LAUNCH`].
    #[default]
    Auto,
    /// One launch per pipeline piece, after that piece's copies; the staging is a ring
    /// of 3 pieces per peer.
    Pieces,
    /// One launch per call, whose CTAs wait for each piece's copies on a flag: beside a
    /// GEMM that holds every SM it waits for an SM once instead of once per piece. Stages
    /// the whole chunk (one slot per peer); f32, f16 and bf16 reduce-scatters of the
    /// input's own type only, at most 64 pieces.
    Once,
}

/// What [`ReduceLaunch::Auto`] becomes: `Pieces` until the 2-GPU run measures `Once`
/// end to end (docs/benchmarks.md, "A reduction beside a saturated GEMM").
pub const DEFAULT_REDUCE_LAUNCH: ReduceLaunch = ReduceLaunch::Pieces;

impl ReduceLaunch {
    /// Every variant.
    pub const ALL: [ReduceLaunch; 3] = [ReduceLaunch::Auto, ReduceLaunch::Pieces, ReduceLaunch::Once];

    /// The name used on command lines and in messages.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceLaunch::Auto => "auto",
            ReduceLaunch::Pieces => "pieces",
            ReduceLaunch::Once => "once",
        }
    }

    /// The ABI's code (`lowconReduceLaunch`).
    pub const fn code(self) -> u32 {
        match self {
            ReduceLaunch::Auto => 0,
            ReduceLaunch::Pieces => 1,
            ReduceLaunch::Once => 2,
        }
    }

    /// The variant of an ABI code.
    pub fn from_code(code: u32) -> Result<Self> {
        Self::ALL.into_iter().find(|l| l.code() == code).ok_or_else(|| {
            Error::InvalidArgument(format!("reduce launch {code}: expected 0 (auto), 1 (pieces) or 2 (once)"))
        })
    }
}

impl fmt::Display for ReduceLaunch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceLaunch {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| Error::InvalidArgument(format!("reduce launch {s:?}: expected auto, pieces or once")))
    }
}

/// Whether a reduce-scatter reduces in one launch: `Once` asked for (or chosen by
/// `Auto`) and possible. An explicit `Once` that cannot be honoured is refused, naming
/// why; `Auto` falls back to `Pieces` quietly. `algorithm` is the one that runs;
/// `pieces` the pipeline's (1 for algorithms without one).
pub(crate) fn once(
    rank: usize,
    launch: ReduceLaunch,
    (algorithm, plan): (ReduceScatterAlgorithm, Plan),
    dtype: DType,
    pieces: u32,
) -> Result<bool> {
    let explicit = launch == ReduceLaunch::Once;
    let wanted = match launch {
        ReduceLaunch::Auto => DEFAULT_REDUCE_LAUNCH == ReduceLaunch::Once,
        l => l == ReduceLaunch::Once,
    };
    if !wanted {
        return Ok(false);
    }
    let max = lowcon_abi::pad::WIRE_PIECES;
    let why = if !matches!(algorithm, ReduceScatterAlgorithm::CeReduce | ReduceScatterAlgorithm::Auto) {
        Some(format!("ce-reduce only, not {algorithm}"))
    } else if plan != Plan::Same {
        Some("a reduce-scatter whose input and output types match, with no wire".to_string())
    } else if dtype.is_int() {
        Some(format!("f32, f16 and bf16 only, not {dtype}"))
    } else if pieces > max {
        Some(format!("at most {max} pieces, not {pieces}"))
    } else {
        None
    };
    match (why, explicit) {
        (None, _) => Ok(true),
        (Some(w), true) => Err(Error::InvalidArgument(format!("rank {rank}: reduce launch once: {w}"))),
        (Some(_), false) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for l in ReduceLaunch::ALL {
            assert_eq!(l.name().parse::<ReduceLaunch>().unwrap(), l);
            assert_eq!(ReduceLaunch::from_code(l.code()).unwrap(), l);
        }
        assert!(ReduceLaunch::from_code(3).unwrap_err().to_string().contains("expected 0 (auto)"));
        assert!("persistent".parse::<ReduceLaunch>().unwrap_err().to_string().contains("auto, pieces or once"));
    }

    #[test]
    fn once_is_refused_where_it_cannot_run() {
        let ce = ReduceScatterAlgorithm::CeReduce;
        let ok = |l, a, p, d, n| once(3, l, (a, p), d, n);
        assert!(ok(ReduceLaunch::Once, ce, Plan::Same, DType::F32, 16).unwrap());
        assert!(ok(ReduceLaunch::Once, ce, Plan::Same, DType::Bf16, 64).unwrap());
        assert!(!ok(ReduceLaunch::Pieces, ce, Plan::Same, DType::F32, 16).unwrap());
        for (a, p, d, n, want) in [
            (ReduceScatterAlgorithm::SmDirect, Plan::Same, DType::F32, 1, "ce-reduce only, not sm-direct"),
            (ce, Plan::Split, DType::F32, 4, "no wire"),
            (ce, Plan::Bf16In, DType::Bf16, 4, "no wire"),
            (ce, Plan::Same, DType::I32, 4, "not i32"),
            (ce, Plan::Same, DType::F32, 65, "at most 64 pieces, not 65"),
        ] {
            let e = ok(ReduceLaunch::Once, a, p, d, n).unwrap_err().to_string();
            assert!(e.contains("rank 3: reduce launch once") && e.contains(want), "{e}");
            // Auto never refuses: it falls back to one launch per piece.
            assert!(!ok(ReduceLaunch::Auto, a, p, d, n).unwrap());
        }
    }
}
