//! What a collective call is: element types, operators, the algorithms, how a
//! reduction is launched, the caller's options and hints. The planner (the parent
//! module) resolves these into a plan; `crate::coll` executes plans.

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
    /// 32-bit signed integer (reduce-scatter: sum, min, max).
    I32,
    /// Byte (reduce-scatter: sum, min, max; bool as min and max).
    U8,
    /// 64-bit signed integer (reduce-scatter: sum, min, max).
    I64,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 6] = [DType::F32, DType::F16, DType::Bf16, DType::I32, DType::U8, DType::I64];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::I64 => 8,
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
            DType::I64 => "i64",
        }
    }

    /// Whether it is an integer type (reductions in the type itself: sums wrap, no
    /// average) rather than a float (accumulated in f32).
    pub const fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::U8)
    }

    /// The reduction kernels' index of the type (`lowcon_abi::reduce_dtype`).
    pub(crate) fn kernel_index(self) -> Result<usize> {
        Ok(match self {
            DType::F32 => reduce_dtype::F32,
            DType::F16 => reduce_dtype::F16,
            DType::Bf16 => reduce_dtype::BF16,
            DType::I32 => reduce_dtype::I32,
            DType::I64 => reduce_dtype::I64,
            DType::U8 => reduce_dtype::U8,
        })
    }
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
            .ok_or_else(|| Error::InvalidArgument(format!("dtype {s:?}: expected one of f32, f16, bf16, i32, u8, i64")))
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
impl Element for i64 {
    const DTYPE: DType = DType::I64;
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

/// The planned twin of an option enum with an `Auto` variant: the same variants less
/// `Auto`, which is what a plan holds (the planner resolved it), with the conversions both
/// ways (`named`: `None` for `Auto`; `from_planned`) and the option's names.
macro_rules! planned_twin {
    ($name:ident / $planned:ident { $($v:ident),+ $(,)? }) => {
        #[doc = concat!("A [`", stringify!($name), "`] as a plan holds it: never `Auto` (the planner resolved it).")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $planned {
            $(#[doc = concat!("[`", stringify!($name), "::", stringify!($v), "`].")] $v),+
        }

        impl $planned {
            /// Every variant.
            pub const ALL: &[$planned] = &[$($planned::$v),+];

            /// The name used on command lines, in tables and in messages.
            pub const fn name(self) -> &'static str {
                $name::from_planned(self).name()
            }
        }

        impl $name {
            /// The variant a caller names, or `None` for `Auto` (the planner's to pick).
            pub const fn named(self) -> Option<$planned> {
                match self {
                    $name::Auto => None,
                    $($name::$v => Some($planned::$v)),+
                }
            }

            /// The option naming a planned variant.
            pub const fn from_planned(a: $planned) -> Self {
                match a {
                    $($planned::$v => $name::$v),+
                }
            }
        }

        impl From<$planned> for $name {
            fn from(a: $planned) -> Self {
                $name::from_planned(a)
            }
        }

        impl fmt::Display for $planned {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

macro_rules! algorithm_enum {
    ($(#[$m:meta])* $name:ident / $planned:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            /// Chosen by the planner ([`crate::plan`]) for the call, the machine and the world.
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

        planned_twin!($name / $planned { $($v),+ });
    };
}

algorithm_enum!(
    /// All-gather algorithms.
    AllGatherAlgorithm / AgAlgo {
        /// Copy-engine reads of the peers' shards, rotated order.
        CePull = "ce-pull",
        /// Copy-engine writes of the local shard into every peer.
        CePush = "ce-push",
        /// One kernel reading every peer (small messages).
        SmOneshot = "sm-oneshot",
        /// Small messages: one kernel per round pushes the shard into every peer's LL
        /// buffer with a flag beside every 4 bytes (NCCL's LL protocol), so the data is
        /// its own signal and no barrier runs. Half of what crosses NVLink is flags.
        /// Needs no symmetric buffer.
        Ll = "ll",
    }
);

algorithm_enum!(
    /// Reduce-scatter algorithms.
    ReduceScatterAlgorithm / RsAlgo {
        /// Copy-engine gather into staging, pipelined with a few-CTA reduction.
        CeReduce = "ce-reduce",
        /// One few-CTA kernel reading and reducing the peers' chunks.
        SmDirect = "sm-direct",
        /// Bulk copies (TMA) of every rank's tiles into a shared-memory ring, reduced by
        /// consumer warps on a few CTAs (default 8).
        TmaReduce = "tma-reduce",
        /// `tma-reduce` with an evict-first L2 hint on the streamed loads.
        TmaReduceEvict = "tma-reduce-evict",
        /// Opt-in, sum only, **not deterministic**: each rank stages tiles of its own input
        /// in shared memory (bulk loads) and adds them into the owners' accumulators over
        /// NVLink with `cp.reduce.async.bulk` (NVLink carries writes only). Additions
        /// happen in arrival order and in the element type, so per element
        /// |error| ≤ (world − 1) · u · Σ|x| (u: bf16 2⁻⁸, f16 2⁻¹¹, f32 2⁻²⁴) and repeated
        /// calls may differ in the last bits. `auto` never picks it. The host backend
        /// adds in rank order in f32 (exact, like the others).
        TmaPushReduce = "tma-push-reduce",
        /// Small messages: each rank pushes chunk `p` of its input into rank `p`'s LL
        /// buffer (data and flags in one store, no barrier); the owner reduces in rank
        /// order in f32, exact and deterministic like the others. Needs no symmetric
        /// buffer.
        Ll = "ll",
    }
);

// NOTE [algorithm capabilities]
// What each algorithm can run is declared once, here (`AgAlgo::caps`, `RsAlgo::caps`), in
// the manner of MSCCL++'s algorithm descriptors: the element types and operators, the
// wire, the launch forms, its default CTAs, whether it pipelines, and the memory it
// needs (what peers read or write: `Peers`). The planner picks among the algorithms whose
// declaration covers a call and takes their defaults from it, and its refusals of an
// algorithm a caller named (`plan::runnable`) read the same declaration and list the
// algorithms it names as the ones that can, so a new algorithm is one entry here, not an
// edit of every refusal. Sync methods are not declared per algorithm: every algorithm's
// barriers run both (kernel waits and stream memops), since they are the group's
// (`sync`), not the algorithm's. Nor is a maximum of CTAs: every kernel takes 1 to
// `MAX_CTAS`, and the one bound that exists is the machine's (NOTE [shared CTAs]: ranks
// sharing a GPU), which the planner applies to every algorithm alike.

/// The default CTAs of an algorithm where neither the caller nor a rule names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctas {
    /// None: the copy engines move the bytes (the plan's `ctas` is 0).
    Engines,
    /// A fixed count.
    Fixed(u32),
    /// One thread per line of the first LL round, up to 32 CTAs (`plan::ll_ctas`).
    LlLines,
    /// One per 16 KiB gathered, 4 to 32 (`plan::oneshot_ctas`).
    PerGathered16K,
}

/// What an algorithm's peers touch of a rank's buffers, which sets the memory a call
/// needs beyond them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peers {
    /// They read this rank's input in place: a symmetric input as it is, an ordinary one
    /// mapped (`map_ordinary`, where declared) or staged into the channel's symmetric
    /// workspace (the input's bytes; `allow_staging = false` refuses that).
    ReadInput,
    /// They write into this rank's output (`ce-push`): an ordinary output is staged in
    /// the workspace (world x shard).
    WriteOutput,
    /// They push into this rank's LL buffer (a fixed buffer per channel: two halves of
    /// `world` slots); nothing needs to be symmetric.
    LlBuffers,
    /// They add into this rank's workspace (`tma-push-reduce`: the chunk, and the input
    /// staged where it is not 16-byte aligned).
    AddIntoWorkspace,
}

/// The default CTAs of the reductions (ce-reduce, sm-direct, the wire) where no rule
/// names them: 16, measured on 4x H200 alone (2026-11-21: `sm-direct` 311 GB/s busbw at
/// 256 MiB); the tables name more where a GEMM runs beside them.
pub const DEFAULT_REDUCE_CTAS: u32 = 16;
/// The default CTAs of `tma-reduce` and `tma-push-reduce` (a few CTAs keep a ring of bulk
/// copies in flight each: docs/algorithms.md).
pub const DEFAULT_TMA_CTAS: u32 = 8;

/// What a reduce-scatter algorithm can run (NOTE [algorithm capabilities]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RsCaps {
    /// Integer element types (i32, i64, u8; sum, min and max).
    pub ints: bool,
    /// Every operator (sum, avg, min, max); else sum only.
    pub all_ops: bool,
    /// A bf16 input reduced into an f32 output (the input is the wire): ce-reduce copies
    /// it as it is; sm-direct packs it into its workspace's high plane, as the split
    /// wire's top halves (NOTE [the wire read directly]).
    pub bf16_in: bool,
    /// The split bf16 wire of an f32 call (NOTE [bf16 wire]).
    pub split_wire: bool,
    /// One reduction launch per call (`LaunchForm::Once`).
    pub launch_once: bool,
    /// Peers read an ordinary input in place (`map_ordinary`, eager calls).
    pub map_ordinary: bool,
    /// The same result, bit for bit, at every call; `auto` picks no other.
    pub deterministic: bool,
    /// Its CTAs where no one names them.
    pub ctas: Ctas,
    /// A pipeline of pieces (copies of piece `i + 1` beside the reduction of piece `i`);
    /// else one piece, but for the split wire's pieces where it carries one.
    pub pipelined: bool,
    /// What its peers touch, and so the memory it needs.
    pub peers: Peers,
}

impl RsAlgo {
    /// What it can run (NOTE [algorithm capabilities]).
    pub const fn caps(self) -> RsCaps {
        let none = RsCaps {
            ints: false,
            all_ops: true,
            bf16_in: false,
            split_wire: false,
            launch_once: false,
            map_ordinary: false,
            deterministic: true,
            ctas: Ctas::Fixed(DEFAULT_REDUCE_CTAS),
            pipelined: false,
            peers: Peers::ReadInput,
        };
        let tma = RsCaps { ctas: Ctas::Fixed(DEFAULT_TMA_CTAS), ..none };
        match self {
            RsAlgo::CeReduce => RsCaps {
                ints: true,
                bf16_in: true,
                split_wire: true,
                launch_once: true,
                map_ordinary: true,
                pipelined: true,
                ..none
            },
            // NOTE [the wire read directly]: the wire's planes read over NVLink, the split
            // wire's or a bf16 input's.
            RsAlgo::SmDirect => RsCaps { ints: true, split_wire: true, bf16_in: true, ..none },
            RsAlgo::TmaReduce | RsAlgo::TmaReduceEvict => tma,
            RsAlgo::TmaPushReduce => {
                RsCaps { all_ops: false, deterministic: false, peers: Peers::AddIntoWorkspace, ..tma }
            }
            RsAlgo::Ll => RsCaps { ctas: Ctas::LlLines, peers: Peers::LlBuffers, ..none },
        }
    }

    /// The names of the algorithms whose declaration has `f`, in declaration order, as a
    /// refusal lists them.
    pub fn names_where(f: impl Fn(RsCaps) -> bool) -> Vec<&'static str> {
        RsAlgo::ALL.iter().filter(|a| f(a.caps())).map(|a| a.name()).collect()
    }
}

/// What an all-gather algorithm can run (NOTE [algorithm capabilities]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgCaps {
    /// Peers read an ordinary input in place (`map_ordinary`, eager calls).
    pub map_ordinary: bool,
    /// Each peer's copy may wait for that peer alone (`ArrivalForm::InOrder`, `AnyOrder`).
    pub per_peer_arrival: bool,
    /// Its CTAs where no one names them.
    pub ctas: Ctas,
    /// What its peers touch, and so the memory it needs.
    pub peers: Peers,
}

impl AgAlgo {
    /// What it can run (NOTE [algorithm capabilities]).
    pub const fn caps(self) -> AgCaps {
        let none =
            AgCaps { map_ordinary: false, per_peer_arrival: false, ctas: Ctas::Engines, peers: Peers::ReadInput };
        match self {
            AgAlgo::CePull => AgCaps { map_ordinary: true, per_peer_arrival: true, ..none },
            AgAlgo::CePush => AgCaps { peers: Peers::WriteOutput, ..none },
            AgAlgo::SmOneshot => AgCaps { ctas: Ctas::PerGathered16K, ..none },
            AgAlgo::Ll => AgCaps { ctas: Ctas::LlLines, peers: Peers::LlBuffers, ..none },
        }
    }
}

/// How `ce-reduce` launches its reduction on the GPU backend. The host backend has no
/// launches: it accepts (and checks) the option and computes the same result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReduceLaunch {
    /// The planner's choice ([`crate::plan`]).
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

planned_twin!(ReduceLaunch / LaunchForm { Pieces, Once });

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

/// How a `ce-pull` all-gather's copies wait for the peers (GPU backend, eager calls with
/// stream-memop sync; NOTE [arrival-driven all-gather] in `coll::gpu`). Each peer's
/// signal says that its shard is ready; what differs is what a copy waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Arrival {
    /// The planner's choice ([`crate::plan`]).
    #[default]
    Auto,
    /// One barrier on every peer, then every copy: nothing moves before the last peer
    /// arrived (every plan but eager memop `ce-pull`).
    Barrier,
    /// Each peer's copy waits for that peer alone, in the rotated order on the caller's
    /// stream: a copy from an early peer runs while a later one is still coming.
    InOrder,
    /// Each peer's wait and copy on a stream of its own, joined back: copies start in
    /// the order the peers arrive.
    AnyOrder,
}

impl Arrival {
    /// Every variant.
    pub const ALL: [Arrival; 4] = [Arrival::Auto, Arrival::Barrier, Arrival::InOrder, Arrival::AnyOrder];

    /// The name used in options, tables and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Arrival::Auto => "auto",
            Arrival::Barrier => "barrier",
            Arrival::InOrder => "in-order",
            Arrival::AnyOrder => "any-order",
        }
    }
}

planned_twin!(Arrival / ArrivalForm { Barrier, InOrder, AnyOrder });

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arrival {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
            Error::InvalidArgument(format!("arrival {s:?}: expected auto, barrier, in-order or any-order"))
        })
    }
}

/// What runs beside a collective: a hint the caller passes, which the planner reads to
/// pick among choices measured in that setting (a choice that wins alone can lose beside
/// a GEMM: NOTE [auto inside FSDP2] in `docs/algorithms.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Context {
    /// Nothing in particular (benchmarks, plain use).
    #[default]
    Alone,
    /// FSDP2's parameter all-gathers and gradient reduce-scatters, beside its GEMMs
    /// (`lowcon.fsdp`, the `torch.distributed` backend).
    Fsdp,
    /// Tensor parallelism's collectives, fused with or beside their matmuls (`lowcon.tp`).
    Tp,
}

impl Context {
    /// Every context.
    pub const ALL: [Context; 3] = [Context::Alone, Context::Fsdp, Context::Tp];

    /// The name used in options, tables and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Context::Alone => "alone",
            Context::Fsdp => "fsdp",
            Context::Tp => "tp",
        }
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Context {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Context::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| Error::InvalidArgument(format!("context {s:?}: expected alone, fsdp or tp")))
    }
}

/// Options of one collective call. `A` is the algorithm enum of the collective.
#[derive(Clone, Copy, Debug)]
pub struct CollOptions<A> {
    /// The algorithm, or `Auto`.
    pub algorithm: A,
    /// How the barriers run (GPU backend), in calls enqueued now; `None`: the planner's
    /// choice for this call ([`crate::plan`]).
    pub sync: Option<SyncMethod>,
    /// How the barriers run in calls captured into a CUDA graph (GPU backend; NOTE
    /// [captured sync] in `sync::gpu::graph`). Kernel waits by default, whatever `sync`
    /// says: a stream-memop barrier is a graph node that costs the driver 1.3-4.5 µs of
    /// host time at every replay, a kernel node almost none. Set it to
    /// [`SyncMethod::StreamMemop`] for graphs whose waits must hold no SM (beside
    /// GEMMs that fill every SM), and pay that host time.
    pub graph_sync: Option<SyncMethod>,
    /// CTAs of the SM parts (one-shot kernels, reductions); `None` for the default.
    pub ctas: Option<u32>,
    /// ce-reduce: pieces the chunk is split into, so copies of piece i+1 overlap the
    /// reduction of piece i; `None` for one per 16 MiB (2 to 16; 1 below 1 MiB).
    pub pipeline: Option<u32>,
    /// Signal-pad channel, 0 to 15. Calls that may run at the same time (two streams,
    /// two threads) must use different channels; each channel has its own workspace.
    pub channel: u32,
    /// Allow staging ordinary buffers through the workspace where the algorithm needs
    /// symmetric memory; when `false`, such a call is refused instead.
    pub allow_staging: bool,
    /// GPU backend, `ce-pull` and `ce-reduce`: peers read an ordinary input where it is
    /// (NOTE [mapped ordinary memory] in `memory::mapped`): the ranks exchange its IPC
    /// handle through shared host memory in the call, which then waits for every peer's
    /// host to make the same call, and open each peer allocation once. The input must
    /// come from `cudaMalloc`/`cuMemAlloc` (torch's default caching allocator does): if a
    /// rank's cannot be shared, every rank stages the call (that rank warns once), or
    /// refuses it without `allow_staging`. Saves the staging copy and the workspace it
    /// needs; other algorithms (and the host backend) stage as before.
    pub map_ordinary: Option<bool>,
    /// Reduce-scatter: the element type that crosses the peer links, when it differs
    /// from the input's (NOTE [bf16 wire] in `coll::wire`). `Some(DType::Bf16)` with an
    /// f32 input and output sends the top half of each f32 through the copy engines and
    /// reads the bottom half only for pieces where it is nonzero: the result is the f32
    /// reduce-scatter's, bit for bit, for every input (ce-reduce, sm-direct or auto only).
    /// A bf16 input with an f32 output needs no wire (its input is bf16). `None`: the input's
    /// type, unless the planner picks the bf16 wire for a call hinted `bf16_exact`. All-gathers
    /// refuse a wire.
    pub wire: Option<DType>,
    /// Reduce-scatter, `ce-reduce`: one reduction launch per piece or one per call
    /// ([`ReduceLaunch`]; NOTE [one launch per call] in `coll::gpu::ce_reduce`).
    pub reduce_launch: ReduceLaunch,
    /// All-gather, `ce-pull`: what each peer's copy waits for ([`Arrival`]); `Auto`: the
    /// planner's choice. Reduce-scatters ignore it.
    pub arrival: Arrival,
    /// A hint: what runs beside the call ([`Context`]). The planner reads it; nothing
    /// else does.
    pub context: Context,
    /// A hint for an f32 reduce-scatter: its input holds bf16 values upcast (FSDP2's
    /// `param_dtype=bf16, reduce_dtype=fp32` gradients), so the bf16 wire sends half the
    /// bytes and stays exact (NOTE [bf16 wire]). The planner may then pick the wire; the
    /// result is the f32 one bit for bit whatever the data holds.
    pub bf16_exact: bool,
    /// A benchmark instrument, not a collective (GPU backend, eager calls, the
    /// copy-engine algorithms that pull: ce-pull, ce-reduce and the bf16 wire on it): the call
    /// runs its plan's copies exactly as the collective would (the same pieces, streams,
    /// wire bytes and mapped inputs) and leaves out every barrier, signal and SM kernel
    /// (the reduction, the wire's pack), so its output is garbage (NOTE [honest floor]
    /// in `coll::gpu::floor`). Every rank must pass the same value.
    pub traffic: bool,
}

impl<A: Default> Default for CollOptions<A> {
    fn default() -> Self {
        Self {
            algorithm: A::default(),
            sync: None,
            graph_sync: None,
            ctas: None,
            pipeline: None,
            channel: 0,
            allow_staging: true,
            map_ordinary: None,
            wire: None,
            reduce_launch: ReduceLaunch::Auto,
            arrival: Arrival::Auto,
            context: Context::Alone,
            bf16_exact: false,
            traffic: false,
        }
    }
}

/// Options of an all-gather.
pub type AllGatherOptions = CollOptions<AllGatherAlgorithm>;
/// Options of a reduce-scatter.
pub type ReduceScatterOptions = CollOptions<ReduceScatterAlgorithm>;

/// Largest CTA count accepted for the SM parts.
pub const MAX_CTAS: u32 = 1024;

impl<A: Copy> CollOptions<A> {
    /// These options with `sync` for eager and captured calls alike.
    pub fn with_sync(self, sync: SyncMethod) -> Self {
        Self { sync: Some(sync), graph_sync: Some(sync), ..self }
    }
}

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

#[cfg(test)]
mod tests {
    #[test]
    fn each_algorithm_declares_what_it_runs_once() {
        // NOTE [algorithm capabilities]: the facts the planner and the refusals read.
        assert_eq!(RsAlgo::names_where(|c| c.ints), ["ce-reduce", "sm-direct"]);
        assert_eq!(RsAlgo::names_where(|c| c.split_wire), ["ce-reduce", "sm-direct"]);
        assert_eq!(RsAlgo::names_where(|c| c.bf16_in), ["ce-reduce", "sm-direct"]);
        assert_eq!(RsAlgo::names_where(|c| c.launch_once), ["ce-reduce"]);
        assert_eq!(RsAlgo::names_where(|c| c.map_ordinary), ["ce-reduce"]);
        assert_eq!(RsAlgo::names_where(|c| !c.all_ops), ["tma-push-reduce"]);
        assert_eq!(RsAlgo::names_where(|c| !c.deterministic), ["tma-push-reduce"]);
        let pull: Vec<_> = AgAlgo::ALL.iter().filter(|a| a.caps().per_peer_arrival).map(|a| a.name()).collect();
        assert_eq!(pull, ["ce-pull"]);
        assert!(AgAlgo::ALL.iter().all(|a| a.caps().map_ordinary == a.caps().per_peer_arrival));
        assert_eq!(RsAlgo::names_where(|c| c.pipelined), ["ce-reduce"]);
        assert_eq!(RsAlgo::names_where(|c| c.ctas == Ctas::Fixed(DEFAULT_TMA_CTAS)).len(), 3);
        assert_eq!(RsAlgo::names_where(|c| c.peers == Peers::LlBuffers), ["ll"]);
        assert_eq!(RsAlgo::names_where(|c| c.peers == Peers::AddIntoWorkspace), ["tma-push-reduce"]);
        assert_eq!(AgAlgo::CePush.caps().peers, Peers::WriteOutput);
        let engines: Vec<_> = AgAlgo::ALL.iter().filter(|a| a.caps().ctas == Ctas::Engines).map(|a| a.name()).collect();
        assert_eq!(engines, ["ce-pull", "ce-push"]);
        // Every named algorithm has its planned twin, and back.
        for a in ReduceScatterAlgorithm::NAMED {
            assert_eq!(ReduceScatterAlgorithm::from_planned(a.named().unwrap()), *a);
        }
        assert_eq!(RsAlgo::ALL.len(), ReduceScatterAlgorithm::NAMED.len());
        assert_eq!(AllGatherAlgorithm::Auto.named(), None);
        assert_eq!(ReduceLaunch::Auto.named(), None);
        assert_eq!(Arrival::Auto.named(), None);
        for a in Arrival::ALL.into_iter().filter_map(Arrival::named) {
            assert_eq!(Arrival::from_planned(a).named(), Some(a));
        }
    }

    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for a in Arrival::ALL {
            assert_eq!(a.name().parse::<Arrival>().unwrap(), a);
        }
        assert!("eager".parse::<Arrival>().unwrap_err().to_string().contains("barrier, in-order or any-order"));
        for l in ReduceLaunch::ALL {
            assert_eq!(l.name().parse::<ReduceLaunch>().unwrap(), l);
            assert_eq!(ReduceLaunch::from_code(l.code()).unwrap(), l);
        }
        assert!(ReduceLaunch::from_code(3).unwrap_err().to_string().contains("expected 0 (auto)"));
        assert!("persistent".parse::<ReduceLaunch>().unwrap_err().to_string().contains("auto, pieces or once"));
    }

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
}
