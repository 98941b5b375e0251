//! Shrinking a group after peers die (`lowcon selftest coll-shrink`): the victims
//! SIGKILL themselves before call `kill_at` of a loop of all-gathers; every survivor
//! must get an error naming a victim, shrink, and run the correctness suite on the new
//! group (fresh data, poisoned outputs, the CPU reference). It reports the time from the
//! kill point to the error, to the new group, and to the first correct collective.
//! `healthy_shrinks` instead shrinks a live group that many times (nobody dies) and
//! checks that nothing leaks: open file descriptors, and on GPUs the device memory
//! in use, before and after.

use std::time::{Duration, Instant};

use lowcon::{AllGatherOptions, Arrival, DType, HostInput, ReduceLaunch, SyncMethod};

use crate::coll::{self, Runner, input_bytes};

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// Open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// What the survivors measured, as one line.
fn report(rank: usize, new: (usize, usize), t: [Duration; 3], suite: &str) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "rank {rank} is rank {} of {} after the shrink: error {:.0} ms, new group {:.0} ms, first correct \
         collective {:.0} ms after the kill point; {suite}",
        new.0,
        new.1,
        ms(t[0]),
        ms(t[1]),
        ms(t[2])
    )
}

/// The victims' part, and the survivors' wait for their error: calls all-gathers
/// (`call`) until one fails; the victims die at `kill_at`. Returns the error and the
/// kill point's time.
fn until_failure(
    rank: usize,
    victims: &[usize],
    kill_at: usize,
    mut call: impl FnMut() -> lowcon::Result<()>,
) -> Result<(lowcon::Error, Instant), String> {
    let mut since = Instant::now();
    for i in 0..100_000 {
        if i == kill_at {
            if victims.contains(&rank) {
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            }
            since = Instant::now();
        }
        if let Err(err) = call() {
            if i < kill_at {
                return Err(format!("rank {rank}: call {i} failed before the kill point: {err}"));
            }
            return Ok((err, since));
        }
    }
    Err(format!("rank {rank}: 100000 calls succeeded although ranks {victims:?} died"))
}

/// Shrinks, retrying (a rank dying during a shrink makes an attempt fail: the others
/// try again, and the dead rank has hung up by then). `dies`: this rank SIGKILLs itself
/// `delay` after starting its first shrink.
fn shrink_retrying<G>(
    rank: usize,
    shrink: impl Fn() -> lowcon::Result<G>,
    dies: Option<Duration>,
) -> Result<(G, usize), String> {
    if let Some(delay) = dies {
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        });
    }
    let mut errors = Vec::new();
    for attempt in 0..4 {
        match shrink() {
            Ok(g) => return Ok((g, attempt)),
            Err(err) => {
                if lowcon::config::debug() {
                    eprintln!("rank {rank}: shrink attempt {attempt} failed: {err}");
                }
                errors.push(err.to_string())
            }
        }
    }
    Err(format!("rank {rank}: four shrink attempts failed: {errors:?}"))
}

/// Host backend: victims die, the survivors shrink and run the suite; with `dier`, that
/// rank dies during the shrink itself and the others retry.
pub fn host_shrink(
    victims: &[usize],
    kill_at: usize,
    timeout: Duration,
    dier: Option<(usize, Duration)>,
    late: Option<(usize, Duration)>,
) -> Result<String, String> {
    let g0 = coll::host_group(Some(timeout))?;
    let (rank, world) = (g0.rank(), g0.world_size());
    let input = input_bytes(DType::F32, 7, rank, 0, 256);
    let mut out = vec![0u8; input.len() * world];
    let opts = AllGatherOptions::default();
    let (err, since) =
        until_failure(rank, victims, kill_at, || g0.all_gather(HostInput::Plain(&input), &mut out, DType::F32, &opts))?;
    let failed = since.elapsed();
    if !victims.iter().any(|v| crate::dead_peer::blames(&err, *v)) {
        return Err(format!("rank {rank}: the error names none of {victims:?}: {err}"));
    }
    if let Some((_, delay)) = late.filter(|l| l.0 == rank) {
        return left_out(rank, delay, &g0);
    }
    let dies = dier.filter(|d| d.0 == rank).map(|d| d.1);
    let (g, mut attempts) = shrink_retrying(rank, || g0.shrink(), dies)?;
    drop(g0);
    let mut runner = Runner::new(g)?;
    // A rank that died just after a shrink completed is in the new group: its first
    // collective names it, and the survivors shrink once more.
    let mut rounds = 0;
    while let Err(why) = one_check(&runner, rounds) {
        if dier.is_none() || rounds == 2 {
            return Err(format!("rank {rank}: the first collective of the shrunken group: {why}"));
        }
        let (g, a) = shrink_retrying(rank, || runner.g.shrink(), None)?;
        runner = Runner::new(g)?;
        (attempts, rounds) = (attempts + a, rounds + 1);
    }
    let (shrunk, first) = (since.elapsed(), since.elapsed());
    let gone: Vec<usize> = victims.iter().copied().chain(dier.map(|d| d.0)).chain(late.map(|l| l.0)).collect();
    check_members(rank, world, &gone, runner.g.rank(), runner.g.world_size())?;
    let suite = coll::run_suite(&runner, &coll::suite(SyncMethod::Kernel, 1001))?;
    let retried = match (attempts, rounds) {
        (0, 0) => String::new(),
        (a, r) => format!(" ({a} failed shrink attempts, {r} shrinks more after a death in a new group)"),
    };
    Ok(report(rank, (runner.g.rank(), runner.g.world_size()), [failed, shrunk, first], &suite) + &retried)
}

/// The late rank's part: it calls `shrink` `delay` late, past the agreement window, and
/// must be told it was left out; calling it again must say so at once.
fn left_out(rank: usize, delay: Duration, g: &lowcon::HostGroup) -> Result<String, String> {
    std::thread::sleep(delay);
    let first = match g.shrink() {
        Ok(n) => return Err(format!("rank {rank}: a shrink {delay:?} late made a group of {}", n.world_size())),
        Err(e) => e.to_string(),
    };
    let start = Instant::now();
    let again = match g.shrink() {
        Ok(n) => {
            return Err(format!(
                "rank {rank}: a second shrink after being left out made a group of {}",
                n.world_size()
            ));
        }
        Err(e) => e.to_string(),
    };
    if !first.contains("left out")
        || !again.contains("left out of an earlier shrink")
        || start.elapsed() > Duration::from_secs(1)
    {
        return Err(format!("rank {rank}: late shrink: first {first:?}, then after {:?}: {again:?}", start.elapsed()));
    }
    Ok(format!("rank {rank} was left out, as it should be: {first}; then: {again}"))
}

/// GPU backend: as [`host_shrink`].
pub fn gpu_shrink(victims: &[usize], kill_at: usize, timeout: Duration, sync: SyncMethod) -> Result<String, String> {
    let run = Runner::from_env(true, Some(timeout))?;
    let r = run.gpu("coll-shrink")?;
    let (rank, world) = (r.g.rank(), r.g.world_size());
    let case = coll::Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll: coll::Coll::AllGather(lowcon::AllGatherAlgorithm::CePull),
        dtype: DType::F32,
        count: 4096,
        symmetric: false,
        misalign: 0,
        sync,
        channel: 0,
    };
    let (inp, out) = r.prepare(&case, &input_bytes(DType::F32, 7, rank, 0, case.count))?;
    let (err, since) = until_failure(rank, victims, kill_at, || {
        r.enqueue(&case, r.stream, &inp, &out).map_err(lowcon::Error::InvalidArgument)?;
        r.g.synchronize(r.stream)
    })?;
    let failed = since.elapsed();
    if !victims.iter().any(|v| crate::dead_peer::blames(&err, *v)) {
        return Err(format!("rank {rank}: the error names none of {victims:?}: {err}"));
    }
    let g = r.g.shrink().map_err(|m| format!("rank {rank}: shrink: {m}"))?;
    let shrunk = since.elapsed();
    drop((inp, out));
    drop(run);
    check_members(rank, world, victims, g.rank(), g.world_size())?;
    let runner = Runner::new(g)?;
    one_check(&runner, 0)?;
    let first = since.elapsed();
    let suite = coll::run_suite(&runner, &coll::suite(sync, 1001))?;
    Ok(report(rank, (runner.g.rank(), runner.g.world_size()), [failed, shrunk, first], &suite))
}

/// The new rank and world must be the survivors', renumbered in order.
fn check_members(
    rank: usize,
    world: usize,
    victims: &[usize],
    new_rank: usize,
    new_world: usize,
) -> Result<(), String> {
    let survivors: Vec<usize> = (0..world).filter(|p| !victims.contains(p)).collect();
    let want = survivors.iter().position(|&p| p == rank);
    if new_world != survivors.len() || Some(new_rank) != want {
        return Err(format!(
            "rank {rank}: the shrunken group has this rank as {new_rank} of {new_world}; survivors {survivors:?}"
        ));
    }
    Ok(())
}

/// Shrinks a live group `n` times (nobody dies), one checked all-gather on each new
/// group, and compares open file descriptors (and on GPUs the device memory in use)
/// before and after.
pub fn healthy_shrinks(n: usize, gpu: bool) -> Result<String, String> {
    let mut r = Runner::from_env(gpu, None)?;
    let (rank, world) = (r.rank(), r.world());
    one_check(&r, n)?;
    let fds0 = open_fds();
    let mem0 = used_device_memory(&r)?;
    for i in 0..n {
        r = Runner::new(r.g.shrink().map_err(|m| format!("rank {rank}: shrink {i}: {m}"))?)?;
        one_check(&r, i)?;
    }
    // Measured with the last group alive, as the first was (the device's context ends
    // with the last group).
    let mem1 = used_device_memory(&r)?;
    drop(r);
    let fds1 = open_fds();
    // The first groups' one-time costs (the driver's handles, a lazily made thread pool)
    // are not leaks: a few descriptors and 32 MiB of slack (the GPU's memory in use is
    // every rank's, measured while the others may be mid-shrink); per shrink, a leak
    // would show n times over (a module per group was 1 MiB: 100 shrinks, 100 MiB).
    if fds1 > fds0 + 8 || mem1 > mem0 + (32 << 20) {
        return Err(format!(
            "rank {rank}: after {n} shrinks of {world} ranks: {fds0} -> {fds1} open file descriptors, device memory \
             in use {} -> {} MiB",
            mem0 >> 20,
            mem1 >> 20
        ));
    }
    Ok(format!(
        "{n} shrinks of a live group of {world}, each checked; open file descriptors {fds0} -> {fds1}{}",
        if gpu { format!(", device memory in use {} -> {} MiB", mem0 >> 20, mem1 >> 20) } else { String::new() }
    ))
}

fn one_check(r: &Runner, i: usize) -> Result<(), String> {
    let case = coll::Case {
        launch: ReduceLaunch::Auto,
        arrival: Arrival::Auto,
        coll: coll::Coll::AllGather(lowcon::AllGatherAlgorithm::Auto),
        dtype: DType::F32,
        count: 1001,
        symmetric: false,
        misalign: 0,
        sync: SyncMethod::Kernel,
        channel: 0,
    };
    coll::check_case(r, &case, &format!("healthy-shrink-{i}")).map(drop)
}

/// Device memory in use (total minus free) on the runner's device, once every rank has
/// got here (ranks sharing a GPU see each other's memory); 0 on the host backend.
fn used_device_memory(r: &Runner) -> Result<usize, String> {
    if r.g.device().is_none() {
        return Ok(0);
    }
    r.g.store_barrier("shrink-memory").map_err(e)?;
    r.g.device().map_or(Ok(0), |d| d.memory_info().map(|(free, total)| total - free)).map_err(e)
}
