"""paired_order.py draws fsdp2_paired.py's round orders again and sizes order effects."""
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "crates", "lowcon-py", "bench"))

import paired_order as po  # noqa: E402


def test_orders_are_fsdp2_paireds_and_a_penalty_after_nocomm_shows(tmp_path):
    modes, seed, index, warmup, n = ["nccl", "nccl-b", "lowcon", "nocomm"], 1, 2, 3, 200
    # The same draw as fsdp2_paired.run_config's: one sample per round, warm-up included.
    rng = random.Random(seed * 7919 + index)
    drawn = [rng.sample(modes, len(modes)) for _ in range(warmup + n)][warmup:]
    assert po.orders(modes, seed, index, warmup, n) == drawn
    # Every step takes its mode's time, plus 30 ms right after nocomm.
    base = {"nccl": 100.0, "nccl-b": 100.0, "lowcon": 90.0, "nocomm": 80.0}
    rounds = []
    for order in drawn:
        rounds.append({m: base[m] + (30.0 if i and order[i - 1] == "nocomm" else 0.0) for i, m in enumerate(order)})
    config = {"shape": "4096x12", "tokens_per_rank": 1024, "modes": modes, "seed": seed, "warmup_rounds": warmup,
              "rounds": rounds}
    doc = {"configs": [{"error": "time budget spent"}, config]}  # the failed first one counts: index 2
    by_pos, by_prev = po.effects(config, index)
    assert set(by_prev["nccl"]["nocomm"]) == {130.0} and set(by_prev["nccl"]["lowcon"]) == {100.0}
    path = tmp_path / "paired.json"
    path.write_text(json.dumps(doc))
    out = subprocess.run([sys.executable, os.path.join(HERE, "paired_order.py"), str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "4096x12 at 1024 tokens, 200 rounds" in out and "nocomm: 130.0" in out and "lowcon: 100.0" in out


def test_the_draw_matches_the_benchmark_source():
    # The formula this probe redraws, as the benchmark writes it (a change there must
    # change the probe too).
    src = open(os.path.join(HERE, "..", "..", "crates", "lowcon-py", "bench", "fsdp2_paired.py")).read()
    assert "order_rng = random.Random(args.seed * 7919 + index)" in src
    assert "order = order_rng.sample(modes, len(modes))" in src
