"""The Python package on the host backend (CPU shared memory), with numpy arrays through
DLPack, at 2 and 3 ranks: what CI runs. Each test starts real rank processes running
worker.py, under `lowcon launch` or by hand. Needs the `lowcon` binary: LOWCON_BIN, or
target/debug/lowcon of this repository (scripts/test.sh builds it)."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lowcon

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
WORKER = str(HERE / "worker.py")
LOWCON = os.environ.get("LOWCON_BIN", str(REPO / "target" / "debug" / "lowcon"))


def launch(n, *args, timeout=240, env=None):
    return launch_script(n, WORKER, *args, timeout=timeout, env=env)


def launch_script(n, script, *args, flags=(), timeout=240, env=None):
    """`script` on `n` ranks under `lowcon launch` (with its `flags`): (exit code, output)."""
    if not Path(LOWCON).exists():
        pytest.fail(f"no lowcon binary at {LOWCON}: build it (cargo build -p lowcon-cli) or set LOWCON_BIN")
    p = subprocess.run(
        [LOWCON, "launch", "--nproc-per-node", str(n), "--tee", *flags, "--", sys.executable, str(script), *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("ranks", [2, 3])
def test_collectives_match_numpy(ranks):
    rc, out = launch(ranks, "check", "host")
    assert rc == 0, out
    for r in range(ranks):
        assert f"rank {r}: check ok" in out, out


def test_torch_tensors_take_the_fast_path_and_match_torch():
    """CPU torch tensors (where torch is installed; CI has none): read through their own
    accessors, not DLPack. Correct data, pool tensors, in place, and clear errors."""
    pytest.importorskip("torch")
    p = subprocess.run(
        [LOWCON, "launch", "--nproc-per-node", "2", "--tee", "--", sys.executable, str(HERE / "torch_host_worker.py")],
        capture_output=True, text=True, timeout=240,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in range(2):
        assert f"rank {r}: torch ok" in out, out


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_bf16_wire_is_bit_exact_and_counted(ranks):
    rc, out = launch(ranks, "wire", "host")
    assert rc == 0, out
    for r in range(ranks):
        assert f"rank {r}: wire ok" in out, out


@pytest.mark.parametrize("ranks", [2, 3])
def test_bad_input_raises_naming_rank_and_sizes(ranks):
    rc, out = launch(ranks, "bad", "host")
    assert rc == 0, out
    for r in range(ranks):
        assert f"rank {r}: bad ok" in out, out


@pytest.mark.parametrize("ranks,every", [(2, "1"), (3, "1"), (2, "3")])
def test_pool_tensors_offsets_and_mismatch(ranks, every):
    """every: fingerprint checks every N collectives on pool memory (1: strict, before
    each call; otherwise lagged, published without waiting, named within 2N calls)."""
    rc, out = launch(ranks, "pool", "host", env={"LOWCON_POOL_CHECK_EVERY": every, "LOWCON_POOL_SEGMENT_MB": "16"})
    assert rc == 0, out
    for r in range(ranks):
        assert f"rank {r}: pool ok" in out, out


def test_the_pool_trace_records_every_decision(tmp_path):
    """LOWCON_POOL_TRACE: one file per rank process, the same decisions on every rank."""
    rc, out = launch(2, "pool", "host", env={"LOWCON_POOL_TRACE": str(tmp_path / "trace"),
                                             "LOWCON_POOL_SEGMENT_MB": "16"})
    assert rc == 0, out
    files = sorted(tmp_path.glob("trace.*"))
    assert len(files) == 2, files
    decisions = []
    for f in files:
        lines = [l.split("\t") for l in f.read_text().splitlines()]
        kinds = {l[0] for l in lines}
        assert {"alloc", "free", "trim"} <= kinds, kinds
        assert any(l[0] == "alloc" and l[7] == "grew" for l in lines) and any(l[-1] == "free" for l in lines)
        # (bytes, segment, offset, how) of every allocation, in order: rank-independent.
        decisions.append([(l[3], l[5], l[6], l[7]) for l in lines if l[0] == "alloc"])
    # Rank 0 keeps one extra block at the end (the mismatch check): compare what precedes it.
    n = min(len(d) for d in decisions)
    assert n > 10 and decisions[0][:n - 2] == decisions[1][:n - 2]


def _by_hand(mode, hold=False):
    """Starts a store and two ranks of worker.py `mode` without a launcher; with `hold`,
    their stdin is a pipe the test closes to let a rank go on."""
    store = subprocess.Popen([LOWCON, "store", "serve", "--bind", "127.0.0.1:0"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    addr = None
    for line in store.stdout:
        if "serving on" in line:
            addr = line.split("serving on", 1)[1].strip()
            break
    assert addr, "the store did not start"
    env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1",
               LOWCON_STORE_ADDR=addr, PYTHONUNBUFFERED="1")
    # LOWCON_PYTEST_BACKEND=gpu runs these by-hand tests on GPUs (the GPU machine).
    backend = os.environ.get("LOWCON_PYTEST_BACKEND", "host")
    ranks = [subprocess.Popen([sys.executable, WORKER, mode, backend], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdin=subprocess.PIPE if hold else None, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    return store, ranks


def test_a_sigkilled_rank_is_named_without_a_launcher():
    """Ranks started by hand (a launcher would stop the job): rank 1 SIGKILLs itself and
    rank 0 must raise lowcon.PeerError naming it, well within the timeout; then shrink the
    group to itself and all-gather on it."""
    t0 = time.monotonic()
    store, ranks = _by_hand("dead")
    try:
        outs = [p.communicate(timeout=120)[0] for p in ranks]
        took = time.monotonic() - t0
        assert ranks[1].returncode == -9, outs[1]
        assert ranks[0].returncode == 0, outs[0]
        assert "rank 0: dead ok: named rank 1" in outs[0], outs[0]
        assert "shrank to rank 0 of 1" in outs[0] and "all-gathered" in outs[0], outs[0]
        assert took < 20, f"took {took:.1f} s"
    finally:
        for p in ranks:
            p.kill()
        store.kill()
        store.wait()


def test_ctrl_c_interrupts_a_waiting_call():
    """Rank 0 waits in an all-gather rank 1 never joins; SIGINT must raise
    KeyboardInterrupt within a moment and leave the group aborted."""
    store, ranks = _by_hand("sigint", hold=True)
    try:
        line = ranks[0].stdout.readline()
        assert "waiting" in line, line
        time.sleep(0.5)
        t0 = time.monotonic()
        ranks[0].send_signal(signal.SIGINT)
        # Rank 0's report, then rank 1 is let go: it stays alive until rank 0 has reported
        # (it used to sleep 3 s, and under load rank 0 could see it gone before the SIGINT
        # came); rank 0's exit waits for it.
        ready, _, _ = select.select([ranks[0].stdout], [], [], 30)
        assert ready, "rank 0 reported nothing within 30 s of the SIGINT"
        report = ranks[0].stdout.readline()
        took = time.monotonic() - t0
        out1 = ranks[1].communicate(input="", timeout=30)[0]
        out0 = report + ranks[0].communicate(timeout=30)[0]
        assert ranks[0].returncode == 0, out0
        assert "rank 0: sigint ok: KeyboardInterrupt" in out0, out0
        assert took < 5, f"Ctrl-C took {took:.1f} s"
        assert ranks[1].returncode == 0, out1
    finally:
        for p in ranks:
            p.kill()
        store.kill()
        store.wait()


def test_two_groups_in_torchrun_mode_share_the_hosted_store():
    """No launcher and no LOWCON_STORE_ADDR, as under torchrun: rank 0 hosts lowcon's store
    at MASTER_PORT + 1, and a second group made the same way must share it (it failed to
    bind the port before)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1] - 1
    env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               PYTHONUNBUFFERED="1")
    env.pop("LOWCON_STORE_ADDR", None)
    ranks = [subprocess.Popen([sys.executable, WORKER, "twogroups", "host"], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    try:
        outs = [p.communicate(timeout=120)[0] for p in ranks]
        for r, (p, out) in enumerate(zip(ranks, outs)):
            assert p.returncode == 0, out
            assert f"rank {r}: twogroups ok" in out, out
    finally:
        for p in ranks:
            p.kill()


@pytest.mark.parametrize("ranks", [2, 3])
def test_groups_over_a_python_store(ranks, tmp_path):
    rc, out = launch(ranks, "pystore", "host", env={"LOWCON_TEST_STORE_DIR": str(tmp_path / "store"),
                                                   "LOWCON_SETUP_TIMEOUT_MS": "3000",
                                                   "LOWCON_TIMEOUT_MS": "2000"})
    assert rc == 0, out
    for r in range(ranks):
        assert f"rank {r}: pystore ok" in out, out


def test_exceptions_keep_their_kinds():
    assert issubclass(lowcon.InvalidArgument, lowcon.Error)
    assert issubclass(lowcon.InvalidArgument, ValueError)
    assert issubclass(lowcon.PeerError, lowcon.Error)
    assert issubclass(lowcon.Error, RuntimeError)


def test_init_outside_a_job_is_a_clear_error(monkeypatch):
    for v in ("RANK", "WORLD_SIZE", "LOWCON_STORE_ADDR"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(lowcon.Error, match="RANK"):
        lowcon.init("host")
    with pytest.raises(lowcon.InvalidArgument, match="backend"):
        lowcon.init("tpu")


def test_the_enqueue_clock_has_every_kind():
    """NOTE [enqueue clock]: this thread's driver enqueues by kind, (calls, ns) each. The host
    backend hands the driver nothing, so its clock does not move (a GPU call's does:
    fsdp2_profile.py splits FSDP2's hooks with it)."""
    before = lowcon.enqueue_clock()
    assert sorted(before) == ["copy", "event", "launch", "memop"]
    assert all(isinstance(c, int) and isinstance(ns, int) and c >= 0 and ns >= 0 for c, ns in before.values())
    assert lowcon.enqueue_clock() == before
    # NOTE [host phases]: the rest of a GPU call's library time, by phase, less its enqueues.
    phases = lowcon.host_phases()
    assert sorted(phases) == ["binding", "checks", "exchange", "finish", "plan", "prepare", "verify"]
    assert all(isinstance(c, int) and isinstance(ns, int) and c >= 0 and ns >= 0 for c, ns in phases.values())
    assert lowcon.host_phases() == phases


def test_the_shared_gpu_variables(monkeypatch):
    """LOWCON_SHARE_GPU and the device a rank's group would pick, as Python sees them (the
    rules are lowcon's own: docs/cli.md); malformed values are errors naming them."""
    for k in ("LOWCON_SHARE_GPU", "LOWCON_DEVICE", "LOCAL_RANK", "RANK"):
        monkeypatch.delenv(k, raising=False)
    assert lowcon.share_gpu() is False
    monkeypatch.setenv("LOWCON_SHARE_GPU", "1")
    assert lowcon.share_gpu() is True
    monkeypatch.setenv("LOWCON_SHARE_GPU", "yes")
    with pytest.raises(lowcon.InvalidArgument, match='LOWCON_SHARE_GPU="yes"'):
        lowcon.share_gpu()
    monkeypatch.setenv("LOWCON_SHARE_GPU", "0")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert lowcon.device_index() == 3
    monkeypatch.setenv("LOWCON_DEVICE", "1")
    assert lowcon.device_index() == 1
    monkeypatch.setenv("LOWCON_DEVICE", "gpu1")
    with pytest.raises(lowcon.InvalidArgument, match='LOWCON_DEVICE="gpu1"'):
        lowcon.device_index()


@pytest.mark.parametrize("ranks", [2, 3])
def test_checked_calls_name_every_ranks_call_when_the_ranks_disagree(ranks):
    # NOTE [checked calls]: LOWCON_CHECK_CALLS=1 on every rank.
    rc, out = launch(ranks, "checkcalls", "host", env={"LOWCON_CHECK_CALLS": "1"})
    assert rc == 0, out
    for r in range(ranks):
        assert f"rank {r}: checkcalls ok" in out, out


def test_checked_calls_must_be_on_on_every_rank_or_none(tmp_path):
    # Rank 1 alone with the check on: group creation refuses, naming the setting.
    script = tmp_path / "one.py"
    script.write_text("import os, lowcon\n"
                      "if os.environ['RANK'] == '1':\n"
                      "    os.environ['LOWCON_CHECK_CALLS'] = '1'\n"
                      "try:\n"
                      "    lowcon.init('host', timeout=20)\n"
                      "except lowcon.Error as e:\n"
                      "    print('rank', os.environ['RANK'], 'refused:', e, flush=True)\n")
    _, out = launch_script(2, script, timeout=120)
    for r in range(2):
        assert f"rank {r} refused:" in out, out
    assert "LOWCON_CHECK_CALLS is on on rank 1 but off on rank 0" in out, out


def test_two_threads_starting_two_channels_in_another_order_get_an_error_not_each_others_data(tmp_path):
    # NOTE [allocations agreed]: rank 0 starts channel 1 first, rank 1 channel 2 first, from
    # two threads each. Their first allocations (a channel's LL buffer or workspace) used to
    # pair across channels when equal in size, and each call read the other's data.
    script = tmp_path / "two_threads.py"
    script.write_text(
        "import os, threading, time, numpy as np, lowcon\n"
        "g = lowcon.init('host', timeout=20)\n"
        "r, w = g.rank, g.world_size\n"
        "errors, results = [], {}\n"
        "def run(ch, delay):\n"
        "    time.sleep(delay)\n"
        "    out = np.zeros(8 * w, np.float32)\n"
        "    try:\n"
        "        g.all_gather(out, np.full(8, r + ch, np.float32), channel=ch)\n"
        "        results[ch] = out\n"
        "    except lowcon.Error as e:\n"
        "        errors.append(str(e))\n"
        "d = (0.0, 0.2) if r == 0 else (0.2, 0.0)\n"
        "ts = [threading.Thread(target=run, args=(ch, t)) for ch, t in ((1, d[0]), (2, d[1]))]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "wrong = [ch for ch, out in results.items()\n"
        "         if not np.array_equal(out, np.repeat(np.arange(w, dtype=np.float32) + ch, 8))]\n"
        "print(f'rank {r}: {len(errors)} errors, wrong channels {wrong}:', ' | '.join(errors), flush=True)\n")
    _, out = launch_script(2, script, flags=("--keep-going",), timeout=120)
    for r in range(2):
        line = next((x for x in out.splitlines() if f"rank {r}: " in x and "errors, wrong channels" in x), None)
        assert line is not None, out
        assert "wrong channels []" in line, out  # never each other's data
        assert "2 errors" in line and "must allocate in the same order" in line, out
        assert "channel 1's" in line and "channel 2's" in line, out


def test_two_threads_starting_two_channels_at_the_same_moment_agree_or_fail_together(tmp_path):
    # NOTE [allocations agreed]: started together (a barrier), the threads' allocations come
    # in whatever order each rank's lock gives them: both ranks then succeed (same order) or
    # both fail naming the allocations (different orders); never wrong data, never a hang.
    script = tmp_path / "at_once.py"
    script.write_text(
        "import threading, numpy as np, lowcon\n"
        "g = lowcon.init('host', timeout=10)\n"
        "r, w = g.rank, g.world_size\n"
        "for chans in ((1, 2), (3, 4), (5, 6), (7, 8)):\n"
        "    go, errors, wrong = threading.Barrier(2), [], []\n"
        "    def run(ch):\n"
        "        go.wait()\n"
        "        out = np.zeros(8 * w, np.float32)\n"
        "        try:\n"
        "            g.all_gather(out, np.full(8, r + ch, np.float32), channel=ch)\n"
        "            if not np.array_equal(out, np.repeat(np.arange(w, dtype=np.float32) + ch, 8)):\n"
        "                wrong.append(ch)\n"
        "        except lowcon.Error as e:\n"
        "            errors.append('same order' in str(e))\n"
        "    ts = [threading.Thread(target=run, args=(ch,)) for ch in chans]\n"
        "    [t.start() for t in ts]; [t.join() for t in ts]\n"
        "    print(f'rank {r} channels {chans}: errors {errors} wrong {wrong}', flush=True)\n")
    rc, out = launch_script(2, script, timeout=120)
    assert rc == 0, out
    for chans in ((1, 2), (3, 4), (5, 6), (7, 8)):
        lines = [x for x in out.splitlines() if f"channels {chans}:" in x]
        assert len(lines) == 2, out
        for line in lines:
            assert "wrong []" in line, out
            assert "errors []" in line or "errors [True, True]" in line, out
        # Both ranks alike: both ran, or both refused.
        assert ("errors []" in lines[0]) == ("errors []" in lines[1]), out
