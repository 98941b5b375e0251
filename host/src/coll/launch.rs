//! Which calls may reduce in one launch ([`LaunchForm::Once`]; NOTE [one launch per
//! call] in `coll::gpu::ce_reduce`): the check of a plan's launch against the call.

use super::wire::Carry;
use super::{DType, LaunchForm, RsAlgo};
use crate::error::{Error, Result};

/// Whether a reduce-scatter reduces in one launch: `Once` planned and possible. A `Once`
/// the caller asked for (`explicit`) that cannot be honoured is refused, naming why; one
/// the planner chose falls back to `Pieces` quietly. `algorithm` is the one that runs;
/// `pieces` the pipeline's (1 for algorithms without one).
pub(crate) fn once(
    rank: usize,
    (launch, explicit): (LaunchForm, bool),
    (algorithm, plan): (RsAlgo, Carry),
    dtype: DType,
    pieces: u32,
) -> Result<bool> {
    if launch != LaunchForm::Once {
        return Ok(false);
    }
    let max = lowcon_abi::pad::WIRE_PIECES;
    // NOTE [algorithm capabilities].
    let why = if !algorithm.caps().launch_once {
        Some(format!("{} only, not {algorithm}", RsAlgo::names_where(|c| c.launch_once).join(", ")))
    } else if plan != Carry::Same {
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
    fn once_is_refused_where_it_cannot_run() {
        let ce = RsAlgo::CeReduce;
        let ok = |l, a, p, d, n| once(3, (l, true), (a, p), d, n);
        assert!(ok(LaunchForm::Once, ce, Carry::Same, DType::F32, 16).unwrap());
        assert!(ok(LaunchForm::Once, ce, Carry::Same, DType::Bf16, 64).unwrap());
        assert!(!ok(LaunchForm::Pieces, ce, Carry::Same, DType::F32, 16).unwrap());
        for (a, p, d, n, want) in [
            (RsAlgo::SmDirect, Carry::Same, DType::F32, 1, "ce-reduce only, not sm-direct"),
            (ce, Carry::Split, DType::F32, 4, "no wire"),
            (ce, Carry::Bf16In, DType::Bf16, 4, "no wire"),
            (ce, Carry::Same, DType::I32, 4, "not i32"),
            (ce, Carry::Same, DType::F32, 65, "at most 64 pieces, not 65"),
        ] {
            let e = ok(LaunchForm::Once, a, p, d, n).unwrap_err().to_string();
            assert!(e.contains("rank 3: reduce launch once") && e.contains(want), "{e}");
            // A planned `once` never refuses: it falls back to one launch per piece.
            assert!(!once(3, (LaunchForm::Once, false), (a, p), d, n).unwrap());
        }
    }
}
