"""The fused tensor-parallel ops (`lowcon.tp`) on the host backend, at 2 and 3 ranks: every
output and gradient against a float64 reference, bad input (tp_worker.py `check host`),
and the TP MLP example against DTensor's parallelize_module on the lowcon backend. The
GPU forms (overlap, freshness over 1000 calls eager and replayed, a dead peer) run on the
GPU machine (scripts/gpu-shared.sh). Skipped where torch is not installed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
from ports import free_port  # noqa: E402 (P and P + 1 free)
LOWCON = os.environ.get("LOWCON_BIN", str(HERE.parents[2] / "target" / "debug" / "lowcon"))


def launch(n, *cmd):
    # A port of its own: the TP example's torch store binds MASTER_PORT, and `lowcon launch`
    # defaults to torch's 29500, which a test running beside it may hold (seen on CI).
    p = subprocess.run([LOWCON, "launch", "--nproc-per-node", str(n), "--tee", "--master-port", str(free_port()), "--",
                        sys.executable, *cmd], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("ranks", [2, 3])
def test_fused_ops_match_the_reference_on_the_host_backend(ranks):
    rc, out = launch(ranks, str(HERE / "tp_worker.py"), "check", "host")
    assert rc == 0, out
    for r in range(ranks):
        assert f"rank {r}: tp check ok" in out, out


def test_the_tp_mlp_example_trains_as_dtensor_does():
    rc, out = launch(2, str(HERE.parent / "examples" / "tp_mlp.py"), "--cpu")
    assert rc == 0, out
    for r in range(2):
        assert f"rank {r}: tp_mlp: ok on 2 ranks (cpu)" in out, out


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_merged_chunks_are_written_before_their_release_in_any_world(world):
    # NOTE [merged GEMMs], the matmul-reduce-scatter's probe: the released reduce-scatter
    # asks for chunks rank + 1, ..., rank in turn and releases each right after; a block's
    # first chunk computes the whole block, so each chunk must be written by then.
    import torch
    from lowcon.tp import _merged_chunks

    m = 3
    for rank in range(world):
        A = torch.randn(world * m, 2, 5, dtype=torch.float64)
        B = torch.randn(5, 4, dtype=torch.float64)
        ws = torch.full((world, m, 2, 4), float("nan"), dtype=torch.float64)
        produce = _merged_chunks(A, B, ws, (rank, world, m))
        for i in range(world):
            d = (rank + i + 1) % world
            produce(d)
            assert not torch.isnan(ws[d]).any(), (world, rank, d)
        assert torch.allclose(ws.view(world * m, 2, 4), A @ B)
