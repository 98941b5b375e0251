//! The bf16 wire (NOTE [bf16 wire] in `lowcon::coll::wire`), checked on both backends.
//!
//! Every case runs the same data twice, through the wire and through lowcon's f32
//! `ce-reduce`, and the two outputs must be equal bit for bit; bf16-exact cases are
//! also held to the float64 CPU reference with the f32 tolerance (`tolerance`). Inputs
//! are fresh pseudo-random data per case, outputs are poisoned (0xFF bytes: a NaN), and
//! the group's counters must show exactly the bytes and the fallback pieces the data
//! calls for (computed here from the inputs):
//! - f32 over the bf16 wire, bf16-exact data: every operator, 1 element, odd counts,
//!   counts not a multiple of 16 bytes, a larger size, plain and symmetric buffers,
//!   misaligned ones, the default pieces and 3 pieces: no fallback;
//! - a bf16 input into an f32 output, against the f32 call on the same values upcast;
//! - inputs that are not bf16-exact: random f32 (every piece falls back), one inexact
//!   element on one rank (one piece on one rank), and NaN, infinities, denormals,
//!   -0.0 and values past bf16's range beside exact ones; some with more pieces than
//!   the planes' ring holds (NOTE [plane ring]), read directly and staged;
//! - refusals, each followed by a good call (the group stays usable).
//!
//! `gpu_wire_graph` captures wire calls into a CUDA graph and checks its replays;
//! `gpu_wire_replays` checks eager calls that lowcon launches as graphs itself (NOTE
//! [wire replays]).

use lowcon::CollStats;
use lowcon::cuda::Graph;

use super::runners::Mem;
use super::*;

/// How a case's f32 inputs are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Data {
    /// bf16 values, as f32 (exact on the wire).
    Exact,
    /// Full f32 values in [-1, 1) (almost every one inexact).
    Random,
    /// Exact, but for one element of rank `world - 1`'s chunk for rank 0.
    OneInexact,
    /// Exact, with special values at some positions on every rank.
    Special,
}

/// The special values (as bits): NaNs with and without a low half, infinities,
/// denormals (an f32 one and a bf16 one), -0.0, f32::MAX, bf16's largest finite value,
/// a value past it.
const SPECIAL: [u32; 11] = [
    0x7fc0_0001,
    0x7fc0_0000,
    0x7f80_0000,
    0xff80_0000,
    0x0000_0001,
    0x0001_0000,
    0x8000_0000,
    0x7f7f_ffff,
    0x7f7f_0000,
    0x7f7f_8000,
    0xc2f6_e979,
];

/// Element `i` of rank `rank`'s f32 input for `seed` (bits).
fn f32_bits(data: Data, seed: u64, rank: usize, world: usize, count: usize, i: usize) -> u32 {
    let exact = || {
        let b = input_bytes(DType::Bf16, seed, rank, i, 1);
        (u16::from_le_bytes([b[0], b[1]]) as u32) << 16
    };
    match data {
        Data::Exact => exact(),
        Data::Random => u32::from_le_bytes(input_bytes(DType::F32, seed, rank, i, 1).try_into().expect("4")),
        Data::OneInexact if rank == world - 1 && i == count / 2 => exact() | 0x0001,
        Data::OneInexact => exact(),
        Data::Special if (i * 7 + rank).is_multiple_of(13) => SPECIAL[(i / 13 + rank) % SPECIAL.len()],
        Data::Special => exact(),
    }
}

/// Rank `rank`'s whole f32 input for a case of `count` elements per chunk.
fn f32_input(data: Data, seed: u64, rank: usize, world: usize, count: usize) -> Vec<u32> {
    (0..world * count).map(|i| f32_bits(data, seed, rank, world, count, i)).collect()
}

fn to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The pieces a wire call of `count` elements splits into (as the library does).
fn piece_count(count: usize, pipeline: Option<u32>) -> (usize, usize) {
    let pieces = pipeline
        .unwrap_or_else(|| if count * 4 < (1 << 20) { 1 } else { (count * 4).div_ceil(16 << 20).clamp(2, 16) as u32 });
    let pe = count.div_ceil(pieces as usize).div_ceil(64) * 64;
    (pe, count.div_ceil(pe))
}

/// The fallback pieces and bytes rank `rank` must read: per piece and peer, whether any
/// element of the peer's chunk `rank` has a nonzero bottom half.
fn expected_fallbacks(inputs: &[Vec<u32>], rank: usize, count: usize, pipeline: Option<u32>) -> (u64, u64) {
    let (pe, pieces) = piece_count(count, pipeline);
    let (mut n, mut bytes) = (0, 0);
    for (p, inp) in inputs.iter().enumerate().filter(|&(p, _)| p != rank) {
        let _ = p;
        for i in 0..pieces {
            let (first, len) = (i * pe, pe.min(count - i * pe));
            if inp[rank * count + first..rank * count + first + len].iter().any(|w| w & 0xffff != 0) {
                n += 1;
                bytes += 2 * len as u64;
            }
        }
    }
    (n, bytes)
}

/// Checks `got` (f32) against the float64 reference of `inputs`' chunk `rank` with the
/// f32 tolerance; returns a description of the first failure.
fn check_reference(inputs: &[Vec<u32>], rank: usize, op: ReduceOp, count: usize, got: &[u8]) -> Option<String> {
    let world = inputs.len();
    let (rel, abs) = tolerance(DType::F32);
    for k in 0..count {
        let vals = inputs.iter().map(|v| f32::from_bits(v[rank * count + k]) as f64);
        let want = match op {
            ReduceOp::Sum => vals.sum::<f64>(),
            ReduceOp::Avg => vals.sum::<f64>() / world as f64,
            ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
            ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
        };
        let have = f32::from_le_bytes(got[4 * k..4 * k + 4].try_into().expect("4")) as f64;
        if (have - want).abs() > rel * want.abs() + abs || have.is_nan() {
            return Some(format!("element {k}: got {have}, want {want} (f64 reference)"));
        }
    }
    None
}

/// The first element where two outputs differ, bit for bit.
fn first_difference(a: &[u8], b: &[u8], size: usize) -> Option<String> {
    a.chunks_exact(size).zip(b.chunks_exact(size)).position(|(x, y)| x != y).map(|k| {
        format!(
            "element {k}: wire {:02x?}, f32 path {:02x?}",
            &a[k * size..(k + 1) * size],
            &b[k * size..(k + 1) * size]
        )
    })
}

/// The bytes and pieces counted between `a` and `b` (the host-rendezvous and
/// prediction counters are left at 0: a call may grow a workspace, which meets the peers).
fn delta(a: &CollStats, b: &CollStats) -> CollStats {
    CollStats {
        all_gather_bytes: b.all_gather_bytes - a.all_gather_bytes,
        reduce_scatter_bytes: b.reduce_scatter_bytes - a.reduce_scatter_bytes,
        wire_bytes: b.wire_bytes - a.wire_bytes,
        fallback_bytes: b.fallback_bytes - a.fallback_bytes,
        wire_pieces: b.wire_pieces - a.wire_pieces,
        fallback_pieces: b.fallback_pieces - a.fallback_pieces,
        ..CollStats::default()
    }
}

/// An f32 sum over the bf16 wire on `ce-reduce`, one element, plain buffers, the default
/// pieces, on `channel`: what every wire case here starts from.
fn wire_case(sync: SyncMethod, channel: u32) -> Typed {
    Typed {
        algorithm: ReduceScatterAlgorithm::CeReduce,
        op: ReduceOp::Sum,
        input: DType::F32,
        output: DType::F32,
        wire: Some(DType::Bf16),
        count: 1,
        symmetric: false,
        misalign: 0,
        sync,
        channel,
        pipeline: None,
        map: None,
    }
}

/// Runs one split-wire case on `data` and its f32 twin; checks bits, the reference (for
/// exact data) and the counters. Returns the fallback pieces this rank read.
fn split_case(r: &Runner, c: &Typed, data: Data, tag: &str) -> Result<u64, String> {
    let (rank, world) = (r.rank(), r.world());
    let seed = r.shared_seed(tag)?;
    let inputs: Vec<Vec<u32>> = (0..world).map(|p| f32_input(data, seed, p, world, c.count)).collect();
    let mine = to_bytes(&inputs[rank]);
    let before = r.stats()?;
    let got = r.run_typed(c, &mine).map_err(|m| format!("rank {rank}: {}: {m}", c.name()))?;
    let d = delta(&before, &r.stats()?);
    let want = r.run_typed(&c.f32_twin(), &mine).map_err(|m| format!("rank {rank}: {} (f32): {m}", c.name()))?;
    if let Some(first) = first_difference(&got, &want, 4) {
        return Err(format!("rank {rank}: {} on {data:?} data: not the f32 result; first: {first}", c.name()));
    }
    if data == Data::Exact
        && let Some(first) = check_reference(&inputs, rank, c.op, c.count, &got)
    {
        return Err(format!("rank {rank}: {}: {first}", c.name()));
    }
    let (_, pieces) = piece_count(c.count, c.pipeline);
    let (fb, fb_bytes) = expected_fallbacks(&inputs, rank, c.count, c.pipeline);
    let want_stats = CollStats {
        wire_bytes: ((world - 1) * c.count * 2) as u64,
        wire_pieces: ((world - 1) * pieces) as u64,
        fallback_pieces: fb,
        fallback_bytes: fb_bytes,
        ..Default::default()
    };
    if d != want_stats {
        return Err(format!(
            "rank {rank}: {} on {data:?} data: counters moved by {d:?}, want {want_stats:?}",
            c.name()
        ));
    }
    Ok(fb)
}

/// The wire suite (module docs) on one backend and sync method; `large` is the big count.
pub fn wire_suite(r: &Runner, sync: SyncMethod, large: usize) -> Result<String, String> {
    let (rank, world) = (r.rank(), r.world());
    let base = wire_case(sync, 0);
    let counts = [1usize, 7, 1003, 65_541, large];
    let mut cases = 0;
    // f32 over the bf16 wire, exact data.
    for (o, op) in ReduceOp::ALL.into_iter().enumerate() {
        for (k, &count) in counts.iter().enumerate() {
            if count == large && op != ReduceOp::Sum {
                continue;
            }
            let c = Typed {
                op,
                count,
                symmetric: k % 2 == 1,
                misalign: if k == 2 { 1 } else { 0 },
                pipeline: if (k + o) % 2 == 0 { None } else { Some(3) },
                // NOTE [the wire read directly]: sm-direct reads the planes over NVLink.
                algorithm: match k {
                    0 => ReduceScatterAlgorithm::Auto,
                    _ if (k + o) % 3 == 0 => ReduceScatterAlgorithm::SmDirect,
                    _ => ReduceScatterAlgorithm::CeReduce,
                },
                ..base
            };
            split_case(r, &c, Data::Exact, &format!("wire/exact/{o}/{k}"))?;
            cases += 1;
        }
    }
    // A bf16 input into an f32 output, against the f32 call on the same values: copied
    // as it is (ce-reduce), or packed as top halves and read directly (sm-direct, NOTE
    // [the wire read directly]; with more pieces than the planes' ring holds at 262_147;
    // 65_536 keeps every piece 16-byte aligned, so the packs and reductions take their
    // vector paths, as FSDP2's do).
    // The last three: sm-direct reading the bf16 input where it is (NOTE [bf16 input read
    // in place]): symmetric (aligned and not), and ordinary memory mapped (eager).
    let bf16_counts = [1usize, 7, 1003, 65_541, 262_147, 65_536, 65_536, 1003, 65_541];
    for (o, op) in ReduceOp::ALL.into_iter().enumerate() {
        for (k, &count) in bf16_counts.iter().enumerate() {
            if count == 262_147 && op != ReduceOp::Sum && op != ReduceOp::Max {
                continue;
            }
            let in_place = k >= 6;
            let sm = (k + o) % 2 == 1 || k >= 4;
            let c = Typed {
                op,
                count,
                input: DType::Bf16,
                wire: if k % 2 == 0 { None } else { Some(DType::Bf16) },
                symmetric: if in_place { k < 8 } else { k % 2 == 0 },
                misalign: if k == 3 || k == 7 { 3 } else { 0 },
                map: in_place.then_some(true),
                algorithm: if sm { ReduceScatterAlgorithm::SmDirect } else { ReduceScatterAlgorithm::CeReduce },
                pipeline: match (sm, k) {
                    (true, 4) => Some(8),
                    (true, 5) => Some(4),
                    (true, 2) => Some(3),
                    _ => None,
                },
                ..base
            };
            let seed = r.shared_seed(&format!("wire/bf16-in/{o}/{k}"))?;
            let bf = input_bytes(DType::Bf16, seed, rank, 0, count * world);
            let up: Vec<u8> = bf
                .chunks_exact(2)
                .flat_map(|h| ((u16::from_le_bytes([h[0], h[1]]) as u32) << 16).to_le_bytes())
                .collect();
            let before = r.stats()?;
            let got = r.run_typed(&c, &bf).map_err(|m| format!("rank {rank}: {}: {m}", c.name()))?;
            let d = delta(&before, &r.stats()?);
            let want = r.run_typed(&c.f32_twin(), &up).map_err(|m| format!("rank {rank}: {} (f32): {m}", c.name()))?;
            if let Some(first) = first_difference(&got, &want, 4) {
                return Err(format!("rank {rank}: {}: not the f32 result; first: {first}", c.name()));
            }
            let inputs: Vec<Vec<u32>> = (0..world)
                .map(|p| {
                    input_bytes(DType::Bf16, seed, p, 0, count * world)
                        .chunks_exact(2)
                        .map(|h| (u16::from_le_bytes([h[0], h[1]]) as u32) << 16)
                        .collect()
                })
                .collect();
            if let Some(first) = check_reference(&inputs, rank, op, count, &got) {
                return Err(format!("rank {rank}: {}: {first}", c.name()));
            }
            let bytes = ((world - 1) * count * 2) as u64;
            if d.reduce_scatter_bytes != bytes || d.wire_bytes != 0 || d.fallback_pieces != 0 {
                return Err(format!(
                    "rank {rank}: {}: counters moved by {d:?}, want {bytes} reduce-scatter bytes",
                    c.name()
                ));
            }
            cases += 1;
        }
    }
    // Inputs that are not bf16-exact: the result is still the f32 one, bit for bit.
    let mut fallbacks = 0;
    for (k, (data, op, count, pipeline)) in [
        (Data::Random, ReduceOp::Sum, 65_541, Some(4)),
        (Data::Random, ReduceOp::Max, 1003, None),
        (Data::OneInexact, ReduceOp::Sum, 65_541, Some(4)),
        (Data::OneInexact, ReduceOp::Avg, 7, None),
        (Data::Special, ReduceOp::Sum, 1003, Some(2)),
        (Data::Special, ReduceOp::Min, 65_541, Some(5)),
        (Data::Special, ReduceOp::Max, 4099, None),
        // More pieces than the planes' ring holds (NOTE [plane ring]): slots packed again
        // once every reader signalled it read them, read directly (k % 3 == 1) and staged.
        (Data::Random, ReduceOp::Sum, 262_147, Some(8)),
        (Data::OneInexact, ReduceOp::Sum, 100_003, Some(6)),
        (Data::Special, ReduceOp::Max, 65_541, Some(9)),
        (Data::OneInexact, ReduceOp::Avg, 131_075, Some(7)),
    ]
    .into_iter()
    .enumerate()
    {
        let algorithm = if k % 3 == 1 { ReduceScatterAlgorithm::SmDirect } else { ReduceScatterAlgorithm::CeReduce };
        let c = Typed { op, count, pipeline, symmetric: k % 2 == 0, algorithm, ..base };
        fallbacks += split_case(r, &c, data, &format!("wire/inexact/{k}"))?;
        cases += 1;
    }
    let refused = refusals(r, &base)?;
    Ok(format!(
        "{sync:?}: {cases} wire cases bit-exact against the f32 path, {fallbacks} fallback pieces read; {refused}"
    ))
}

/// What a wire call refuses (each named), each followed by a good call.
fn refusals(r: &Runner, base: &Typed) -> Result<String, String> {
    let (rank, world) = (r.rank(), r.world());
    let bad = [
        (Typed { algorithm: ReduceScatterAlgorithm::TmaReduce, ..*base }, "runs on ce-reduce, sm-direct"),
        (Typed { algorithm: ReduceScatterAlgorithm::Ll, ..*base }, "runs on ce-reduce, sm-direct"),
        (Typed { wire: Some(DType::F16), ..*base }, "only bf16"),
        (Typed { input: DType::Bf16, output: DType::Bf16, wire: Some(DType::F32), ..*base }, "wider than the input"),
        (Typed { input: DType::I32, output: DType::I32, wire: Some(DType::Bf16), ..*base }, "float reduce-scatters"),
        (Typed { input: DType::F32, output: DType::Bf16, wire: None, ..*base }, "the output must have"),
        (Typed { pipeline: Some(65), ..*base }, "at most 64 pieces"),
    ];
    for (c, what) in &bad {
        let c = Typed { count: 1003, ..*c };
        let input = vec![0x11u8; c.count * world * c.input.size()];
        match r.run_typed(&c, &input) {
            Ok(_) => return Err(format!("rank {rank}: {} was not refused", c.name())),
            Err(m) if m.contains(what) && m.contains(&format!("rank {rank}")) => {}
            Err(m) => {
                return Err(format!("rank {rank}: {}: refused with {m:?}, which does not say {what:?}", c.name()));
            }
        }
        let ok = Typed { count: 1003, ..*base };
        split_case(r, &ok, Data::Exact, "wire/after-refusal")?;
    }
    Ok(format!("{} refusals, each followed by a good call", bad.len()))
}

/// In place on GPUs (the output is this rank's chunk of the input, as NCCL allows): the
/// split wire against the f32 call in place, bit for bit, and the bf16-input call's
/// refusal (its f32 output would overwrite the input peers read).
pub fn gpu_wire_in_place(run: &Runner, sync: SyncMethod) -> Result<String, String> {
    let r = run.gpu("the bf16 wire in place")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let mut runs = Vec::new();
    for (k, count) in [1003usize, 65_541].into_iter().enumerate() {
        let seed = run.shared_seed(&format!("wire-in-place/{k}"))?;
        let input = to_bytes(&f32_input(Data::Special, seed, rank, world, count));
        for wire in [Some(DType::Bf16), None] {
            let buf = Mem::new(r.g, r.stream, k == 1, input.len())?;
            // SAFETY: `buf` holds the input's bytes; synchronous copy.
            unsafe { r.stream.copy_from_host(buf.ptr(), &input) }.map_err(e)?;
            let ib = buf.buf(0, count * world, DType::F32)?;
            let ob = buf.buf(rank * count * 4, count, DType::F32)?;
            let o = ReduceScatterOptions {
                algorithm: ReduceScatterAlgorithm::CeReduce,
                sync: Some(sync),
                wire,
                pipeline: Some(3),
                ..Default::default()
            };
            r.g.reduce_scatter(ib, ob, ReduceOp::Sum, r.stream, &o).map_err(|m| format!("rank {rank}: {m}"))?;
            r.g.synchronize(r.stream).map_err(e)?;
            let mut got = vec![0u8; count * 4];
            // SAFETY: `buf` holds the chunk; synchronous copy.
            unsafe { r.stream.copy_to_host(&mut got, buf.ptr() + (rank * count * 4) as u64) }.map_err(e)?;
            runs.push(got);
        }
        if let Some(first) = first_difference(&runs[runs.len() - 2], &runs[runs.len() - 1], 4) {
            return Err(format!("rank {rank}: in-place wire x{count}: not the in-place f32 result; first: {first}"));
        }
    }
    // bf16 into f32 in place: refused, naming why.
    let buf = Mem::new(r.g, r.stream, false, 1024 * world * 2)?;
    let ib = buf.buf(0, 1024 * world, DType::Bf16)?;
    let ob = buf.buf(rank * 512 * 2, 512, DType::F32)?;
    let o = ReduceScatterOptions { sync: Some(sync), ..Default::default() };
    let ib = ib.sub(0, 512 * world).map_err(e)?;
    match r.g.reduce_scatter(ib, ob, ReduceOp::Sum, r.stream, &o) {
        Err(m) if m.to_string().contains("cannot run in place") => {}
        other => return Err(format!("rank {rank}: bf16 into f32 in place: {other:?}, not refused")),
    }
    Ok(format!("{sync:?}: in place bit-exact at 2 sizes, bf16 into f32 in place refused"))
}

/// Wire calls captured into a CUDA graph: a split call (exact data, then random data,
/// whose pieces all fall back, counted by the device on every replay) and two bf16-input
/// calls (copied by ce-reduce, packed by sm-direct), replayed `replays` times with fresh data and poisoned outputs, each output
/// checked bit for bit against the eager f32 ce-reduce of the same data.
pub fn gpu_wire_graph(run: &Runner, sync: SyncMethod, replays: usize) -> Result<String, String> {
    let r = run.gpu("the bf16 wire in CUDA graphs")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let ch = 6;
    r.g.reserve_workspace(ch, 64 << 20).map_err(e)?;
    let split = Typed { count: 100_003, pipeline: Some(4), ..wire_case(sync, ch) };
    let bf16_in = Typed { input: DType::Bf16, wire: None, count: 50_001, op: ReduceOp::Avg, pipeline: None, ..split };
    // The bf16 input packed and read directly (`RsPlan::packs`), captured.
    // 65_536: aligned pieces, the vector paths FSDP2's calls take.
    let bf16_direct = Typed {
        algorithm: ReduceScatterAlgorithm::SmDirect,
        count: 65_536,
        op: ReduceOp::Sum,
        pipeline: Some(5),
        ..bf16_in
    };
    let calls = [split, bf16_in, bf16_direct];
    let bufs = calls
        .iter()
        .map(|c| {
            Ok((
                Mem::new(r.g, r.stream, false, c.count * world * c.input.size())?,
                Mem::new(r.g, r.stream, false, c.count * c.output.size())?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    r.stream.begin_capture().map_err(e)?;
    let mut res = Ok(());
    for (c, (inp, out)) in calls.iter().zip(&bufs) {
        res = res.and_then(|()| {
            let ib = inp.buf(0, c.count * world, c.input)?;
            let ob = out.buf(0, c.count, c.output)?;
            r.g.reduce_scatter(ib, ob, c.op, r.stream, &c.opts()).map_err(|m| format!("{}: {m}", c.name()))
        });
    }
    let graph: Result<Graph, String> = r.stream.end_capture().map_err(e);
    res.map_err(|m| format!("rank {rank}: capture: {m}"))?;
    let graph = graph?;
    let (pieces, mut checked) = (piece_count(split.count, split.pipeline).1, 0);
    for i in 0..replays {
        let data = if i % 2 == 0 { Data::Exact } else { Data::Random };
        let seed = run.shared_seed(&format!("wire-graph/{i}"))?;
        let inputs: Vec<Vec<u8>> = vec![
            to_bytes(&f32_input(data, seed, rank, world, split.count)),
            input_bytes(DType::Bf16, seed, rank, 0, bf16_in.count * world),
            input_bytes(DType::Bf16, seed ^ 1, rank, 0, bf16_direct.count * world),
        ];
        for ((c, (inp, out)), input) in calls.iter().zip(&bufs).zip(&inputs) {
            // SAFETY: the buffers hold these sizes (allocated above); synchronous copies.
            unsafe {
                r.stream.copy_from_host(inp.ptr(), input).map_err(e)?;
                r.stream.fill(out.ptr(), 0xFF, c.count * 4).map_err(e)?;
            }
        }
        let before = run.stats()?;
        r.g.replay(&graph).map_err(|m| format!("rank {rank}: replay {i}: {m}"))?;
        r.g.synchronize(r.stream).map_err(|m| format!("rank {rank}: replay {i}: {m}"))?;
        let d = delta(&before, &run.stats()?);
        let want_fb = if data == Data::Random { ((world - 1) * pieces) as u64 } else { 0 };
        if d.fallback_pieces != want_fb || d.wire_pieces != 0 {
            return Err(format!(
                "rank {rank}: replay {i} ({data:?} data): counters moved by {d:?}; want {want_fb} fallback pieces, \
                 counted by the device, and no host counts (a replay is not enqueued)"
            ));
        }
        for ((c, (_, out)), input) in calls.iter().zip(&bufs).zip(&inputs) {
            let mut got = vec![0u8; c.count * 4];
            // SAFETY: `out` holds this many bytes; synchronous copy.
            unsafe { r.stream.copy_to_host(&mut got, out.ptr()) }.map_err(e)?;
            let f32_in: Vec<u8> = if c.input == DType::Bf16 {
                input
                    .chunks_exact(2)
                    .flat_map(|h| ((u16::from_le_bytes([h[0], h[1]]) as u32) << 16).to_le_bytes())
                    .collect()
            } else {
                input.clone()
            };
            let want = run.run_typed(&Typed { channel: 0, ..c.f32_twin() }, &f32_in)?;
            if let Some(first) = first_difference(&got, &want, 4) {
                return Err(format!("rank {rank}: replay {i}: {}: not the f32 result; first: {first}", c.name()));
            }
            checked += c.count;
        }
    }
    Ok(format!("{sync:?}: 3 captured wire calls replayed {replays} times, {checked} elements bit-exact"))
}

/// The other sync method than `sync`.
fn other_method(sync: SyncMethod) -> SyncMethod {
    match sync {
        SyncMethod::Kernel => SyncMethod::StreamMemop,
        _ => SyncMethod::Kernel,
    }
}

/// NOTE [wire replays]: eager split-wire calls of one shape, from the second on launched
/// as a graph, one per set of buffers. Each shape (staged and read directly, the latter
/// with more pieces than the planes' ring, and a bf16 input into f32 read directly,
/// which packs too) runs `calls` times over two buffer sets in an
/// irregular order, with fresh data (exact and not) and poisoned outputs; every output
/// is checked bit for bit against the eager f32 ce-reduce of the same data, and the
/// counters against what each call must have done: the first call of a shape eager,
/// then one capture per buffer set, and replays for the rest. Each rank walks the buffer
/// sets in its own order, so one rank captures while another replays a graph it has. Midway the channel's
/// workspace grows, which must drop the graphs (a capture again per buffer set); then
/// replays are turned off for a few calls on every rank (no replay counted, same bits).
/// At one rank the call takes the f32 path: no replay at all.
pub fn gpu_wire_replays(run: &Runner, sync: SyncMethod, calls: usize) -> Result<String, String> {
    let r = run.gpu("the bf16 wire launched as graphs")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let ch = 5;
    let staged = Typed { count: 100_003, pipeline: Some(4), ..wire_case(sync, ch) };
    let direct = Typed {
        algorithm: ReduceScatterAlgorithm::SmDirect,
        op: ReduceOp::Avg,
        count: 65_541,
        pipeline: Some(7),
        ..staged
    };
    // A bf16 input into f32 on sm-direct packs too (`RsPlan::packs`), and replays alike.
    let bf16_direct = Typed {
        algorithm: ReduceScatterAlgorithm::SmDirect,
        input: DType::Bf16,
        wire: None,
        count: 70_001,
        pipeline: Some(5),
        ..staged
    };
    let (calls, off_from) = (calls.max(8), calls.max(8) - 3);
    let mut checked = 0;
    for (k, c) in [staged, direct, bf16_direct].into_iter().enumerate() {
        let sets = (0..2)
            .map(|_| {
                Ok((
                    Mem::new(r.g, r.stream, false, c.count * world * c.input.size())?,
                    Mem::new(r.g, r.stream, false, c.count * 4)?,
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let pieces = piece_count(c.count, c.pipeline).1;
        // NOTE [replay sync]: the direct shape's graphs wait with the other method than its
        // eager first call (FSDP2's wire at 4 ranks: memop eagerly, kernel waits replayed).
        let opts = match k {
            1 => ReduceScatterOptions { graph_sync: Some(other_method(sync)), ..c.opts() },
            _ => c.opts(),
        };
        let start = run.stats()?;
        let (mut want_replays, mut want_captures) = (0u64, 0u64);
        let mut graphs = [false, false];
        for i in 0..calls {
            // Sets in the order A A B A B B A ..., shifted by the rank: hits, misses and
            // switches, and a rank capturing while a peer replays (the path is the
            // shape's, the graph the rank's own).
            let s = usize::from(matches!((i + rank) % 6, 2 | 4 | 5));
            if i == calls / 2 {
                // Collective: a larger workspace replaces the one the graphs hold (larger
                // than the last shape's too).
                r.g.reserve_workspace(ch, (96 + 64 * k) << 20).map_err(|m| format!("rank {rank}: reserve: {m}"))?;
                graphs = [false, false];
            }
            let on = i < off_from;
            r.g.set_wire_replays(on);
            // At one rank nothing crosses a link: the f32 path, never a replay.
            if on && i > 0 && world > 1 {
                want_replays += 1;
                if !graphs[s] {
                    want_captures += 1;
                    graphs[s] = true;
                }
            }
            let data = if i % 3 == 1 { Data::Random } else { Data::Exact };
            let seed = run.shared_seed(&format!("wire-replays/{}/{i}", c.name()))?;
            let bf16 = c.input == DType::Bf16;
            let input = match bf16 {
                true => input_bytes(DType::Bf16, seed, rank, 0, c.count * world),
                false => to_bytes(&f32_input(data, seed, rank, world, c.count)),
            };
            let (inp, out) = &sets[s];
            // SAFETY: the buffers hold these sizes (allocated above); synchronous copies.
            unsafe {
                r.stream.copy_from_host(inp.ptr(), &input).map_err(e)?;
                r.stream.fill(out.ptr(), 0xFF, c.count * 4).map_err(e)?;
            }
            let before = run.stats()?;
            let (ib, ob) = (inp.buf(0, c.count * world, c.input)?, out.buf(0, c.count, c.output)?);
            r.g.reduce_scatter(ib, ob, c.op, r.stream, &opts).map_err(|m| format!("rank {rank}: call {i}: {m}"))?;
            r.g.synchronize(r.stream).map_err(|m| format!("rank {rank}: call {i}: {m}"))?;
            let d = delta(&before, &run.stats()?);
            // A bf16 input's bytes count as any reduce-scatter's (no wire pieces).
            let counted = match bf16 {
                true => d.wire_pieces == 0 && d.reduce_scatter_bytes == ((world - 1) * c.count * 2) as u64,
                false => d.wire_pieces == ((world - 1) * pieces) as u64,
            };
            if !counted {
                return Err(format!("rank {rank}: {} call {i}: counters moved by {d:?}", c.name()));
            }
            let mut got = vec![0u8; c.count * 4];
            // SAFETY: `out` holds this many bytes; synchronous copy.
            unsafe { r.stream.copy_to_host(&mut got, out.ptr()) }.map_err(e)?;
            let f32_in: Vec<u8> = match bf16 {
                true => input
                    .chunks_exact(2)
                    .flat_map(|h| ((u16::from_le_bytes([h[0], h[1]]) as u32) << 16).to_le_bytes())
                    .collect(),
                false => input.clone(),
            };
            let want = run.run_typed(&Typed { channel: 0, ..c.f32_twin() }, &f32_in)?;
            if let Some(first) = first_difference(&got, &want, 4) {
                return Err(format!(
                    "rank {rank}: {} call {i} (buffer set {s}, replays {on}, {data:?} data): not the f32 result; \
                     first: {first}",
                    c.name()
                ));
            }
            checked += c.count;
        }
        r.g.set_wire_replays(true);
        let end = run.stats()?;
        let got = (end.wire_replays - start.wire_replays, end.wire_captures - start.wire_captures);
        if got != (want_replays, want_captures) {
            return Err(format!(
                "rank {rank}: {}: {} calls made {} replays and {} captures; want {want_replays} and {want_captures}",
                c.name(),
                calls,
                got.0,
                got.1
            ));
        }
    }
    Ok(format!(
        "{sync:?}: 3 wire shapes (staged, read directly, a bf16 input read directly) x {calls} eager calls over 2 \
         buffer sets, replayed (the second with {:?} waits), {checked} elements bit-exact",
        other_method(sync)
    ))
}
