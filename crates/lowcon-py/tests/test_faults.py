"""The fault matrix on the host backend (fault_matrix.py, faults.py): a peer leaves five
ways at seven moments, ranks started by hand and under `lowcon launch`; every survivor must
raise a lowcon error naming it within the bound, and nothing may hang. torchrun cells
and the GPU backend run on the GPU machine (scripts/gpu-faults.sh)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXITS = "os_exit,sys_exit,exception,sigkill,sigterm"


def matrix(*args):
    p = subprocess.run([sys.executable, str(HERE / "fault_matrix.py"), "--backend", "host", "--timeout", "3", *args],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("moment", ["ag", "rs", "ll", "pool", "init", "close", "sync"])
def test_every_exit_is_named_by_hand(moment):
    rc, out = matrix("--launchers", "hand", "--exits", EXITS, "--moments", moment)
    assert rc == 0, out
    assert out.count("| named |") == 5, out


def test_under_lowcon_launch():
    rc, out = matrix("--launchers", "launch", "--exits", EXITS, "--moments", "ag,init")
    assert rc == 0, out
    # Clean exits are lowcon's to name; a failing rank makes the launcher end the job.
    assert out.count("| named |") >= 4, out


@pytest.mark.parametrize("world,victims", [(3, 1), (4, 2), (8, 1), (8, 2)])
def test_one_or_two_victims_at_every_moment_then_the_survivors_shrink_and_check(world, victims):
    """3, 4 and 8 ranks, the last one or two leaving together at every moment: each
    survivor names a victim, and (where a group exists) shrinks to the others and checks
    an all-gather and reduce-scatters (SUM, MAX) of fresh data against numpy."""
    rc, out = matrix("--launchers", "hand", "--exits", "sigkill,exception", "--world", str(world),
                     "--victims", str(victims))
    assert rc == 0, out
    rows = [line for line in out.splitlines() if line.startswith(f"| host | {world} → {world - victims} |")]
    assert len(rows) == 14 and all("| named |" in r for r in rows), out
    shrunk = [r for r in rows if "| init |" not in r]
    assert len(shrunk) == 12 and all(re.search(r"\| named \| \d+ \| \d+ \|", r) for r in shrunk), out


def test_under_lowcon_launch_keep_going_the_survivors_shrink():
    """`lowcon launch --keep-going`: a victim killed by a signal leaves the job running, so
    the survivors must name it, shrink and all-gather on the new group in every cell."""
    rc, out = matrix("--launchers", "keep-going", "--exits", "sigkill,sigterm", "--moments", "ag,rs,pool")
    assert rc == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| host | 2 → 1 | keep-going")]
    assert len(rows) == 6 and all("| named |" in r for r in rows), out
    # The then-shrink column holds a time in every row.
    assert all(re.search(r"\| named \| \d+ \| \d+ \|", r) for r in rows), out


def test_a_stopped_peer_times_out_named():
    """SIGSTOP: the victim is alive but never arrives; the survivor must time out naming it."""
    rc, out = matrix("--launchers", "hand", "--exits", "sigstop", "--moments", "ag,pool")
    assert rc == 0, out
    assert out.count("| named |") == 2, out
