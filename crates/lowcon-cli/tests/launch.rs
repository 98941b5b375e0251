//! `lowcon launch` and `lowcon store serve` as users run them: real processes, real
//! signals. Every test checks that no rank (or anything a rank started) outlives it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lowcon_store::{ClientOptions, StoreClient, StoreError};

const LOWCON: &str = env!("CARGO_BIN_EXE_lowcon");

/// Alive = exists and is not a zombie (a reparented zombie may never be reaped in a
/// container whose init does not reap).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
    }
}

fn pids_in(dir: &Path) -> Vec<i32> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn assert_all_dead(dir: &Path) {
    let pids = pids_in(dir);
    assert!(!pids.is_empty(), "the ranks recorded no pids");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "orphans left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A rank script: record the shell's pid and a background sleeper's pid in `dir`.
fn record_pids(dir: &Path) -> String {
    format!("sleep 60 & echo $! > {d}/bg.$RANK; echo $$ > {d}/sh.$RANK", d = dir.display())
}

/// Shell code that waits until `n` pid files exist in `dir`.
fn wait_files(dir: &Path, n: usize) -> String {
    format!("while [ $(ls {} | wc -l) -lt {n} ]; do sleep 0.02; done", dir.display())
}

fn launch(args: &[&str], script: &str) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(LOWCON).arg("launch").args(args).args(["--", "sh", "-c", script]).output().unwrap();
    (out, t.elapsed())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn gpus_places_ranks_round_robin_and_shares_only_when_needed() {
    let script =
        "echo \"D=${LOWCON_DEVICE:-unset} S=${LOWCON_SHARE_GPU:-unset} C=${CUDA_DEVICE_MAX_CONNECTIONS:-unset}\"";
    let (out, _) = launch(&["--nproc-per-node", "5", "--gpus", "2", "--tee"], script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    for (r, d) in [(0, 0), (1, 1), (2, 0), (3, 1), (4, 0)] {
        assert!(stdout.contains(&format!("[rank {r}] D={d} S=1 C=8\n")), "{stdout}");
    }
    // The user's own work-queue count is kept.
    let out = Command::new(LOWCON)
        .args(["launch", "--nproc-per-node", "2", "--gpus", "1", "--tee", "--", "sh", "-c", script])
        .env("CUDA_DEVICE_MAX_CONNECTIONS", "4")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[rank 1] D=0 S=1 C=4\n"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // As many GPUs as ranks: placed, not shared, with every hardware queue (32).
    let (out, _) = launch(&["--nproc-per-node", "2", "--gpus", "2", "--tee"], script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    assert!(
        stdout.contains("[rank 0] D=0 S=unset C=32\n") && stdout.contains("[rank 1] D=1 S=unset C=32\n"),
        "{stdout}"
    );
    // Without --gpus nothing is placed; the queues as above.
    let (out, _) = launch(&["--nproc-per-node", "2", "--tee"], script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[rank 1] D=unset S=unset C=32\n"), "{stdout}");
    // Bad values are clear errors.
    let (out, _) = launch(&["--nproc-per-node", "2", "--gpus", "0"], script);
    assert!(
        !out.status.success() && stderr(&out).contains("--gpus \"0\": expected a positive number"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn ranks_get_the_torchrun_environment_and_meet_in_the_store() {
    let script = format!(
        "echo \"R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE M=$MASTER_ADDR:$MASTER_PORT S=${{LOWCON_STORE_ADDR:+set}}\"; \
         {LOWCON} store barrier start && {LOWCON} store add ranks 1 >/dev/null && {LOWCON} store barrier end && \
         [ \"$({LOWCON} store get ranks)\" = 4 ] && echo met"
    );
    let (out, _) = launch(&["--nproc-per-node", "4", "--tee", "--master-port", "29555"], &script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    for r in 0..4 {
        assert!(stdout.contains(&format!("[rank {r}] R={r} W=4 L={r} LW=4 M=127.0.0.1:29555 S=set\n")), "{stdout}");
        assert!(stdout.contains(&format!("[rank {r}] met\n")), "{stdout}");
    }
}

#[test]
fn a_rank_exiting_3_stops_the_others_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let script =
        format!("{}; if [ $RANK = 1 ]; then {}; exit 3; fi; wait", record_pids(dir.path()), wait_files(dir.path(), 8));
    let (out, took) = launch(&["--nproc-per-node", "4", "--grace-period", "2"], &script);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("rank 1 (pid") && err.contains("failed first: exit code 3"), "{err}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_all_dead(dir.path());
}

#[test]
fn a_rank_killed_by_sigkill_is_named_with_its_signal() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "{}; if [ $RANK = 2 ]; then {}; kill -9 $$; fi; wait",
        record_pids(dir.path()),
        wait_files(dir.path(), 6)
    );
    let (out, _) = launch(&["--nproc-per-node", "3", "--grace-period", "2"], &script);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(128 + 9), "{err}");
    assert!(err.contains("rank 2 (pid") && err.contains("signal SIGKILL (9)"), "{err}");
    assert_all_dead(dir.path());
}

#[test]
fn ranks_ignoring_sigterm_are_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "trap '' TERM; {}; if [ $RANK = 0 ]; then {}; exit 1; fi; wait",
        record_pids(dir.path()),
        wait_files(dir.path(), 6)
    );
    let (out, took) = launch(&["--nproc-per-node", "3", "--grace-period", "0.5"], &script);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("sending SIGKILL"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_all_dead(dir.path());
}

#[test]
fn sigterm_to_the_launcher_is_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!("{}; wait", record_pids(dir.path()));
    let child = Command::new(LOWCON)
        .args(["launch", "--nproc-per-node", "3", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids_in(dir.path()).len() < 6 {
        assert!(Instant::now() < deadline, "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("received SIGTERM; forwarding it to every rank"), "{err}");
    assert_all_dead(dir.path());
}

#[test]
fn ranks_die_with_a_sigkilled_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!("echo $$ > {}/rank.$RANK; exec sleep 60", dir.path().display());
    let mut child =
        Command::new(LOWCON).args(["launch", "--nproc-per-node", "2", "--", "sh", "-c", &script]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids_in(dir.path()).len() < 2 {
        assert!(Instant::now() < deadline, "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_all_dead(dir.path());
}

#[test]
fn bad_launch_arguments_are_clear_errors() {
    let run = |args: &[&str]| Command::new(LOWCON).arg("launch").args(args).output().unwrap();
    let out = run(&["--nproc-per-node", "0", "--", "true"]);
    assert!(!out.status.success() && stderr(&out).contains("expected a positive number"), "{}", stderr(&out));
    let out = run(&["--nproc-per-node", "2", "--", "/nonexistent/program"]);
    assert!(!out.status.success() && stderr(&out).contains("cannot start rank 0"), "{}", stderr(&out));
    if !lowcon::cuda::driver_present() {
        let out = run(&["--nproc-per-node", "gpu", "--", "true"]);
        assert!(stderr(&out).contains("--nproc-per-node gpu: no CUDA driver"), "{}", stderr(&out));
    }
}

#[test]
fn a_store_server_killed_mid_wait_gives_clients_an_error() {
    let mut server = Command::new(LOWCON)
        .args(["store", "serve", "--bind", "127.0.0.1:0"])
        .env_remove("LOWCON_STORE_TOKEN")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("lowcon store: serving on ").unwrap_or_else(|| panic!("{line}")).to_string();
    let waiter = std::thread::spawn(move || {
        let mut c = StoreClient::connect(addr, ClientOptions::default()).unwrap();
        c.set("x", b"1").unwrap();
        let t = Instant::now();
        (c.get_timeout("never", Duration::from_secs(60)), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    server.kill().unwrap();
    server.wait().unwrap();
    let (r, took) = waiter.join().unwrap();
    assert!(matches!(r, Err(StoreError::Disconnected { op: "get", .. })), "{r:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// `--keep-going`: a rank killed by a signal stops nobody; the others finish and the job
/// succeeds. A rank that exits non-zero on its own still stops the job.
#[test]
fn keep_going_lets_the_others_finish_after_a_rank_is_killed() {
    // Rank 1 SIGKILLs itself; the others outlive it and finish.
    let script = "if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 0.5; echo finished";
    let (out, _) = launch(&["--nproc-per-node", "3", "--tee", "--keep-going"], script);
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(out.status.success(), "{stdout}\n{err}");
    assert!(stdout.contains("[rank 0] finished") && stdout.contains("[rank 2] finished"), "{stdout}\n{err}");
    assert!(err.contains("rank 1 (pid") && err.contains("died: signal SIGKILL (9)"), "{err}");
    assert!(err.contains("finished without them: rank 1 (signal SIGKILL (9)) died, 2 rank(s) finished"), "{err}");
    // Without --keep-going the same job fails.
    let (out, _) = launch(&["--nproc-per-node", "3"], script);
    assert!(!out.status.success(), "{}", stderr(&out));
    // A rank that exits 3 still stops the job, --keep-going or not.
    let script = "if [ $RANK = 1 ]; then exit 3; fi; sleep 30";
    let (out, took) = launch(&["--nproc-per-node", "3", "--keep-going", "--grace-period", "1"], script);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(took < Duration::from_secs(15), "{took:?}");
    // Every rank killed: nobody finished, the job failed.
    let (out, _) = launch(&["--nproc-per-node", "2", "--keep-going"], "kill -9 $$");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}
