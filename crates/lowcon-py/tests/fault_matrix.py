"""The fault matrix: a peer leaves (five ways) at seven moments, under four launchers;
every survivor must end with a lowcon error naming it, within a bound, and nothing may
hang. Each cell starts real rank processes running faults.py.

    python fault_matrix.py --backend gpu --launchers hand,launch,keep-going,torchrun \\
        --exits os_exit,sys_exit,exception,sigkill,sigterm --moments ag,rs,ll,pool,init,close,sync \\
        --syncs kernel,memop --out DIR
    python fault_matrix.py --world 4 --victims 2 ...    # 4 ranks, the last 2 leave together

Outcomes per cell:
- `named`: every survivor raised a lowcon error naming the victim; the detection time
  is from the victim's exit (or stop, for `sigstop`) to the survivor's error; then,
  where a group exists (not `init`), every survivor shrank it and all-gathered on the
  new group ("then shrink", the time that took), else `FAILED (then shrink)`;
- `launcher`: the launcher stopped the job first (torchrun and `lowcon launch` end the
  whole job when a rank fails: an exception or a signal), which it reports naming the
  failed rank; nothing hung. `keep-going` (`lowcon launch --keep-going`) ends it only
  for a rank that exits non-zero (`exception`): for a signal its cells must be `named`,
  shrink included;
- `HUNG`: a process was still running at the cell's limit (then killed);
- `FAILED`: anything else (the output is kept in DIR).

The host backend (no GPU) runs the same cells in CI through test_faults.py. Needs the
`lowcon` binary: LOWCON_BIN, or target/debug/lowcon of this repository.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
WORKER = str(HERE / "faults.py")
LOWCON = os.environ.get("LOWCON_BIN", str(REPO / "target" / "debug" / "lowcon"))
WORLD = 2  # --world
VICTIMS = 1  # --victims: the last ones leave
# A survivor's error is due within this bound of the victim's exit: the watchdog's 50 ms
# grace, the sentinel's 100 ms, polling. Group creation waits out the group's timeout.
BOUND_MS = 2000


def stopped(out):
    """Whether a launcher says it stopped the job for a victim (not `--keep-going`'s "died")."""
    v = "|".join(str(r) for r in range(WORLD - VICTIMS, WORLD))
    return re.search(rf"lowcon launch: rank (?:{v}) \(pid \d+\) failed first|Root Cause[\s\S]*rank\s*: (?:{v}) ", out)


def _start_store():
    store = subprocess.Popen([LOWCON, "store", "serve", "--bind", "127.0.0.1:0"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in store.stdout:
        if "serving on" in line:
            return store, line.split("serving on", 1)[1].strip()
    raise RuntimeError("the store did not start")


def _kill_tree(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_cell(backend, launcher, exit_, moment, sync, limit, timeout_s):
    """Runs one cell; returns (outcome, detect_ms or None, wall seconds, output)."""
    fault_dir = tempfile.mkdtemp(prefix="lowcon-fault-")
    # Group creation waits for a missing rank up to the set-up timeout (default 300 s):
    # here the group's timeout, so that the init cells end in seconds.
    env = dict(os.environ, FAULT_DIR=fault_dir, LOWCON_SYNC=sync, FAULT_TIMEOUT=str(timeout_s),
               FAULT_VICTIMS=str(VICTIMS),
               LOWCON_SETUP_TIMEOUT_MS=str(int(timeout_s * 1000)), PYTHONUNBUFFERED="1")
    args = [sys.executable, WORKER, backend, exit_, moment]
    t0 = time.monotonic()
    procs, store = [], None
    if launcher == "hand":
        store, addr = _start_store()
        base = dict(env, WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                    MASTER_PORT="1", LOWCON_STORE_ADDR=addr)
        for r in range(WORLD):
            procs.append(subprocess.Popen(args, env=dict(base, RANK=str(r), LOCAL_RANK=str(r)),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True))
    elif launcher in ("launch", "keep-going"):
        flags = ["--keep-going"] if launcher == "keep-going" else []
        procs.append(subprocess.Popen([LOWCON, "launch", "--nproc-per-node", str(WORLD), "--tee", *flags, "--", *args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    elif launcher == "torchrun":
        port = 29500 + (os.getpid() + int(t0 * 1000)) % 2000
        procs.append(subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                                       str(WORLD), "--master-port", str(port), *args[1:]],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    else:
        raise ValueError(launcher)
    outs, hung = [], False
    sigstop = exit_ == "sigstop"
    if sigstop:
        assert launcher == "hand", "sigstop cells start their ranks by hand"
    for i, p in enumerate(procs):
        if sigstop and i >= len(procs) - VICTIMS:
            # The stopped victims never end by themselves: end them once the survivors have.
            _kill_tree(p)
        try:
            out, _ = p.communicate(timeout=max(1.0, limit - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            hung = True
            _kill_tree(p)
            out, _ = p.communicate()
        outs.append(out)
    wall = time.monotonic() - t0
    if store is not None:
        store.kill()
        store.wait()
    out = "\n".join(outs)
    if hung:
        return "HUNG", None, wall, out
    survivors = list(range(WORLD - VICTIMS))
    named = [re.search(rf"rank {r}: fault ok: detected (\d+) ms", out) for r in survivors]
    if all(named):
        if moment == "init":  # no group to shrink
            return "named", max(int(m.group(1)) for m in named), wall, out
        shrunk = [re.search(rf"rank {r}: then shrink ok: .* in (\d+) ms", out) for r in survivors]
        if not all(shrunk):
            # A launcher may end the job (a failed rank) while the survivors shrink.
            if launcher != "hand" and exit_ in ("exception", "sigkill", "sigterm") and stopped(out):
                return "launcher", None, wall, out
            return "FAILED (then shrink)", None, wall, out
        return "named", (max(int(m.group(1)) for m in named), max(int(m.group(1)) for m in shrunk)), wall, out
    # A launcher ends the whole job when a rank fails (non-zero exit or a signal).
    # Both launchers then name the failed rank: `lowcon launch: rank 1 (pid ..) failed
    # first`, torchrun's `rank : 1 (local_rank: 1)` under "Root Cause".
    if launcher != "hand" and exit_ in ("exception", "sigkill", "sigterm") and stopped(out) and "fault FAILED" not in out:
        return "launcher", None, wall, out
    return "FAILED", None, wall, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="host")
    ap.add_argument("--launchers", default="hand")
    ap.add_argument("--exits", default="os_exit,sys_exit,exception,sigkill,sigterm",
                    help="also sigstop (a stalled peer; ranks by hand only)")
    ap.add_argument("--moments", default="ag,rs,ll,pool,init,close,sync")
    ap.add_argument("--syncs", default="kernel")
    ap.add_argument("--limit", type=float, default=40.0, help="seconds a cell may take before it counts as hung")
    ap.add_argument("--timeout", type=float, default=5.0, help="the group's timeout in seconds")
    ap.add_argument("--out", default=None, help="folder for the table and the outputs of failed cells")
    ap.add_argument("--world", type=int, default=2, help="ranks per cell")
    ap.add_argument("--victims", type=int, default=1, help="how many of them (the last ones) leave")
    a = ap.parse_args()
    global WORLD, VICTIMS
    WORLD, VICTIMS = a.world, a.victims
    if not 0 < VICTIMS < WORLD:
        ap.error(f"--victims {VICTIMS}: between 1 and {WORLD - 1} of --world {WORLD}")
    out_dir = Path(a.out) if a.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    rows, bad = [], 0
    print("| backend | ranks → survivors | launcher | sync | exit | moment | outcome | detected (ms) | then shrink (ms) "
          "| wall (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for launcher in a.launchers.split(","):
        for sync in a.syncs.split(","):
            for moment in a.moments.split(","):
                for exit_ in a.exits.split(","):
                    outcome, ms, wall, out = run_cell(a.backend, launcher, exit_, moment, sync, a.limit, a.timeout)
                    ms, shrink_ms = ms if isinstance(ms, tuple) else (ms, None)
                    # Group creation is bounded by the set-up timeout, a stopped (late) peer by
                    # the group's timeout and the watchdog's rules, not by BOUND_MS alone.
                    if moment == "init":
                        bound = a.timeout * 1000 + BOUND_MS
                    elif exit_ == "sigstop":
                        # timeout + 1 s (memop waits' rule) + 2 s (a stuck diagnosis)
                        bound = a.timeout * 1000 + 3000 + BOUND_MS
                    else:
                        bound = BOUND_MS
                    if outcome == "named" and ms is not None and ms > bound:
                        outcome = f"SLOW (> {bound:.0f} ms)"
                    row = (f"| {a.backend} | {WORLD} → {WORLD - VICTIMS} | {launcher} | {sync} | {exit_} | {moment} | "
                           f"{outcome} | "
                           f"{'' if ms is None else ms} | {'' if shrink_ms is None else shrink_ms} | {wall:.1f} |")
                    print(row, flush=True)
                    rows.append(row)
                    if outcome not in ("named", "launcher"):
                        bad += 1
                        if out_dir:
                            (out_dir / f"{a.backend}-{launcher}-{sync}-{exit_}-{moment}.log").write_text(out)
                        else:  # no folder to keep it in: the end of the cell's output, for the log
                            for line in out.strip().splitlines()[-25:]:
                                print(f"    > {line}", flush=True)
    if out_dir:
        (out_dir / f"faults-{a.backend}.md").write_text("\n".join(rows) + "\n")
    print(f"{len(rows)} cells, {bad} not ended by a named error", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
