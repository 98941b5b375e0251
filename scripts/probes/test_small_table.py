"""small_table.py on synthetic sweeps: medians over sweeps, the star where `auto` is slower."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _row(impl, algo, graph, size, us):
    return {"bench": "reduce-scatter", "implementation": impl, "algorithm": algo, "ranks": 4, "dtype": "bf16",
            "size": size, "graph": graph, "time_us": us}


def test_medians_over_sweeps_and_the_slower_cells(tmp_path):
    # Three sweeps: auto's replayed 8K medians 5.0 (NCCL 6.0); eager 8K auto 9.0 against
    # NCCL 8.0 (slower, starred); the `ll` rows are not `auto` and are left out.
    for k, (a, n, ea, en) in enumerate([(5.0, 6.0, 9.0, 8.0), (4.0, 7.0, 10.0, 7.0), (6.0, 5.0, 8.0, 9.0)], 1):
        rows = [_row("lowcon", "auto", True, 8192, a), _row("nccl", "nccl", True, 8192, n),
                _row("lowcon", "auto", False, 8192, ea), _row("nccl", "nccl", False, 8192, en),
                _row("lowcon", "ll", True, 8192, 1.0)]
        (tmp_path / f"small-reduce-scatter-bf16-{k}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, os.path.join(HERE, "small_table.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert "median of 3 sweeps" in out
    assert "| reduce-scatter bf16, replayed | 5.0 / 6.0 |" in out
    assert "| reduce-scatter bf16, eager | 9.0 / 8.0 * |" in out
    assert "`auto` slower than NCCL in 1 of 2 cells" in out


def test_no_sweeps_is_an_error(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(HERE, "small_table.py"), str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "no small-*.json" in r.stderr
