//! `map_ordinary` on GPUs: peers read ordinary `cuMemAlloc` inputs in place (NOTE
//! [mapped ordinary memory] in `lowcon::memory::mapped`). Checked like the suite (fresh
//! data, poisoned outputs, the CPU reference), plus what the cache must get right:
//! inputs freed and allocated again (new buffer ids, often at the same address), more
//! live inputs than the cache keeps open, sizes that differ between ranks, and memory
//! that cannot be shared (staged by every rank, or refused without staging).

use lowcon::Error;
use lowcon::cuda::DeviceAlloc;

use super::*;

/// A `cuMemAlloc` allocation (what torch's caching allocator makes) on the group's
/// device, freed on drop.
fn legacy(r: &GpuRunner, bytes: usize) -> Result<DeviceAlloc, String> {
    DeviceAlloc::new(r.g.device(), bytes).map_err(e)
}

/// Runs `case` (ce-pull or ce-reduce) with `map_ordinary` over fresh `cuMemAlloc`
/// buffers; in place for an all-gather when `in_place`. Returns the checked elements.
fn check_mapped(r: &GpuRunner, case: &Case, in_place: bool, tag: &str) -> Result<usize, String> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let s = case.dtype.size();
    let seed = seed_of_rank0(|mine| r.g.all_gather_bytes(tag, mine))?;
    let input = input_bytes(case.dtype, seed, rank, 0, case.in_count(world));
    let out_bytes = case.out_count(world) * s;
    let name = format!("{} mapped{}", case.name(), if in_place { " in place" } else { "" });
    let out = legacy(r, out_bytes)?;
    let separate = if in_place { None } else { Some(legacy(r, input.len())?) };
    let inp = match &separate {
        Some(b) => b.ptr(),
        None => out.ptr() + (rank * input.len()) as u64,
    };
    // SAFETY: both allocations hold what is copied; the copies are synchronous.
    unsafe {
        r.stream.fill(out.ptr(), 0xFF, out_bytes).map_err(e)?;
        r.stream.copy_from_host(inp, &input).map_err(e)?;
    }
    r.stream.synchronize().map_err(e)?;
    // SAFETY: the buffers live until after the synchronisation below.
    let (ib, ob) = unsafe {
        (
            DeviceBuf::from_raw(inp, case.in_count(world), case.dtype),
            DeviceBuf::from_raw(out.ptr(), case.out_count(world), case.dtype),
        )
    };
    match case.coll {
        Coll::AllGather(a) => {
            r.g.all_gather(ib, ob, r.stream, &AllGatherOptions { map_ordinary: Some(true), ..case.ag_opts(a) })
        }
        Coll::ReduceScatter(a, op) => r.g.reduce_scatter(
            ib,
            ob,
            op,
            r.stream,
            &ReduceScatterOptions { map_ordinary: Some(true), ..case.rs_opts(a) },
        ),
    }
    .map_err(|m| format!("rank {rank}: {name}: {m}"))?;
    r.g.synchronize(r.stream).map_err(e)?;
    let mut got = vec![0u8; out_bytes];
    // SAFETY: `out` holds `out_bytes`; synchronous copy.
    unsafe { r.stream.copy_to_host(&mut got, out.ptr()) }.map_err(e)?;
    let (wrong, first) = compare(case, seed, rank, world, &got);
    if wrong > 0 {
        return Err(format!("rank {rank}: {name}: {wrong} wrong elements; first: {first}"));
    }
    Ok(case.out_count(world))
}

/// A ce-pull all-gather of `n` f32 from `src` (rank `rank`'s data for `seed`, already
/// uploaded) into `out` (poisoned here first) on `stream`, checked against the
/// reference; `what` names the call in errors.
#[allow(clippy::too_many_arguments)]
fn gather_checked(
    r: &GpuRunner,
    stream: &Stream,
    opts: &AllGatherOptions,
    src: u64,
    out: u64,
    n: usize,
    seed: u64,
    what: &str,
) -> Result<usize, String> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    // SAFETY: `out` holds 4 * n * world bytes (the callers size it); ordered on `stream`.
    unsafe { stream.fill(out, 0xFF, 4 * n * world) }.map_err(e)?;
    // SAFETY: both live past the synchronisation below.
    let (ib, ob) =
        unsafe { (DeviceBuf::from_raw(src, n, DType::F32), DeviceBuf::from_raw(out, n * world, DType::F32)) };
    r.g.all_gather(ib, ob, stream, opts).map_err(|m| format!("rank {rank}: {what}: {m}"))?;
    r.g.synchronize(stream).map_err(e)?;
    let mut got = vec![0u8; 4 * n * world];
    // SAFETY: as above; synchronous copy.
    unsafe { stream.copy_to_host(&mut got, out) }.map_err(e)?;
    let case = Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll: Coll::AllGather(AllGatherAlgorithm::CePull),
        dtype: DType::F32,
        count: n,
        symmetric: false,
        misalign: 0,
        sync: opts.sync.unwrap_or_default(),
        channel: opts.channel,
    };
    let (wrong, first) = compare(&case, seed, rank, world, &got);
    if wrong > 0 {
        return Err(format!("rank {rank}: {what}: {wrong} wrong; first: {first}"));
    }
    Ok(n * world)
}

/// The `map_ordinary` checks (one sync method): correctness at odd and pipelined sizes,
/// in place and not, every input freshly allocated (so the cache sees new buffer ids at
/// reused addresses) with a bound on what stays open; then differing sizes and memory
/// that cannot be shared, each refused on every rank with the group still usable.
pub fn gpu_mapped(r: &GpuRunner, sync: SyncMethod) -> Result<String, String> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let mut checked = 0;
    let mut calls = 0;
    // 12M f32 elements per rank: ce-reduce's pieces (one per 16 MiB) pipeline.
    for (count, dtype) in [(1usize, DType::F32), (1001, DType::Bf16), (12_345, DType::F16), (12 << 20, DType::F32)] {
        let base = Case {
            launch: ReduceLaunch::Auto,
            arrival: Arrival::Auto,
            coll: Coll::AllGather(AllGatherAlgorithm::CePull),
            dtype,
            count,
            symmetric: false,
            misalign: 0,
            sync,
            channel: 0,
        };
        for in_place in [false, true] {
            checked += check_mapped(r, &base, in_place, "mapped-ag")?;
            calls += 1;
        }
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max] {
            let c = Case { coll: Coll::ReduceScatter(ReduceScatterAlgorithm::CeReduce, op), channel: 3, ..base };
            checked += check_mapped(r, &c, false, "mapped-rs")?;
            calls += 1;
        }
        // Auto resolves to ce-pull / ce-reduce at the large size; below it, it stages.
        let c = Case { coll: Coll::ReduceScatter(ReduceScatterAlgorithm::Auto, ReduceOp::Sum), ..base };
        checked += check_mapped(r, &c, false, "mapped-rs-auto")?;
        calls += 1;
    }
    // Every input above was freed after its call, so stale mappings were closed when
    // their addresses came back. Now more live allocations than the cache keeps open,
    // used twice over: the least recently used are closed and opened again, and every
    // result stays right.
    let live = lowcon::MAX_PEER_MAPPINGS + 8;
    let n = 1001;
    let seed = seed_of_rank0(|mine| r.g.all_gather_bytes("mapped-lru", mine))?;
    let bufs: Vec<DeviceAlloc> = (0..live).map(|_| legacy(r, 2 << 20)).collect::<Result<_, _>>()?;
    for (k, b) in bufs.iter().enumerate() {
        let data = input_bytes(DType::F32, seed ^ k as u64, rank, 0, n);
        // SAFETY: `b` holds 2 MiB; synchronous copy.
        unsafe { r.stream.copy_from_host(b.ptr(), &data) }.map_err(e)?;
    }
    let out = legacy(r, 4 * n * world)?;
    let opts = AllGatherOptions {
        algorithm: AllGatherAlgorithm::CePull,
        sync: Some(sync),
        map_ordinary: Some(true),
        ..Default::default()
    };
    for pass in 0..2 {
        for (k, b) in bufs.iter().enumerate() {
            let what = format!("live buffer {k}, pass {pass}");
            checked += gather_checked(r, r.stream, &opts, b.ptr(), out.ptr(), n, seed ^ k as u64, &what)?;
            calls += 1;
        }
    }
    let open = r.g.mapped_allocations();
    // The cap is soft by the few calls the watchdog has not yet seen complete.
    if open > (lowcon::MAX_PEER_MAPPINGS + 2) * (world - 1) {
        return Err(format!(
            "rank {rank}: {open} peer allocations open after {calls} calls over {live} live buffers (cap {} per peer)",
            lowcon::MAX_PEER_MAPPINGS
        ));
    }
    // Every call has completed: release_mappings closes them all (once the watchdog
    // has seen the completions, which it polls for).
    let t = Instant::now();
    let mut released = 0;
    while r.g.mapped_allocations() > 0 && t.elapsed() < Duration::from_secs(5) {
        released += r.g.release_mappings().map_err(e)?;
        std::thread::sleep(Duration::from_millis(10));
    }
    if r.g.mapped_allocations() != 0 || released != open {
        return Err(format!(
            "rank {rank}: release_mappings closed {released} of {open}; {} still open",
            r.g.mapped_allocations()
        ));
    }
    drop(bufs);
    let (c, k) = two_threads(r, 50)?;
    checked += c;
    calls += k;
    // NOTE [addresses predicted]: the same call again makes no host rendezvous, and a
    // rank whose peers' buffers moved still gets the right result.
    let (c, k) = predicted_calls(r, sync)?;
    checked += c;
    calls += k;
    // The same for a reduce-scatter that reads a bf16 input in place (NOTE [bf16 input
    // read in place]): a miss is fixed in the kernel's address table.
    let (c, k) = predicted_reduce_scatters(r, sync)?;
    checked += c;
    calls += k;
    // Sizes that differ between ranks: refused on every rank, naming the size.
    let n = 1000 + if rank == 0 { 8 } else { 0 };
    let out = legacy(r, 4 * (n + 8) * world)?;
    let inp = legacy(r, 4 * n)?;
    // SAFETY: both live past the call (which enqueues nothing when refused).
    let (ib, ob) = unsafe {
        (DeviceBuf::from_raw(inp.ptr(), n, DType::F32), DeviceBuf::from_raw(out.ptr(), n * world, DType::F32))
    };
    match r.g.all_gather(ib, ob, r.stream, &opts) {
        Err(Error::InvalidArgument(m)) if m.contains("same sizes") && m.contains(&format!("rank {rank}:")) => {}
        other => return Err(format!("rank {rank}: differing sizes: expected a refusal, got {other:?}")),
    }
    // Memory that cannot be shared (VMM, like expandable segments) on the last rank:
    // every rank stages the call instead (results checked), or, with staging off, every
    // rank refuses it, naming that rank.
    let last = world - 1;
    let n = 1 << 19;
    let seed = seed_of_rank0(|mine| r.g.all_gather_bytes("mapped-unshareable", mine))?;
    let vmm = if rank == last { Some(DeviceAlloc::vmm(r.g.device(), 4 * n).map_err(e)?) } else { None };
    let plain = legacy(r, 4 * n)?;
    let src = vmm.as_ref().map_or(plain.ptr(), |v| v.ptr());
    let out2 = legacy(r, 4 * n * world)?;
    let data = input_bytes(DType::F32, seed, rank, 0, n);
    // SAFETY: `src` holds n f32; synchronous.
    unsafe { r.stream.copy_from_host(src, &data) }.map_err(e)?;
    // SAFETY: as above.
    let (ib, ob) =
        unsafe { (DeviceBuf::from_raw(src, n, DType::F32), DeviceBuf::from_raw(out2.ptr(), world * n, DType::F32)) };
    let strict = AllGatherOptions { allow_staging: false, ..opts };
    match r.g.all_gather(ib, ob, r.stream, &strict) {
        Err(Error::InvalidArgument(m))
            if m.contains(&format!("rank {rank}: map_ordinary: rank {last}"))
                && m.contains("allow_staging = false")
                && (rank != last || m.contains("cannot be shared")) => {}
        other => {
            return Err(format!(
                "rank {rank}: unshareable input on rank {last}, no staging: expected a refusal, got {other:?}"
            ));
        }
    }
    checked += gather_checked(r, r.stream, &opts, src, out2.ptr(), n, seed, "unshareable input, staged")?;
    drop(vmm);
    // The group is still usable.
    let base = Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll: Coll::AllGather(AllGatherAlgorithm::CePull),
        dtype: DType::F32,
        count: 4097,
        symmetric: false,
        misalign: 0,
        sync,
        channel: 0,
    };
    checked += check_mapped(r, &base, true, "mapped-after")?;
    Ok(format!(
        "map_ordinary {sync:?}: {calls} calls, {checked} elements ok, {open} peer allocations open, then released; two channels from two threads at once; differing sizes refused, unshareable memory staged (or refused without staging) on every rank"
    ))
}

/// Two threads on two channels (5 and 6) at once, `calls_per_thread` ce-pull all-gathers
/// each over `map_ordinary` inputs (the first exchanged, the rest predicted), every one
/// checked; returns the checked elements and the calls. `coll-mapped --threads-only`
/// runs this part alone (scripts/gpu-stall.sh repeats it).
pub fn two_threads(r: &GpuRunner, calls_per_thread: u64) -> Result<(usize, usize), String> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    // Two threads on two channels at once, each exchanging per call: no rank's exchange
    // may hold up another channel's (the cache was once locked across the wait, and two
    // ranks whose threads reached the channels in opposite orders deadlocked). Kernel
    // sync in both passes: with memop sync, two threads' calls in flight at once may
    // deadlock across ranks once the process has more streams than hardware queues (a
    // wait on one stream holds up another's signal, and the threads enqueue in
    // rank-dependent order; docs/design.md, "Enough hardware queues"). This test's process
    // has more than 8 (every channel's copy and fix streams); on 4x H200 it hung in 2
    // runs of 5 there.
    let seed = seed_of_rank0(|mine| r.g.all_gather_bytes("mapped-threads", mine))?;
    let n = 4097;
    let work = |ch: u32| -> Result<usize, String> {
        r.g.device().bind_to_thread().map_err(e)?;
        let stream = r.g.device().stream(StreamPriority::High).map_err(e)?;
        let (inp, out) = (legacy(r, 4 * n)?, legacy(r, 4 * n * world)?);
        let opts = AllGatherOptions {
            algorithm: AllGatherAlgorithm::CePull,
            sync: Some(SyncMethod::Kernel),
            channel: ch,
            map_ordinary: Some(true),
            ..Default::default()
        };
        for i in 0..calls_per_thread {
            let s = seed ^ (u64::from(ch) << 40) ^ i;
            // SAFETY: `inp` holds n f32; ordered on `stream` before the call.
            unsafe { stream.copy_from_host(inp.ptr(), &input_bytes(DType::F32, s, rank, 0, n)) }.map_err(e)?;
            gather_checked(r, &stream, &opts, inp.ptr(), out.ptr(), n, s, &format!("channel {ch} call {i}"))?;
        }
        Ok(calls_per_thread as usize * n * world)
    };
    let results: Vec<Result<usize, String>> = std::thread::scope(|sc| {
        let work = &work;
        let hs: Vec<_> = [5u32, 6].into_iter().map(|ch| sc.spawn(move || work(ch))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect()
    });
    let mut checked = 0;
    for res in results {
        checked += res?;
    }
    Ok((checked, 2 * calls_per_thread as usize))
}

/// sm-direct reading a bf16 input into f32 in place (NOTE [bf16 input read in place])
/// from ordinary memory, with predicted addresses ([`predicted_phases`]), every result
/// checked bit for bit against the f32 rank-order sum: rank 0's missed predictions are
/// rewritten in the kernel's address table before the kernel reads it. Returns the
/// checked elements and the calls.
fn predicted_reduce_scatters(r: &GpuRunner, sync: SyncMethod) -> Result<(usize, usize), String> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let n = 3 << 17;
    let opts = ReduceScatterOptions {
        algorithm: ReduceScatterAlgorithm::SmDirect,
        sync: Some(sync),
        channel: 3,
        map_ordinary: Some(true),
        ctas: Some(16),
        ..Default::default()
    };
    // The earlier checks' peer mappings are closed first: their buffers are freed, and a
    // new one at an address this rank still has mapped fails a predicted call (NOTE
    // [addresses predicted]: the verifier cannot close a mapping), which is not what this
    // check is about.
    r.g.synchronize(r.stream).map_err(e)?;
    let t = Instant::now();
    while r.g.mapped_allocations() > 0 && t.elapsed() < Duration::from_secs(5) {
        r.g.release_mappings().map_err(e)?;
        std::thread::sleep(Duration::from_millis(10));
    }
    let seed = seed_of_rank0(|mine| r.g.all_gather_bytes("mapped-predicted-rs", mine))?;
    let out = legacy(r, 4 * n)?;
    let mut checked = 0;
    let call = |src: u64, s: u64, what: &str| -> Result<(), String> {
        let data = input_bytes(DType::Bf16, s, rank, 0, n * world);
        // SAFETY: `src` holds world * n bf16 and `out` n f32; synchronous copies.
        unsafe {
            r.stream.copy_from_host(src, &data).map_err(e)?;
            r.stream.fill(out.ptr(), 0xFF, 4 * n).map_err(e)?;
        }
        // SAFETY: both live past the call, which is synchronised below.
        let (ib, ob) = unsafe {
            (DeviceBuf::from_raw(src, n * world, DType::Bf16), DeviceBuf::from_raw(out.ptr(), n, DType::F32))
        };
        r.g.reduce_scatter(ib, ob, ReduceOp::Sum, r.stream, &opts).map_err(|m| format!("rank {rank}: {what}: {m}"))?;
        r.g.synchronize(r.stream).map_err(|m| format!("rank {rank}: {what}: {m}"))?;
        let mut got = vec![0u8; 4 * n];
        // SAFETY: `out` holds n f32; synchronous copy.
        unsafe { r.stream.copy_to_host(&mut got, out.ptr()) }.map_err(e)?;
        let ins: Vec<Vec<u8>> = (0..world).map(|p| input_bytes(DType::Bf16, s, p, rank * n, n)).collect();
        for k in 0..n {
            let v = |p: usize| f32::from_bits((u16::from_le_bytes([ins[p][2 * k], ins[p][2 * k + 1]]) as u32) << 16);
            let want = (1..world).fold(v(0), |acc, p| acc + v(p));
            let have = f32::from_le_bytes(got[4 * k..4 * k + 4].try_into().expect("4 bytes"));
            if have.to_bits() != want.to_bits() {
                return Err(format!(
                    "rank {rank}: {what}: element {k} is {have}, want {want} (the f32 rank-order sum)"
                ));
            }
        }
        checked += n;
        Ok(())
    };
    let names = ("reduce-scatters read in place", "reduce-scatters", "predicted reduce-scatter, ");
    predicted_phases(r, seed, (2 * n * world, names), call)?;
    Ok((checked, 24))
}

/// Predicted addresses of all-gathers ([`predicted_phases`]), every result checked: rank
/// 0's missed predictions are fixed by copies. Returns the checked elements and the
/// calls. The copies wait for each
/// peer on a stream of its own (`any-order`, with memop sync; NOTE [arrival-driven
/// all-gather]), so a fix's copy must land after the joined streams' copies.
fn predicted_calls(r: &GpuRunner, sync: SyncMethod) -> Result<(usize, usize), String> {
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let n = 3 << 18;
    let opts = AllGatherOptions {
        algorithm: AllGatherAlgorithm::CePull,
        sync: Some(sync),
        channel: 2,
        map_ordinary: Some(true),
        arrival: Arrival::AnyOrder,
        ..Default::default()
    };
    let seed = seed_of_rank0(|mine| r.g.all_gather_bytes("mapped-predicted", mine))?;
    let out = legacy(r, 4 * n * world)?;
    let mut checked = 0;
    let call = |src: u64, s: u64, what: &str| -> Result<(), String> {
        let data = input_bytes(DType::F32, s, rank, 0, n);
        // SAFETY: `src` holds n f32; synchronous copy.
        unsafe { r.stream.copy_from_host(src, &data) }.map_err(e)?;
        checked += gather_checked(r, r.stream, &opts, src, out.ptr(), n, s, what)?;
        Ok(())
    };
    predicted_phases(r, seed, (4 * n, ("map_ordinary calls", "calls", "")), call)?;
    Ok((checked, 24))
}

/// The two phases of a predicted-address check (NOTE [addresses predicted]), `call(src,
/// seed, what)` making and checking one call from `src`: 12 calls from the same buffer
/// (one host rendezvous, 11 predicted, none missed), then 12 where rank 0 keeps its
/// buffer while every other rank alternates between two of `bytes` and, halfway, frees
/// one and allocates it again (a new buffer id, most likely at the same address): rank
/// 0 predicts all 12 (its call never changes) and misses whenever the peers' buffer
/// differs from its last call's, every call but the first; the others' predictions
/// hold. `names`: the calls in the first phase's error, in the second's, and the prefix
/// of each call's `what`.
fn predicted_phases(
    r: &GpuRunner,
    seed: u64,
    (bytes, (identical, plural, prefix)): (usize, (&str, &str, &str)),
    mut call: impl FnMut(u64, u64, &str) -> Result<(), String>,
) -> Result<(), String> {
    let rank = r.g.rank();
    let mut bufs = [legacy(r, bytes)?, legacy(r, bytes)?];
    let before = r.g.stats().map_err(e)?;
    for i in 0..12u64 {
        call(bufs[0].ptr(), seed ^ i, &format!("{prefix}same call {i}"))?;
    }
    let mid = r.g.stats().map_err(e)?;
    let (meets, predicted) =
        (mid.host_rendezvous - before.host_rendezvous, mid.predicted_calls - before.predicted_calls);
    if meets != 1 || predicted != 11 || mid.mispredicted_calls != before.mispredicted_calls {
        return Err(format!(
            "rank {rank}: 12 identical {identical} made {meets} host rendezvous (want 1) and predicted {predicted} \
             (want 11), {} mispredicted (want 0)",
            mid.mispredicted_calls - before.mispredicted_calls
        ));
    }
    for i in 0..12u64 {
        if rank != 0 && i == 6 {
            bufs[1] = legacy(r, bytes)?;
        }
        let src = if rank == 0 { bufs[0].ptr() } else { bufs[(i % 2) as usize].ptr() };
        call(src, seed ^ (100 + i), &format!("{prefix}moving peers, call {i}"))?;
    }
    let end = r.g.stats().map_err(e)?;
    let missed = end.mispredicted_calls - mid.mispredicted_calls;
    if rank == 0 && missed < 11 {
        return Err(format!("rank 0: peers alternating buffers: {missed} of 12 {plural} mispredicted (want 11)"));
    }
    if rank != 0 && missed != 0 {
        return Err(format!("rank {rank}: rank 0 kept its buffer, yet {missed} {plural} mispredicted"));
    }
    Ok(())
}
