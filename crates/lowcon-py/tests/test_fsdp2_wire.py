"""FSDP2 with the bf16 wire (fsdp_wire_worker.py) on the CPU, lowcon's host backend, at 2 and
4 ranks under `lowcon launch`: every reduce-scatter bit for bit against the fp32 path, the
losses of every wire mode equal to the fp32 wire's, Gloo's within tolerance, the wire
off for gradients accumulated without sync. Skipped where torch is not installed. On a
GPU machine LOWCON_PYTEST_BACKEND=gpu and LOWCON_PYTEST_LAUNCH="--gpus 1" run it with
ranks sharing one GPU (gpu-shared.sh)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
from ports import free_port  # noqa: E402 (P and P + 1 free: the torch store binds MASTER_PORT)

LOWCON = os.environ.get("LOWCON_BIN", str(HERE.parents[2] / "target" / "debug" / "lowcon"))
WORLDS = [int(w) for w in os.environ.get("LOWCON_PYTEST_WIRE_WORLDS", "2 4").split()]


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_over_the_bf16_wire_trains_as_over_fp32(world):
    p = subprocess.run(
        [LOWCON, "launch", "--nproc-per-node", str(world), "--tee", "--master-port", str(free_port()),
         *os.environ.get("LOWCON_PYTEST_LAUNCH", "").split(), "--", sys.executable, str(HERE / "fsdp_wire_worker.py")],
        capture_output=True, text=True, timeout=600,
    )
    out = p.stdout + p.stderr
    print("\n".join(line for line in out.splitlines() if "lowcon vs Gloo" in line or "fsdp-wire" in line))
    assert p.returncode == 0, out
    for r in range(world):
        assert f"rank {r}: fsdp-wire ok" in out, out
