"""The pure parts of fsdp2_step.py, without torch and without a GPU:
`python3 -m pytest crates/lowcon-py/bench/test_fsdp2_stats.py`."""

import json
import math
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsdp2_step as fs  # noqa: E402


def test_importing_needs_no_torch():
    code = "import sys, fsdp2_step; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(fs.__file__))


def test_ffn_dim_matches_llama():
    assert fs.ffn_dim(4096) == 11008  # Llama 2 7B
    assert fs.ffn_dim(2048) == 5632
    assert fs.ffn_dim(1024) == 2816


def test_parse_sweep_and_tokens():
    cfgs = fs.parse_sweep("2048x8:256,4096;4096x2:16384", max_seq=2048)
    assert [(c.width, c.depth, c.seq, c.batch) for c in cfgs] == [
        (2048, 8, 256, 1), (2048, 8, 2048, 2), (4096, 2, 2048, 8)]
    assert cfgs[2].tokens_per_rank == 16384 and cfgs[2].heads == 32
    assert len({c.key for c in fs.parse_sweep(fs.DEFAULT_SWEEP)}) == len(fs.parse_sweep(fs.DEFAULT_SWEEP))
    for bad in ("", "2048x8", "2048x8:3000", "2000x8:256"):
        with pytest.raises(ValueError):
            fs.parse_sweep(bad)


def test_param_counts_and_flops():
    cfg = fs.ModelConfig(width=4096, depth=2, seq=2048, batch=1)
    c = fs.param_counts(cfg)
    block = 4 * 4096**2 + 3 * 4096 * 11008
    assert c["matmul"] == 2 * block + fs.VOCAB * 4096
    assert c["total"] == 2 * fs.VOCAB * 4096 + 2 * (block + 2 * 4096) + 4096
    # 6 N T + 12 L S d T, T over both ranks
    t = 2 * 2048
    assert fs.step_flops(cfg, world=2) == 6 * c["matmul"] * t + 12 * 2 * 2048 * 4096 * t
    # MFU: exactly the peak when the step takes flops / (world x peak) seconds
    f = fs.step_flops(cfg, 2)
    assert fs.mfu(f, f / (2 * fs.PEAK_FLOPS), 2) == pytest.approx(1.0)
    assert math.isnan(fs.mfu(f, 0.0, 2))


def test_summarize_times():
    s = fs.summarize_times([5, 1, 4, 2, 3, 10, 6, 7, 8, 9])
    assert s["n"] == 10 and s["median_ms"] == 5.5 and s["min_ms"] == 1 and s["max_ms"] == 10
    # numpy's default (linear) quartiles of 1..10: 3.25 and 7.75
    assert s["q1_ms"] == pytest.approx(3.25) and s["q3_ms"] == pytest.approx(7.75)
    assert s["iqr_ms"] == pytest.approx(4.5)
    with pytest.raises(ValueError):
        fs.summarize_times([])


def test_diffs_refuse_mismatch_and_nan():
    assert fs.max_abs_diff([1.0, 2.0], [1.0, 2.5]) == 0.5
    assert fs.max_abs_diff([1.0], [1.0, 2.0]) == math.inf
    assert fs.max_abs_diff([float("nan")], [1.0]) == math.inf
    assert fs.max_rel_diff([2.0, 4.0], [2.0, 5.0]) == pytest.approx(0.2)
    assert fs.tolerance(None, 10, 1e-3) == 1e-3
    assert fs.tolerance(0.0, 10, 1e-3) == 1e-3  # NCCL bitwise reproducible: the floor
    assert fs.tolerance(1e-3, 10, 1e-3) == pytest.approx(1e-2)


def row(mode, key="w1024-d2-s512-b1", losses=(10.4, 10.3, 10.2), gn=(1.0, 0.9, 0.8), median=10.0, iqr=0.5):
    return {"mode": mode, "key": key, "shape": "1024x2", "width": 1024, "depth": 2, "seq": 512, "batch": 1,
            "tokens_per_rank": 512, "losses": list(losses), "grad_norms": list(gn),
            "median_ms": median, "min_ms": median - 1, "max_ms": median + 1, "iqr_ms": iqr,
            "tokens_per_s": 1e5, "mfu": 0.3, "peak_used_gib": 1.0, "pool_gib": None}


def test_judge_calibrated_rule():
    rows = [row("nccl"), row("nccl-rerun", losses=(10.4, 10.3002, 10.2)),
            row("lowcon", losses=(10.4, 10.3015, 10.2)),           # 1.5e-3 <= 10 x 2e-4
            row("nccl-ce", losses=(10.4, 10.3, 10.2031))]           # 3.1e-3 > 2e-3
    fs.judge_rows(rows)
    check = {r["mode"]: r["check"] for r in rows}
    assert check == {"nccl": "ref", "nccl-rerun": "calib", "lowcon": "ok", "nccl-ce": "wrong"}
    assert rows[2]["loss_tol"] == pytest.approx(2e-3) and rows[2]["calibrated"]


def test_judge_floor_when_bitwise_and_grad_norm_scale():
    rows = [row("nccl"), row("nccl-rerun"), row("lowcon", losses=(10.4, 10.3005, 10.2)),
            row("nccl-ce", gn=(2.0, 1.8, 1.6))]  # same loss (Adam), doubled gradients
    fs.judge_rows(rows)
    assert rows[2]["check"] == "ok" and rows[2]["loss_tol"] == fs.LOSS_FLOOR
    assert rows[3]["check"] == "wrong"


def test_judge_without_reference_or_rerun():
    rows = [row("lowcon")]
    fs.judge_rows(rows)
    assert rows[0]["check"] == "no-ref"
    rows = [row("nccl"), row("lowcon", losses=(10.4, 10.3, 10.2009))]
    fs.judge_rows(rows)
    assert rows[1]["check"] == "ok" and not rows[1]["calibrated"]
    rows = [row("nccl"), row("lowcon", losses=(10.4, 10.3, float("nan")))]
    fs.judge_rows(rows)
    assert rows[1]["check"] == "wrong"


def test_compare_speed():
    rows = [row("nccl", median=10.0, iqr=0.2), row("lowcon", median=8.0, iqr=0.3),
            row("nccl-ce", median=10.25, iqr=0.3), row("nccl-rerun", median=11.0, iqr=0.1)]
    fs.compare_speed(rows)
    assert rows[1]["vs_nccl"] == pytest.approx(0.8) and rows[1]["speed"] == "faster"
    assert rows[2]["speed"] == "same"
    assert rows[3]["speed"] == "slower"


def doc(mode, rows, skipped=None):
    return {"schema": fs.SCHEMA, "mode": mode, "env": {"torch": "2.11.0", "world_size": 2}, "args": {},
            "rows": [{k: v for k, v in r.items() if k != "mode"} for r in rows], "skipped": skipped, "notes": {}}


def test_merge_and_table():
    docs = [doc("lowcon", [row("lowcon", median=8.0)]), doc("nccl", [row("nccl")]),
            dict(doc("nccl-rerun", []), notes={"ignored": 1}),
            doc("nccl-rerun", [row("nccl-rerun")]), doc("nccl-ce", [], skipped="no zero-CTA policy")]
    merged = fs.merge_results(docs)
    assert [r["mode"] for r in merged["rows"]] == ["nccl", "nccl-rerun", "lowcon"]
    assert merged["modes"]["nccl-ce"]["skipped"] == "no zero-CTA policy"
    table = fs.format_table(merged["rows"], merged["modes"])
    assert "0.800 faster" in table and "nccl-ce: skipped: no zero-CTA policy" in table
    lowcon_notes = dict(doc("lowcon", []), notes={"all_gather": "ce-pull"})
    assert "lowcon: all_gather=ce-pull" in fs.format_table([], fs.merge_results([lowcon_notes])["modes"])
    # A merged document merges again to the same rows (the driver's output is reusable).
    again = fs.merge_results([json.loads(json.dumps(merged))])
    assert [(r["mode"], r["check"]) for r in again["rows"]] == [(r["mode"], r["check"]) for r in merged["rows"]]
    with pytest.raises(ValueError):
        fs.merge_results([{"schema": "something else"}])


def test_table_shows_errors():
    rows = [{"mode": "lowcon", "key": "k", "shape": "4096x8", "tokens_per_rank": 16384, "error": "out of memory"}]
    fs.judge_rows(rows)
    assert "out of memory" in fs.format_table(rows) and rows[0]["check"] == "error"


def test_merge_command_line(tmp_path):
    paths = []
    for d in (doc("nccl", [row("nccl")]), doc("lowcon", [row("lowcon", median=9.0)])):
        p = tmp_path / f"{d['mode']}.json"
        p.write_text(json.dumps(d))
        paths.append(str(p))
    out = tmp_path / "all.json"
    res = subprocess.run([sys.executable, fs.__file__, "--merge", *paths, "--json", str(out),
                          "--plot", str(tmp_path / "all.png")], capture_output=True, text=True, check=True)
    assert "0.900 faster" in res.stdout and "plot:" in res.stdout
    assert json.loads(out.read_text())["rows"][1]["check"] == "ok"


def test_arguments():
    a = fs.parse_args(["--mode", "lowcon", "--quick"])
    assert a.sweep == fs.QUICK_SWEEP and a.warmup == 2 and a.steps == 10
    a = fs.parse_args(["--modes", "nccl,lowcon", "--lowcon-ag", "ce-pull", "--lowcon-sync", "memop"])
    assert a.lowcon_ag == "ce-pull" and a.sweep == fs.DEFAULT_SWEEP and a.warmup == 3
    for bad in (["--mode", "nccl", "--steps", "5"], [], ["--mode", "nccl", "--merge", "x"],
                ["--mode", "nccl", "--sweep", "2048x8:3000"]):
        with pytest.raises(SystemExit):
            fs.parse_args(bad)
