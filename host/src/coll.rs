//! What both backends' collectives share: element types, reduction operators, the
//! algorithms and their options, argument checks, automatic selection, the workspace
//! layout and the CPU reduction the host backend uses.
//!
//! The algorithms (see `docs/design.md` for the why):
//!
//! | collective | algorithm | data moved by | needs symmetric |
//! |---|---|---|---|
//! | all-gather | `ce-pull` | copy engine, each rank reads the peers' shards in rotated order | input |
//! | all-gather | `ce-push` | copy engine, each rank writes its shard into every peer | output |
//! | all-gather | `sm-oneshot` | one kernel reading every peer with 16-byte loads | input |
//! | reduce-scatter | `ce-reduce` | copy engine into local staging, pipelined with a few-CTA reduction | input |
//! | reduce-scatter | `sm-direct` | one few-CTA kernel reading and reducing the peers' chunks | input |
//!
//! A buffer that must be symmetric but is ordinary memory is staged through the group's
//! workspace (one local copy), unless the options forbid it.

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};
use lowcon_abi::{reduce_dtype, reduce_op};

use crate::error::{Error, Result};
use crate::sync::SyncMethod;

/// Element type of a collective's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// 32-bit signed integer (all-gather only).
    I32,
    /// Byte (all-gather only).
    U8,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 5] = [DType::F32, DType::F16, DType::Bf16, DType::I32, DType::U8];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 => 1,
        }
    }

    /// The name used on command lines and in messages.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }

    /// Whether reduce-scatter supports it (floating types; reductions accumulate in f32).
    pub const fn reducible(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::Bf16)
    }

    pub(crate) fn kernel_index(self) -> Result<usize> {
        match self {
            DType::F32 => Ok(reduce_dtype::F32),
            DType::F16 => Ok(reduce_dtype::F16),
            DType::Bf16 => Ok(reduce_dtype::BF16),
            _ => Err(unsupported_dtype(self)),
        }
    }
}

fn unsupported_dtype(d: DType) -> Error {
    Error::InvalidArgument(format!(
        "dtype {}: reduce-scatter supports f32, f16 and bf16 (all-gather takes any dtype)",
        d.name()
    ))
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| Error::InvalidArgument(format!("dtype {s:?}: expected one of f32, f16, bf16, i32, u8")))
    }
}

/// Rust element types that map to a [`DType`].
pub trait Element: bytemuck::Pod + cudarc::driver::DeviceRepr {
    /// The dtype.
    const DTYPE: DType;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
}
impl Element for bf16 {
    const DTYPE: DType = DType::Bf16;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl Element for u8 {
    const DTYPE: DType = DType::U8;
}

/// Reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Sum divided by the number of ranks.
    Avg,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max];

    /// The name used on command lines.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }

    pub(crate) const fn code(self) -> u32 {
        match self {
            ReduceOp::Sum => reduce_op::SUM,
            ReduceOp::Avg => reduce_op::AVG,
            ReduceOp::Min => reduce_op::MIN,
            ReduceOp::Max => reduce_op::MAX,
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| Error::InvalidArgument(format!("op {s:?}: expected one of sum, avg, min, max")))
    }
}

macro_rules! algorithm_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            /// Chosen by size and world (see [`choose_all_gather`] / [`choose_reduce_scatter`]).
            #[default]
            Auto,
            $($(#[$vm])* $v),+
        }

        impl $name {
            /// The named (non-auto) algorithms.
            pub const NAMED: &[$name] = &[$($name::$v),+];

            /// The name used on command lines and in tables.
            pub const fn name(self) -> &'static str {
                match self {
                    $name::Auto => "auto",
                    $($name::$v => $s),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                std::iter::once($name::Auto).chain($name::NAMED.iter().copied()).find(|a| a.name() == s).ok_or_else(|| {
                    let names: Vec<_> = $name::NAMED.iter().map(|a| a.name()).collect();
                    Error::InvalidArgument(format!("algorithm {s:?}: expected auto or one of {}", names.join(", ")))
                })
            }
        }
    };
}

algorithm_enum!(
    /// All-gather algorithms.
    AllGatherAlgorithm {
        /// Copy-engine reads of the peers' shards, rotated order.
        CePull = "ce-pull",
        /// Copy-engine writes of the local shard into every peer.
        CePush = "ce-push",
        /// One kernel reading every peer (small messages).
        SmOneshot = "sm-oneshot",
    }
);

algorithm_enum!(
    /// Reduce-scatter algorithms.
    ReduceScatterAlgorithm {
        /// Copy-engine gather into staging, pipelined with a few-CTA reduction.
        CeReduce = "ce-reduce",
        /// One few-CTA kernel reading and reducing the peers' chunks.
        SmDirect = "sm-direct",
    }
);

/// Options of one collective call. `A` is the algorithm enum of the collective.
#[derive(Clone, Copy, Debug)]
pub struct CollOptions<A> {
    /// The algorithm, or `Auto`.
    pub algorithm: A,
    /// How the barriers run (GPU backend).
    pub sync: SyncMethod,
    /// CTAs of the SM parts (one-shot kernels, reductions); `None` for the default.
    pub ctas: Option<u32>,
    /// ce-reduce: pieces the chunk is split into, so copies of piece i+1 overlap the
    /// reduction of piece i; `None` for one per 16 MiB (2 to 16; 1 below 1 MiB).
    pub pipeline: Option<u32>,
    /// Signal-pad channel (0..16). Calls that may run at the same time (two streams,
    /// two threads) must use different channels; each channel has its own workspace.
    pub channel: u32,
    /// Allow staging ordinary buffers through the workspace where the algorithm needs
    /// symmetric memory; when `false`, such a call is refused instead.
    pub allow_staging: bool,
}

impl<A: Default> Default for CollOptions<A> {
    fn default() -> Self {
        Self {
            algorithm: A::default(),
            sync: SyncMethod::default(),
            ctas: None,
            pipeline: None,
            channel: 0,
            allow_staging: true,
        }
    }
}

/// Options of an all-gather.
pub type AllGatherOptions = CollOptions<AllGatherAlgorithm>;
/// Options of a reduce-scatter.
pub type ReduceScatterOptions = CollOptions<ReduceScatterAlgorithm>;

/// Largest CTA count accepted for the SM parts.
pub const MAX_CTAS: u32 = 1024;

impl<A> CollOptions<A> {
    pub(crate) fn check(&self, rank: usize) -> Result<()> {
        crate::sync::Epochs::check_channel(self.channel)?;
        if let Some(c) = self.ctas
            && !(1..=MAX_CTAS).contains(&c)
        {
            return Err(Error::InvalidArgument(format!("rank {rank}: ctas {c}: expected 1..={MAX_CTAS}")));
        }
        if let Some(p) = self.pipeline
            && !(1..=1024).contains(&p)
        {
            return Err(Error::InvalidArgument(format!("rank {rank}: pipeline {p}: expected 1..=1024 pieces")));
        }
        Ok(())
    }
}

// NOTE [crossovers]: where `auto` switches algorithm. Measured with `lowcon bench
// all-gather|reduce-scatter` on 4x H200 (NVSwitch, driver 580, 2026-11-21; tables in
// docs/benchmarks.md): the SM kernels win while copy-engine launch latency dominates,
// the copy engines win from about the size below on. Re-measure on other machines.

/// All-gather shard size (bytes per rank) up to which `auto` picks `sm-oneshot`: at a
/// 1 MiB shard it took 28.4 and 28.7 µs in two runs against 38.0 and 35.0 µs for
/// `ce-push`; at 4 MiB the copy engines win (194 against 164 GB/s busbw).
pub const ONESHOT_MAX_SHARD: usize = 1 << 20;

/// The algorithm `auto` runs for a shard of `shard_bytes` per rank. Above the one-shot
/// range, `ce-push` when the output is symmetric (measured 2-8% faster than `ce-pull`
/// from 1 MiB up, and no staging), else `ce-pull` (which stages only the input shard,
/// where `ce-push` would stage the whole output).
pub fn choose_all_gather(shard_bytes: usize, _world: usize, output_symmetric: bool) -> AllGatherAlgorithm {
    if shard_bytes <= ONESHOT_MAX_SHARD {
        AllGatherAlgorithm::SmOneshot
    } else if output_symmetric {
        AllGatherAlgorithm::CePush
    } else {
        AllGatherAlgorithm::CePull
    }
}

/// The algorithm `auto` runs for an output chunk of `chunk_bytes` per rank: `sm-direct`
/// at every size. Since its reduction issues every source's 16-byte loads before
/// combining them, `sm-direct` with 16 CTAs beat `ce-reduce` at every size from 64 KiB
/// to 256 MiB per rank on 4x H200 (311 against 228 GB/s busbw at 256 MiB): `ce-reduce`'s
/// copies and reductions overlap too little. Re-measure on other machines and worlds.
pub fn choose_reduce_scatter(_chunk_bytes: usize, _world: usize) -> ReduceScatterAlgorithm {
    ReduceScatterAlgorithm::SmDirect
}

/// Default CTAs of the one-shot all-gather for `total` gathered bytes: one per 16 KiB,
/// 4 to 32 (it is meant for small messages, where it runs for a few microseconds).
pub(crate) fn oneshot_ctas(total: usize) -> u32 {
    (total / (16 << 10)).clamp(4, 32) as u32
}

/// Default CTAs of the reductions (ce-reduce and sm-direct).
pub const DEFAULT_REDUCE_CTAS: u32 = 16;

/// Pieces of ce-reduce for a chunk of `bytes`: one per 16 MiB, 2 to 16 (1 below 1 MiB).
/// Every piece costs a kernel launch and two cross-stream event hops; with 4 MiB pieces
/// those hops serialised copies and reductions on 4x H200 (190 GB/s at 256 MiB).
pub(crate) fn default_pieces(bytes: usize) -> u32 {
    if bytes < (1 << 20) { 1 } else { bytes.div_ceil(16 << 20).clamp(2, 16) as u32 }
}

/// Staging slots of ce-reduce: copies may run this many pieces ahead of the reduction.
pub(crate) const STAGING_DEPTH: usize = 3;

/// Elements per ce-reduce piece: `count / pieces` rounded up to a multiple of 64
/// elements, so every piece but the last keeps 16-byte alignment.
pub(crate) fn piece_elems(count: usize, pieces: u32) -> usize {
    count.div_ceil(pieces as usize).div_ceil(64) * 64
}

/// Checks an all-gather's sizes; returns the shard bytes.
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

/// Checks a reduce-scatter's sizes and dtype; returns the output chunk bytes.
pub(crate) fn check_reduce_scatter(
    rank: usize,
    world: usize,
    input: (usize, DType),
    output: (usize, DType),
) -> Result<usize> {
    if input.1 != output.1 {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: reduce-scatter input is {} but output is {}",
            input.1, output.1
        )));
    }
    if !input.1.reducible() {
        return Err(unsupported_dtype(input.1));
    }
    let want = output.0.checked_mul(world).ok_or_else(|| Error::InvalidArgument("size overflow".into()))?;
    if input.0 != want {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: reduce-scatter input has {} elements but a world of {world} with an output of {} \
             elements needs {want} (world x output)",
            input.0, output.0
        )));
    }
    Ok(output.0 * output.1.size())
}

/// Rounds `x` up to a multiple of 256 (workspace regions start 256-byte aligned).
pub(crate) const fn align256(x: usize) -> usize {
    x.div_ceil(256) * 256
}

/// The size a workspace of `old` bytes grows to when `need` bytes are asked for: at
/// least 1.5x the old size (so it grows in few steps), rounded up to 2 MiB.
pub(crate) fn grow_to(old: usize, need: usize) -> usize {
    let want = need.max(old + old / 2);
    want.div_ceil(2 << 20) * (2 << 20)
}

/// Ranks in the order rank `rank` visits them: `rank + 1, rank + 2, ...` (itself last).
pub(crate) fn rotated(rank: usize, world: usize) -> impl Iterator<Item = usize> {
    (1..=world).map(move |k| (rank + k) % world)
}

/// Index of peer `p`'s slot in a staging area that skips `rank`.
pub(crate) const fn staged_slot(p: usize, rank: usize) -> usize {
    if p < rank { p } else { p - 1 }
}

fn load(dtype: DType, b: &[u8], i: usize) -> f32 {
    match dtype {
        DType::F32 => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("4 bytes")),
        DType::F16 => f16::from_le_bytes(b[2 * i..2 * i + 2].try_into().expect("2 bytes")).to_f32(),
        DType::Bf16 => bf16::from_le_bytes(b[2 * i..2 * i + 2].try_into().expect("2 bytes")).to_f32(),
        _ => unreachable!("checked reducible"),
    }
}

fn store(dtype: DType, b: &mut [u8], i: usize, v: f32) {
    match dtype {
        DType::F32 => b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
        DType::F16 => b[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        DType::Bf16 => b[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
        _ => unreachable!("checked reducible"),
    }
}

/// `out = op(srcs[0], srcs[1], ...)` element-wise, accumulating in f32 in source order,
/// as the GPU kernels do (`world` divides for `Avg`). Every source and `out` hold the
/// same whole number of `dtype` elements; `dtype` is reducible.
pub(crate) fn reduce_into(dtype: DType, op: ReduceOp, world: usize, srcs: &[&[u8]], out: &mut [u8]) {
    let n = out.len() / dtype.size();
    for i in 0..n {
        let mut acc = load(dtype, srcs[0], i);
        for s in &srcs[1..] {
            let x = load(dtype, s, i);
            acc = match op {
                ReduceOp::Min => acc.min(x),
                ReduceOp::Max => acc.max(x),
                ReduceOp::Sum | ReduceOp::Avg => acc + x,
            };
        }
        if op == ReduceOp::Avg {
            acc /= world as f32;
        }
        store(dtype, out, i, acc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in AllGatherAlgorithm::NAMED {
            assert_eq!(a.name().parse::<AllGatherAlgorithm>().unwrap(), *a);
        }
        for a in ReduceScatterAlgorithm::NAMED {
            assert_eq!(a.name().parse::<ReduceScatterAlgorithm>().unwrap(), *a);
        }
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        for o in ReduceOp::ALL {
            assert_eq!(o.name().parse::<ReduceOp>().unwrap(), o);
        }
        let e = "ring".parse::<AllGatherAlgorithm>().unwrap_err().to_string();
        assert!(e.contains("ce-pull, ce-push, sm-oneshot"), "{e}");
    }

    #[test]
    fn size_checks_name_rank_and_sizes() {
        assert_eq!(check_all_gather(1, 4, (10, DType::F32), (40, DType::F32)).unwrap(), 40);
        let e = check_all_gather(1, 4, (10, DType::F32), (39, DType::F32)).unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("39 elements") && e.contains("needs 40"), "{e}");
        let e = check_reduce_scatter(2, 3, (9, DType::U8), (3, DType::U8)).unwrap_err().to_string();
        assert!(e.contains("dtype u8"), "{e}");
        let e = check_reduce_scatter(2, 3, (10, DType::F32), (3, DType::F32)).unwrap_err().to_string();
        assert!(e.contains("rank 2") && e.contains("needs 9"), "{e}");
        let e = check_all_gather(0, 2, (1, DType::F32), (2, DType::Bf16)).unwrap_err().to_string();
        assert!(e.contains("input is f32 but output is bf16"), "{e}");
    }

    #[test]
    fn pieces_cover_the_chunk_and_stay_aligned() {
        for count in [1usize, 63, 64, 1000, 1 << 20, (1 << 20) + 7] {
            for pieces in [1, 2, 3, 7, 64] {
                let pe = piece_elems(count, pieces);
                assert_eq!(pe % 64, 0);
                assert!(pe * pieces as usize >= count);
            }
        }
        assert_eq!(default_pieces(1), 1);
        assert_eq!(default_pieces(4 << 20), 2);
        assert_eq!(default_pieces(256 << 20), 16);
    }

    #[test]
    fn rotation_visits_everyone_once_self_last() {
        let v: Vec<_> = rotated(2, 4).collect();
        assert_eq!(v, vec![3, 0, 1, 2]);
        assert_eq!(staged_slot(0, 2), 0);
        assert_eq!(staged_slot(3, 2), 2);
    }

    #[test]
    fn cpu_reduction_accumulates_in_f32_in_order() {
        let a: Vec<u8> = [1.0f32, 5.0, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [2.0f32, -1.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = vec![0u8; 12];
        let f = |out: &[u8]| -> Vec<f32> {
            out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
        };
        reduce_into(DType::F32, ReduceOp::Sum, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![3.0, 4.0, 2.0]);
        reduce_into(DType::F32, ReduceOp::Avg, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![1.5, 2.0, 1.0]);
        reduce_into(DType::F32, ReduceOp::Min, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![1.0, -1.0, -2.0]);
        reduce_into(DType::F32, ReduceOp::Max, 2, &[&a, &b], &mut out);
        assert_eq!(f(&out), vec![2.0, 5.0, 4.0]);
    }
}
