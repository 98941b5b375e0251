//! The tuning table: lowcon's choices for one machine and world, as plain text that
//! `lowcon bench tune` writes and the planner reads (NOTE [tuning tables] in the parent).
//!
//! ```text
//! # comments start with '#'
//! lowcon-tuning 1
//! machine gpu=H200 world=4
//! source 2026-11-26, commit 0e6f8ce, 4x H200: lowcon bench tune
//! all-gather     bytes=0..256K                  algorithm=ll
//! reduce-scatter context=fsdp dtype=f32 exact=yes  algorithm=ce-reduce wire=bf16 ctas=64 piece=16M
//! reduce-scatter                                 algorithm=sm-direct ctas=16
//! ```
//!
//! A rule is a collective, then `key=value` words. Selectors say which calls it covers
//! (all of them when it names none):
//!
//! | selector | values | meaning |
//! |---|---|---|
//! | `context` | `alone`, `fsdp`, `tp` | the caller's hint ([`Context`]) |
//! | `dtype` | `f32`, `bf16`, ... (comma-separated) | the input's element type |
//! | `out` | `f32`, `bf16`, ... (comma-separated) | the output's element type (a bf16 reduce-scatter into f32: `dtype=bf16 out=f32`) |
//! | `mem` | `symmetric`, `ordinary` | all-gather: the output's memory; reduce-scatter: the input's |
//! | `bytes` | `LO..HI` (`K`, `M`, `G`): from LO to HI, both included; either may be left out | per rank: the all-gather's shard, the reduce-scatter's input chunk |
//! | `exact` | `yes`, `no` | the caller's `bf16_exact` hint |
//! | `mode` | `eager`, `captured` | whether the call is captured into a CUDA graph |
//!
//! Since the first rule that covers a call wins, `..1M` then `1M..4M` give 1 MiB to the
//! first. Choices say what runs: `algorithm` (every rule names one), `ctas`, `sync` and `graph_sync` (`kernel`,
//! `memop`), `piece` (bytes of a pipeline piece: ce-reduce and the wire), `max_pieces`,
//! `wire` (`bf16`), `launch` (`pieces`, `once`), `map` (`yes`, `no`: read an ordinary
//! input in place), `arrival` (`barrier`, `in-order`, `any-order`: what an all-gather's
//! copy waits for). For an `auto` call the first rule that covers it and names an
//! algorithm wins; for a call naming its algorithm, the first that covers it and names
//! that algorithm. A choice a rule leaves out takes the algorithm's default.

use std::fmt;
use std::sync::Arc;

use super::vocab::{AgAlgo, AllGatherAlgorithm, Arrival, Context, DType, ReduceLaunch, ReduceScatterAlgorithm, RsAlgo};
use crate::error::{Error, Result};
use crate::sync::SyncMethod;

/// The version word a table starts with.
pub const FORMAT: &str = "lowcon-tuning 1";

/// Which collective a rule is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coll {
    /// All-gather.
    AllGather,
    /// Reduce-scatter.
    ReduceScatter,
}

impl Coll {
    /// The name in tables and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Coll::AllGather => "all-gather",
            Coll::ReduceScatter => "reduce-scatter",
        }
    }
}

/// The memory a call's peers read or write: a symmetric buffer or ordinary memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mem {
    /// Symmetric memory (the pool, `alloc`).
    Symmetric,
    /// Ordinary device memory (cudaMalloc, torch's allocator).
    Ordinary,
}

/// Which calls a rule covers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Selectors {
    pub(crate) context: Option<Context>,
    pub(crate) dtypes: Option<Vec<DType>>,
    /// The output's element types.
    pub(crate) outs: Option<Vec<DType>>,
    pub(crate) mem: Option<Mem>,
    /// Per-rank bytes: from `lo` to `hi`, both included.
    pub(crate) bytes: (usize, usize),
    pub(crate) exact: Option<bool>,
    pub(crate) captured: Option<bool>,
}

/// What a rule chooses; `None`: the algorithm's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Choices {
    pub(crate) all_gather: Option<AgAlgo>,
    pub(crate) reduce_scatter: Option<RsAlgo>,
    pub(crate) ctas: Option<u32>,
    pub(crate) sync: Option<SyncMethod>,
    pub(crate) graph_sync: Option<SyncMethod>,
    pub(crate) piece: Option<usize>,
    pub(crate) max_pieces: Option<u32>,
    pub(crate) wire: Option<DType>,
    pub(crate) launch: Option<ReduceLaunch>,
    pub(crate) map: Option<bool>,
    pub(crate) arrival: Option<Arrival>,
}

/// One rule of a table.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub(crate) coll: Coll,
    pub(crate) sel: Selectors,
    pub(crate) choose: Choices,
    /// `table:line`, for plans and messages.
    pub(crate) origin: Arc<str>,
}

/// What a call looks like to the rules.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe {
    pub(crate) coll: Coll,
    pub(crate) context: Context,
    pub(crate) dtype: DType,
    /// The output's element type (an all-gather's is its input's).
    pub(crate) out: DType,
    pub(crate) mem: Mem,
    pub(crate) bytes: usize,
    pub(crate) exact: bool,
    pub(crate) captured: bool,
}

impl Rule {
    pub(crate) fn covers(&self, p: &Probe) -> bool {
        let s = &self.sel;
        self.coll == p.coll
            && s.context.is_none_or(|c| c == p.context)
            && s.dtypes.as_ref().is_none_or(|d| d.contains(&p.dtype))
            && s.outs.as_ref().is_none_or(|d| d.contains(&p.out))
            && s.mem.is_none_or(|m| m == p.mem)
            && (s.bytes.0..=s.bytes.1).contains(&p.bytes)
            && s.exact.is_none_or(|e| e == p.exact)
            && s.captured.is_none_or(|c| c == p.captured)
    }

    /// The rule with its byte bounds multiplied by `num / den` (the model's scaling).
    pub(crate) fn scaled(&self, num: usize, den: usize) -> Rule {
        let f = |b: usize| if b == usize::MAX { b } else { (b as u128 * num as u128 / den as u128) as usize };
        let mut r = self.clone();
        r.sel.bytes = (f(r.sel.bytes.0), f(r.sel.bytes.1));
        r
    }
}

/// A parsed tuning table.
#[derive(Clone, Debug)]
pub struct Table {
    /// Where it came from: `shipped:NAME` or a path.
    pub name: String,
    /// The machine line's `gpu` (matched against the device's name) and `world` (None: any).
    pub gpu: String,
    /// See [`Table::gpu`].
    pub world: Option<usize>,
    /// The `source` line: date, commit, machine and how it was measured.
    pub source: String,
    pub(crate) rules: Vec<Rule>,
    /// CRC-32 of the text, which every rank of a group must share.
    pub crc: u32,
}

fn bad(name: &str, line: usize, why: impl fmt::Display) -> Error {
    Error::InvalidArgument(format!("tuning table {name}, line {line}: {why}"))
}

/// `8K` -> 8192; `1M`, `2G`, plain numbers.
pub fn parse_bytes(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1usize << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

/// The shortest exact form of a byte count (`8K`, `1M`, `1536`).
pub fn format_bytes(b: usize) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if b != 0 && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

fn yes_no(v: &str) -> Option<bool> {
    match v {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

impl Table {
    /// Parses `text`, naming the table `name` in errors (with the line).
    pub fn parse(name: &str, text: &str) -> Result<Table> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.split('#').next().unwrap_or("").trim()));
        let mut lines = lines.by_ref().filter(|(_, l)| !l.is_empty());
        match lines.next() {
            Some((_, l)) if l == FORMAT => {}
            Some((n, l)) => return Err(bad(name, n, format!("expected {FORMAT:?} first, found {l:?}"))),
            None => return Err(bad(name, 0, format!("empty: expected {FORMAT:?} first"))),
        }
        let (mut gpu, mut world, mut source, mut rules) = (None, None, String::new(), Vec::new());
        for (n, line) in lines {
            let mut words = line.split_whitespace();
            let head = words.next().unwrap_or("");
            match head {
                "machine" => {
                    if gpu.is_some() {
                        return Err(bad(name, n, "a second machine line (a table is for one machine)"));
                    }
                    for w in words {
                        match w.split_once('=') {
                            Some(("gpu", "")) => return Err(bad(name, n, "machine: gpu= names no GPU")),
                            Some(("gpu", v)) => gpu = Some(v.to_string()),
                            Some(("world", "*")) => world = None,
                            Some(("world", v)) => {
                                world = Some(v.parse::<usize>().ok().filter(|&w| w > 0).ok_or_else(|| {
                                    bad(name, n, format!("world {v:?}: expected a positive number or *"))
                                })?)
                            }
                            _ => return Err(bad(name, n, format!("machine: {w:?}: expected gpu=NAME or world=N"))),
                        }
                    }
                }
                "source" => source = line["source".len()..].trim().to_string(),
                "all-gather" | "reduce-scatter" => {
                    let coll = if head == "all-gather" { Coll::AllGather } else { Coll::ReduceScatter };
                    let origin: Arc<str> = format!("{name}:{n}").into();
                    rules.push(parse_rule(name, n, coll, words, origin)?);
                }
                _ => {
                    return Err(bad(
                        name,
                        n,
                        format!("{head:?}: expected machine, source, all-gather or reduce-scatter"),
                    ));
                }
            }
        }
        let gpu = gpu.ok_or_else(|| bad(name, 0, "no machine line (machine gpu=NAME world=N)"))?;
        let crc = crc32fast::hash(text.as_bytes());
        Ok(Table { name: name.to_string(), gpu, world, source, rules, crc })
    }

    /// Whether this table is for a device named `device` (its `gpu` is a part of the
    /// name, case aside) in a world of `world`.
    pub fn matches(&self, device: &str, world: usize) -> bool {
        device.to_ascii_lowercase().contains(&self.gpu.to_ascii_lowercase()) && self.world.is_none_or(|w| w == world)
    }

    /// The rules as table lines, in order (what `lowcon bench tune` carries over).
    pub fn rule_lines(&self) -> Vec<String> {
        self.rules.iter().map(Rule::to_string).collect()
    }

    /// The machine it was measured on, in words (`4x H200`).
    pub fn machine(&self) -> String {
        match self.world {
            Some(w) => format!("{w}x {}", self.gpu),
            None => format!("{}, any world", self.gpu),
        }
    }
}

fn parse_rule<'a>(
    name: &str,
    n: usize,
    coll: Coll,
    words: impl Iterator<Item = &'a str>,
    origin: Arc<str>,
) -> Result<Rule> {
    let mut sel = Selectors { bytes: (0, usize::MAX), ..Default::default() };
    let mut ch = Choices::default();
    let mut seen: Vec<&str> = Vec::new();
    for w in words {
        let (k, v) = w.split_once('=').ok_or_else(|| bad(name, n, format!("{w:?}: expected key=value")))?;
        if seen.contains(&k) {
            return Err(bad(name, n, format!("{k} is given twice")));
        }
        seen.push(k);
        let val = |what: &str| bad(name, n, format!("{k}={v:?}: expected {what}"));
        match k {
            "context" => sel.context = Some(v.parse().map_err(|_| val("alone, fsdp or tp"))?),
            "dtype" => {
                let d: Result<Vec<DType>> = v.split(',').map(str::parse).collect();
                sel.dtypes = Some(d.map_err(|_| val("dtypes among f32, f16, bf16, i32, u8, i64"))?);
            }
            "out" => {
                let d: Result<Vec<DType>> = v.split(',').map(str::parse).collect();
                sel.outs = Some(d.map_err(|_| val("dtypes among f32, f16, bf16, i32, u8, i64"))?);
            }
            "mem" => {
                sel.mem = Some(match v {
                    "symmetric" => Mem::Symmetric,
                    "ordinary" => Mem::Ordinary,
                    _ => return Err(val("symmetric or ordinary")),
                })
            }
            "bytes" => {
                let (lo, hi) = v.split_once("..").ok_or_else(|| val("LO..HI"))?;
                let lo = if lo.is_empty() { Some(0) } else { parse_bytes(lo) };
                let hi = if hi.is_empty() { Some(usize::MAX) } else { parse_bytes(hi) };
                match (lo, hi) {
                    (Some(lo), Some(hi)) if lo <= hi => sel.bytes = (lo, hi),
                    _ => return Err(val("LO..HI with LO <= HI (K, M, G suffixes)")),
                }
            }
            "exact" => sel.exact = Some(yes_no(v).ok_or_else(|| val("yes or no"))?),
            "mode" => {
                sel.captured = Some(match v {
                    "eager" => false,
                    "captured" => true,
                    _ => return Err(val("eager or captured")),
                })
            }
            "algorithm" => match coll {
                Coll::AllGather => {
                    ch.all_gather = Some(
                        v.parse::<AllGatherAlgorithm>()
                            .ok()
                            .and_then(AllGatherAlgorithm::named)
                            .ok_or_else(|| val("an all-gather algorithm (ce-pull, ce-push, sm-oneshot, ll)"))?,
                    )
                }
                Coll::ReduceScatter => {
                    ch.reduce_scatter = Some(
                        v.parse::<ReduceScatterAlgorithm>().ok().and_then(ReduceScatterAlgorithm::named).ok_or_else(
                            || val("a reduce-scatter algorithm (ce-reduce, sm-direct, tma-reduce, ll, ...)"),
                        )?,
                    )
                }
            },
            "ctas" => {
                ch.ctas = Some(
                    v.parse::<u32>()
                        .ok()
                        .filter(|c| (1..=super::vocab::MAX_CTAS).contains(c))
                        .ok_or_else(|| val(&format!("1..={}", super::vocab::MAX_CTAS)))?,
                )
            }
            "sync" | "graph_sync" => {
                let s = Some(v.parse::<SyncMethod>().map_err(|_| val("kernel or memop"))?);
                if k == "sync" { ch.sync = s } else { ch.graph_sync = s }
            }
            "piece" => ch.piece = Some(parse_bytes(v).filter(|&p| p > 0).ok_or_else(|| val("a byte size"))?),
            "max_pieces" => {
                ch.max_pieces =
                    Some(v.parse::<u32>().ok().filter(|p| (1..=1024).contains(p)).ok_or_else(|| val("1..=1024"))?)
            }
            "wire" => ch.wire = Some(v.parse::<DType>().ok().filter(|d| *d == DType::Bf16).ok_or_else(|| val("bf16"))?),
            "launch" => {
                ch.launch =
                    Some(v.parse().ok().filter(|l| *l != ReduceLaunch::Auto).ok_or_else(|| val("pieces or once"))?)
            }
            "map" => ch.map = Some(yes_no(v).ok_or_else(|| val("yes or no"))?),
            "arrival" => {
                ch.arrival = Some(
                    v.parse()
                        .ok()
                        .filter(|a| *a != Arrival::Auto)
                        .ok_or_else(|| val("barrier, in-order or any-order"))?,
                )
            }
            _ => return Err(bad(name, n, format!("unknown key {k:?}"))),
        }
    }
    if ch.all_gather.is_none() && ch.reduce_scatter.is_none() {
        return Err(bad(name, n, "a rule names its algorithm (algorithm=...)"));
    }
    if coll == Coll::ReduceScatter && ch.arrival.is_some() {
        return Err(bad(name, n, "a reduce-scatter has no arrival (an all-gather's choice)"));
    }
    if coll == Coll::AllGather && (ch.wire.is_some() || ch.piece.is_some() || ch.launch.is_some()) {
        return Err(bad(name, n, "an all-gather has no wire, piece or launch"));
    }
    // NOTE [algorithm capabilities].
    if ch.wire.is_some() && ch.reduce_scatter.is_some_and(|a| !a.caps().split_wire) {
        let can = RsAlgo::names_where(|c| c.split_wire).join(" or ");
        return Err(bad(name, n, format!("the bf16 wire runs on {can}")));
    }
    Ok(Rule { coll, sel, choose: ch, origin })
}

impl fmt::Display for Rule {
    /// The rule as a table line (what `lowcon bench tune` writes).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = vec![self.coll.name().to_string()];
        let s = &self.sel;
        if let Some(c) = s.context {
            w.push(format!("context={c}"));
        }
        if let Some(d) = &s.dtypes {
            w.push(format!("dtype={}", d.iter().map(|d| d.name()).collect::<Vec<_>>().join(",")));
        }
        if let Some(d) = &s.outs {
            w.push(format!("out={}", d.iter().map(|d| d.name()).collect::<Vec<_>>().join(",")));
        }
        if let Some(m) = s.mem {
            w.push(format!("mem={}", if m == Mem::Symmetric { "symmetric" } else { "ordinary" }));
        }
        if s.bytes != (0, usize::MAX) {
            let hi = if s.bytes.1 == usize::MAX { String::new() } else { format_bytes(s.bytes.1) };
            let lo = if s.bytes.0 == 0 { String::new() } else { format_bytes(s.bytes.0) };
            w.push(format!("bytes={lo}..{hi}"));
        }
        if let Some(e) = s.exact {
            w.push(format!("exact={}", if e { "yes" } else { "no" }));
        }
        if let Some(c) = s.captured {
            w.push(format!("mode={}", if c { "captured" } else { "eager" }));
        }
        let c = &self.choose;
        if let Some(a) = c.all_gather {
            w.push(format!("algorithm={a}"));
        }
        if let Some(a) = c.reduce_scatter {
            w.push(format!("algorithm={a}"));
        }
        if let Some(v) = c.ctas {
            w.push(format!("ctas={v}"));
        }
        if let Some(v) = c.sync {
            w.push(format!("sync={}", v.name()));
        }
        if let Some(v) = c.graph_sync {
            w.push(format!("graph_sync={}", v.name()));
        }
        if let Some(v) = c.piece {
            w.push(format!("piece={}", format_bytes(v)));
        }
        if let Some(v) = c.max_pieces {
            w.push(format!("max_pieces={v}"));
        }
        if let Some(v) = c.wire {
            w.push(format!("wire={v}"));
        }
        if let Some(v) = c.launch {
            w.push(format!("launch={v}"));
        }
        if let Some(v) = c.map {
            w.push(format!("map={}", if v { "yes" } else { "no" }));
        }
        if let Some(v) = c.arrival {
            w.push(format!("arrival={v}"));
        }
        f.write_str(&w.join(" "))
    }
}

/// Builds the text of a table rule by rule, in the format [`Table::parse`] reads (what
/// `lowcon bench tune` uses, so the format lives here alone).
#[derive(Clone, Debug, Default)]
pub struct TableWriter {
    lines: Vec<String>,
}

impl TableWriter {
    /// A table for `gpu` at `world` ranks, measured as `source` says.
    pub fn new(gpu: &str, world: usize, source: &str) -> Self {
        let lines = vec![
            FORMAT.to_string(),
            format!("machine gpu={gpu} world={world}"),
            format!("source {}", source.replace('\n', " ")),
        ];
        Self { lines }
    }

    /// A comment line (`# ...`).
    pub fn comment(&mut self, text: &str) {
        for l in text.lines() {
            self.lines.push(format!("# {l}"));
        }
    }

    /// A rule, given as the words after the collective (`bytes=..1M algorithm=ll`);
    /// checked by parsing it.
    pub fn rule(&mut self, coll: Coll, words: &str) -> Result<()> {
        let r = parse_rule("(writer)", self.lines.len() + 1, coll, words.split_whitespace(), "".into())?;
        self.lines.push(r.to_string());
        Ok(())
    }

    /// The text (ends with a newline).
    pub fn finish(&self) -> String {
        let mut s = self.lines.join("\n");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "# a test table\nlowcon-tuning 1\nmachine gpu=H200 world=4\nsource test\n\
        all-gather bytes=..256K algorithm=ll # small\n\
        reduce-scatter context=fsdp dtype=f32 exact=yes algorithm=ce-reduce wire=bf16 ctas=64 piece=16M\n\
        reduce-scatter mem=ordinary mode=eager algorithm=ce-reduce map=yes\n\
        reduce-scatter algorithm=sm-direct ctas=16 sync=memop graph_sync=kernel\n";

    fn probe(coll: Coll, bytes: usize) -> Probe {
        Probe {
            coll,
            context: Context::Alone,
            dtype: DType::F32,
            out: DType::F32,
            mem: Mem::Symmetric,
            bytes,
            exact: false,
            captured: false,
        }
    }

    #[test]
    fn parses_and_matches() {
        let t = Table::parse("t", T).unwrap();
        assert_eq!((t.gpu.as_str(), t.world, t.source.as_str()), ("H200", Some(4), "test"));
        assert_eq!(t.rules.len(), 4);
        assert!(t.matches("NVIDIA H200", 4) && !t.matches("NVIDIA H200", 2) && !t.matches("NVIDIA H100 80GB", 4));
        let ag = &t.rules[0];
        assert!(ag.covers(&probe(Coll::AllGather, 0)) && ag.covers(&probe(Coll::AllGather, 256 << 10)));
        assert!(!ag.covers(&probe(Coll::AllGather, (256 << 10) + 1)) && !ag.covers(&probe(Coll::ReduceScatter, 8)));
        let text = format!("{FORMAT}\nmachine gpu=x\nall-gather bytes=1M..4M algorithm=ll\n");
        let above = Table::parse("t", &text).unwrap();
        let r = &above.rules[0];
        assert!(!r.covers(&probe(Coll::AllGather, (1 << 20) - 2)) && r.covers(&probe(Coll::AllGather, 1 << 20)));
        assert!(r.covers(&probe(Coll::AllGather, 4 << 20)) && !r.covers(&probe(Coll::AllGather, (4 << 20) + 2)));
        let wire = &t.rules[1];
        let fsdp = Probe { context: Context::Fsdp, exact: true, ..probe(Coll::ReduceScatter, 1 << 30) };
        assert!(wire.covers(&fsdp) && !wire.covers(&Probe { exact: false, ..fsdp }));
        assert!(!wire.covers(&Probe { dtype: DType::Bf16, ..fsdp }));
        let mapped = &t.rules[2];
        assert!(mapped.covers(&Probe { mem: Mem::Ordinary, ..probe(Coll::ReduceScatter, 1) }));
        assert!(!mapped.covers(&Probe { mem: Mem::Ordinary, captured: true, ..probe(Coll::ReduceScatter, 1) }));
        assert_eq!(&*t.rules[3].origin, "t:8");
        assert_eq!(t.rules[3].choose.sync, Some(SyncMethod::StreamMemop));
        // `out`: a bf16 reduce-scatter into f32, not a bf16 one into bf16.
        let text = format!("{FORMAT}\nmachine gpu=x\nreduce-scatter dtype=bf16 out=f32 algorithm=sm-direct\n");
        let t = Table::parse("t", &text).unwrap();
        let bf16_in = Probe { dtype: DType::Bf16, ..probe(Coll::ReduceScatter, 1) };
        assert!(t.rules[0].covers(&bf16_in) && !t.rules[0].covers(&Probe { out: DType::Bf16, ..bf16_in }));
        assert_eq!(t.rules[0].to_string(), "reduce-scatter dtype=bf16 out=f32 algorithm=sm-direct");
        let e = Table::parse("t", &format!("{FORMAT}\nmachine gpu=x\nreduce-scatter out=x algorithm=ll\n"));
        assert!(e.unwrap_err().to_string().contains("out=\"x\""));
    }

    #[test]
    fn rules_print_as_they_parse() {
        let t = Table::parse("t", T).unwrap();
        for r in &t.rules {
            let text = format!("{FORMAT}\nmachine gpu=x world=2\n{r}\n");
            let again = Table::parse("again", &text).unwrap();
            assert_eq!(again.rules[0].sel, r.sel, "{r}");
            assert_eq!(again.rules[0].choose, r.choose, "{r}");
        }
        assert_eq!(t.rules[0].to_string(), "all-gather bytes=..256K algorithm=ll");
    }

    #[test]
    fn bad_tables_name_the_line() {
        for (text, want) in [
            ("", "empty"),
            ("lowcon-tuning 2\n", "expected \"lowcon-tuning 1\" first"),
            ("lowcon-tuning 1\nall-gather algorithm=ll\n", "no machine line"),
            ("lowcon-tuning 1\nmachine gpu=a world=0\n", "line 2: world \"0\""),
            ("lowcon-tuning 1\nmachine gpu=a\nall-gather algorithm=ce-reduce\n", "line 3: algorithm=\"ce-reduce\""),
            ("lowcon-tuning 1\nmachine gpu=a\nreduce-scatter bytes=2M..1M\n", "line 3: bytes=\"2M..1M\""),
            ("lowcon-tuning 1\nmachine gpu=a\nreduce-scatter colour=red\n", "line 3: unknown key \"colour\""),
            ("lowcon-tuning 1\nmachine gpu=a\nreduce-scatter ctas=0\n", "line 3: ctas=\"0\""),
            ("lowcon-tuning 1\nmachine gpu=a\nreduce-scatter ctas=4\n", "line 3: a rule names its algorithm"),
            (
                "lowcon-tuning 1\nmachine gpu=a\nall-gather algorithm=ll algorithm=ce-pull\n",
                "line 3: algorithm is given twice",
            ),
            ("lowcon-tuning 1\nmachine gpu=\n", "line 2: machine: gpu= names no GPU"),
            ("lowcon-tuning 1\nmachine gpu=a\nmachine gpu=b\n", "line 3: a second machine line"),
            (
                "lowcon-tuning 1\nmachine gpu=a\nall-gather algorithm=ll wire=bf16\n",
                "line 3: an all-gather has no wire",
            ),
            (
                "lowcon-tuning 1\nmachine gpu=a\nreduce-scatter algorithm=ll wire=bf16\n",
                "runs on ce-reduce or sm-direct",
            ),
            ("lowcon-tuning 1\nmachine gpu=a\nbroadcast\n", "line 3: \"broadcast\""),
        ] {
            let e = Table::parse("t.txt", text).unwrap_err().to_string();
            assert!(e.contains("tuning table t.txt") && e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn bytes_round_trip() {
        for (s, b) in [("8K", 8192), ("1M", 1 << 20), ("3G", 3 << 30), ("1536", 1536)] {
            assert_eq!(parse_bytes(s), Some(b));
            assert_eq!(format_bytes(b), s);
        }
        assert_eq!(parse_bytes("x"), None);
        assert_eq!(parse_bytes(""), None);
    }

    #[test]
    fn scaling_moves_the_bounds_only() {
        let t = Table::parse("t", T).unwrap();
        let r = t.rules[0].scaled(3, 7);
        assert_eq!(r.sel.bytes, (0, (256 << 10) * 3 / 7));
        assert_eq!(r.choose, t.rules[0].choose);
        assert_eq!(t.rules[3].scaled(3, 7).sel.bytes, (0, usize::MAX));
    }

    #[test]
    fn the_writer_writes_what_parses() {
        let mut w = TableWriter::new("H200", 4, "2026-11-26, abc, 4x H200: test");
        w.comment("measured");
        w.rule(Coll::AllGather, "bytes=..1M algorithm=ll").unwrap();
        w.rule(Coll::ReduceScatter, "algorithm=sm-direct ctas=16").unwrap();
        assert!(w.rule(Coll::ReduceScatter, "algorithm=ce-pull").is_err());
        let t = Table::parse("w", &w.finish()).unwrap();
        assert_eq!((t.world, t.rules.len()), (Some(4), 2));
    }
}
