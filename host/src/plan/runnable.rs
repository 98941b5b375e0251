//! What an algorithm can run, call by call: the planner's refusals of a call that no
//! plan can run as asked, each naming the rank and what the caller asked for (NOTE
//! [algorithm capabilities] in `vocab`). The planner alone refuses these; the backends
//! execute the plan and check only the arguments (sizes, buffers, aliasing).

use super::RsCall;
use super::vocab::{DType, LaunchForm, ReduceOp, RsAlgo, RsCaps};
use crate::error::{Error, Result};

/// What crosses the peer links in one reduce-scatter (NOTE [bf16 wire] in `coll::wire`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carry {
    /// The input's own type.
    Same,
    /// A bf16 input reduced into an f32 output.
    Bf16In,
    /// f32 in and out, split into top halves (the wire) and bottom halves (fallback).
    Split,
}

impl Carry {
    /// Its name in a plan's fields.
    pub fn name(self) -> &'static str {
        match self {
            Carry::Same => "same",
            Carry::Bf16In => "bf16-in",
            Carry::Split => "split",
        }
    }
}

/// What a reduce-scatter of `input` into `output` with `wire` carries (None: the
/// input's type), or the refusal naming the dtypes.
pub(crate) fn carry(rank: usize, input: DType, output: DType, wire: Option<DType>) -> Result<Carry> {
    let refuse = |why: &str| {
        let w = wire.map_or("none".to_string(), |w| w.to_string());
        Err(Error::InvalidArgument(format!(
            "rank {rank}: reduce-scatter of {input} into {output} with wire {w}: {why}"
        )))
    };
    if let Some(w) = wire
        && (w.is_int() || input.is_int())
    {
        return refuse("a wire applies to float reduce-scatters only");
    }
    match (input, output, wire) {
        (i, o, None) if i == o => Ok(Carry::Same),
        (i, o, Some(w)) if i == o && w == i => Ok(Carry::Same),
        (DType::F32, DType::F32, Some(DType::Bf16)) => Ok(Carry::Split),
        (DType::Bf16, DType::F32, None | Some(DType::Bf16)) => Ok(Carry::Bf16In),
        (i, o, _) if i != o => refuse(
            "the output must have the input's type, or be f32 for a bf16 input (which then crosses the links \
             as bf16)",
        ),
        (_, _, Some(w)) if w.size() > input.size() => refuse("the wire is wider than the input"),
        (DType::F32, _, Some(DType::F16)) => {
            refuse("only bf16, the top half of an f32, can carry f32 exactly (f16 has another exponent)")
        }
        _ => refuse("bf16 is the only wire, for f32 inputs"),
    }
}

/// Whether a call carrying `carry` on `algorithm` packs what it sends into its
/// workspace's planes, signalled piece by piece: the split wire, and a bf16 input on
/// sm-direct unless its peers read it where it is (`in_place`: NOTE [bf16 input read in
/// place]; NOTE [the wire read directly]; `RsPlan::packs`).
pub(crate) fn packs(carry: Carry, algorithm: RsAlgo, in_place: bool) -> bool {
    carry == Carry::Split || (bf16_on_sm_direct(carry, algorithm) && !in_place)
}

/// A bf16 input into f32 on sm-direct: packed into the wire's planes, or read in place.
pub(crate) fn bf16_on_sm_direct(carry: Carry, algorithm: RsAlgo) -> bool {
    carry == Carry::Bf16In && algorithm == RsAlgo::SmDirect
}

/// Whether `a` can run `call` (what the planner's `auto` picks among): integers reduce
/// on ce-reduce and sm-direct, `tma-push-reduce` only sums, and a call whose links carry
/// another type than its input's (a bf16 input into f32, or the bf16 wire of an f32
/// call) runs on ce-reduce and sm-direct (NOTE [the wire read directly]).
pub(crate) fn can_run(a: RsAlgo, call: &RsCall, carried: bool) -> bool {
    let caps = a.caps();
    if carried {
        let split = call.input == DType::F32 && call.output == DType::F32;
        return if split { caps.split_wire } else { caps.bf16_in };
    }
    if call.input.is_int() && !caps.ints {
        return false;
    }
    caps.all_ops || call.op == ReduceOp::Sum
}

/// Refuses an integer reduce-scatter that cannot run: integers reduce with sum, min and
/// max (no average: an integer mean would round), and only the algorithms that declare
/// `ints` have integer kernels. Floats pass.
pub(crate) fn check_ints(rank: usize, dtype: DType, algorithm: RsAlgo, op: ReduceOp) -> Result<()> {
    if !dtype.is_int() {
        return Ok(());
    }
    if op == ReduceOp::Avg {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: reduce-scatter of {dtype} with avg: integers reduce with sum, min and max (an integer \
             mean would round; sum, then divide)"
        )));
    }
    if algorithm.caps().ints {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "rank {rank}: reduce-scatter of {dtype} with {algorithm}: integers reduce with {} (or auto)",
        RsAlgo::names_where(|c| c.ints).join(" or ")
    )))
}

/// Refuses an operator other than sum for an algorithm that only sums
/// (`tma-push-reduce`: its additions are `cp.reduce.async.bulk .add`; average would need
/// a division after the last one).
pub(crate) fn check_op(rank: usize, algorithm: RsAlgo, op: ReduceOp) -> Result<()> {
    if !algorithm.caps().all_ops && op != ReduceOp::Sum {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: op {op} is not supported by {algorithm}, which only sums (cp.reduce.async.bulk .add); \
             use {} for {op}",
            RsAlgo::names_where(|c| c.all_ops && c.deterministic).join(", ")
        )));
    }
    Ok(())
}

/// Refuses more pieces than a split-wire call has signals for (`pad::WIRE_PIECES`).
pub(crate) fn check_wire_pieces(rank: usize, want: u32) -> Result<()> {
    let max = lowcon_abi::pad::WIRE_PIECES;
    if want > max {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: pipeline {want}: a bf16-wire reduce-scatter has at most {max} pieces"
        )));
    }
    Ok(())
}

/// Refuses an algorithm that cannot send `carry`'s wire (naming the ones that can), or
/// more pieces than the split wire has signals for (at any world size, one rank
/// included, where nothing crosses and the call runs as an f32 one); `in_place`: a bf16
/// input on sm-direct read where it is, which packs nothing.
pub(crate) fn check_wire(
    rank: usize,
    carry: Carry,
    (algorithm, pieces, in_place): (RsAlgo, u32, bool),
    input: DType,
    output: DType,
) -> Result<()> {
    if packs(carry, algorithm, in_place) {
        check_wire_pieces(rank, pieces)?;
    }
    // The split wire read directly is sm-direct's (NOTE [the wire read directly] in
    // coll::gpu::wire_steps).
    let can: fn(RsCaps) -> bool = match carry {
        Carry::Same => return Ok(()),
        Carry::Split => |c| c.split_wire,
        Carry::Bf16In => |c| c.bf16_in,
    };
    if can(algorithm.caps()) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "rank {rank}: reduce-scatter of {input} into {output} over a bf16 wire runs on {} (or auto), not {algorithm}",
        RsAlgo::names_where(can).join(", ")
    )))
}

/// Whether a reduce-scatter reduces in one launch ([`LaunchForm::Once`]; NOTE [one
/// launch per call] in `coll::gpu::ce_reduce`): `Once` asked for and possible. A `Once`
/// the caller named (`explicit`) that cannot be honoured is refused, naming why; one a
/// rule chose falls back to `Pieces` quietly. `pieces` are the plan's pipeline pieces.
pub(crate) fn launch_once(
    rank: usize,
    (launch, explicit): (LaunchForm, bool),
    (algorithm, carry): (RsAlgo, Carry),
    dtype: DType,
    pieces: u32,
) -> Result<bool> {
    if launch != LaunchForm::Once {
        return Ok(false);
    }
    let max = lowcon_abi::pad::WIRE_PIECES;
    let why = if !algorithm.caps().launch_once {
        Some(format!("{} only, not {algorithm}", RsAlgo::names_where(|c| c.launch_once).join(", ")))
    } else if carry != Carry::Same {
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
    use DType::*;

    #[test]
    fn carries_and_refusals_name_the_dtypes() {
        assert_eq!(carry(0, F32, F32, None).unwrap(), Carry::Same);
        assert_eq!(carry(0, Bf16, Bf16, Some(Bf16)).unwrap(), Carry::Same);
        assert_eq!(carry(0, F32, F32, Some(F32)).unwrap(), Carry::Same);
        assert_eq!(carry(0, F32, F32, Some(Bf16)).unwrap(), Carry::Split);
        assert_eq!(carry(0, Bf16, F32, None).unwrap(), Carry::Bf16In);
        assert_eq!(carry(0, Bf16, F32, Some(Bf16)).unwrap(), Carry::Bf16In);
        for (i, o, w, what) in [
            (I32, I32, Some(Bf16), "float reduce-scatters only"),
            (I32, I32, Some(I32), "float reduce-scatters only"),
            (F32, F32, Some(I32), "float reduce-scatters only"),
            (Bf16, Bf16, Some(F32), "wider than the input"),
            (F16, F16, Some(F32), "wider than the input"),
            (F32, F32, Some(F16), "only bf16"),
            (F16, F16, Some(Bf16), "bf16 is the only wire"),
            (Bf16, Bf16, Some(F16), "bf16 is the only wire"),
            (F32, Bf16, None, "the output must have the input's type"),
            (F16, F32, None, "the output must have the input's type"),
            (Bf16, F32, Some(F32), "the output must have the input's type"),
            (Bf16, F16, None, "the output must have the input's type"),
        ] {
            let e = carry(3, i, o, w).unwrap_err().to_string();
            let wn = w.map_or("none".to_string(), |w| w.to_string());
            assert!(e.contains(&format!("rank 3: reduce-scatter of {i} into {o} with wire {wn}")), "{e}");
            assert!(e.contains(what), "{i} {o} {w:?}: {e}");
        }
    }

    #[test]
    fn the_wire_runs_where_declared_and_the_others_refuse_by_name() {
        use RsAlgo as A;
        check_wire(0, Carry::Same, (A::Ll, 1, false), F32, F32).unwrap();
        // The wire read directly (NOTE [the wire read directly]): the split wire's planes,
        // or a bf16 input packed as top halves, at most `WIRE_PIECES` pieces either way.
        check_wire(0, Carry::Split, (A::SmDirect, 4, false), F32, F32).unwrap();
        check_wire(0, Carry::Bf16In, (A::SmDirect, 8, false), Bf16, F32).unwrap();
        let e = check_wire(2, Carry::Bf16In, (A::SmDirect, 65, false), Bf16, F32).unwrap_err().to_string();
        assert!(e.contains("rank 2: pipeline 65"), "{e}");
        // ce-reduce copies a bf16 input as it is: no signals per piece, no cap.
        check_wire(0, Carry::Bf16In, (A::CeReduce, 65, false), Bf16, F32).unwrap();
        assert!(packs(Carry::Bf16In, A::SmDirect, false) && packs(Carry::Split, A::CeReduce, false));
        assert!(!packs(Carry::Bf16In, A::CeReduce, false) && !packs(Carry::Same, A::SmDirect, false));
        // A bf16 input read in place packs nothing, and has no piece limit; the split wire
        // packs whatever `in_place` says.
        assert!(!packs(Carry::Bf16In, A::SmDirect, true) && packs(Carry::Split, A::SmDirect, true));
        check_wire(0, Carry::Bf16In, (A::SmDirect, 65, true), Bf16, F32).unwrap();
        for c in [Carry::Split, Carry::Bf16In] {
            check_wire(0, c, (A::CeReduce, 64, false), F32, F32).unwrap();
            let kernels = [A::TmaReduce, A::TmaReduceEvict, A::TmaPushReduce, A::Ll];
            for a in kernels {
                let e = check_wire(1, c, (a, 1, false), Bf16, F32).unwrap_err().to_string();
                assert!(e.contains("rank 1") && e.contains(a.name()) && e.contains("bf16 into f32"), "{e}");
            }
        }
        let e = check_wire(2, Carry::Split, (A::CeReduce, 65, false), F32, F32).unwrap_err().to_string();
        assert!(e.contains("rank 2: pipeline 65") && e.contains("at most 64"), "{e}");
    }

    #[test]
    fn integer_reductions_take_sum_min_max_on_ce_reduce_and_sm_direct() {
        use RsAlgo as A;
        for d in [I32, I64, U8] {
            check_ints(0, d, A::CeReduce, ReduceOp::Sum).unwrap();
            check_ints(0, d, A::SmDirect, ReduceOp::Max).unwrap();
            let e = check_ints(1, d, A::CeReduce, ReduceOp::Avg).unwrap_err().to_string();
            assert!(e.contains("rank 1") && e.contains(&format!("of {d} with avg")), "{e}");
            for a in [A::TmaReduce, A::TmaPushReduce, A::Ll] {
                let e = check_ints(2, d, a, ReduceOp::Min).unwrap_err().to_string();
                assert!(e.contains("rank 2") && e.contains(a.name()) && e.contains("ce-reduce or sm-direct"), "{e}");
            }
        }
        check_ints(0, F32, A::Ll, ReduceOp::Avg).unwrap();
        let push = A::TmaPushReduce;
        check_op(0, push, ReduceOp::Sum).unwrap();
        check_op(0, A::TmaReduce, ReduceOp::Max).unwrap();
        let e = check_op(1, push, ReduceOp::Avg).unwrap_err().to_string();
        assert!(e.contains("rank 1: op avg") && e.contains("tma-push-reduce") && e.contains("sm-direct"), "{e}");
    }

    #[test]
    fn once_is_refused_where_it_cannot_run() {
        let ce = RsAlgo::CeReduce;
        let ok = |l, a, c, d, n| launch_once(3, (l, true), (a, c), d, n);
        assert!(ok(LaunchForm::Once, ce, Carry::Same, F32, 16).unwrap());
        assert!(ok(LaunchForm::Once, ce, Carry::Same, Bf16, 64).unwrap());
        assert!(!ok(LaunchForm::Pieces, ce, Carry::Same, F32, 16).unwrap());
        for (a, c, d, n, want) in [
            (RsAlgo::SmDirect, Carry::Same, F32, 1, "ce-reduce only, not sm-direct"),
            (ce, Carry::Split, F32, 4, "no wire"),
            (ce, Carry::Bf16In, Bf16, 4, "no wire"),
            (ce, Carry::Same, I32, 4, "not i32"),
            (ce, Carry::Same, F32, 65, "at most 64 pieces, not 65"),
        ] {
            let e = ok(LaunchForm::Once, a, c, d, n).unwrap_err().to_string();
            assert!(e.contains("rank 3: reduce launch once") && e.contains(want), "{e}");
            // A planned `once` never refuses: it falls back to one launch per piece.
            assert!(!launch_once(3, (LaunchForm::Once, false), (a, c), d, n).unwrap());
        }
    }
}
