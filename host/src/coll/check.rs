//! Argument checks shared by both backends, and the workspace layout helpers (alignment,
//! growth, rotated peer order, staging slots).

use super::{DType, ReduceLaunch, ReduceOp};
use crate::error::{Error, Result};

/// Checks an all-gather's sizes; returns the shard bytes.
/// What a collective call is, as every rank writes it for the others to compare (NOTE
/// [checked calls] in `crate::rendezvous`): the collective (and operator), the input's
/// and the output's sizes (`unit`: elements on GPUs, bytes on the host backend, whose
/// buffers are bytes) and types, and every option.
pub(crate) fn call_text(
    what: &str,
    op: Option<ReduceOp>,
    (n_in, t_in): (usize, DType),
    (n_out, t_out): (usize, DType),
    unit: &str,
    opts: &impl std::fmt::Debug,
) -> String {
    let op = op.map(|o| format!(" ({})", o.name())).unwrap_or_default();
    format!("{what}{op} of {n_in} {unit} {t_in} into {n_out} {unit} {t_out}, {opts:?}")
}

pub(crate) fn check_all_gather(
    rank: usize,
    world: usize,
    input: (usize, DType),
    output: (usize, DType),
) -> Result<usize> {
    if input.1 != output.1 {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: all-gather input is {} but output is {}",
            input.1, output.1
        )));
    }
    let want = input.0.checked_mul(world).ok_or_else(|| Error::InvalidArgument("size overflow".into()))?;
    if output.0 != want {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: all-gather output has {} elements ({} bytes) but a world of {world} needs {want} \
             (world x input of {} elements)",
            output.0,
            output.0 * output.1.size(),
            input.0
        )));
    }
    Ok(input.0 * input.1.size())
}

/// Checks a reduce-scatter's sizes (its dtypes and wire are the planner's to refuse:
/// `plan::runnable`); returns the bytes of one input chunk (this rank's share of the
/// input, in the input's type).
pub(crate) fn check_reduce_scatter(
    rank: usize,
    world: usize,
    input: (usize, DType),
    output: (usize, DType),
) -> Result<usize> {
    let want = output.0.checked_mul(world).ok_or_else(|| Error::InvalidArgument("size overflow".into()))?;
    if input.0 != want {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: reduce-scatter input has {} elements but a world of {world} with an output of {} \
             elements needs {want} (world x output)",
            input.0, output.0
        )));
    }
    Ok(output.0 * input.1.size())
}

/// Refuses a wire on an all-gather (it sends its input as it is).
pub(crate) fn no_wire(rank: usize, (wire, launch): (Option<DType>, ReduceLaunch), dtype: DType) -> Result<()> {
    match (wire, launch.named()) {
        (Some(w), _) if w != dtype => Err(Error::InvalidArgument(format!(
            "rank {rank}: all-gather of {dtype} with wire {w}: a wire applies to reduce-scatters only"
        ))),
        (_, None) => Ok(()),
        (_, Some(l)) => Err(Error::InvalidArgument(format!(
            "rank {rank}: all-gather with reduce launch {l}: it applies to reduce-scatters only"
        ))),
    }
}

/// Rounds `x` up to a multiple of 256 (workspace regions start 256-byte aligned).
pub(crate) const fn align256(x: usize) -> usize {
    x.div_ceil(256) * 256
}

/// The size a workspace of `old` bytes grows to when `need` bytes are asked for: the
/// largest call it serves, rounded up to 2 MiB. (It grew by at least 1.5x before 0.4:
/// fewer collective growths where sizes creep up, but up to half again the memory the
/// largest call needs, held for the group's life; FSDP2 asks for two or three sizes.)
pub(crate) fn grow_to(old: usize, need: usize) -> usize {
    need.max(old).div_ceil(2 << 20) * (2 << 20)
}

/// Ranks in the order rank `rank` visits them: `rank + 1, rank + 2, ...` (itself last).
pub(crate) fn rotated(rank: usize, world: usize) -> impl Iterator<Item = usize> {
    (1..=world).map(move |k| (rank + k) % world)
}

/// Index of peer `p`'s slot in a staging area that skips `rank`.
pub(crate) const fn staged_slot(p: usize, rank: usize) -> usize {
    if p < rank { p } else { p - 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_grows_to_the_largest_call_it_serves() {
        let mib = 1usize << 20;
        assert_eq!(grow_to(0, 1), 2 * mib);
        assert_eq!(grow_to(0, 801 * mib), 802 * mib);
        // Not 1.5x the old size: memory is held for the group's life.
        assert_eq!(grow_to(600 * mib, 610 * mib), 610 * mib);
        assert_eq!(grow_to(8 * mib, 3 * mib), 8 * mib);
    }

    #[test]
    fn size_checks_name_rank_and_sizes() {
        assert_eq!(check_all_gather(1, 4, (10, DType::F32), (40, DType::F32)).unwrap(), 40);
        let e = check_all_gather(1, 4, (10, DType::F32), (39, DType::F32)).unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("39 elements") && e.contains("needs 40"), "{e}");
        assert_eq!(check_reduce_scatter(2, 3, (9, DType::U8), (3, DType::U8)).unwrap(), 3);
        assert_eq!(check_reduce_scatter(2, 3, (9, DType::I64), (3, DType::I64)).unwrap(), 24);
        let e = check_reduce_scatter(2, 3, (10, DType::F32), (3, DType::F32)).unwrap_err().to_string();
        assert!(e.contains("rank 2") && e.contains("needs 9"), "{e}");
        // A bf16 input into an f32 output: the chunk is counted in the input's bytes.
        assert_eq!(check_reduce_scatter(0, 2, (8, DType::Bf16), (4, DType::F32)).unwrap(), 8);
        let auto = ReduceLaunch::Auto;
        no_wire(0, (None, auto), DType::F32).unwrap();
        no_wire(0, (Some(DType::F32), auto), DType::F32).unwrap();
        let e = no_wire(1, (None, ReduceLaunch::Once), DType::F32).unwrap_err().to_string();
        assert!(e.contains("rank 1: all-gather with reduce launch once"), "{e}");
        let e = no_wire(2, (Some(DType::Bf16), auto), DType::F32).unwrap_err().to_string();
        assert!(e.contains("rank 2: all-gather of f32 with wire bf16"), "{e}");
        let e = check_all_gather(0, 2, (1, DType::F32), (2, DType::Bf16)).unwrap_err().to_string();
        assert!(e.contains("input is f32 but output is bf16"), "{e}");
    }

    #[test]
    fn rotation_visits_everyone_once_self_last() {
        let v: Vec<_> = rotated(2, 4).collect();
        assert_eq!(v, vec![3, 0, 1, 2]);
        assert_eq!(staged_slot(0, 2), 0);
        assert_eq!(staged_slot(3, 2), 2);
    }
}
