//! Multi-process scenarios: each function runs as one rank, started by `lowcon launch`
//! (`lowcon selftest <scenario>`), and returns `Err` with a message if anything is off.
//! The cargo tests in `crates/lowcon-cli/tests/` launch them at several world sizes on
//! the host backend; the GPU bundle launches the GPU ones on every visible GPU.

use std::time::{Duration, Instant};

use lowcon::{Error, HostGroup, HostGroupOptions};
use lowcon_abi::payload_word;
use rand::Rng;

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

fn host_group(timeout: Option<Duration>) -> Result<HostGroup, String> {
    let mut opts = HostGroupOptions::default();
    if let Some(t) = timeout {
        opts.timeout = t;
    }
    HostGroup::from_env(opts).map_err(e)
}

/// `iters` barriers with random per-rank delays. Before barrier `i` each rank writes
/// `i` into its own buffer; after it, every peer's value must be `i` or `i + 1` (a peer
/// may already have entered the next barrier, never the one after): a barrier that let
/// a rank through early, or held one back, fails the check.
pub fn barrier_stress(iters: u64, max_delay_us: u64) -> Result<String, String> {
    let g = host_group(None)?;
    let (rank, world) = (g.rank(), g.world_size());
    let buf = g.alloc(8).map_err(e)?;
    let mut rng = rand::rng();
    let start = Instant::now();
    for i in 1..=iters {
        buf.write(rank, 0, &i.to_le_bytes()).map_err(e)?;
        if max_delay_us > 0 && rng.random_ratio(1, 64) {
            std::thread::sleep(Duration::from_micros(rng.random_range(0..=max_delay_us)));
        }
        g.barrier((i % 4) as u32).map_err(e)?;
        for p in 0..world {
            let mut v = [0u8; 8];
            buf.read(p, 0, &mut v).map_err(e)?;
            let v = u64::from_le_bytes(v);
            if v != i && v != i + 1 {
                return Err(format!("rank {rank}: after barrier {i}, rank {p} is at {v}"));
            }
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    Ok(format!("{iters} barriers over {world} ranks, {us:.1} us each"))
}

/// Ring publish-then-signal: each round, rank r fills its region in rank r+1's buffer
/// with fresh pseudo-random words, signals r+1 (channel 1), and checks every word of
/// what r-1 wrote into its own buffer after r-1's signal; then acknowledges (channel 2)
/// so r-1 may overwrite. The seed is drawn fresh by rank 0 each run.
pub fn publish_signal(rounds: u32, words: usize) -> Result<String, String> {
    let g = host_group(None)?;
    let (rank, world) = (g.rank(), g.world_size());
    if world < 2 {
        return Err("publish-signal needs at least 2 ranks".into());
    }
    let seed_buf = g.alloc(8).map_err(e)?;
    if rank == 0 {
        seed_buf.write(0, 0, &rand::rng().random::<u64>().to_le_bytes()).map_err(e)?;
    }
    g.barrier(0).map_err(e)?;
    let mut s = [0u8; 8];
    seed_buf.read(0, 0, &mut s).map_err(e)?;
    let seed = u64::from_le_bytes(s);

    let buf = g.alloc(words * 4).map_err(e)?;
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
    let mut out = vec![0u8; words * 4];
    let mut inp = vec![0u8; words * 4];
    let mut checked = 0u64;
    for round in 1..=rounds {
        if round > 1 {
            g.wait_signal(next, 2).map_err(e)?; // next has checked our previous round
        }
        for (i, w) in out.chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&payload_word(seed ^ rank as u64, round, i as u32).to_le_bytes());
        }
        buf.write(next, 0, &out).map_err(e)?;
        g.put_signal(next, 1).map_err(e)?;
        g.wait_signal(prev, 1).map_err(e)?;
        buf.read(rank, 0, &mut inp).map_err(e)?;
        for (i, w) in inp.chunks_exact(4).enumerate() {
            let got = u32::from_le_bytes(w.try_into().expect("4 bytes"));
            let want = payload_word(seed ^ prev as u64, round, i as u32);
            if got != want {
                return Err(format!(
                    "rank {rank}: round {round} word {i} from rank {prev}: got {got:#x}, want {want:#x}"
                ));
            }
            checked += 1;
        }
        g.put_signal(prev, 2).map_err(e)?;
    }
    g.wait_signal(next, 2).map_err(e)?;
    Ok(format!("{rounds} rounds, {checked} words checked, 0 wrong"))
}

/// Rank `skipper` never enters the barrier; every other rank must fail within the
/// timeout with an error that names it, and the group must then refuse further work.
pub fn skip_barrier(skipper: usize, timeout: Duration) -> Result<String, String> {
    let g = host_group(Some(timeout))?;
    let rank = g.rank();
    if rank == skipper {
        // Stay alive (so this is a timeout, not a dead peer) until the others are done.
        std::thread::sleep(timeout * 3);
        return Ok(format!("rank {rank} skipped the barrier"));
    }
    let t = Instant::now();
    match g.barrier(0) {
        Ok(()) => Err(format!("rank {rank}: the barrier completed although rank {skipper} never entered it")),
        Err(err @ Error::PeerTimeout { peer, .. }) if peer == skipper => {
            let took = t.elapsed();
            if took < timeout || took > timeout * 2 + Duration::from_secs(1) {
                return Err(format!("rank {rank}: timeout of {timeout:?} took {took:?}"));
            }
            match g.barrier(0) {
                Err(Error::GroupFailed(_)) => Ok(format!("{err}")),
                other => Err(format!("rank {rank}: group still usable after a timeout: {other:?}")),
            }
        }
        Err(other) => Err(format!("rank {rank}: wrong error: {other}")),
    }
}

/// Rank `victim` exits abruptly before the barrier; every other rank must get an error
/// naming it well before the (long) timeout.
pub fn dead_peer(victim: usize) -> Result<String, String> {
    let timeout = Duration::from_secs(60);
    let g = host_group(Some(timeout))?;
    let rank = g.rank();
    g.barrier(0).map_err(e)?;
    if rank == victim {
        // SAFETY-free abrupt exit: no destructors, like a crash.
        std::process::exit(0);
    }
    let t = Instant::now();
    match g.barrier(0) {
        Err(err @ Error::PeerGone { peer, .. }) if peer == victim && t.elapsed() < timeout / 4 => {
            Ok(format!("noticed in {:.0} ms: {err}", t.elapsed().as_secs_f64() * 1e3))
        }
        other => Err(format!("rank {rank}: expected PeerGone naming rank {victim} quickly, got {other:?}")),
    }
}

/// Every rank asks for a different size; allocation must fail on every rank with an
/// error naming the sizes.
pub fn mismatched_size() -> Result<String, String> {
    let g = host_group(None)?;
    let rank = g.rank();
    match g.alloc(4096 * (rank + 1)) {
        Ok(_) => Err(format!("rank {rank}: mismatched allocation succeeded")),
        Err(err @ Error::Rendezvous(_)) if err.to_string().contains("asked for") => Ok(err.to_string()),
        Err(other) => Err(format!("rank {rank}: wrong error: {other}")),
    }
}
