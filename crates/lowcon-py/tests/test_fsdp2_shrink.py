"""The FSDP2 shrink example (examples/fsdp2_shrink.py) end to end on the CPU, with
lowcon's host backend under `lowcon launch --keep-going`: 3 ranks train, rank 1 dies
halfway through step 7, the survivors shrink to 2, re-shard the step-5 checkpoint and
train on. The re-sharded state must hash as the checkpoint did, and the run must end
where the same run with nobody dying ends (the global batch does not depend on the
world size; only the order of floating-point sums does). Skipped where torch is not
installed. On a GPU machine it runs on the GPU backend: LOWCON_PYTEST_LAUNCH="--gpus 1"
adds launcher arguments (there: 3 ranks sharing one GPU, gpu-shared.sh), and
LOWCON_PYTEST_SHRINK_WORLD=2 runs 2 ranks -> 1 (one per GPU on 2 GPUs, gpu-run.sh)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port  # P and P + 1 free: lowcon's store takes MASTER_PORT + 1

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
EXAMPLE = str(HERE.parent / "examples" / "fsdp2_shrink.py")
LOWCON = os.environ.get("LOWCON_BIN", str(HERE.parents[2] / "target" / "debug" / "lowcon"))
WORLD = int(os.environ.get("LOWCON_PYTEST_SHRINK_WORLD", "3"))


def run(tmp_path, *args):
    port = free_port()
    p = subprocess.run(
        [LOWCON, "launch", "--nproc-per-node", str(WORLD), "--keep-going", "--tee", "--master-port", str(port),
         *os.environ.get("LOWCON_PYTEST_LAUNCH", "").split(), "--",
         sys.executable, EXAMPLE, "--steps", "12", "--ckpt", str(tmp_path / str(port)), *args],
        capture_output=True, text=True, timeout=300,
    )
    return p.returncode, p.stdout + p.stderr


def show(out):
    """The lines that say what happened (seen with pytest -s; gpu-shared.sh keeps them)."""
    print("\n".join(line for line in out.splitlines() if re.search(r"failed:|now rank|done:|lowcon launch:", line)))


def final_loss(out):
    m = re.search(r"done: final loss ([0-9.]+) on (\d) ranks", out)
    assert m, out
    return float(m.group(1)), int(m.group(2))


def test_survivors_shrink_reshard_and_train_on_as_if_nobody_died(tmp_path):
    rc, out = run(tmp_path, "--die-rank", "1", "--die-step", "7")
    show(out)
    assert rc == 0, out
    assert "rank 1 (pid" in out and "died: signal SIGKILL" in out, out
    survivors = [r for r in range(WORLD) if r != 1]
    for new, old in enumerate(survivors):
        assert f"rank {old}: step 7 failed: rank {old}: peer rank 1 is gone" in out, out
        line = re.search(rf"rank {old}: now rank {new} of {WORLD - 1}: shrunk in \d+ ms, re-sharded the step 5 "
                         r"checkpoint.*\(hash [0-9a-f]+ matches\)", out)
        assert line, out
    loss, world = final_loss(out)
    assert world == WORLD - 1, out
    rc, ref_out = run(tmp_path, "--no-die")
    show(ref_out)
    assert rc == 0, ref_out
    ref, ref_world = final_loss(ref_out)
    assert ref_world == WORLD, ref_out
    # Same data, same state after the re-shard: only the sums' order differs (f32).
    assert abs(loss - ref) <= 1e-4 * abs(ref), (loss, ref, out)


def test_rank_0_cannot_be_the_one_to_die():
    """Rank 0 hosts torch's store, so the example refuses to kill it, saying why."""
    p = subprocess.run([sys.executable, EXAMPLE, "--die-rank", "0"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "RANK": "0", "WORLD_SIZE": "3"})
    assert p.returncode != 0 and "rank 0 hosts torch's store" in p.stderr, p.stderr
