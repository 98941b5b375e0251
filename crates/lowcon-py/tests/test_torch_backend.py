"""lowcon as a torch.distributed backend (lowcon.distributed), at 2 ranks: every
operation against a torch reference, async works waited out of order, functional
collectives and DTensor, FSDP2 with no hooks against Gloo's (or NCCL's) losses, and a
dead peer raising from Work.wait(). On CPU tensors through lowcon's host backend; with
LOWCON_PYTEST_BACKEND=gpu on CUDA tensors (2 GPUs). Skipped where torch is not
installed (torch_backend_worker.py says what each check compares)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port  # P and P + 1 free: lowcon's store takes MASTER_PORT + 1

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "torch_backend_worker.py")
DEVICE = "cuda" if os.environ.get("LOWCON_PYTEST_BACKEND") == "gpu" else "cpu"
# Ranks of the torchrun jobs (default 2; more where ranks share a GPU, LOWCON_SHARE_GPU=1).
WORLD = int(os.environ.get("LOWCON_PYTEST_WORLD", "2"))


def torchrun(mode, timeout=300):
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD), "--master-port", str(free_port()),
         WORKER, mode, DEVICE],
        capture_output=True, text=True, timeout=timeout,
    )
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("mode", ["ops", "fsdp"])
def test_backend(mode):
    rc, out = torchrun(mode)
    assert rc == 0, out
    for r in range(WORLD):
        assert f"rank {r}: {mode} ok" in out, out


def test_a_dead_peer_raises_from_the_survivors_calls_and_works():
    """Ranks by hand (a launcher would stop the job when rank 1 dies)."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2",
           "LOWCON_TIMEOUT_MS": "20000"}
    procs = [subprocess.Popen([sys.executable, WORKER, "dead", DEVICE], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[1].returncode == -9, outs[1]
    assert procs[0].returncode == 0, outs[0]
    assert "rank 0: dead ok" in outs[0] and "the dead peer raised from the" in outs[0], outs[0]


def test_registration_is_idempotent_and_named():
    import torch.distributed as dist

    import lowcon.distributed

    lowcon.distributed.register()
    assert "lowcon" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["lowcon"] == ["cuda", "cpu"]


def test_shrink_group_refuses_a_group_that_is_not_lowcons():
    """lowcon.distributed.shrink_group takes lowcon process groups only, saying so (the
    3-rank shrink itself runs in test_fsdp2_shrink.py)."""
    import torch.distributed as dist

    import lowcon
    import lowcon.distributed

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(lowcon.InvalidArgument, match="ProcessGroup is not a lowcon process group"):
            lowcon.distributed.shrink_group()
    finally:
        dist.destroy_process_group()
