"""small_table.py on synthetic sweeps: medians over sweeps, one table per rank count and
sync, the marks where `auto` is slower than NCCL (*) or NCCL-CE (+)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _row(impl, algo, graph, size, us, ranks=4, sync="kernel"):
    return {"bench": "reduce-scatter", "implementation": impl, "algorithm": algo, "ranks": ranks, "dtype": "bf16",
            "size": size, "graph": graph, "time_us": us, "sync": sync if impl == "lowcon" else "-"}


def _run(*dirs):
    return subprocess.run([sys.executable, os.path.join(HERE, "small_table.py"), *map(str, dirs)],
                          capture_output=True, text=True)


def test_medians_over_sweeps_and_the_slower_cells(tmp_path):
    # Three sweeps at 4 ranks: replayed 8K auto 5.0 (NCCL 6.0, NCCL-CE 4.5: slower, +);
    # eager 8K auto 9.0 against NCCL 8.0 (slower, *) and NCCL-CE 10.0; `ll` is not `auto`.
    sweeps = [(5.0, 6.0, 4.0, 9.0, 8.0, 10.0), (4.0, 7.0, 4.5, 10.0, 7.0, 11.0), (6.0, 5.0, 5.0, 8.0, 9.0, 9.0)]
    for k, (a, n, c, ea, en, ec) in enumerate(sweeps, 1):
        rows = [_row("lowcon", "auto", True, 8192, a), _row("nccl", "nccl", True, 8192, n),
                _row("nccl-ce", "nccl-ce", True, 8192, c), _row("lowcon", "auto", False, 8192, ea),
                _row("nccl", "nccl", False, 8192, en), _row("nccl-ce", "nccl-ce", False, 8192, ec),
                _row("lowcon", "ll", True, 8192, 1.0)]
        (tmp_path / f"small-reduce-scatter-bf16-{k}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "## 4 ranks, lowcon with kernel sync" in out and "median of 3 sweeps" in out
    assert "| reduce-scatter bf16, replayed | 5.0 / 6.0 / 4.5 + |" in out
    assert "| reduce-scatter bf16, eager | 9.0 / 8.0 / 10.0 * |" in out
    assert "`auto` slower than NCCL in 1 of 2 cells" in out and "`auto` slower than NCCL-CE in 1 of 2 cells" in out


def test_rank_counts_and_syncs_are_tabled_apart(tmp_path):
    rows = [_row("lowcon", "auto", True, 8192, 3.0, ranks=2), _row("nccl", "nccl", True, 8192, 6.0, ranks=2),
            _row("lowcon", "auto", True, 8192, 5.0, ranks=4), _row("lowcon", "auto", True, 8192, 7.0, ranks=4,
                                                                  sync="memop"),
            _row("nccl", "nccl", True, 8192, 6.5, ranks=4)]
    (tmp_path / "small-reduce-scatter-bf16-1.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _run(tmp_path).stdout
    tables = out.split("## ")[1:]
    assert [t.splitlines()[0] for t in tables] == ["2 ranks, lowcon with kernel sync", "4 ranks, lowcon with kernel sync",
                                                   "4 ranks, lowcon with memop sync"]
    assert "| reduce-scatter bf16, replayed | 3.0 / 6.0 / - |" in tables[0]
    assert "| reduce-scatter bf16, replayed | 5.0 / 6.5 / - |" in tables[1]
    assert "| reduce-scatter bf16, replayed | 7.0 / 6.5 / - * |" in tables[2]


def test_no_sweeps_is_an_error(tmp_path):
    r = _run(tmp_path)
    assert r.returncode == 1 and "no small-*.json" in r.stderr


def test_the_batches_spread_when_the_sweeps_kept_it(tmp_path):
    # Two sweeps with the spread, one without: the second table takes the fastest and the
    # slowest batch over the sweeps that kept it; without any, there is no second table.
    rows = []
    for k, (lo, hi) in enumerate([(4.5, 6.0), (4.2, 9.5), (None, None)], 1):
        r = _row("lowcon", "auto", True, 8192, 5.0)
        if lo is not None:
            r.update(time_us_min=lo, time_us_max=hi)
        (tmp_path / f"small-reduce-scatter-bf16-{k}.json").write_text(
            json.dumps(r) + "\n" + json.dumps(_row("nccl", "nccl", True, 8192, 6.0)) + "\n")
    out = _run(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "median of 3 sweeps" in out.stdout
    assert "`auto`'s batches" in out.stdout and "| reduce-scatter bf16, replayed | 4.2-9.5 |" in out.stdout
    assert "slow batches" not in out.stdout  # no sweep kept its batches
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "small-reduce-scatter-bf16-1.json").write_text(json.dumps(_row("lowcon", "auto", True, 8192, 5.0)) + "\n")
    out = _run(plain)
    assert out.returncode == 0 and "`auto`'s batches" not in out.stdout, out.stdout


def test_the_slow_batches_when_the_sweeps_kept_each(tmp_path):
    # Two sweeps of eager 8K: the first with its first batch slow (2 of 4 over 1.5x its
    # fastest), the second with none; the replayed row keeps no batches.
    for k, b in enumerate(["12.0 5.0 5.2 9.0", "5.1 5.0 5.3 5.2"], 1):
        r = _row("lowcon", "auto", False, 8192, 5.2)
        r.update(time_us_min=5.0, time_us_max=12.0, batches_us=b)
        rows = [r, _row("lowcon", "auto", True, 8192, 4.0), _row("nccl", "nccl", False, 8192, 6.0)]
        (tmp_path / f"small-reduce-scatter-bf16-{k}.json").write_text("".join(json.dumps(x) + "\n" for x in rows))
    out = _run(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "median of 2 sweeps" in out.stdout, out.stdout
    assert "| reduce-scatter bf16, eager | 2/8, first 1 |" in out.stdout, out.stdout
    assert "| reduce-scatter bf16, replayed | - |" in out.stdout, out.stdout
