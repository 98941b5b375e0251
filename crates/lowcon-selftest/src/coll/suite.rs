//! The suites: the cases every run checks, and the multi-stream / multi-thread stress.

use super::*;

/// The cases of the correctness suite: every algorithm (and `auto`), dtype and
/// operator, at 1 element, odd counts, counts that are not a multiple of 16 bytes and
/// a larger size; plain and symmetric buffers; aligned and misaligned.
pub fn suite(sync: SyncMethod, large: usize) -> Vec<Case> {
    let mut v = Vec::new();
    let counts = [1usize, 7, 1003, 65_541, large];
    let base = Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll: Coll::AllGather(AllGatherAlgorithm::Auto),
        dtype: DType::F32,
        count: 1,
        symmetric: false,
        misalign: 0,
        sync,
        channel: 0,
    };
    let ags = std::iter::once(AllGatherAlgorithm::Auto).chain(AllGatherAlgorithm::NAMED.iter().copied());
    for a in ags {
        for dtype in DType::ALL {
            for (k, &count) in counts.iter().enumerate() {
                // Bytes are bytes: the big size once per algorithm is enough.
                if count == large && dtype != DType::Bf16 {
                    continue;
                }
                v.push(Case {
                    coll: Coll::AllGather(a),
                    dtype,
                    count,
                    symmetric: k % 2 == 1,
                    misalign: if k == 2 { 1 } else { 0 },
                    ..base
                });
            }
        }
    }
    // ce-pull whose copies wait for each peer alone (NOTE [arrival-driven all-gather]):
    // memop sync runs them so; kernel sync plans one barrier, and must say so.
    for arrival in [Arrival::InOrder, Arrival::AnyOrder] {
        for dtype in [DType::F32, DType::Bf16] {
            for (k, &count) in counts.iter().enumerate() {
                v.push(Case {
                    coll: Coll::AllGather(AllGatherAlgorithm::CePull),
                    dtype,
                    count,
                    symmetric: k % 2 == 1,
                    misalign: if k == 2 { 1 } else { 0 },
                    arrival,
                    ..base
                });
            }
        }
    }
    // Integers: sum (wrapping), min, max, on the algorithms with integer kernels.
    for a in [ReduceScatterAlgorithm::Auto, ReduceScatterAlgorithm::CeReduce, ReduceScatterAlgorithm::SmDirect] {
        for dtype in [DType::I32, DType::I64, DType::U8] {
            for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
                for (k, &count) in counts[..4].iter().enumerate() {
                    v.push(Case {
                        coll: Coll::ReduceScatter(a, op),
                        dtype,
                        count,
                        symmetric: k % 2 == 0,
                        misalign: if k == 3 { 1 } else { 0 },
                        ..base
                    });
                }
            }
        }
    }
    let rss = std::iter::once(ReduceScatterAlgorithm::Auto).chain(ReduceScatterAlgorithm::NAMED.iter().copied());
    for a in rss {
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            for op in ReduceOp::ALL {
                // tma-push-reduce only sums (other operators are refused: `*_bad_input`).
                if a == ReduceScatterAlgorithm::TmaPushReduce && op != ReduceOp::Sum {
                    continue;
                }
                for (k, &count) in counts.iter().enumerate() {
                    if count == large && op != ReduceOp::Sum {
                        continue;
                    }
                    v.push(Case {
                        coll: Coll::ReduceScatter(a, op),
                        dtype,
                        count,
                        symmetric: k % 2 == 0,
                        misalign: if k == 3 { 3 } else { 0 },
                        ..base
                    });
                }
            }
        }
    }
    // ce-reduce with one reduction launch per call (NOTE [one launch per call]): the
    // large count has several pieces, each behind its flag.
    for dtype in [DType::F32, DType::F16, DType::Bf16] {
        for op in ReduceOp::ALL {
            for (k, &count) in counts.iter().enumerate() {
                if count == large && op != ReduceOp::Sum {
                    continue;
                }
                v.push(Case {
                    coll: Coll::ReduceScatter(ReduceScatterAlgorithm::CeReduce, op),
                    dtype,
                    count,
                    symmetric: k % 2 == 1,
                    misalign: if k == 2 { 1 } else { 0 },
                    launch: ReduceLaunch::Once,
                    ..base
                });
            }
        }
    }
    v
}

/// Runs `cases`; returns a summary.
pub fn run_suite(r: &Runner, cases: &[Case]) -> Result<String, String> {
    let t = Instant::now();
    let mut checked = 0;
    for (i, c) in cases.iter().enumerate() {
        checked += check_case(r, c, &format!("suite/{i}"))?;
    }
    Ok(format!(
        "{} cases, {checked} output elements checked, 0 wrong ({:.1} s)",
        cases.len(),
        t.elapsed().as_secs_f64()
    ))
}

/// The algorithms the stress loop cycles through (eight calls; LL twice, so that its
/// rounds alternate halves and reuse each within one unsynchronised block). ce-pull's
/// turns cycle through the three arrivals (NOTE [arrival-driven all-gather]).
fn stress_case(i: usize, channel: u32, sync: SyncMethod, count: usize) -> Case {
    let coll = match i % 8 {
        6 => Coll::AllGather(AllGatherAlgorithm::Ll),
        7 => Coll::ReduceScatter(ReduceScatterAlgorithm::Ll, ReduceOp::Avg),
        0 => Coll::AllGather(AllGatherAlgorithm::CePull),
        1 => Coll::AllGather(AllGatherAlgorithm::CePush),
        2 => Coll::AllGather(AllGatherAlgorithm::SmOneshot),
        3 => Coll::ReduceScatter(ReduceScatterAlgorithm::CeReduce, ReduceOp::Sum),
        4 => Coll::ReduceScatter(ReduceScatterAlgorithm::TmaReduce, ReduceOp::Sum),
        _ => Coll::ReduceScatter(ReduceScatterAlgorithm::SmDirect, ReduceOp::Max),
    };
    Case {
        launch: ReduceLaunch::Auto,
        coll,
        dtype: DType::Bf16,
        count,
        symmetric: i.is_multiple_of(3),
        misalign: 0,
        sync,
        channel,
        arrival: [Arrival::Barrier, Arrival::InOrder, Arrival::AnyOrder][(i / 8) % 3],
    }
}

/// `iters` back-to-back calls on one GPU stream (in blocks of 8, enqueued without
/// synchronising between them), cycling through every algorithm, each call with fresh
/// data, every output checked. With `streams == 2`, two threads do this at once on two
/// streams and channels. Everything collective (symmetric allocations, workspace
/// growth) happens before the threads start: collective set-up must not race.
pub fn gpu_stress(r: &GpuRunner, iters: usize, streams: usize, sync: SyncMethod) -> Result<String, String> {
    const BLOCK: usize = 8;
    let count = 4093;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let bytes = count * world * DType::Bf16.size() + 64;
    let mut pools = Vec::new();
    for ch in 0..streams as u32 {
        r.g.reserve_workspace(ch, 16 << 20).map_err(e)?;
        let mut pool = Vec::new();
        for k in 0..BLOCK {
            let sym = k % 3 == 0;
            pool.push((Mem::new(r.g, r.stream, sym, bytes)?, Mem::new(r.g, r.stream, sym, bytes)?));
        }
        pools.push(pool);
    }
    let base = r.shared_seed("stress-seed")?;
    let work = |ch: usize, pool: &[(Mem, Mem)]| -> Result<usize, String> {
        let stream = if ch == 0 { r.stream.clone() } else { r.g.device().stream(StreamPriority::High).map_err(e)? };
        let mut checked = 0;
        let mut i = 0;
        while i < iters {
            let n = BLOCK.min(iters - i);
            let cases: Vec<Case> = (i..i + n)
                .map(|k| Case { symmetric: (k - i) % 3 == 0, ..stress_case(k, ch as u32, sync, count) })
                .collect();
            let seeds: Vec<u64> = (i..i + n).map(|k| base ^ ((ch as u64) << 40) ^ (k as u64 * 0x9E37)).collect();
            for ((c, s), (inp, out)) in cases.iter().zip(&seeds).zip(pool) {
                let input = input_bytes(c.dtype, *s, rank, 0, c.in_count(world));
                // SAFETY: the pool buffers hold `bytes` >= every case's input and output;
                // the copies are ordered on `stream` and synchronised below.
                unsafe {
                    stream.copy_from_host(inp.ptr(), &input).map_err(e)?;
                    stream.fill(out.ptr(), 0xFF, bytes).map_err(e)?;
                }
            }
            for (c, (inp, out)) in cases.iter().zip(pool) {
                r.enqueue(c, &stream, inp, out)?;
            }
            r.g.synchronize(&stream).map_err(e)?;
            for ((c, s), (_, out)) in cases.iter().zip(&seeds).zip(pool) {
                let mut got = vec![0u8; c.out_count(world) * c.dtype.size()];
                // SAFETY: `out` holds at least this many bytes; synchronous copy.
                unsafe { stream.copy_to_host(&mut got, out.ptr()) }.map_err(e)?;
                let (wrong, first) = compare(c, *s, rank, world, &got);
                if wrong > 0 {
                    return Err(format!("rank {rank}: stream {ch}: {}: {wrong} wrong; first: {first}", c.name()));
                }
                checked += got.len() / c.dtype.size();
            }
            i += n;
        }
        Ok(checked)
    };
    let t = Instant::now();
    let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let work = &work;
        let hs: Vec<_> = pools.iter().enumerate().map(|(ch, pool)| s.spawn(move || work(ch, pool))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect()
    });
    let mut total = 0;
    for res in results {
        total += res?;
    }
    Ok(format!(
        "{iters} calls x {streams} stream(s), {total} elements checked, 0 wrong ({:.1} s)",
        t.elapsed().as_secs_f64()
    ))
}

/// As [`gpu_stress`] on the host backend (threads instead of streams).
pub fn host_stress(r: &Runner, iters: usize, threads: usize) -> Result<String, String> {
    let count = 1021;
    let base = r.shared_seed("stress-seed")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    // Workspaces grow collectively: run one call per channel first, one thread at a time.
    let warm = |ch: u32| -> Result<(), String> {
        for k in 0..8 {
            let c = Case { symmetric: false, ..stress_case(k, ch, SyncMethod::Kernel, count) };
            let input = input_bytes(c.dtype, base, rank, 0, c.in_count(world));
            let mut out = vec![0u8; c.out_count(world) * 2];
            host_call(&r.g, &c, HostInput::Plain(&input), &mut out).map_err(e)?;
        }
        Ok(())
    };
    for ch in 0..threads as u32 {
        warm(ch)?;
    }
    let work = |ch: usize| -> Result<usize, String> {
        let mut checked = 0;
        for i in 0..iters {
            let c = Case { symmetric: false, ..stress_case(i, ch as u32, SyncMethod::Kernel, count) };
            let seed = base ^ ((ch as u64) << 40) ^ (i as u64 * 0x9E37);
            let input = input_bytes(c.dtype, seed, rank, 0, c.in_count(world));
            let mut out = vec![0xFFu8; c.out_count(world) * c.dtype.size()];
            host_call(&r.g, &c, HostInput::Plain(&input), &mut out)
                .map_err(|m| format!("rank {rank}: thread {ch} call {i}: {m}"))?;
            let (wrong, first) = compare(&c, seed, rank, world, &out);
            if wrong > 0 {
                return Err(format!("rank {rank}: thread {ch} call {i}: {}: {wrong} wrong; first: {first}", c.name()));
            }
            checked += out.len() / c.dtype.size();
        }
        Ok(checked)
    };
    let t = Instant::now();
    let results: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads).map(|ch| s.spawn(move || work(ch))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect()
    });
    let mut total = 0;
    for res in results {
        total += res?;
    }
    Ok(format!(
        "{iters} calls x {threads} thread(s), {total} elements checked, 0 wrong ({:.1} s)",
        t.elapsed().as_secs_f64()
    ))
}
