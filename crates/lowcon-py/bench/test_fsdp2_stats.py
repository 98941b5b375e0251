"""The paired FSDP2 benchmark's pure parts, without torch and without a GPU:
`python3 -m pytest crates/lowcon-py/bench/test_fsdp2_stats.py`."""

import json
import math
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fsdp2_model as fm  # noqa: E402
import fsdp2_paired as fp  # noqa: E402
import fsdp2_stats as st  # noqa: E402


def test_importing_needs_no_torch():
    code = ("import sys, fsdp2_model, fsdp2_stats, fsdp2_paired; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=HERE)


def test_the_benchmark_refuses_ranks_sharing_a_gpu():
    assert fp.shared_gpu_refusal({}) is None
    assert fp.shared_gpu_refusal({"LOWCON_SHARE_GPU": "0"}) is None
    assert "timings of ranks sharing a GPU mean nothing" in fp.shared_gpu_refusal({"LOWCON_SHARE_GPU": "1"})
    # Options of one mode may follow its @ separated by commas too.
    assert fp.split_modes("nccl,lowcon@ag=ce-pull,sync=memop,nocomm") == ["nccl", "lowcon@ag=ce-pull,sync=memop", "nocomm"]
    with pytest.raises(SystemExit):
        fp.parse_args(["--modes", "nccl,sync=memop"])
    # --memory-only runs without NCCL, against nocomm-torch.
    ok = fp.parse_args(["--memory-only", "--modes", "lowcon,nocomm-torch"])
    assert ok.memory_only and [k for _, k, _ in ok.mode_specs] == ["lowcon", "nocomm-torch"]
    for modes in ("nccl,lowcon,nocomm-torch", "lowcon,nocomm"):
        with pytest.raises(SystemExit):
            fp.parse_args(["--memory-only", "--modes", modes])
    res = subprocess.run([sys.executable, os.path.join(HERE, "fsdp2_paired.py"), "--cpu"], capture_output=True,
                         text=True, env={**os.environ, "LOWCON_SHARE_GPU": "1"}, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "LOWCON_SHARE_GPU='1' lets ranks share a GPU" in res.stderr, res.stderr


# ---------------------------------------------------------------------------------------
# The model's arithmetic


def test_ffn_dim_matches_llama():
    assert fm.ffn_dim(4096) == 11008  # Llama 2 7B
    assert fm.ffn_dim(2048) == 5632
    assert fm.ffn_dim(8192) == 22016


def test_parse_sweep_and_tokens():
    cfgs = fm.parse_sweep("2048x8:256,4096;4096x2:16384", max_seq=2048)
    assert [(c.width, c.depth, c.seq, c.batch) for c in cfgs] == [
        (2048, 8, 256, 1), (2048, 8, 2048, 2), (4096, 2, 2048, 8)]
    assert cfgs[2].tokens_per_rank == 16384 and cfgs[2].heads == 32
    every = fm.parse_sweep(fp.DEFAULT_SWEEP)
    assert len({c.key for c in every}) == len(every) == 12
    for bad in ("", "2048x8", "2048x8:3000", "2000x8:256"):
        with pytest.raises(ValueError):
            fm.parse_sweep(bad)


def test_param_counts_and_flops():
    cfg = fm.ModelConfig(width=4096, depth=2, seq=2048, batch=1)
    c = fm.param_counts(cfg)
    block = 4 * 4096**2 + 3 * 4096 * 11008
    assert c["matmul"] == 2 * block + fm.VOCAB * 4096
    assert c["total"] == 2 * fm.VOCAB * 4096 + 2 * (block + 2 * 4096) + 4096
    t = 2 * 2048  # 6 N T + 12 L S d T, T over both ranks
    assert fm.step_flops(cfg, world=2) == 6 * c["matmul"] * t + 12 * 2 * 2048 * 4096 * t
    f = fm.step_flops(cfg, 2)
    assert fm.mfu(f, f / (2 * fm.PEAK_FLOPS), 2) == pytest.approx(1.0)
    assert math.isnan(fm.mfu(f, 0.0, 2))


def test_comm_compute_regimes():
    small, big = fm.parse_sweep("4096x12:256,16384")
    a, b = fm.comm_compute(small, 2), fm.comm_compute(big, 2)
    assert a["regime"] == "communication-bound" and b["regime"] == "compute-bound"
    assert a["comm_ms"] == pytest.approx(b["comm_ms"])  # the bytes do not depend on the tokens
    # link time: N x (2 x 2 / B_ag + 4 / B_rs) x (W-1)/W
    n = fm.param_counts(small)["total"]
    assert a["comm_ms"] == pytest.approx(1e3 * n * (4 / fm.AG_BUSBW + 4 / fm.RS_BUSBW) / 2)
    assert fm.comm_compute(small, 2, reduce_bytes=2)["comm_ms"] < a["comm_ms"]
    assert fm.comm_compute(small, 1)["comm_ms"] == 0.0
    # the ratio falls as 1/T (attention adds a little at longer sequences)
    mid = fm.parse_sweep("4096x12:1024")[0]
    r = fm.comm_compute(mid, 2)["comm_over_compute"]
    assert r == pytest.approx(4 * fm.comm_compute(fm.parse_sweep("4096x12:4096")[0], 2)["comm_over_compute"], rel=0.05)
    assert fm.comm_compute(mid, 2)["regime"] == "balanced"
    table = fm.regime_table([small, mid, big])
    assert table.count("\n") == 3 and "balanced" in table and "compute-bound" in table


# ---------------------------------------------------------------------------------------
# Statistics


def test_quantile_and_summary():
    s = st.summarize([5, 1, 4, 2, 3, 10, 6, 7, 8, 9])
    assert s["n"] == 10 and s["median"] == 5.5 and s["min"] == 1 and s["max"] == 10
    assert s["q1"] == pytest.approx(3.25) and s["q3"] == pytest.approx(7.75)  # numpy's linear quartiles
    assert st.quantile([3.0], 0.9) == 3.0 and math.isnan(st.quantile([], 0.5))
    with pytest.raises(ValueError):
        st.summarize([])


def rounds_of(n, seed=0, drift=0.0, noise=0.01, **factors):
    """Synthetic rounds: nccl drifting from 100 ms by `drift` per round, each mode a
    factor of it, every value with its own relative noise."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = 100.0 + drift * i
        r = {"nccl": base * (1 + rng.gauss(0, noise))}
        for m, f in factors.items():
            r[m.replace("_", "-")] = base * f * (1 + rng.gauss(0, noise))
        out.append(r)
    return out


def test_bootstrap_is_deterministic_and_exact_on_constant_ratios():
    rs = [{"nccl": 100.0 + i, "lowcon": 0.9 * (100.0 + i)} for i in range(30)]
    point, lo, hi = st.bootstrap(rs, st.median_ratio("lowcon"))
    assert point == pytest.approx(0.9) and lo == pytest.approx(0.9) and hi == pytest.approx(0.9)
    noisy = rounds_of(30, lowcon=0.95)
    assert st.bootstrap(noisy, st.median_ratio("lowcon"), seed=3) == st.bootstrap(noisy, st.median_ratio("lowcon"), seed=3)
    with pytest.raises(ValueError):
        st.bootstrap([], st.median_ratio("lowcon"))


def test_pairing_resolves_what_unpaired_medians_cannot():
    # The machine drifts 100 -> 160 ms over the run; lowcon is 3% faster in every round.
    rs = rounds_of(40, seed=1, drift=1.5, noise=0.005, lowcon=0.97)
    ratio, lo, hi = st.bootstrap(rs, st.median_ratio("lowcon"))
    assert ratio == pytest.approx(0.97, abs=0.005) and hi < 1.0
    # The unpaired spreads overlap by far: the drift is larger than the effect.
    a, b = st.summarize([r["nccl"] for r in rs]), st.summarize([r["lowcon"] for r in rs])
    assert b["q3"] > a["q1"]


def test_interval_covers_one_when_there_is_no_difference():
    rs = rounds_of(40, seed=2, noise=0.03, nccl_b=1.0)
    _, lo, hi = st.bootstrap(rs, st.median_ratio("nccl-b"))
    assert lo < 1.0 < hi


def test_removed_share_and_bound():
    rs = [{"nccl": 110.0, "lowcon": 104.0, "nocomm": 100.0}] * 5
    b = st.bound_ms(rs)
    assert b == 100.0
    assert st.removed_share("lowcon", b, 0.0)(rs) == pytest.approx(0.6)
    assert st.removed_share("lowcon", 100.0, 0.0)([{"nccl": 110.0, "lowcon": 112.0}]) == pytest.approx(-0.2)
    assert math.isnan(st.removed_share("lowcon", 120.0, -20.0)(rs))  # NCCL under the bound: no excess to remove
    assert st.bound_ms([{"nccl": 1.0}]) is None
    # measured at world 1 for a 2-rank run: half the optimizer's time comes off
    opt = [{"nocomm": 10.0}] * 5
    assert st.bound_ms(rs, opt, world=2, bound_world=1) == pytest.approx(95.0)
    assert st.bound_ms(rs, opt, world=8, bound_world=1) == pytest.approx(100.0 - 10.0 * 7 / 8)
    with pytest.raises(ValueError):
        st.bound_ms(rs, None, world=2, bound_world=1)


def test_removed_share_pairs_each_round():
    # NOTE [removed, paired]: each mode's step over NCCL's in its own round. Unpaired
    # medians (nccl 100, lowcon 95, nocomm 80) would say 25%; the rounds say lowcon takes
    # 0.9 of NCCL's step where the bound takes 0.8: half the excess.
    rs = [{"nccl": 100.0, "lowcon": 90.0, "nocomm": 80.0},
          {"nccl": 200.0, "lowcon": 95.0, "nocomm": 160.0},
          {"nccl": 100.0, "lowcon": 180.0, "nocomm": 80.0}]
    b = st.bound_ms(rs)
    assert st.removed_share("lowcon", b, 0.0)(rs) == pytest.approx(0.5)
    assert st.pair_stats(rs, ["nccl", "lowcon", "nocomm"], b)["lowcon"]["removed"] == pytest.approx(0.5)
    # A world-1 bound (below the rounds' own nocomm by the optimizer's share) moves Rb
    # by that share of NCCL's median step: 0.8 - 10/100.
    assert st.removed_share("lowcon", b - 10.0, 10.0)(rs) == pytest.approx(1 - (0.9 - 0.7) / (1 - 0.7))
    assert st.pair_stats(rs, ["nccl", "lowcon", "nocomm"], b - 10.0)["lowcon"]["removed"] == \
        pytest.approx(1 - (0.9 - 0.7) / (1 - 0.7))


def test_removed_share_interval_keeps_the_pairing():
    # The machine drifts 100 -> 160 ms; every round lowcon takes 0.9 of NCCL's step and
    # nocomm 0.8: the paired share is 50% in every resample, so its interval is a point.
    # A correction recomputed per resample (the median nocomm of the resample less the
    # bound) would follow the drift and widen it.
    rs = [{"nccl": 100.0 + 1.5 * i, "lowcon": 0.9 * (100.0 + 1.5 * i), "nocomm": 0.8 * (100.0 + 1.5 * i)}
          for i in range(41)]
    s = st.pair_stats(rs, ["nccl", "lowcon", "nocomm"], st.bound_ms(rs))["lowcon"]
    assert s["removed"] == pytest.approx(0.5)
    assert s["removed_lo"] == pytest.approx(0.5) and s["removed_hi"] == pytest.approx(0.5)


def test_a_report_reads_a_bound_for_another_world_as_it_was_run(tmp_path):
    # A `--bound-for-world 2` run at one rank: env says world 1, the analysis was for 2
    # (half the optimizer's time off the bound); reading it again keeps that, from the
    # config's analysed_world or, in older files, from its args.
    c = st.analyse(synthetic_config(bound_world=1), world=2)
    bound = c["bound_ms"]
    for drop_field in (False, True):
        doc = json.loads(json.dumps({"schema": fp.SCHEMA, "env": {"world_size": 1},
                                     "args": {"bound_for_world": 2}, "configs": [c]}))
        if drop_field:
            del doc["configs"][0]["analysed_world"]
        (tmp_path / "p.json").write_text(json.dumps(doc))
        again = fp.load([str(tmp_path / "p.json")])[0]
        assert again["bound_ms"] == pytest.approx(bound) and again["analysed_world"] == 2


def test_pair_stats_noise_and_verdicts():
    rs = rounds_of(40, seed=4, noise=0.01, nccl_b=1.0, lowcon=0.9, slow=1.2, nocomm=0.8)
    b = st.bound_ms(rs)
    s = st.pair_stats(rs, ["nccl", "nccl-b", "lowcon", "slow", "nocomm"], b)
    assert "ratio" not in s["nccl"] and s["nccl"]["pairs"] == 40
    assert s["lowcon"]["removed"] == pytest.approx(0.5, abs=0.1)  # (100 - 90) / (100 - 80)
    assert "removed" not in s["nocomm"] and s["nocomm"]["excess_ms"] == 0.0
    noise = st.noise_floor(s)
    assert 0 < noise < 0.02
    assert st.verdict(s["lowcon"], noise) == "faster"
    assert st.verdict(s["slow"], noise) == "slower"
    assert st.verdict(s["nccl-b"], noise) == "same"
    # Without a twin the interval alone decides.
    assert st.noise_floor({"nccl": {}}) is None
    assert st.verdict({"ratio": 1.01, "ratio_lo": 1.005, "ratio_hi": 1.02}, None) == "slower"
    assert st.verdict({"ratio": 1.01, "ratio_lo": 1.005, "ratio_hi": 1.02}, 0.02) == "same"
    assert st.verdict({}, None) == "?"


def test_targets():
    doc = {"stats": {"nccl": {"median_ms": 110.0},
                     "lowcon": {"ratio": 0.95, "ratio_lo": 0.94, "ratio_hi": 0.96, "removed": 0.6},
                     "nccl-ce": {"ratio": 0.97, "ratio_lo": 0.96, "ratio_hi": 0.98, "removed": 0.35}},
           "noise": 0.01, "memory": {"nccl": 10 * 2**30, "lowcon": 10.4 * 2**30}}
    # 60% removed against nccl-ce's 35%: 25 points more, the target is 20.
    assert st.check_targets(doc, "lowcon", "compute-bound") == []
    doc["stats"]["nccl-ce"]["removed"] = 0.45
    assert "the target is nccl-ce + 20%" in st.check_targets(doc, "lowcon", "balanced")[0]
    # Communication-bound rows have no share target; nccl-ce itself has none.
    assert st.check_targets(doc, "lowcon", "communication-bound") == []
    assert st.check_targets(doc, "nccl-ce", "balanced") == []
    doc["stats"]["nccl-ce"]["removed"] = 0.35
    doc["memory"]["lowcon"] = 10.6 * 2**30
    doc["pool_growth"] = {"lowcon": "step 3: 1.000 -> 1.500 GiB"}
    missed = st.check_targets(doc, "lowcon", "compute-bound")
    assert any("peak 10.60 GiB > 1.05 x" in m for m in missed) and any("pool grew" in m for m in missed)
    assert st.check_targets(doc, "absent", "balanced") == ["absent: no timed steps"]
    doc["stats"]["lowcon"].update(ratio=1.05, ratio_lo=1.03, ratio_hi=1.07)
    assert any("slower" in m for m in st.check_targets(doc, "lowcon", "communication-bound"))


def test_own_memory():
    docs = [{"shape": "8192x4", "tokens_per_rank": 1024, "reduce_dtype": "fp32",
             "lowcon_memory": {"pool_bytes": 2**30, "workspace_channels": {"1": 2**29, "3": 3 * 2**30}}},
            {"shape": "x", "tokens_per_rank": 1, "reduce_dtype": "fp32"}]
    text = st.format_own_memory(docs)
    assert "8192x4 1024 fp32: 4.50 GiB = pool 1.00 + workspaces (channel 3: 3.00, channel 1: 0.50)" in text
    assert st.format_own_memory(docs[1:]) == ""


def test_losses():
    ref = [10.4, 10.3, 10.2]
    j = st.judge_losses({"nccl": ref, "nccl-b": [10.4, 10.3002, 10.2], "lowcon": [10.4, 10.3015, 10.2],
                         "bad": [10.4, 10.3, 10.2031], "nocomm": [1.0, 2.0, 3.0]})
    assert j["tolerance"] == pytest.approx(2e-3)
    assert {m: v["check"] for m, v in j["modes"].items()} == {"nccl-b": "calib", "lowcon": "ok", "bad": "wrong"}
    j = st.judge_losses({"nccl": ref, "nccl-b": ref, "lowcon": [10.4, 10.3009, 10.2], "nan": [10.4, float("nan"), 10.2]})
    assert j["tolerance"] == st.LOSS_FLOOR and j["modes"]["lowcon"]["check"] == "ok"
    assert j["modes"]["nan"]["check"] == "wrong"
    assert st.judge_losses({"lowcon": ref}) == {"tolerance": None, "modes": {}}
    # Without a twin: the uncalibrated floor; a wrong gradient still fails.
    j = st.judge_losses({"nccl": ref, "lowcon": [10.4, 10.3016, 10.2], "bad": [10.4, 10.33, 10.2]})
    assert j["tolerance"] == st.LOSS_FLOOR_UNCALIBRATED
    assert j["modes"]["lowcon"]["check"] == "ok" and j["modes"]["bad"]["check"] == "wrong"
    # Another summation order drifts only after the judged rounds: ok, its drift reported;
    # a step wrong within them is not.
    long = [10.0 - 0.01 * i for i in range(60)]
    late = long[:49] + [x + 2e-3 for x in long[49:]]
    early = long[:5] + [x + 2e-3 for x in long[5:]]
    j = st.judge_losses({"nccl": long, "nccl-b": long, "late": late, "early": early})
    assert j["modes"]["late"]["check"] == "ok" and j["modes"]["late"]["drift"] == pytest.approx(2e-3)
    assert j["modes"]["early"]["check"] == "wrong"
    assert st.max_abs_diff([1.0], [1.0, 2.0]) == math.inf


def test_pool_growth():
    assert st.pool_growth([2**30] * 5) is None
    assert st.pool_growth([]) is None
    assert st.pool_growth([2**30, 2**30, 1.5 * 2**30]) == "step 3: 1.000 -> 1.500 GiB"
    assert st.pool_growth([2**30, 2**29]) is None  # shrinking is not growing


def synthetic_config(**kw):
    rs = rounds_of(30, seed=5, noise=0.01, nccl_b=1.0, lowcon=0.97, nocomm=0.95)
    doc = {"key": "k", "shape": "4096x12", "width": 4096, "depth": 12, "tokens_per_rank": 4096,
           "reduce_dtype": "fp32", "regime": "compute-bound", "modes": ["nccl", "nccl-b", "lowcon", "nocomm"],
           "rounds": rs, "opt_rounds": [{m: 5.0 for m in r} for r in rs],
           "memory": {"nccl": 2**30, "nccl-b": 2**30, "lowcon": 2**30, "nocomm": 2**30},
           "loss_curves": {"nccl": [1.0, 0.9], "nccl-b": [1.0, 0.9], "lowcon": [1.0, 0.9005], "nocomm": [9.0, 9.0]}}
    doc.update(kw)
    return doc


def test_analyse_end_to_end():
    d = st.analyse(synthetic_config(), world=2)
    assert d["bound_ms"] == pytest.approx(95.0, abs=1.0)
    assert d["stats"]["lowcon"]["removed"] == pytest.approx(0.6, abs=0.15)
    assert d["missed"] == {"lowcon": []} and d["losses"]["modes"]["lowcon"]["check"] == "ok"
    table = st.format_rows([d, {"shape": "8192x4", "tokens_per_rank": 16384, "reduce_dtype": "bf16",
                                "error": "out of memory"}])
    assert "faster" in table and "out of memory" in table and "calib" in table
    # A run at world 1 measuring the bound for 2 ranks: half the optimizer's 5 ms comes off.
    d1 = st.analyse(synthetic_config(bound_world=1), world=2)
    assert d1["bound_ms"] == pytest.approx(d["bound_ms"] - 2.5)
    # A noisy A/A twin: the row says it resolves nothing.
    noisy = synthetic_config(rounds=rounds_of(30, seed=5, noise=0.01, nccl_b=1.05, lowcon=0.97, nocomm=0.95))
    assert "resolves nothing" in st.analyse(noisy, world=2)["missed"]["nccl-b"][0]


def test_report_command_line(tmp_path):
    doc = {"schema": fp.SCHEMA, "env": {}, "configs": [st.analyse(synthetic_config(), 2)]}
    path = tmp_path / "paired.json"
    path.write_text(json.dumps(doc))
    res = subprocess.run([sys.executable, os.path.join(HERE, "fsdp2_paired.py"), "--report", str(path)],
                         capture_output=True, text=True, check=True)
    assert "lowcon" in res.stdout and "faster" in res.stdout
    # A file written before NOTE [removed, paired] (its stored share forged here) is read
    # with today's rule: the share printed comes from its rounds.
    old = st.analyse(synthetic_config(), 2)
    fresh = old["stats"]["lowcon"]["removed"]
    old["stats"]["lowcon"].update(removed=0.123, removed_lo=0.1, removed_hi=0.2)
    path.write_text(json.dumps({"schema": fp.SCHEMA, "env": {"world_size": 2}, "configs": [old]}))
    res = subprocess.run([sys.executable, os.path.join(HERE, "fsdp2_paired.py"), "--report", str(path)],
                         capture_output=True, text=True, check=True)
    assert "12%" not in res.stdout and f"{fresh:.0%}" in res.stdout, res.stdout
    path.write_text(json.dumps({"schema": "other"}))
    res = subprocess.run([sys.executable, os.path.join(HERE, "fsdp2_paired.py"), "--report", str(path)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "not a lowcon-fsdp2-paired/1 document" in res.stderr


def test_modes_and_arguments():
    assert fp.parse_mode("lowcon@sync=memop,rs=sm-direct") == (
        "lowcon@sync=memop,rs=sm-direct", "lowcon", {"sync": "memop", "rs": "sm-direct"})
    assert fp.parse_mode("nocomm") == ("nocomm", "nocomm", {})
    # Every choice the planner makes can be named (launch= was refused before 0.3.0).
    spec = "lowcon@launch=once,pieces=4,agsync=memop,rssync=kernel,rs_ctas=64,wire=fp32"
    assert fp.parse_mode(spec)[2] == {"launch": "once", "pieces": "4", "agsync": "memop", "rssync": "kernel",
                                      "rs_ctas": "64", "wire": "fp32"}
    assert fp.parse_mode("lowcon@traffic=1")[2] == {"traffic": "1"}  # the honest floor
    for bad in ("mpi", "lowcon@speed=11", "nccl@sync=memop", "lowcon@sync"):
        with pytest.raises(ValueError):
            fp.parse_mode(bad)
    a = fp.parse_args(["--modes", "nccl,lowcon@sync=memop", "--rounds", "40"])
    assert [s[0] for s in a.mode_specs] == ["nccl", "lowcon@sync=memop"] and a.rounds == 40
    assert a.warmup == 3 and a.reduce_dtypes == "fp32,bf16" and a.method == "auto"
    for bad in (["--rounds", "1"], ["--modes", "nccl,nccl"], ["--modes", "nccl,mpi"], ["--sweep", "2048x8:3000"],
                ["--reduce-dtypes", "fp16"]):
        with pytest.raises(SystemExit):
            fp.parse_args(bad)


def test_every_documented_lowcon_option_parses():
    # The modes' docs list lowcon@KEY=VALUE options; every one must parse (rsgraph was
    # documented but refused by the parser until 2026-11-27).
    import re

    import fsdp2_modes
    doc = fsdp2_modes.__doc__
    line = next(l for l in doc.splitlines() if "`lowcon@" in l)
    documented = re.findall(r"[,@]([a-z_]+)=", line)
    assert {"rsgraph", "arrival", "ag", "replays"} <= set(documented), documented
    for key in documented:
        assert key in fp.LOWCON_KEYS, f"{key} is documented in fsdp2_modes but refused by fsdp2_paired"
        assert fp.parse_mode(f"lowcon@{key}=x")[2] == {key: "x"}
    assert set(fp.LOWCON_KEYS) == set(documented), "an accepted option the docs do not name"
    assert fp.parse_mode("lowcon@arrival=any-order,rsgraph=memop")[2] == {"arrival": "any-order", "rsgraph": "memop"}


def test_wire_modes_and_the_bytes_table():
    assert fp.parse_mode("lowcon@wire=bf16") == ("lowcon@wire=bf16", "lowcon", {"wire": "bf16"})
    a = fp.parse_args(["--modes", "nccl,lowcon@wire=bf16,lowcon@wire=fp32"])
    assert [s[0] for s in a.mode_specs] == ["nccl", "lowcon@wire=bf16", "lowcon@wire=fp32"]
    docs = [{"shape": "4096x12", "tokens_per_rank": 1024, "reduce_dtype": "fp32",
             "bytes_per_step": {"lowcon@wire=bf16": {"total_bytes": 7_700_000_000, "all_gather_bytes": 5_130_000_000,
                                                     "reduce_scatter_bytes": 0, "wire_bytes": 2_570_000_000,
                                                     "fallback_bytes": 0, "wire_pieces": 96, "fallback_pieces": 0}}}]
    text = st.format_bytes(docs)
    assert "lowcon@wire=bf16" in text and "7.700" in text and "2.570" in text and "0 / 96" in text, text
    assert st.format_bytes([{"shape": "x", "tokens_per_rank": 1, "reduce_dtype": "fp32"}]) == ""
    # Rendezvous and predicted calls per step, when the run counted them.
    docs[0]["bytes_per_step"]["lowcon@wire=bf16"].update(host_rendezvous=0, predicted_calls=25, mispredicted_calls=2)
    row = [l for l in st.format_bytes(docs).splitlines() if l.startswith("4096x12")][0].split()
    assert row[-3:] == ["0", "25", "(2)"], row


def test_memory_table():
    docs = [{"shape": "4096x12", "tokens_per_rank": 1024, "reduce_dtype": "fp32",
             "memory": {"nocomm-torch": 20 * 2**30, "lowcon": 20.8 * 2**30, "lowcon@x": 22 * 2**30},
             "symmetric": {"lowcon": 1.5 * 2**30, "lowcon@x": 1.5 * 2**30}},
            {"shape": "8192x4", "tokens_per_rank": 1024, "reduce_dtype": "fp32", "error": "out of memory"}]
    t = st.format_memory(docs).splitlines()
    row = {l.split()[3]: l.split() for l in t[2:] if l.startswith("4096x12")}
    assert row["lowcon"][4:] == ["20.80", "1.040", "1.50", "ok"]
    assert row["lowcon@x"][-1] == "missed" and row["nocomm-torch"][5] == "1.000"
    assert "out of memory" in t[-1]


def _trace():
    """One GPU's synthetic trace: an all-gather range with a recorded copy launch, a
    reduce-scatter range whose copies' launches are not recorded (lowcon's
    cuMemcpyAsync), FSDP's copy-out range, and a copy launched outside every range."""
    X = lambda cat, name, ts, dur, **a: {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": a}  # noqa: E731
    return [
        X("user_annotation", "FSDP::all_gather (layers.0)", 0, 100),
        X("cuda_runtime", "cudaMemcpyAsync", 10, 1, correlation=1),
        X("user_annotation", "FSDP::post_backward_reduce (layers.0)", 200, 100),
        X("cuda_driver", "cuLaunchKernel", 210, 1, correlation=5),  # recorded, before the copies
        X("user_annotation", "FSDP::all_gather_copy_out (layers.0)", 400, 10),
        X("cuda_runtime", "cudaLaunchKernel", 401, 1, correlation=9),
        X("cuda_runtime", "cudaLaunchKernel", 500, 1, correlation=20),
        # all-gather: 2 GB over 1000..2000 µs and 1500..2500 (union 1.5 ms)
        X("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 1000, 1000, correlation=1, bytes=1_000_000_000),
        X("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 1500, 1000, correlation=2, bytes=1_000_000_000),
        # reduce-scatter, launches 6 and 7 not recorded: 0.5 GB over 2000..3000 (overlap 0.5 ms)
        X("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 2000, 1000, correlation=6, bytes=500_000_000),
        X("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 5000, 0, correlation=7, bytes=0),
        # launched in the copy-out range and after every range: other
        X("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 6000, 10, correlation=10, bytes=7),
        X("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 7000, 10, correlation=21, bytes=7),
        X("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 8000, 10, correlation=22, bytes=9),
    ]


def test_copy_rates_split_by_call_and_join_unrecorded_launches():
    import fsdp2_profile as fp

    r = fp.copy_rates(_trace())
    ag, rs, other = r["all-gather"], r["reduce-scatter"], r["other"]
    assert (ag["copies"], ag["gb"], ag["union_ms"]) == (2, 2.0, 1.5)
    assert abs(ag["gbps"] - 2.0 / 1.5e-3) < 1e-6
    assert (rs["copies"], rs["gb"], rs["union_ms"]) == (2, 0.5, 1.0)
    assert (other["copies"], other["gb"]) == (2, 14e-9)
    assert abs(r["overlap_ms"] - 0.5) < 1e-9
    assert fp.union_us([(0, 1), (0.5, 2), (3, 4)]) == 3.0


def test_the_profile_table_shows_the_slowest_all_gather():
    import fsdp2_profile as fp

    fast = fp.copy_rates(_trace())
    slow = {"all-gather": dict(fast["all-gather"], gbps=100.0)}
    doc = {"shape": "8192x4", "tokens_per_rank": 1024, "profile": {"lowcon": {
        "waits_ms": {"forward layers.0": 1.0, "forward layers.1": 2.0, "backward layers.0": 4.0,
                     "reduce-scatter layers.0": 0.5, "final root": 0.25},
        "host_us": {"all-gather": {"median_us": 120.0, "p90_us": 150.0}},
        "copies": [fast, slow, None]}}}
    text = fp.format_profile([doc])
    line = text.splitlines()[-1]
    assert "3.0/4.0/0.5/0.2" in line and "120 (150)" in line and " 100 (2, 2.00 GB, 1.5 ms)" in line, text
    assert fp.format_profile([{"shape": "x", "tokens_per_rank": 1}]) == ""
    # NOTE [host time]: the library's part of a hook call and its rendezvous.
    doc["profile"]["lowcon"]["host_us"].update({"all-gather library": {"median_us": 80.0, "p90_us": 90.0},
                                                "all-gather rendezvous": {"median_us": 0.0, "p90_us": 0.0}})
    assert "80 (0) / -" in fp.format_profile([doc]).splitlines()[-1]
    # The rendezvous' tail, and of it the mailbox's post waits.
    doc["profile"]["lowcon"]["host_us"].update({"all-gather rendezvous": {"median_us": 0.0, "p90_us": 700.0},
                                                "all-gather mailbox": {"median_us": 0.0, "p90_us": 650.0}})
    assert "700 (650) / -" in fp.format_profile([doc]).splitlines()[-1]


def test_host_times_split_a_call_with_the_group_clock():
    import fsdp2_modes as fm

    class Clock:
        def __init__(self):
            self.now = [0, 0, 0, 0]

        def host_clock(self):
            return tuple(self.now)

    g = Clock()

    def hook(*_a):
        g.now = [g.now[0] + 1, g.now[1] + 40_000, g.now[2] + 15_000, g.now[3] + 12_000]

    t = fm.HostTimes(g)
    t.wrap(hook, "all-gather")()
    assert t.us["all-gather library"] == [40.0] and t.us["all-gather rendezvous"] == [15.0]
    assert t.us["all-gather mailbox"] == [12.0]
    assert t.us["all-gather"][0] >= 0.0
    plain = fm.HostTimes()
    plain.wrap(hook, "reduce-scatter")()
    assert set(plain.us) == {"reduce-scatter"}


def test_host_times_split_a_call_by_what_it_enqueued():
    # NOTE [enqueue clock]: the calls and µs of each kind of enqueue, per hook call.
    import fsdp2_modes as fm
    import fsdp2_profile as fp

    now = {q: (0, 0) for q in fp.ENQUEUES}

    class Group:
        def host_clock(self):
            return (0, 0, 0)

    def hook(*_a):
        now["launch"] = (now["launch"][0] + 3, now["launch"][1] + 9_000)
        now["memop"] = (now["memop"][0] + 2, now["memop"][1] + 5_000)

    t = fm.HostTimes(Group(), enqueued=lambda: dict(now))
    t.wrap(hook, "reduce-scatter")()
    assert t.us["reduce-scatter launch"] == [9.0] and t.us["reduce-scatter launch calls"] == [3.0]
    assert t.us["reduce-scatter memop"] == [5.0] and t.us["reduce-scatter copy calls"] == [0.0]
    doc = {"shape": "8192x4", "tokens_per_rank": 1024,
           "profile": {"lowcon": {"host_us": {k: {"median_us": v[0], "p90_us": v[0]} for k, v in t.us.items()}}}}
    table = fp.format_enqueues([doc])
    assert "9.0 (3)" in table and "5.0 (2)" in table and "reduce-scatter" in table, table
    assert fp.format_enqueues([{"shape": "x", "tokens_per_rank": 1, "profile": {"nccl": {"host_us": {}}}}]) == ""


def test_churn_report(tmp_path, capsys):
    import json

    import fsdp2_churn as fc

    def write(mode, in_use, loss=5.0):
        rows = [{"step": 100 * (i + 1), "in_use_gib": v, "reserved_gib": 1.0, "step_ms": 30.0, "loss": loss,
                 **({"mapped_allocations": 6, "host_rendezvous": 40, "predicted_calls": 900,
                     "mispredicted_calls": 3} if mode == "lowcon" else {})} for i, v in enumerate(in_use)]
        p = tmp_path / f"churn-{mode}.json"
        p.write_text(json.dumps({"mode": mode, "world": 4, "args": {}, "samples": rows}))
        return str(p)

    fc.report([write("nccl", [3.0, 3.2, 3.1, 3.2]), write("lowcon", [3.1, 3.3, 3.3, 3.3])])
    out = capsys.readouterr().out
    assert "ratio 1.031" in out and "not growing" in out and "6 peer allocations mapped" in out, out
    fc.report([write("nccl", [3.0, 3.2, 3.1, 3.2]), write("lowcon", [3.1, 3.3, 3.9, 4.4], loss=5.25)])
    out = capsys.readouterr().out
    assert "still growing" in out and "4 common samples: largest |lowcon - NCCL| 2.50e-01" in out, out


def _step_trace(extra_gemm_us=0.0, reduce_beside=True, names=("nvjet_gemm", "elementwise", "nvjet_gemm")):
    """A synthetic step (microseconds): three compute kernels on stream 7 (launches ending
    at 0, 300 and 500), an all-gather copy on stream 24 ending at 400, a reduction on
    stream 28 beside the third kernel's first part, and a wait kernel last (the end)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "FSDP::pre_backward (layers.0)", "ts": 450.0, "dur": 1.0}]

    def launch(corr, end):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": end - 5.0, "dur": 5.0,
                   "args": {"correlation": corr}})

    def op(cat, name, stream, ts, dur, corr):
        ev.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream,
                                                                                      "correlation": corr}})
    op("kernel", names[0], 7, 0.0, 100.0, 1)
    launch(1, 0.0)
    op("kernel", names[1], 7, 410.0, 50.0, 2)
    launch(2, 300.0)  # launched at 300: 100..300 waited for the host, 300..410 for the copy
    op("kernel", names[2], 7, 600.0, 200.0 + extra_gemm_us, 3)
    launch(3, 500.0)  # the host is early; 460..600 waits, and nothing of another stream ends then
    op("gpu_memcpy", "Memcpy PtoP (Device -> Device)", 24, 200.0, 200.0, 4)
    if reduce_beside:
        op("kernel", "lowcon_wire_reduce_f32", 28, 600.0, 100.0 + extra_gemm_us / 2, 5)
    op("kernel", "lowcon_wire_wait", 28, 900.0, 50.0, 6)  # after the last compute kernel: the end
    return ev


def test_step_decomposition_splits_idle_by_cause_and_busy_by_neighbour():
    import fsdp2_decompose as fd

    base = fd.decompose(_step_trace(reduce_beside=False))
    mode = fd.decompose(_step_trace(extra_gemm_us=100.0))
    # Idle: 100..300 the host, 300..410 the copy (all-gather; forward: launched before
    # pre_backward at 450), 460..600 a dependency no other stream explains (the kernel
    # launched at 500 is backward: 460..500 host, 500..600 other), then the end.
    assert mode["idle_us"]["host/forward"] == pytest.approx(200.0)
    assert mode["idle_us"]["all-gather/forward"] == pytest.approx(110.0)
    assert mode["idle_us"]["host/backward"] == pytest.approx(40.0)
    assert mode["idle_us"]["other/backward"] == pytest.approx(100.0)
    assert mode["idle_us"]["end/final"] == pytest.approx(950.0 - 900.0)
    assert base["idle_us"]["end/final"] == pytest.approx(950.0 - 800.0)
    # The tail: no optimizer kernel in these traces, so none.
    assert mode["tail_us"] == base["tail_us"] == 0.0
    r = fd.compare(mode, base)
    assert r["extra_busy_ms"] == pytest.approx(0.1)
    # The third kernel (300 µs here, 200 in the base) ran half (150 of 300 µs) beside the
    # reduction: half its 100 µs extra goes to sm-collective, half to nothing.
    gemm = r["extra_by_family_ms"]["gemm"]
    assert gemm["sm-collective"] == pytest.approx(0.05)
    assert gemm["nothing"] == pytest.approx(0.05)
    assert gemm["copy"] == pytest.approx(0.0)
    # The step ends with the wait kernel either way: the extra busy time came out of the
    # end's idle time, and the parts add up to the excess.
    assert r["excess_ms"] == pytest.approx(0.0)
    assert r["extra_idle_ms"]["end/final"] == pytest.approx(-0.1)
    assert sum(r["extra_idle_ms"].values()) + r["extra_busy_ms"] == pytest.approx(r["excess_ms"])
    text = fd.format_decomposition({"lowcon": r}, "nocomm")
    row = next(line.split() for line in text.splitlines() if line.startswith("lowcon "))
    # mode, span, excess, idle, all-gather fwd / bwd+final, reduce-scatter, other, host, end, busy, tail
    assert row[1:4] == ["0.9", "+0.0", "-0.1"] and row[-4:] == ["-0.1", "+0.1", "0.0", "(+0.0)"], text
    assert "lowcon  gemm    +0.10  +0.05" in text, text
    with pytest.raises(ValueError, match="operation 0 is 'a', the base's 'nvjet_gemm': not the same model's step"):
        fd.compare(fd.decompose(_step_trace(names=("a", "b", "c"))), base, "x")


def test_step_decomposition_finds_the_model_beside_long_collective_kernels_and_matches_kernels_by_name():
    import fsdp2_decompose as fd

    base = fd.decompose(_step_trace(reduce_beside=False))
    # An NCCL kernel spinning longer than every model kernel together (a step that waits on
    # its all-gathers, 4x H200 2026-11-28): the compute stream is still the model's.
    ev = _step_trace(reduce_beside=False)
    ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
               "ts": 0.0, "dur": 900.0, "args": {"stream": 31, "correlation": 9}})
    nccl = fd.decompose(ev)
    assert [o[0] for o in nccl["ops"]] == ["nvjet_gemm", "elementwise", "nvjet_gemm"]
    assert fd.compare(nccl, base, "nccl")["extra_busy_ms"] == pytest.approx(0.0)
    # The same kernel with other template arguments (chunk_cat copying bf16 bytes where the
    # base casts to f32) is the same step's kernel; another kernel is not.
    cast = ("void chunk_cat_cuda_kernel<float, c10::BFloat16>(float**)", "elementwise", "nvjet_gemm")
    copy = ("void chunk_cat_cuda_kernel<char, char>(char**)", "elementwise", "nvjet_gemm")
    r = fd.compare(fd.decompose(_step_trace(reduce_beside=False, names=copy)),
                   fd.decompose(_step_trace(reduce_beside=False, names=cast)), "lowcon")
    assert r["excess_ms"] == pytest.approx(0.0)
    assert fd.kernel_name(copy[0]) == fd.kernel_name(cast[0]) == "void chunk_cat_cuda_kernel"
    # Parentheses inside the name are the name's: two kernels of an anonymous namespace differ.
    a = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<float>(float*)"
    b = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float*)"
    assert fd.kernel_name(a) == "void at::native::(anonymous namespace)::multi_tensor_apply_kernel"
    assert fd.kernel_name(a) != fd.kernel_name(b)
    other = ("void chunk_cat_other<char>(char**)", "elementwise", "nvjet_gemm")
    with pytest.raises(ValueError, match="operation 0"):
        fd.compare(fd.decompose(_step_trace(reduce_beside=False, names=other)),
                   fd.decompose(_step_trace(reduce_beside=False, names=cast)), "lowcon")
    # A trace of communication kernels alone has no compute stream.
    only = [e for e in ev if e.get("cat") != "kernel" or e["name"].startswith("nccl")]
    with pytest.raises(ValueError, match="no compute stream"):
        fd.decompose(only)


def test_step_decomposition_from_the_paired_report(tmp_path):
    import gzip

    import fsdp2_decompose as fd

    for mode, tr in (("nocomm", _step_trace(reduce_beside=False)), ("lowcon", _step_trace(extra_gemm_us=100.0))):
        with gzip.open(tmp_path / f"trace-w64-d2-s8-b1-fp32-{mode}.json.gz", "wt") as f:
            json.dump({"traceEvents": tr}, f)
    doc = {"shape": "64x2", "tokens_per_rank": 8, "reduce_dtype": "fp32", "_dir": str(tmp_path),
           "profile": {m: {"trace": f"trace-w64-d2-s8-b1-fp32-{m}.json.gz"} for m in ("nocomm", "lowcon")}}
    text = fd.format_profiled([doc])
    assert text.startswith("64x2, 8 tokens/rank, fp32 reduce") and "+0.10" in text, text
    assert fd.format_profiled([{**doc, "_dir": str(tmp_path / "none")}]) == ""
    assert fd.main([str(tmp_path)]) == 0
    assert fd.main([str(tmp_path), "--base", "nccl"]) == 2


def test_the_hf_llama_configuration_is_llama_3s():
    cfg = fm.ModelConfig.for_tokens(4096, 32, 8192, kind="hf-llama")
    assert (cfg.ffn, cfg.heads, cfg.kv_heads, cfg.vocab, cfg.seq, cfg.batch) == (14336, 32, 8, 128256, 2048, 4)
    # Llama-3-8B: 8.03 billion parameters (untied embedding and head).
    assert fm.param_counts(cfg)["total"] == 8_030_261_248
    assert cfg.key == "hf-llama-w4096-d32-s2048-b4" and cfg.shape == "hf-llama 4096x32"
    blocks = fm.ModelConfig.for_tokens(4096, 32, 8192)
    assert (blocks.kv_heads, blocks.ffn, blocks.key) == (32, 11008, "w4096-d32-s2048-b4")
    (c,) = fm.parse_sweep("4096x8:2048", kind="hf-llama")
    assert c.kind == "hf-llama" and c.depth == 8
    with pytest.raises(ValueError, match="model 'gpt'"):
        fm.parse_sweep("4096x8:2048", kind="gpt")
    assert fp.parse_args(["--model", "hf-llama", "--sweep", "4096x8:2048,8192"]).model == "hf-llama"


def _tune_config(shape, ratios, aa=(1.0, 0.99, 1.01)):
    """A paired configuration's stats: mode -> (ratio, lo, hi)."""
    st = {m: {"ratio": r, "ratio_lo": lo, "ratio_hi": hi, "removed": 1 - r} for m, (r, lo, hi) in ratios.items()}
    if aa is not None:
        st["nccl-b"] = {"ratio": aa[0], "ratio_lo": aa[1], "ratio_hi": aa[2]}
    return {"shape": shape, "tokens_per_rank": 1024, "stats": st}


def test_fsdp2_tune_replaces_a_row_only_when_a_variant_is_resolved_faster():
    import fsdp2_tune as ft

    row = ("reduce-scatter context=fsdp dtype=f32 exact=yes algorithm=sm-direct wire=bf16 ctas=64 sync=memop "
           "piece=64M max_pieces=8")
    # The wire's rows are FSDP2's fp32 copy-in's: every lowcon mode runs with copyin=fp32.
    rows = {k.replace("@copyin=fp32", "").replace(",copyin=fp32", "").replace(",rs_ctas=64,rssync=memop", ""): v
            for k, v in ft.variants([row]).items()}
    assert all("copyin=fp32" in k for k in ft.variants([row]))
    modes = list(rows)
    assert modes[0] == "lowcon" and rows["lowcon"] == row
    assert rows["lowcon@rs=ce-reduce"] == ("reduce-scatter context=fsdp dtype=f32 exact=yes algorithm=ce-reduce "
                                           "wire=bf16 ctas=64 sync=memop")
    assert "ctas=32 " in rows["lowcon@rs_ctas=32"] and "sync=kernel" in rows["lowcon@rssync=kernel"]
    # The table's own ce-reduce row is what a caller naming ce-reduce runs, so it stands
    # for that mode; from a ce-reduce row, sm-direct is a candidate too (a table can switch back).
    own = "reduce-scatter context=fsdp dtype=f32 exact=yes algorithm=ce-reduce wire=bf16 ctas=16 sync=kernel"
    assert ft.variants([row, own])["lowcon@rs=ce-reduce,copyin=fp32"] == own
    back = ft.variants([own])
    assert "lowcon@rs=ce-reduce,copyin=fp32" not in back
    # With no row of its own, the candidate's mode names the row's CTAs and sync: what ran
    # is the row written.
    assert "algorithm=sm-direct" in back["lowcon@rs=sm-direct,rs_ctas=16,rssync=kernel,copyin=fp32"]
    # Rows bounded by bytes, mode or memory kind are not FSDP2's wire rows to rewrite.
    assert ft.is_fsdp_wire_row(row) and not ft.is_fsdp_wire_row(row.replace("exact=yes", "exact=yes bytes=..1M"))
    assert not ft.is_fsdp_wire_row(row.replace(" wire=bf16", ""))
    # The bf16 copy-in's rows (NOTE [bf16 copy-in]): their own selectors, modes as they are,
    # ce-reduce reading the bf16 input in place.
    bf = "reduce-scatter context=fsdp dtype=bf16 out=f32 algorithm=sm-direct ctas=64 sync=memop piece=32M max_pieces=8"
    assert ft.is_fsdp_row(bf) and not ft.is_fsdp_row(row) and not ft.is_fsdp_wire_row(bf)
    assert not ft.is_fsdp_row(bf.replace(" out=f32", ""))
    vb = ft.variants([bf])
    assert list(vb)[0] == "lowcon" and vb["lowcon@rs=ce-reduce,rs_ctas=64,rssync=memop"] == (
        "reduce-scatter context=fsdp dtype=bf16 out=f32 algorithm=ce-reduce ctas=64 sync=memop map=yes")
    # NOTE [bf16 input read in place]: a packing row's candidate reads it in place on 16
    # CTAs, and an in-place row's packs it on 64; the row written is the one that ran.
    assert vb["lowcon@rsmap=yes,rs_ctas=16"] == (
        "reduce-scatter context=fsdp dtype=bf16 out=f32 algorithm=sm-direct ctas=16 sync=memop piece=32M "
        "max_pieces=8 map=yes")
    inplace = ft.variants([vb["lowcon@rsmap=yes,rs_ctas=16"]])
    assert "lowcon@rsmap=yes,rs_ctas=16" not in inplace and inplace["lowcon@rsmap=no,rs_ctas=64"] == bf
    # The sync candidate is the one the row does not name: memop for a row with kernel
    # sync or none (the 2x H200 row), kernel for a memop row.
    w2 = "reduce-scatter context=fsdp dtype=bf16 out=f32 algorithm=sm-direct ctas=16 map=yes piece=32M max_pieces=4"
    v2 = ft.variants([w2])
    assert "lowcon@rssync=kernel" not in v2 and "sync=memop" in v2["lowcon@rssync=memop"], v2
    assert "lowcon@rssync=memop" not in inplace and "sync=kernel" in inplace["lowcon@rssync=kernel"]
    base = {"lowcon": (0.90, 0.89, 0.91), "lowcon@rs=ce-reduce": (0.95, 0.94, 0.96), "lowcon@rs_ctas=32": (0.905, 0.89, 0.92),
            "lowcon@rs_ctas=128": (0.93, 0.92, 0.94), "lowcon@rssync=kernel": (0.90, 0.88, 0.92)}
    modes = [m for m in modes if m in base]
    best, ev = ft.choose([_tune_config("8192x4", base)], modes)
    assert best == "lowcon", "overlapping intervals keep the table's row"
    assert any("lowcon@rs_ctas=32: 0.905 [0.890, 0.920]" in e for e in ev), ev
    faster = dict(base, **{"lowcon@rs_ctas=128": (0.85, 0.84, 0.86)})
    assert ft.choose([_tune_config("8192x4", faster)], modes)[0] == "lowcon@rs_ctas=128"
    # Faster at one shape, slower at another: the row stays.
    slower = dict(base, **{"lowcon@rs_ctas=128": (0.97, 0.96, 0.98)})
    assert ft.choose([_tune_config("8192x4", faster), _tune_config("4096x12", slower)], modes)[0] == "lowcon"
    # A wide A/A twin, or none: nothing replaced, and the evidence says why.
    best, ev = ft.choose([_tune_config("8192x4", faster, aa=(1.0, 0.95, 1.05))], modes)
    assert best == "lowcon" and any("too wide" in e for e in ev), ev
    assert ft.choose([_tune_config("8192x4", faster, aa=None)], modes)[0] == "lowcon"


def _tune_results(tmp_path, st):
    results = tmp_path / "paired.json"
    results.write_text(json.dumps({"env": {"device_name": "NVIDIA H100 80GB HBM3", "world_size": 4},
                                   # As fsdp2_paired.py writes them: every round's step times.
                                   "configs": [dict(_tune_config("8192x4", st), rounds=[{"nccl": 100.0}] * 20)]}))
    return results


@pytest.mark.parametrize("copy_in", ["bf16", "fp32"])
def test_fsdp2_tune_rewrites_the_tables_fsdp2_rows(tmp_path, copy_in):
    import fsdp2_tune as ft

    shipped = os.path.join(HERE, "..", "..", "..", "host", "src", "plan", "tables", "h100-w4.txt")
    text = open(shipped).read()
    table = tmp_path / "box.txt"
    table.write_text(text)
    is_row = lambda line: ft.is_fsdp_row(line, copy_in)  # noqa: E731
    rows = ft.variants([line for line in text.splitlines() if is_row(line)])
    m = lambda mode: ft.mode_for(mode, copy_in)  # noqa: E731
    ce = next(k for k in rows if "rs=ce-reduce" in k)
    st = {m("lowcon"): (0.90, 0.89, 0.91), ce: (0.95, 0.94, 0.96),
          m("lowcon@rs_ctas=32"): (0.91, 0.90, 0.92), m("lowcon@rs_ctas=128"): (0.85, 0.84, 0.86),
          m("lowcon@rssync=kernel"): (0.90, 0.88, 0.92), "nccl-ce": (0.95, 0.94, 0.96)}
    results = _tune_results(tmp_path, st)
    assert ft.main(["--table", str(table), "--results", str(results), "--copy-in", copy_in]) == 0
    out = table.read_text().splitlines()
    fsdp = [line for line in out if is_row(line)]
    best = m("lowcon@rs_ctas=128")
    # The winner, then ce-reduce's row (what a caller naming it gets); the other sm-direct
    # variants would be unread behind the winner, so they are comments.
    assert fsdp == [rows[best], rows[ce]], fsdp
    also = [line for line in out if line.startswith("# also measured (unread behind the sm-direct row above): ")]
    assert sorted(line.split(": ", 1)[1] for line in also) == sorted(r for k, r in rows.items() if k not in (best, ce))
    # Tuned again from the same results: the earlier run's comments and source go with its
    # rows; the row (now 128 CTAs) has no 128-CTA variant any more, and stays.
    rows_again = ft.variants(fsdp)
    assert m("lowcon@rs_ctas=128") not in rows_again and rows_again[m("lowcon")] == rows[best], rows_again
    assert ft.main(["--table", str(table), "--results", str(results), "--copy-in", copy_in]) == 0
    again = table.read_text().splitlines()
    ce_again = next(k for k in rows_again if "rs=ce-reduce" in k)
    assert [line for line in again if is_row(line)] == [rows[best], rows[ce]]
    also_again = sorted(line.split(": ", 1)[1] for line in again if line.startswith("# also measured "))
    assert also_again == sorted(r for k, r in rows_again.items() if k not in (m("lowcon"), ce_again)), also_again
    assert sum(line.startswith("# Chosen: ") for line in again) == 1
    assert next(line for line in again if line.startswith("source ")).count(f"; FSDP2 {copy_in} rows: ") == 1
    assert len(rows) == (6 if copy_in == "bf16" else 5), rows  # bf16: sm-direct read in place too
    assert any(line.startswith(f"# Chosen: {best}") for line in out)
    assert any(ft.FAMILIES[copy_in][2] in line for line in out)
    # The comments that described the old rows went with them; the other kind's stay.
    gone, kept = ("A caller who names ce-reduce", "32 MiB of bf16") if copy_in == "fp32" else \
        ("32 MiB of bf16", "A caller who names ce-reduce")
    assert not any(gone in line for line in out) and any(kept in line for line in out)
    assert next(line for line in out if line.startswith("source ")).endswith(
        f"; FSDP2 {copy_in} rows: {__import__('datetime').date.today()}, 4 ranks of NVIDIA H100 80GB HBM3, 8192x4:1024, "
        f"20 rounds ({results})")
    # Every other rule is kept, in its order.
    others = [line for line in text.splitlines() if line and not line.startswith("#") and not is_row(line)
              and not line.startswith("source ")]
    assert [line for line in out if line in others] == others
    # A table with no such row is refused, unchanged.
    bare = tmp_path / "bare.txt"
    bare.write_text("lowcon-tuning 1\nmachine gpu=X world=2\nsource s\nall-gather algorithm=ce-pull\n")
    assert ft.main(["--table", str(bare), "--results", str(results), "--copy-in", copy_in]) == 2
    assert bare.read_text().endswith("all-gather algorithm=ce-pull\n")


def test_fsdp2_tune_ce_reduce_winning_and_both_kinds_tuned_in_turn(tmp_path):
    import fsdp2_tune as ft

    shipped = os.path.join(HERE, "..", "..", "..", "host", "src", "plan", "tables", "h100-w4.txt")
    text = open(shipped).read()
    table = tmp_path / "box.txt"
    table.write_text(text)
    kept = {}
    for copy_in in ("fp32", "bf16"):
        is_row = lambda line, k=copy_in: ft.is_fsdp_row(line, k)  # noqa: E731
        rows = ft.variants([line for line in table.read_text().splitlines() if is_row(line)])
        m = lambda mode, k=copy_in: ft.mode_for(mode, k)  # noqa: E731
        ce = next(k for k in rows if "rs=ce-reduce" in k)
        st = {m("lowcon"): (0.90, 0.89, 0.91), ce: (0.80, 0.79, 0.81), m("lowcon@rs_ctas=32"): (0.91, 0.90, 0.92)}
        results = tmp_path / copy_in / "paired.json"
        results.parent.mkdir()
        results.write_text(json.dumps({"env": {"device_name": "NVIDIA H100 80GB HBM3", "world_size": 4},
                                       "configs": [dict(_tune_config("8192x4", st), rounds=[{"nccl": 1.0}] * 20)]}))
        assert ft.main(["--table", str(table), "--results", str(results), "--copy-in", copy_in]) == 0
        out = table.read_text().splitlines()
        # ce-reduce won: its row first, then the table's own sm-direct row (what a caller
        # naming sm-direct gets), the other sm-direct variants as comments after both.
        assert [line for line in out if is_row(line)] == [rows[ce], rows[m("lowcon")]]
        unread = [line for line in out if line.startswith(f"{ft.ALSO}(unread behind the sm-direct row above): ")
                  and is_row(line.split(": ", 1)[1])]
        assert sorted(line.split(": ", 1)[1] for line in unread) == \
            sorted(r for k, r in rows.items() if k not in (ce, m("lowcon")))
        last_rule = max(i for i, line in enumerate(out) if is_row(line))
        assert all(out.index(line) > last_rule for line in unread)
        kept[copy_in] = unread
    # Tuning the bf16 rows kept the fp32 rows' comments, and the source names both runs.
    out = table.read_text().splitlines()
    assert all(line in out for line in kept["fp32"]), kept["fp32"]
    source = next(line for line in out if line.startswith("source "))
    assert source.count("; FSDP2 fp32 rows: ") == 1 and source.count("; FSDP2 bf16 rows: ") == 1, source


def test_step_decomposition_classes_streams_by_fsdps_annotations_then_kernel_names(tmp_path):
    import gzip

    import fsdp2_decompose as fd

    def k(name, stream, cat="kernel"):
        return {"ph": "X", "cat": cat, "name": name, "ts": 0.0, "dur": 1.0, "args": {"stream": stream}}

    def note(name, stream):
        return {"ph": "X", "cat": "gpu_user_annotation", "name": name, "tid": stream, "ts": 0.0, "dur": 1.0}

    ev = [k("nvjet_gemm", 7), k("nvjet_gemm", 7),
          k("lowcon_rs_direct_f32", 30),  # sm-direct, no annotation: its kernel names it
          k("Memcpy PtoP (Device -> Device)", 31, "gpu_memcpy"), note("FSDP::post_backward_reduce (layers.0)", 31),
          k("Memcpy PtoP (Device -> Device)", 32, "gpu_memcpy"), note("FSDP::all_gather (layers.0)", 32),
          k("void at::native::multi_tensor_apply_kernel", 33), note("FSDP::all_gather (layers.0)", 33)]
    assert fd.stream_classes(ev, 7) == {30: "reduce-scatter", 31: "reduce-scatter", 32: "all-gather", 33: "all-gather"}
    # Without annotations, a stream of peer copies alone is an all-gather's.
    assert fd.stream_classes([k("Memcpy PtoP (Device -> Device)", 31, "gpu_memcpy")], 7) == {31: "all-gather"}
    # What ran beside a kernel: by the kernel's own name, whatever its stream.
    beside = fd.decompose(ev + [k("lowcon_wire_wait", 30)])["beside"]
    assert len(beside["sm-collective"]) == len(beside["copy"]) == len(beside["wait"]) == len(beside["other-stream"]) == 1
    # Two configurations in one folder: one table each; two traces of one mode: refused.
    for cfg in ("w64-d2-s8-b1-fp32", "w128-d2-s8-b1-fp32"):
        for mode in ("nocomm", "lowcon"):
            with gzip.open(tmp_path / f"trace-{cfg}-{mode}.json.gz", "wt") as f:
                json.dump({"traceEvents": _step_trace()}, f)
    assert fd.main([str(tmp_path)]) == 0
    assert fd.main([str(tmp_path), str(tmp_path / "trace-w64-d2-s8-b1-fp32-lowcon.json.gz")]) == 2
    # Every rank's traces (--profile-ranks all): a folder gives rank 0's unless --rank says.
    assert fd.config_and_mode("trace-w64-d2-s8-b1-fp32-lowcon_arrival=in-order.rank3.json.gz") == (
        "w64-d2-s8-b1-fp32", "lowcon_arrival=in-order", 3)
    assert fd.config_and_mode("x/trace-w64-d2-s8-b1-fp32-nocomm.json") == ("w64-d2-s8-b1-fp32", "nocomm", 0)
    with gzip.open(tmp_path / "trace-w64-d2-s8-b1-fp32-lowcon.rank1.json.gz", "wt") as f:
        json.dump({"traceEvents": _step_trace()}, f)
    assert fd.main([str(tmp_path)]) == 0  # rank 0's, as before: the rank 1 trace is not a second lowcon
    assert fd.main([str(tmp_path), "--rank", "1"]) == 2  # rank 1 has lowcon but no nocomm trace
    with gzip.open(tmp_path / "trace-w64-d2-s8-b1-fp32-nocomm.rank1.json.gz", "wt") as f:
        json.dump({"traceEvents": _step_trace()}, f)
    assert fd.main([str(tmp_path), "--rank", "1"]) == 0


def test_the_tail_runs_from_the_last_gemm_to_the_optimizer():
    import fsdp2_decompose as fd

    def trace(cast_us):
        ev = []
        for i, (name, ts, dur) in enumerate([("nvjet_gemm", 0.0, 100.0), ("nvjet_gemm", 100.0, 100.0),
                                             ("chunk_cat_cuda_kernel", 200.0, cast_us),
                                             ("multi_tensor_apply_kernel", 300.0 + cast_us, 50.0),
                                             ("nvjet_gemm", 400.0 + cast_us, 10.0)]):
            ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
                       "args": {"stream": 7, "correlation": i}})
        return ev

    base, mode = fd.decompose(trace(20.0)), fd.decompose(trace(60.0))
    # From the second GEMM's end (200) to the optimizer (320 / 360); a GEMM after it
    # does not count.
    assert (base["tail_us"], mode["tail_us"]) == (pytest.approx(120.0), pytest.approx(160.0))
    r = fd.compare(mode, base)
    assert r["extra_tail_ms"] == pytest.approx(0.04)
    assert "tail ms (over base)" in fd.format_decomposition({"lowcon": r}, "nocomm")


def test_each_ranks_waiting_names_the_late_rank(tmp_path, capsys):
    import gzip

    import fsdp2_decompose as fd

    # Rank 1's wire waits spin 50 µs more than rank 0's (rank 0 is the late one).
    for rank, extra in ((0, 0.0), (1, 50.0)):
        ev = _step_trace()
        for e in ev:
            if e.get("name") == "lowcon_wire_wait":
                e["dur"] += extra
        name = f"trace-w64-d2-s8-b1-fp32-lowcon{'.rank1' if rank else ''}.json.gz"
        with gzip.open(tmp_path / name, "wt") as f:
            json.dump({"traceEvents": ev}, f)
    w = fd.rank_waits(_step_trace())
    assert w["spin"] == pytest.approx(0.05) and w["idle"] > 0 and w["tail"] == 0.0
    assert fd.main([str(tmp_path), "--ranks"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("lowcon ")]
    assert [r[1] for r in rows] == ["0", "1"] and [r[4] for r in rows] == ["0.05", "0.10"], out
    assert fd.main([str(tmp_path / "nothing"), "--ranks"]) == 2


def test_two_builds_are_compared_through_nccl(tmp_path):
    import fsdp2_builds as fb

    rng = random.Random(7)

    def run(path, slow):
        rounds = []
        for _ in range(16):
            n = 100 + rng.uniform(-3, 3)  # the machine drifts: NCCL and lowcon alike
            rounds.append({"nccl": n, "nccl-b": n * rng.uniform(0.995, 1.005),
                           "lowcon": n * 0.90 * slow * rng.uniform(0.997, 1.003)})
        path.mkdir()
        (path / "paired.json").write_text(json.dumps({"configs": [{"key": "w8192-d4", "rounds": rounds}]}))
        return str(path)

    same = fb.load_runs([f"base={run(tmp_path / 'a', 1.0)}", f"new={run(tmp_path / 'b', 1.0)}"])
    out = fb.report(same)
    assert "w8192-d4" in out and "within the A/A noise" in out, out
    slower = fb.load_runs([f"base={tmp_path / 'a'}", f"new={run(tmp_path / 'c', 1.05)}"])
    out = fb.report(slower)
    assert "moved: slower" in out, out
    # A label's runs pool; a build without the mode is an error naming it.
    pooled = fb.load_runs([f"base={tmp_path / 'a'}", f"base={tmp_path / 'b'}", f"new={tmp_path / 'c'}"])
    assert len(pooled["base"]["w8192-d4"]) == 32
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "paired.json").write_text(json.dumps({"configs": [{"key": "w8192-d4", "rounds": [{"nccl": 1.0}]}]}))
    with pytest.raises(SystemExit, match="new has no lowcon"):
        fb.report(fb.load_runs([f"base={tmp_path / 'a'}", f"new={tmp_path / 'd'}"]))
    with pytest.raises(SystemExit, match="expected LABEL=RUN_DIR"):
        fb.load_runs(["nolabel"])


def test_host_per_step_is_paired_by_round_against_nocomm():
    # NOTE [host per step]: the host's ms to issue each step beside the step's GPU time.
    gpu = [{"nccl": 100.0, "lowcon": 95.0, "nocomm": 90.0}, {"nccl": 110.0, "lowcon": 96.0, "nocomm": 92.0},
           {"nccl": 104.0, "lowcon": 94.0, "nocomm": 91.0}]
    host = [{"nccl": 80.0, "lowcon": 94.0, "nocomm": 89.0}, {"nccl": 82.0, "lowcon": 97.0, "nocomm": 90.0},
            {"nccl": 81.0, "lowcon": 93.0, "nocomm": 88.0}]
    doc = {"shape": "4096x12", "tokens_per_rank": 1024, "reduce_dtype": "fp32", "rounds": gpu, "host_rounds": host}
    h = st.host_stats(doc)
    assert h["lowcon"]["host_ms"] == 94.0 and h["nocomm"]["host_ms"] == 89.0
    # Paired within rounds: lowcon's host 5, 7 and 5 ms over nocomm's.
    assert h["lowcon"]["host_excess_ms"] == 5.0 and "host_excess_ms" not in h["nocomm"]
    assert h["nccl"]["host_excess_ms"] == -8.0
    # host / step per round, then the median: lowcon's host sets the pace, NCCL's does not.
    assert h["lowcon"]["host_over_step"] == pytest.approx(94.0 / 95.0)
    assert h["nccl"]["host_over_step"] == pytest.approx(81.0 / 104.0)
    text = st.format_host([doc])
    assert "host ms/step" in text and "+5.00" in text and "-8.00" in text, text
    # Runs from before host times were kept print nothing.
    assert st.host_stats({"rounds": gpu}) == {} and st.format_host([{"rounds": gpu}]) == ""
