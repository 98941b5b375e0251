//! The planner: the one place that decides how a collective call runs.
//!
//! NOTE [one planner]: for every call, [`Planner::all_gather`] and
//! [`Planner::reduce_scatter`] turn the call (collective, dtypes, bytes per rank, the
//! kinds of memory, eager or captured) and the caller's options and hints
//! ([`vocab::Context`], `bf16_exact`) into a plan: a plain value with every choice
//! resolved (the algorithm, CTAs, sync, pipeline pieces, the wire, the reduction's
//! launch, whether peers read an ordinary input in place), and the rule it came from.
//! Both backends execute plans and choose nothing; `auto` in Rust, C and Python, the
//! FSDP2 hooks, the fused TP ops and the `torch.distributed` backend all reach the same
//! planner, so the same call gets the same plan whatever its entry point. A caller's
//! explicit option still wins over the planner's choice (NCCL's `enqueue.cc`: a call's
//! algorithm and channels are computed once, from the tuning model, before anything
//! is enqueued).
//!
//! NOTE [tuning tables]: the choices come from a table measured on a box
//! ([`table`]; `lowcon bench tune` writes one). Tables ship for the boxes measured
//! (`plan/tables/`), and the planner loads the one whose machine line matches the GPU's
//! name and the world; `LOWCON_TUNING=path` loads another. Where none matches (8 GPUs,
//! a GPU not measured), the model is the table of the nearest measured world (the same
//! GPU's where two are as near), its byte bounds multiplied by `(w_t - 1) / (w - 1)`: a
//! rank of a world `w` sends `(w - 1)` shards, so a crossover measured at `w_t` ranks is
//! assumed to sit at the same bytes sent per rank. One log line per job says so (rank
//! 0's). Every rank of a group must plan alike, so group creation compares the tables'
//! CRCs and names a rank that differs.

pub mod runnable;
pub mod settings;
pub mod table;
pub mod tma;
pub mod vocab;

use std::sync::Arc;

use table::{Coll, Mem, Probe, Rule, Table};
use vocab::{
    AgAlgo, AllGatherOptions, Arrival, ArrivalForm, DType, LaunchForm, ReduceLaunch, ReduceOp, ReduceScatterAlgorithm,
    RsAlgo,
};
use vocab::{MAX_CTAS, ReduceScatterOptions};

use crate::error::{Error, Result};
use crate::sync::SyncMethod;

pub use runnable::Carry;
pub use settings::Settings;
pub use table::{TableWriter, format_bytes, parse_bytes};

/// The variable naming a tuning table to load instead of the shipped ones.
pub use crate::config::TUNING_ENV;

/// The tables that ship with lowcon, each measured on the box its machine line names
/// (its `source` line says when and how).
pub const SHIPPED: &[(&str, &str)] = &[
    ("h100-w2.txt", include_str!("tables/h100-w2.txt")),
    ("h100-w4.txt", include_str!("tables/h100-w4.txt")),
    ("h200-w2.txt", include_str!("tables/h200-w2.txt")),
    ("h200-w4.txt", include_str!("tables/h200-w4.txt")),
    ("host.txt", include_str!("tables/host.txt")),
];

/// The machine a group plans for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// The device's name (`NVIDIA H200`), or `host` for the host backend.
    pub device: String,
    /// SMs per GPU (0 on the host backend).
    pub sms: u32,
    /// Ranks in the group.
    pub world: usize,
    /// Ranks sharing this rank's GPU (1 unless shared: NOTE [shared CTAs]).
    pub ranks_on_gpu: usize,
}

impl Machine {
    /// The host backend's machine.
    pub fn host(world: usize) -> Self {
        Machine { device: "host".into(), sms: 0, world, ranks_on_gpu: 1 }
    }

    /// Whether it is the host backend's (no SMs).
    pub fn is_host(&self) -> bool {
        self.sms == 0
    }
}

/// An all-gather as the planner sees it.
#[derive(Clone, Copy, Debug)]
pub struct AgCall {
    /// Bytes per rank (the shard).
    pub shard: usize,
    /// Element type.
    pub dtype: DType,
    /// Whether the output is symmetric memory.
    pub output_symmetric: bool,
    /// Whether the call is being captured into a CUDA graph.
    pub captured: bool,
}

/// A reduce-scatter as the planner sees it.
#[derive(Clone, Copy, Debug)]
pub struct RsCall {
    /// Bytes per rank of the input (one chunk, in the input's type).
    pub chunk: usize,
    /// The input's and the output's element types.
    pub input: DType,
    /// See [`RsCall::input`].
    pub output: DType,
    /// The operator.
    pub op: ReduceOp,
    /// Whether the input is symmetric memory.
    pub input_symmetric: bool,
    /// Whether the call is being captured into a CUDA graph.
    pub captured: bool,
}

/// How an all-gather runs: every choice resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgPlan {
    /// The algorithm.
    pub algorithm: AgAlgo,
    /// CTAs of its kernel (`sm-oneshot`, `ll`; 0 where the copy engines move the bytes).
    pub ctas: u32,
    /// How its barriers run.
    pub sync: SyncMethod,
    /// Whether peers read an ordinary input in place (eager `ce-pull` only).
    pub map_ordinary: bool,
    /// What each peer's copy waits for (`Barrier` but for eager `ce-pull` with
    /// stream-memop sync, or on the host backend: NOTE [arrival-driven all-gather]).
    pub arrival: ArrivalForm,
    /// Whether an eager call's copies go to the driver as one batch (NOTE [batched
    /// copies] in `coll::gpu`; the copy-engine algorithms, eager, `set_copy_batching`).
    pub copy_batch: bool,
    /// Whether its copies carry the copy-engine hint (`LOWCON_COPY_ENGINE_HINT`).
    pub copy_hint: bool,
    /// Whether its LL rounds launch with programmatic stream serialization (NOTE [LL
    /// launch overlap]; `ll` on a GPU of its own, unless `LOWCON_LL_OVERLAP=0`).
    pub ll_overlap: bool,
    /// Whether its stream-memop barriers go as one batch each (`LOWCON_MEMOP_BATCH`).
    pub memop_batch: bool,
    /// The rule it came from (`table:line`, `default`, or `explicit`).
    pub origin: Arc<str>,
}

/// How a reduce-scatter runs: every choice resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RsPlan {
    /// The algorithm.
    pub algorithm: RsAlgo,
    /// CTAs of its reductions.
    pub ctas: u32,
    /// How its barriers and signals run.
    pub sync: SyncMethod,
    /// How they run where lowcon launches an eager call as a graph of its own (NOTE
    /// [wire replays] in `coll::gpu::replays`): as in a captured call, the caller's
    /// `graph_sync`, else the rule's, else kernel waits (NOTE [replay sync]).
    pub replay_sync: SyncMethod,
    /// Pipeline pieces (`ce-reduce` and calls that pack; 1 otherwise).
    pub pieces: u32,
    /// The type crossing the links when it differs from the input's (`Some(Bf16)`: the
    /// bf16 wire); `None`: the input's own.
    pub wire: Option<DType>,
    /// What crosses the links (NOTE [bf16 wire]): the input's type, a bf16 input into
    /// f32, or the split wire (never at one rank, where nothing crosses: `Same`).
    pub carry: Carry,
    /// One reduction launch per piece or per call (`Once` only where it can run: a
    /// caller's `once` that cannot is refused, a rule's falls back to `Pieces`).
    pub reduce_launch: LaunchForm,
    /// Whether peers read an ordinary input in place (eager `ce-reduce` only).
    pub map_ordinary: bool,
    /// `tma-reduce`'s ring: tile bytes per rank and stages; `tma-push-reduce`'s tile
    /// bytes and its fixed stages (`coll::geometry`; `LOWCON_TMA_TILE_BYTES`,
    /// `LOWCON_TMA_STAGES`). `(0, 0)` for the other algorithms.
    pub tma: (u32, u32),
    /// Whether an eager call that packs ([`RsPlan::packs`]) is launched as a graph from
    /// its shape's second call on (NOTE [wire replays]; `LOWCON_WIRE_REPLAYS`,
    /// `set_wire_replays`).
    pub replays: bool,
    /// Whether its copies carry the copy-engine hint (`LOWCON_COPY_ENGINE_HINT`).
    pub copy_hint: bool,
    /// Whether its LL rounds launch with programmatic stream serialization (as for
    /// [`AgPlan::ll_overlap`]).
    pub ll_overlap: bool,
    /// Whether its stream-memop barriers go as one batch each (`LOWCON_MEMOP_BATCH`).
    pub memop_batch: bool,
    /// The rule it came from (`table:line`, `default`, or `explicit`).
    pub origin: Arc<str>,
}

impl AgPlan {
    /// The plan as `key=value` pairs (what the bindings and `lowcon info` show).
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("algorithm", self.algorithm.name().into()),
            ("ctas", self.ctas.to_string()),
            ("sync", self.sync.name().into()),
            ("map_ordinary", self.map_ordinary.to_string()),
            ("arrival", self.arrival.name().into()),
            ("copy_batch", self.copy_batch.to_string()),
            ("copy_hint", self.copy_hint.to_string()),
            ("ll_overlap", self.ll_overlap.to_string()),
            ("memop_batch", self.memop_batch.to_string()),
            ("origin", self.origin.to_string()),
        ]
    }
}

impl RsPlan {
    /// Whether the call packs what it sends into its workspace's planes, signalled piece
    /// by piece (`coll::gpu::wire_steps`): the split wire on every algorithm that carries
    /// it, and a bf16 input on sm-direct, whose reductions read the packed bf16 over
    /// NVLink (NOTE [the wire read directly]), unless `map_ordinary` says its peers read
    /// it where it is (NOTE [bf16 input read in place]). ce-reduce copies a bf16 input
    /// as it is.
    pub fn packs(&self) -> bool {
        runnable::packs(self.carry, self.algorithm, self.map_ordinary)
    }

    /// The plan as `key=value` pairs (what the bindings and `lowcon info` show).
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("algorithm", self.algorithm.name().into()),
            ("ctas", self.ctas.to_string()),
            ("sync", self.sync.name().into()),
            ("replay_sync", self.replay_sync.name().into()),
            ("pieces", self.pieces.to_string()),
            ("wire", self.wire.map_or("none".into(), |w| w.name().into())),
            ("carry", self.carry.name().into()),
            ("reduce_launch", self.reduce_launch.name().into()),
            ("map_ordinary", self.map_ordinary.to_string()),
            ("tma_tile", self.tma.0.to_string()),
            ("tma_stages", self.tma.1.to_string()),
            ("replays", self.replays.to_string()),
            ("copy_hint", self.copy_hint.to_string()),
            ("ll_overlap", self.ll_overlap.to_string()),
            ("memop_batch", self.memop_batch.to_string()),
            ("origin", self.origin.to_string()),
        ]
    }
}

fn show(fields: Vec<(&'static str, String)>) -> String {
    fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

impl std::fmt::Display for AgPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&show(self.fields()))
    }
}

impl std::fmt::Display for RsPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&show(self.fields()))
    }
}

pub use vocab::{DEFAULT_REDUCE_CTAS, DEFAULT_TMA_CTAS};
/// The default CTAs of the released reduce-scatter's final reduction (lowcon.tp), where
/// nothing of the call is left to overlap it (2x H200, 2026-11-26).
pub const RELEASED_REDUCE_CTAS: u32 = 64;
/// The default bytes of a pipeline piece: 16 MiB (4 MiB pieces' event hops serialised
/// copies and reductions on 4x H200, 190 GB/s at 256 MiB).
pub const DEFAULT_PIECE: usize = 16 << 20;
/// The default most pieces of a call.
pub const DEFAULT_MAX_PIECES: u32 = 16;

/// Pieces of a chunk of `bytes` in pieces of about `piece` bytes: 1 below 1 MiB, else
/// 2 (or `max`, if 1) to `max`.
pub fn pieces_for(bytes: usize, piece: usize, max: u32) -> u32 {
    let max = max.max(1) as usize;
    if bytes < (1 << 20) { 1 } else { bytes.div_ceil(piece.max(1)).clamp(2.min(max), max) as u32 }
}

/// Default CTAs of an LL round of `lines` lines: one line per thread up to 32 CTAs (a
/// 64 KiB shard takes 16), so that every line is in flight at once.
pub fn ll_ctas(lines: u64) -> u32 {
    lines.div_ceil(crate::cuda::kernels::COLL_THREADS as u64).clamp(1, 32) as u32
}

/// Default CTAs of the one-shot all-gather for `total` gathered bytes: one per 16 KiB,
/// 4 to 32 (it is meant for small messages, where it runs for a few microseconds).
pub fn oneshot_ctas(total: usize) -> u32 {
    (total / (16 << 10)).clamp(4, 32) as u32
}

/// An algorithm's declared default CTAs (NOTE [algorithm capabilities]) for a call
/// whose first LL round has `lines` lines and which gathers `total` bytes.
fn declared_ctas(ctas: vocab::Ctas, lines: u64, total: usize) -> u32 {
    match ctas {
        vocab::Ctas::Engines => 0,
        vocab::Ctas::Fixed(n) => n,
        vocab::Ctas::LlLines => ll_ctas(lines),
        vocab::Ctas::PerGathered16K => oneshot_ctas(total),
    }
}

/// The lines of an LL collective's first round for `bytes` per rank at `world` ranks.
fn ll_first_round_lines(bytes: usize, world: usize) -> u64 {
    let lines = (bytes as u64).div_ceil(lowcon_abi::ll::PAYLOAD_PER_LINE);
    lines.min(lowcon_abi::ll::slot_lines(world as u32))
}

// NOTE [shared CTAs]: a collective's kernels spin until their peers' kernels arrive, so
// every rank's kernels in flight at once must be resident at once. One GPU per rank holds
// them easily; ranks sharing a GPU (`LOWCON_SHARE_GPU`) may not: seen on one H100 under
// MPS, kernel-sync `coll-stress` (two streams per rank) stopped at 6 and 8 ranks, and
// FSDP2 (all-gather and reduce-scatter streams) at 4, with one rank's reduce-scatter
// kernel holding its SMs while the all-gather kernel its peer waited for could not start.
// So with k ranks on a GPU of S SMs, every kernel gets at most max(2, S / (4k)) CTAs:
// four kernels per rank in flight fit even at one CTA per SM, and SMs stay free for the
// application's own kernels (capping each MPS client's share of the SMs instead starved
// those: FSDP2 at 8 ranks stopped with 12% per client). Results do not depend on the CTA
// count (the benchmarks sweep it); shared mode never measures speed.

/// NOTE [shared CTAs]: the CTA cap for `ranks_on_gpu` ranks sharing a GPU of `sm_count`
/// SMs; `None` for a GPU of its own.
pub fn shared_cta_cap(ranks_on_gpu: usize, sm_count: u32) -> Option<u32> {
    (ranks_on_gpu > 1).then(|| (sm_count / (4 * ranks_on_gpu as u32)).max(2))
}

/// How a group's calls are planned: the machine and the table (or model) in use.
#[derive(Debug)]
pub struct Planner {
    machine: Machine,
    table: Table,
    /// How the table was found, in words (for `lowcon info` and messages).
    how: String,
    /// Planning with the model: no table was measured for the machine.
    modelled: bool,
    cta_cap: Option<u32>,
    /// The rank whose calls it plans (its refusals name it).
    rank: usize,
    /// NOTE [plan settings]: read once, changed only by the group's switches.
    settings: std::sync::Mutex<Settings>,
    default_origin: Arc<str>,
    explicit_origin: Arc<str>,
}

impl Planner {
    /// The planner for `machine`: the table `LOWCON_TUNING` names, else the shipped one
    /// for the machine, else the model (NOTE [tuning tables]; a group's rank 0 says so
    /// once: `notice`), with the settings the environment names (NOTE [plan settings]).
    pub fn for_machine(machine: Machine) -> Result<Self> {
        let settings = Settings::from_env()?;
        Ok(Self::tabled(machine)?.with_settings(settings))
    }

    /// The planner for `machine` with the table `LOWCON_TUNING` names, else the shipped one.
    fn tabled(machine: Machine) -> Result<Self> {
        match crate::config::tuning() {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    Error::InvalidArgument(format!("{TUNING_ENV}={path:?}: cannot read the tuning table: {e}"))
                })?;
                let table = Table::parse(&path, &text)?;
                let how = if table.matches(&machine.device, machine.world) {
                    format!("{TUNING_ENV}={path}")
                } else {
                    format!(
                        "{TUNING_ENV}={path} (measured on {}, used as it is on {} ranks of {})",
                        table.machine(),
                        machine.world,
                        machine.device
                    )
                };
                Ok(Self::with_table(machine, table, how))
            }
            None => Self::shipped(machine),
        }
    }

    /// The planner from the shipped tables alone (no environment).
    pub fn shipped(machine: Machine) -> Result<Self> {
        let tables: Vec<Table> =
            SHIPPED.iter().map(|(name, text)| Table::parse(&format!("shipped:{name}"), text)).collect::<Result<_>>()?;
        if let Some(t) = tables.iter().find(|t| t.matches(&machine.device, machine.world)) {
            let how = format!("{} ({})", t.name, t.source);
            return Ok(Self::with_table(machine, t.clone(), how));
        }
        // The model: the nearest measured world (its pieces and byte bounds matter more
        // than the GPU's model between H100 and H200), of the same GPU where two are as
        // near, the larger where two worlds are; never the host's.
        let same_gpu = |t: &Table| machine.device.to_ascii_lowercase().contains(&t.gpu.to_ascii_lowercase());
        let w = machine.world;
        let base = tables
            .iter()
            .filter(|t| t.world.is_some() && t.gpu != "host")
            .min_by_key(|t| {
                let tw = t.world.expect("filtered");
                (tw.abs_diff(w), !same_gpu(t), std::cmp::Reverse(tw))
            })
            .ok_or_else(|| Error::InvalidArgument("no shipped tuning table has a world".into()))?;
        let tw = base.world.expect("filtered");
        let (num, den) = if w > 1 && tw > 1 { (tw - 1, w - 1) } else { (1, 1) };
        let mut model = base.clone();
        model.rules = base.rules.iter().map(|r| r.scaled(num, den)).collect();
        let how = format!(
            "model: {}'s rules ({}), byte bounds x {num}/{den} for {w} ranks of {}",
            base.name,
            base.machine(),
            machine.device
        );
        Ok(Self { modelled: true, ..Self::with_table(machine, model, how) })
    }

    /// The line a group prints once, from its rank 0, where no table was measured for
    /// its machine and the planner plans with the model (NOTE [tuning tables]); `None`
    /// where a table matched, one was named (`LOWCON_TUNING`), or one rank moves nothing.
    pub fn notice(&self) -> Option<String> {
        let m = &self.machine;
        (self.modelled && m.world > 1)
            .then(|| format!("no tuning table for {} ranks of {}; planning with the {}", m.world, m.device, self.how))
    }

    /// The planner for `machine` with `table`, described as `how` (rank 0, the default
    /// settings).
    pub fn with_table(machine: Machine, table: Table, how: String) -> Self {
        let cta_cap = shared_cta_cap(machine.ranks_on_gpu, machine.sms);
        Self {
            machine,
            table,
            how,
            modelled: false,
            cta_cap,
            rank: 0,
            settings: std::sync::Mutex::new(Settings::default()),
            default_origin: "default".into(),
            explicit_origin: "explicit".into(),
        }
    }

    /// This planner with `settings` (NOTE [plan settings]).
    pub fn with_settings(self, settings: Settings) -> Self {
        *self.settings.lock().unwrap_or_else(|p| p.into_inner()) = settings;
        self
    }

    /// This planner for rank `rank` (whose refusals name it).
    pub fn at_rank(self, rank: usize) -> Self {
        Self { rank, ..self }
    }

    /// The settings its plans carry (NOTE [plan settings]).
    pub fn settings(&self) -> Settings {
        *self.settings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the settings its next plans carry (the group's switches: every rank alike).
    pub fn change_settings(&self, f: impl FnOnce(&mut Settings)) {
        f(&mut self.settings.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The table in use, and how it was found.
    pub fn table(&self) -> (&Table, &str) {
        (&self.table, &self.how)
    }

    /// What every rank of a group must share: the CRC of the rules it plans with (the
    /// model's scaled ones included; the same table loaded from two paths agrees), and
    /// the table's name for the message.
    pub fn fingerprint(&self) -> String {
        format!("{:08x} {}", crc32fast::hash(self.table.rule_lines().join("\n").as_bytes()), self.table.name)
    }

    /// This planner for a rank whose GPU `ranks_on_gpu` ranks share (NOTE [shared CTAs]).
    pub fn sharing(self, ranks_on_gpu: usize) -> Self {
        let machine = Machine { ranks_on_gpu, ..self.machine.clone() };
        Self { cta_cap: shared_cta_cap(ranks_on_gpu, machine.sms), machine, ..self }
    }

    fn cap(&self, ctas: u32) -> u32 {
        let c = ctas.clamp(1, MAX_CTAS);
        self.cta_cap.map_or(c, |cap| c.min(cap))
    }

    /// The first rule covering `probe` that `pick` accepts.
    fn rule<'a>(&'a self, probe: &Probe, pick: impl Fn(&Rule) -> bool) -> Option<&'a Rule> {
        self.table.rules.iter().find(|r| r.covers(probe) && pick(r))
    }

    /// The plan of an all-gather.
    pub fn all_gather(&self, call: &AgCall, opts: &AllGatherOptions) -> AgPlan {
        let probe = Probe {
            coll: Coll::AllGather,
            context: opts.context,
            dtype: call.dtype,
            out: call.dtype,
            mem: if call.output_symmetric { Mem::Symmetric } else { Mem::Ordinary },
            bytes: call.shard,
            exact: opts.bf16_exact,
            captured: call.captured,
        };
        let named = opts.algorithm.named();
        let rule = match named {
            None => self.rule(&probe, |r| r.choose.all_gather.is_some()),
            Some(a) => self.rule(&probe, |r| r.choose.all_gather == Some(a)),
        };
        let algorithm = match (named, rule) {
            (Some(a), _) => a,
            (None, Some(r)) => r.choose.all_gather.expect("picked"),
            (None, None) if call.output_symmetric => AgAlgo::CePush,
            (None, None) => AgAlgo::CePull,
        };
        let world = self.machine.world;
        let ctas = opts.ctas.or(rule.and_then(|r| r.choose.ctas)).unwrap_or_else(|| {
            declared_ctas(algorithm.caps().ctas, ll_first_round_lines(call.shard, world), world * call.shard)
        });
        let sync = self.sync(call.captured, (opts.sync, opts.graph_sync), rule);
        // What the backend does: peers read an ordinary input in place in eager ce-pull
        // calls only (NOTE [mapped ordinary memory]).
        let map_ordinary = opts.map_ordinary.or(rule.and_then(|r| r.choose.map)).unwrap_or(false)
            && !call.captured
            && algorithm.caps().map_ordinary;
        // NOTE [arrival-driven all-gather]: a copy waits for its peer alone where one
        // peer's signal can be waited for on a stream without an SM (a memop wait) and
        // the copies pull: eager ce-pull with memop sync, or any ce-pull on the host
        // backend (its waits are the host's). Elsewhere one barrier, as before. The
        // honest floor has no waits at all (NOTE [honest floor]).
        let arrival = match opts.arrival.named() {
            None => rule.and_then(|r| r.choose.arrival).and_then(Arrival::named).unwrap_or(ArrivalForm::Barrier),
            Some(a) => a,
        };
        let per_peer = algorithm.caps().per_peer_arrival
            && !call.captured
            && !opts.traffic
            && (sync == SyncMethod::StreamMemop || self.machine.is_host());
        let arrival = if per_peer { arrival } else { ArrivalForm::Barrier };
        let origin = self.origin(named.is_none(), rule);
        // NOTE [plan settings].
        let set = self.settings();
        let copies = matches!(algorithm, AgAlgo::CePull | AgAlgo::CePush);
        AgPlan {
            algorithm,
            ctas: if ctas == 0 { 0 } else { self.cap(ctas) },
            sync,
            map_ordinary,
            arrival,
            // One batch per call where the copies are eager and one stream issues them
            // (NOTE [batched copies]).
            copy_batch: set.copy_batch && copies && !call.captured && arrival == ArrivalForm::Barrier,
            copy_hint: set.copy_hint,
            ll_overlap: self.ll_overlap(algorithm == AgAlgo::Ll),
            memop_batch: set.memop_batch,
            origin,
        }
    }

    /// NOTE [LL launch overlap]: LL rounds overlap their launches unless switched off or
    /// ranks share the GPU (NOTE [shared CTAs]).
    fn ll_overlap(&self, ll: bool) -> bool {
        ll && self.settings().ll_overlap && self.machine.ranks_on_gpu <= 1 && !self.machine.is_host()
    }

    /// The plan of a reduce-scatter, or the refusal of a call no plan can run as asked
    /// (its dtypes and wire, an explicit algorithm that cannot carry the wire or reduce
    /// its integers or operator, a named launch that cannot run: `runnable`), naming
    /// the rank. The caller's choices pass as they are.
    pub fn reduce_scatter(&self, call: &RsCall, opts: &ReduceScatterOptions) -> Result<RsPlan> {
        self.rs(call, opts, None)
    }

    /// The plan of a released reduce-scatter (`lowcon.tp`'s matmul-reduce-scatter): its
    /// copies are ce-reduce's, and its final reduction takes [`RELEASED_REDUCE_CTAS`],
    /// since nothing of the call is left to overlap it, unless a rule of its own context
    /// (`context=tp`) or the caller names others.
    pub fn released(&self, call: &RsCall, opts: &ReduceScatterOptions) -> Result<RsPlan> {
        let named = ReduceScatterOptions { algorithm: ReduceScatterAlgorithm::CeReduce, ..*opts };
        let mut plan = self.rs(call, &named, Some(RELEASED_REDUCE_CTAS))?;
        if opts.algorithm == ReduceScatterAlgorithm::Auto && &*plan.origin == "explicit" {
            plan.origin = self.default_origin.clone();
        }
        Ok(plan)
    }

    fn rs(&self, call: &RsCall, opts: &ReduceScatterOptions, default_ctas: Option<u32>) -> Result<RsPlan> {
        let probe = Probe {
            coll: Coll::ReduceScatter,
            context: opts.context,
            dtype: call.input,
            out: call.output,
            mem: if call.input_symmetric { Mem::Symmetric } else { Mem::Ordinary },
            bytes: call.chunk,
            exact: opts.bf16_exact,
            captured: call.captured,
        };
        // The links carry another type than the input's: a bf16 input into f32, or an
        // explicit wire (the planner's own wire is decided with the rule below).
        let explicit_carry = call.input != call.output || opts.wire.is_some_and(|w| w != call.input);
        let f32_pair = call.input == DType::F32 && call.output == DType::F32;
        // The planner's wire must not turn the caller's options into a refusal: it has at
        // most `WIRE_PIECES` pieces and one reduction launch per piece.
        let wire_fits =
            opts.pipeline.is_none_or(|p| p <= lowcon_abi::pad::WIRE_PIECES) && opts.reduce_launch != ReduceLaunch::Once;
        let planned_wire = |r: &Rule| r.choose.wire.is_some() && f32_pair && opts.wire.is_none() && wire_fits;
        // A rule that sends the wire speaks only for f32 calls that may take it: not for a
        // caller who named another wire (f32 included), or whose options the wire cannot
        // keep (its CTAs and sync were measured for the wire).
        let wire_ok = |r: &Rule| {
            r.choose.wire.is_none() || !f32_pair || (wire_fits && opts.wire.is_none_or(|w| Some(w) == r.choose.wire))
        };
        // A bf16 input into f32 packs on sm-direct (`RsPlan::packs`), work no rule for
        // calls of one type was measured with: `auto` takes sm-direct for it only from a
        // rule that names the output's type (`out`). ce-reduce copies the bf16 as it is,
        // as such calls always ran.
        // As the planner's wire, it must not turn the caller's options into a refusal: a
        // pipeline past `WIRE_PIECES` keeps such calls on ce-reduce.
        let bf16_in = call.input == DType::Bf16 && call.output == DType::F32;
        let packs_fit = opts.pipeline.is_none_or(|p| p <= lowcon_abi::pad::WIRE_PIECES);
        let packs_ok = |r: &Rule, a: RsAlgo| !bf16_in || a != RsAlgo::SmDirect || (r.sel.outs.is_some() && packs_fit);
        // A launch the caller names binds ce-reduce, the one algorithm with launches:
        // `auto` then picks among ce-reduce's rules (NOTE [one launch per call]).
        let launch_named = opts.reduce_launch.named().is_some();
        let named = opts.algorithm.named();
        let rule = match named {
            None => self.rule(&probe, |r| {
                let a = r.choose.reduce_scatter;
                a.is_some_and(|a| {
                    a.caps().deterministic
                        && runnable::can_run(a, call, explicit_carry || planned_wire(r))
                        && (!launch_named || a == RsAlgo::CeReduce)
                        && wire_ok(r)
                        && packs_ok(r, a)
                })
            }),
            Some(a) => self.rule(&probe, |r| r.choose.reduce_scatter == Some(a) && wire_ok(r)),
        };
        let wire = match opts.wire {
            Some(w) => (w != call.input).then_some(w),
            None => rule.filter(|r| planned_wire(r)).and_then(|r| r.choose.wire),
        };
        let carried = explicit_carry || wire.is_some();
        let algorithm = match (named, rule) {
            (Some(a), _) => a,
            (None, Some(r)) => r.choose.reduce_scatter.expect("picked"),
            (None, None) if carried || launch_named || call.input.is_int() => RsAlgo::CeReduce,
            (None, None) => RsAlgo::SmDirect,
        };
        // A rule's CTAs count where it speaks for the call: for the released reduce-scatter
        // (which has its own default), only a rule of the call's context.
        let rule_ctas =
            rule.filter(|r| default_ctas.is_none() || r.sel.context == Some(opts.context)).and_then(|r| r.choose.ctas);
        let ctas = opts.ctas.or(rule_ctas).or(default_ctas).unwrap_or_else(|| {
            let lines = ll_first_round_lines(call.chunk, self.machine.world);
            declared_ctas(algorithm.caps().ctas, lines, self.machine.world * call.chunk)
        });
        // What the call can run (`runnable`): the refusals name the rank.
        let rank = self.rank;
        let carry = runnable::carry(rank, call.input, call.output, wire)?;
        // At one rank nothing crosses a link: sm-direct's packs have no one to pack for,
        // so a bf16 input into f32 reduces its own chunk as ce-reduce does (its refusals
        // below hold for the algorithm asked for).
        let asked = algorithm;
        let algorithm = match (carry, algorithm) {
            (Carry::Bf16In, RsAlgo::SmDirect) if self.machine.world <= 1 => RsAlgo::CeReduce,
            _ => algorithm,
        };
        // What the backend does: eager ce-reduce calls only (NOTE [mapped ordinary memory]),
        // and sm-direct's bf16 input, read where it is instead of packed (NOTE [bf16 input
        // read in place]): an ordinary one mapped (eager calls), a symmetric one as it is
        // (captured calls too).
        let map_asked = opts.map_ordinary.or(rule.and_then(|r| r.choose.map)).unwrap_or(false);
        let map_ordinary = match runnable::bf16_on_sm_direct(carry, algorithm) {
            true => map_asked && (call.input_symmetric || !call.captured),
            false => map_asked && !call.captured && algorithm.caps().map_ordinary,
        };
        // A pipeline's pieces, and a packed wire's (sm-direct's too).
        let caps = algorithm.caps();
        let packs = runnable::packs(carry, algorithm, map_ordinary);
        let pieces = match (caps.pipelined || packs, opts.pipeline) {
            (true, Some(p)) => p,
            (true, None) => {
                let piece = rule.and_then(|r| r.choose.piece).unwrap_or(DEFAULT_PIECE);
                let mut max = rule.and_then(|r| r.choose.max_pieces).unwrap_or(DEFAULT_MAX_PIECES);
                if packs {
                    max = max.min(lowcon_abi::pad::WIRE_PIECES);
                }
                pieces_for(call.chunk, piece, max)
            }
            _ => 1,
        };
        runnable::check_ints(rank, call.input, asked, call.op)?;
        // The refusals follow the algorithm asked for: read in place as it would be.
        let asked_in_place =
            runnable::bf16_on_sm_direct(carry, asked) && map_asked && (call.input_symmetric || !call.captured);
        runnable::check_wire(rank, carry, (asked, pieces, asked_in_place), call.input, call.output)?;
        runnable::check_op(rank, asked, call.op)?;
        let launch = match opts.reduce_launch.named() {
            None => rule.and_then(|r| r.choose.launch).and_then(ReduceLaunch::named).unwrap_or(LaunchForm::Pieces),
            Some(l) => l,
        };
        let once = runnable::launch_once(rank, (launch, launch_named), (algorithm, carry), call.input, pieces)?;
        let reduce_launch = if once { LaunchForm::Once } else { LaunchForm::Pieces };
        // At one rank nothing crosses a link: the split wire runs as the f32 call it
        // carries (its refusals above hold at every world size).
        let carry = if carry == Carry::Split && self.machine.world <= 1 { Carry::Same } else { carry };
        let sync = self.sync(call.captured, (opts.sync, opts.graph_sync), rule);
        // NOTE [replay sync]: lowcon's own graph of an eager call waits as a captured call.
        let replay_sync = self.sync(true, (opts.sync, opts.graph_sync), rule);
        let origin = self.origin(named.is_none(), rule);
        // NOTE [plan settings].
        let set = self.settings();
        let world = self.machine.world;
        let tma = match algorithm {
            RsAlgo::TmaReduce | RsAlgo::TmaReduceEvict => tma::tma_ring(world, (set.tma_tile_bytes, set.tma_stages)),
            RsAlgo::TmaPushReduce => (tma::push_tile(set.tma_tile_bytes), lowcon_abi::tma::PUSH_STAGES),
            _ => (0, 0),
        };
        Ok(RsPlan {
            algorithm,
            ctas: self.cap(ctas),
            sync,
            replay_sync,
            pieces,
            wire,
            carry,
            reduce_launch,
            map_ordinary,
            tma,
            // NOTE [wire replays]: eager calls that pack.
            replays: set.wire_replays
                && runnable::packs(carry, algorithm, map_ordinary)
                && !call.captured
                && !opts.traffic,
            copy_hint: set.copy_hint,
            ll_overlap: self.ll_overlap(algorithm == RsAlgo::Ll),
            memop_batch: set.memop_batch,
            origin,
        })
    }

    fn sync(
        &self,
        captured: bool,
        (sync, graph_sync): (Option<SyncMethod>, Option<SyncMethod>),
        rule: Option<&Rule>,
    ) -> SyncMethod {
        // NOTE [captured sync] (sync::gpu::graph): kernel waits in graphs unless a rule or
        // the caller says otherwise.
        match captured {
            true => graph_sync.or(rule.and_then(|r| r.choose.graph_sync)).unwrap_or(SyncMethod::Kernel),
            false => sync.or(rule.and_then(|r| r.choose.sync)).unwrap_or(SyncMethod::Kernel),
        }
    }

    fn origin(&self, auto: bool, rule: Option<&Rule>) -> Arc<str> {
        match (auto, rule) {
            (_, Some(r)) => r.origin.clone(),
            (true, None) => self.default_origin.clone(),
            (false, None) => self.explicit_origin.clone(),
        }
    }
}

// NOTE [replay sync]: an eager call that lowcon launches as a graph of its own (NOTE
// [wire replays] in `coll::gpu::replays`) waits as a captured call does (NOTE [captured
// sync]): the caller's `graph_sync`, else the rule's, else kernel waits; the call's eager
// `sync` speaks for its eager enqueues only. A graph's stream-memop wait costs the host
// 1-1.4 µs at every launch, a copy 1.2-2, a kernel nearly nothing (a graph of 31 kernels,
// the wire's 8 pieces with wait kernels, launched in 2.0-3.2 µs; with memop waits in
// 24-35; `scripts/probes/graph_launch_cost.cu`, 4x H200, 2026-11-27). Every rank derives
// it alike (options and rules are rank-consistent), and the eager first call and the
// replays each use their own pad slots (NOTE [graph flags]). The rule is the eager
// call's (a `mode=captured` rule speaks for user captures only).

/// What a rank tells its peers at group creation: its planner's fingerprint, or why it
/// has none (every rank then fails alike, naming it, instead of waiting for it); and
/// the switches that change how ranks meet on the device, which every rank must share
/// too (`LOWCON_WIRE_REPLAYS`, NOTE [wire replays] in `coll::gpu`).
pub fn announce(planner: &Result<Planner>) -> String {
    match planner {
        Ok(p) if p.settings().wire_replays => p.fingerprint(),
        Ok(p) => format!("{} {REPLAYS_OFF}", p.fingerprint()),
        // The reason alone: `agree` wraps it in an error of its own kind.
        Err(Error::InvalidArgument(m)) => format!("error: {m}"),
        Err(e) => format!("error: {e}"),
    }
}

/// The mark of a rank with NOTE [wire replays] off, in its announcement.
const REPLAYS_OFF: &str = "[LOWCON_WIRE_REPLAYS=0]";

/// Checks that every rank announced the same planner ([`announce`]): else an error
/// naming the first rank that failed or that differs from rank 0.
pub fn agree(announced: &[&str]) -> Result<()> {
    if let Some((r, e)) = announced.iter().enumerate().find_map(|(r, a)| a.strip_prefix("error: ").map(|e| (r, e))) {
        return Err(Error::InvalidArgument(format!("rank {r}: no planner: {e}")));
    }
    let crc = |a: &str| a.split(' ').next().unwrap_or("").to_string();
    match announced.iter().enumerate().find(|(_, a)| crc(a) != crc(announced[0])) {
        Some((r, a)) => Err(Error::InvalidArgument(format!(
            "rank {r} plans from tuning table {a:?} but rank 0 from {:?}: every rank must load the same table \
             ({TUNING_ENV} names it; NOTE [tuning tables])",
            announced[0]
        ))),
        None => match announced.iter().position(|a| a.ends_with(REPLAYS_OFF) != announced[0].ends_with(REPLAYS_OFF)) {
            Some(r) => {
                let on = |a: &str| if a.ends_with(REPLAYS_OFF) { "0" } else { "1 (the default)" };
                Err(Error::InvalidArgument(format!(
                    "rank {r} has LOWCON_WIRE_REPLAYS={} but rank 0 has {}: every rank must set it alike (it \
                     changes how a reduce-scatter's ranks meet on the device; NOTE [wire replays])",
                    on(announced[r]),
                    on(announced[0])
                )))
            }
            None => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests;
