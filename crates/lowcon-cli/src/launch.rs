//! `lowcon launch`: starts N ranks with the torchrun environment contract, hosts the
//! store, and fails fast.
//!
//! NOTE [fail fast, no orphans]: every rank runs in its own process group, so a signal
//! to the group reaches whatever the rank started too. When a rank exits non-zero or
//! dies by a signal, the others' groups get SIGTERM, then SIGKILL after the grace
//! period; the report names the rank that failed *first* and how. SIGINT, SIGTERM and
//! SIGHUP sent to the launcher are forwarded the same way (a second one kills at once).
//! At the end every group gets a final SIGKILL, so background children a rank left
//! behind in its group do not outlive the job. If the launcher itself is SIGKILLed,
//! `PR_SET_PDEATHSIG` takes the ranks down with it.
//!
//! With `--keep-going` (for survivors that shrink the group after a peer died) a rank
//! killed by a signal stops nobody: it is reported, and the job succeeds if every other
//! rank exits 0 (at least one must). A rank that exits non-zero on its own still stops
//! the job as above: it failed, it did not merely die.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lowcon_store::env::{JOB_ID_ENV, STORE_ADDR_ENV};
use lowcon_store::{ServerOptions, StoreServer, TOKEN_ENV};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// What `lowcon launch` was asked to do.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    pub nproc: usize,
    pub master_addr: String,
    pub master_port: u16,
    pub store_port: u16,
    pub tee: bool,
    pub grace: Duration,
    /// Place the ranks round-robin on this many GPUs (`LOWCON_DEVICE` = rank mod M), and
    /// let them share GPUs (`LOWCON_SHARE_GPU=1`) when there are more ranks than GPUs.
    pub gpus: Option<usize>,
    /// A rank killed by a signal does not stop the others (NOTE [fail fast, no orphans]).
    pub keep_going: bool,
    pub command: Vec<OsString>,
}

/// `eprintln!` in one write: stderr is unbuffered, and `eprintln!` writes its pieces one
/// by one, so a rank's line pumped at the same moment (`pump`) could land inside
/// the launcher's message (seen in the fault matrix: "lowcon launch: rank [rank 1] ...").
macro_rules! say {
    ($($arg:tt)*) => {{
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

/// The GPU placement variables `lowcon launch --gpus M` gives rank `rank` of `nproc`.
pub fn placement_env(rank: usize, nproc: usize, gpus: usize) -> Vec<(&'static str, String)> {
    let mut env = vec![(lowcon::config::DEVICE_ENV, (rank % gpus).to_string())];
    if nproc > gpus {
        env.push((lowcon::config::SHARE_GPU_ENV, "1".to_string()));
        // Their hardware work queues: `queues_env`.
        // No cap on a client's share of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): the
        // group caps its kernels' CTAs instead (NOTE [shared CTAs] in lowcon's plan/mod.rs),
        // and a per-client cap left too few SMs for torch's own kernels beside them (FSDP2
        // at 8 ranks on one H100 stopped with 12%, passed uncapped).
    }
    env
}

/// The hardware work queues (`CUDA_DEVICE_MAX_CONNECTIONS`) a rank asks for, unless the
/// user chose (docs/design.md, "Enough hardware queues"). With fewer queues than streams,
/// a wait at a queue's head holds back another stream's work behind it, which a peer may
/// wait for (a cross-rank deadlock).
/// - Ranks sharing a GPU (MPS): 8, what a process gets without MPS (a client gets few
///   unless it asks, and 32 per client is too many for 8 clients).
/// - A GPU each: 32, the most. With the driver's default 8, `coll-mapped`'s two threads on
///   channels 5 and 6 (kernel sync) timed out at about the same call in 3 of 6 runs at 4
///   ranks on 4x H200 and passed 3 of 3 with 32 (2026-11-27).
pub fn queues_env(nproc: usize, gpus: Option<usize>) -> Option<String> {
    if std::env::var_os(lowcon::config::MAX_CONNECTIONS_ENV).is_some() {
        return None;
    }
    let sharing = gpus.is_some_and(|g| nproc > g);
    Some(if sharing { "8" } else { "32" }.to_string())
}

enum Event {
    Exited { rank: usize, status: std::io::Result<ExitStatus> },
    Signal(i32),
}

/// How a rank ended, in words ("exit code 3", "signal SIGKILL (9)").
pub fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => {
            let name = Signal::try_from(s).map(|s| s.as_str().to_string()).unwrap_or_else(|_| "unknown".into());
            format!("signal {name} ({s})")
        }
        _ => "an unknown status".into(),
    }
}

fn exit_code(status: &ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut b = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn signal_groups(pids: &[Option<u32>], sig: Signal) {
    for pid in pids.iter().flatten() {
        // ESRCH (the group is gone) is expected and harmless.
        let _ = killpg(Pid::from_raw(*pid as i32), sig);
    }
}

/// Runs the job; returns the launcher's exit code.
pub fn launch(opts: &LaunchOptions) -> Result<i32, String> {
    if opts.command.is_empty() {
        return Err("no command given (usage: lowcon launch --nproc-per-node N -- CMD ARGS...)".into());
    }
    if opts.nproc == 0 {
        return Err("--nproc-per-node must be at least 1".into());
    }
    let token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()).unwrap_or_else(|| random_hex(16));
    let job_id = std::env::var(JOB_ID_ENV).ok().filter(|t| !t.is_empty()).unwrap_or_else(|| random_hex(8));
    let server_opts = ServerOptions { token: Some(token.clone().into_bytes()), ..ServerOptions::default() };
    let bind = format!("{}:{}", opts.master_addr, opts.store_port);
    let server = StoreServer::start(&bind, server_opts).map_err(|e| e.to_string())?;
    let store_addr = server.local_addr().to_string();

    let (tx, rx) = mpsc::channel::<Event>();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let sig_handle = signals.handle();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for s in signals.forever() {
                if tx.send(Event::Signal(s)).is_err() {
                    break;
                }
            }
        });
    }

    let parent = std::process::id();
    let mut pids: Vec<Option<u32>> = vec![None; opts.nproc];
    let mut pumps = Vec::new();
    let mut spawn_error = None;
    for (rank, slot) in pids.iter_mut().enumerate() {
        let mut cmd = Command::new(&opts.command[0]);
        cmd.args(&opts.command[1..])
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", opts.nproc.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", opts.nproc.to_string())
            .env("GROUP_RANK", "0")
            .env("MASTER_ADDR", &opts.master_addr)
            .env("MASTER_PORT", opts.master_port.to_string())
            .env(STORE_ADDR_ENV, &store_addr)
            .env(TOKEN_ENV, &token)
            .env(JOB_ID_ENV, &job_id)
            .process_group(0);
        if let Some(m) = opts.gpus {
            cmd.envs(placement_env(rank, opts.nproc, m));
        }
        if let Some(q) = queues_env(opts.nproc, opts.gpus) {
            cmd.env(lowcon::config::MAX_CONNECTIONS_ENV, q);
        }
        if opts.tee {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        // SAFETY: the closure runs between fork and exec and only makes the
        // async-signal-safe calls prctl(PR_SET_PDEATHSIG) and getppid.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
                // The launcher may have died before the prctl took effect.
                if nix::unistd::getppid().as_raw() as u32 != parent {
                    return Err(std::io::Error::other("launcher exited"));
                }
                Ok(())
            })
        };
        let mut child: Child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                spawn_error = Some(format!("cannot start rank {rank} ({:?}): {e}", opts.command[0]));
                break;
            }
        };
        *slot = Some(child.id());
        if opts.tee {
            if let Some(out) = child.stdout.take() {
                pumps.push(pump(rank, out, false));
            }
            if let Some(err) = child.stderr.take() {
                pumps.push(pump(rank, err, true));
            }
        }
        let tx = tx.clone();
        std::thread::spawn(move || {
            let status = child.wait();
            let _ = tx.send(Event::Exited { rank, status });
        });
    }
    drop(tx);

    let started = pids.iter().filter(|p| p.is_some()).count();
    let mut running = started;
    let mut first_failure: Option<(usize, String, i32)> = None;
    let (mut lost, mut finished) = (Vec::new(), 0usize);
    let mut interrupted: Option<i32> = None;
    let mut kill_at: Option<Instant> = None;
    if let Some(e) = &spawn_error {
        say!("lowcon launch: {e}; stopping the ranks already started");
        signal_groups(&pids, Signal::SIGTERM);
        kill_at = Some(Instant::now() + opts.grace);
    }
    while running > 0 {
        let ev = match kill_at {
            Some(t) => match rx.recv_timeout(t.saturating_duration_since(Instant::now())) {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    say!(
                        "lowcon launch: {running} rank(s) still running {:.1} s after SIGTERM; sending SIGKILL",
                        opts.grace.as_secs_f64()
                    );
                    signal_groups(&pids, Signal::SIGKILL);
                    kill_at = None;
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(ev) => ev,
                Err(_) => break,
            },
        };
        match ev {
            Event::Exited { rank, status } => {
                running -= 1;
                let status = match status {
                    Ok(s) => s,
                    Err(e) => {
                        say!("lowcon launch: cannot wait for rank {rank}: {e}");
                        continue;
                    }
                };
                finished += usize::from(status.success());
                if opts.keep_going && status.signal().is_some() && first_failure.is_none() && interrupted.is_none() {
                    let how = describe(&status);
                    say!(
                        "lowcon launch: rank {rank} (pid {}) died: {how}; the others keep going (--keep-going)",
                        pids[rank].unwrap_or(0)
                    );
                    lost.push(format!("rank {rank} ({how})"));
                    continue;
                }
                if !status.success() && first_failure.is_none() && interrupted.is_none() {
                    let how = describe(&status);
                    say!(
                        "lowcon launch: rank {rank} (pid {}) failed first: {how}; stopping the other ranks",
                        pids[rank].unwrap_or(0)
                    );
                    first_failure = Some((rank, how, exit_code(&status)));
                    signal_groups(&pids, Signal::SIGTERM);
                    kill_at = Some(Instant::now() + opts.grace);
                }
            }
            Event::Signal(sig) => {
                let signal = Signal::try_from(sig).unwrap_or(Signal::SIGTERM);
                if interrupted.is_some() || first_failure.is_some() {
                    say!("lowcon launch: {} again: killing every rank now", signal.as_str());
                    signal_groups(&pids, Signal::SIGKILL);
                } else {
                    say!("lowcon launch: received {}; forwarding it to every rank", signal.as_str());
                    interrupted = Some(sig);
                    signal_groups(&pids, signal);
                    kill_at = Some(Instant::now() + opts.grace);
                }
            }
        }
    }
    // Whatever a rank left running in its process group goes too.
    signal_groups(&pids, Signal::SIGKILL);
    sig_handle.close();
    // Output pumps end when the ranks' pipes close; a descendant that escaped its
    // process group could hold one open forever, so they get a bounded time.
    let deadline = Instant::now() + Duration::from_secs(2);
    while pumps.iter().any(|p| !p.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    server.shutdown();

    Ok(match (spawn_error, first_failure, interrupted) {
        (Some(_), _, _) => 1,
        (None, Some((rank, how, code)), _) => {
            say!("lowcon launch: job failed: rank {rank} exited first with {how}");
            if code == 0 { 1 } else { code }
        }
        (None, None, Some(sig)) => 128 + sig,
        (None, None, None) if lost.is_empty() => 0,
        (None, None, None) => {
            let ok = finished > 0;
            say!(
                "lowcon launch: job {}: {} died, {finished} rank(s) finished",
                if ok { "finished without them" } else { "failed" },
                lost.join(", ")
            );
            if ok { 0 } else { 1 }
        }
    })
}

/// Copies a rank's output to ours, line by line, with a `[rank k]` prefix.
fn pump(rank: usize, src: impl std::io::Read + Send + 'static, is_err: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    let mut buf = format!("[rank {rank}] ").into_bytes();
                    buf.extend_from_slice(&line);
                    // One write per line under the stream's lock keeps lines whole.
                    let _ = if is_err {
                        std::io::stderr().lock().write_all(&buf)
                    } else {
                        std::io::stdout().lock().write_all(&buf)
                    };
                }
            }
        }
    })
}
