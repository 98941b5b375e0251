"""slow_batches.py on synthetic rows: the slow batches' indices and times, NCCL's rows only
with --all, and an error where no row kept its batches."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(*args):
    return subprocess.run([sys.executable, os.path.join(HERE, "slow_batches.py"), *map(str, args)],
                          capture_output=True, text=True)


def _row(impl, batches):
    return {"implementation": impl, "algorithm": "auto" if impl == "lowcon" else impl, "graph": False,
            "size": 8192, "batches_us": batches}


def test_the_slow_batches_by_index(tmp_path):
    rows = [_row("lowcon", "5.0 5.1 23.0 5.2 12.5 7.4"), _row("nccl", "9.0 30.0"), _row("lowcon", None)]
    (tmp_path / "s.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _run(tmp_path)
    assert out.returncode == 0, out.stderr
    # 7.4 is under 1.5 x 5.0; 23.0 and 12.5 are over.
    assert out.stdout.splitlines() == ["s.json lowcon auto eager 8192: fastest 5.0, 2/6 slow: #2 23.0 #4 12.5"]
    assert "nccl nccl eager 8192: fastest 9.0, 1/2 slow: #1 30.0" in _run(tmp_path, "--all").stdout


def test_no_rows_with_batches_is_an_error(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(_row("lowcon", None)) + "\n")
    out = _run(tmp_path)
    assert out.returncode == 1 and "no rows with batches_us" in out.stderr
