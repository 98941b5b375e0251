"""The paired FSDP2 benchmark end to end on the CPU (gloo, and lowcon's host backend), at
2 ranks: a smoke test of the script and of what its lowcon modes run, not a measurement.
One model per mode, so each mode's losses are compared step by step with the reference
`nccl` mode's (gloo here): lowcon's FSDP2 hooks (`lowcon.fsdp`: reduce-scatter inputs
from the pool, outputs from torch) and FSDP2 on a `lowcon` process group must train the
same model. Skipped where torch is not installed."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port  # P and P + 1 free: lowcon's store takes MASTER_PORT + 1

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "fsdp2_paired.py"


def run_bench(*args, nproc=2):
    """fsdp2_paired.py on the CPU (`--cpu`, then `args`) under torchrun at `nproc` ranks."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
         str(free_port()), str(BENCH), "--cpu", *args],
        capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize("align", ["after-nocomm", "every-step"])
def test_fsdp2_paired_aligns_the_ranks_when_asked(tmp_path, align):
    # NOTE [aligned steps]: a synchronisation and a barrier before the steps named, the
    # run otherwise as usual (every mode timed, the option recorded with the results).
    p = run_bench(
        "--sweep", "128x1:16", "--reduce-dtypes", "fp32", "--rounds", "3", "--warmup", "1",
        "--modes", "nccl,lowcon,nocomm", "--align", align, "--seed", "13", "--out", str(tmp_path),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "paired.json").read_text())
    assert doc["args"]["align"] == align
    (cfg,) = doc["configs"]
    assert len(cfg["rounds"]) == 3 and all(set(r) == {"nccl", "lowcon", "nocomm"} for r in cfg["rounds"])
    # The steps aligned, warm-up round included: every-step, all 4 x 3 after a GPU
    # synchronisation; after-nocomm, each step that follows a nocomm (a round's first
    # follows the last of the round before), with the host barrier alone. Seed 13's orders
    # ([lowcon, nocomm, nccl] [nocomm, lowcon, nccl] [nccl, lowcon, nocomm] [lowcon, nccl,
    # nocomm]) give 3: one within a round, one after a round's first step, one across
    # rounds, none after the last step; aligning before each nocomm or at each round's
    # first step would count 4.
    if align == "every-step":
        assert cfg["aligned_steps"] == {"sync_and_barrier": 12, "barrier": 0}, cfg["aligned_steps"]
    else:
        rng = random.Random(cfg["seed"] * 7919 + 1)
        orders = [rng.sample(cfg["modes"], 3) for _ in range(4)]
        want = sum(o.count("nocomm") for o in orders) - (orders[-1][-1] == "nocomm")
        assert want == 3, orders
        assert cfg["aligned_steps"] == {"sync_and_barrier": 0, "barrier": want}, (cfg["aligned_steps"], orders)


def test_fsdp2_paired_on_the_host_backend(tmp_path):
    p = run_bench(
        "--sweep", "128x1:16", "--reduce-dtypes", "fp32", "--rounds", "2", "--warmup", "1",
        "--modes", "nccl,nccl-b,lowcon,lowcon@mem=pool,lowcon@agmem=pool,lowcon@wire=fp32,lowcon@wire=bf16,"
        "lowcon@wire=bf16,copyin=fp32,floor,lowcon-pg,nocomm", "--method", "models", "--out", str(tmp_path),
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    doc = json.loads((tmp_path / "paired.json").read_text())
    # The floor moves bytes between GPUs: skipped on the host backend, saying why.
    assert "host backend" in doc["skipped"]["floor"], doc["skipped"]
    (cfg,) = doc["configs"]
    checks = {m: v["check"] for m, v in cfg["losses"]["modes"].items()}
    split = "lowcon@wire=bf16,copyin=fp32"
    for m in ("lowcon", "lowcon@mem=pool", "lowcon@agmem=pool", "lowcon@wire=fp32", "lowcon@wire=bf16", split,
              "lowcon-pg"):
        assert checks.get(m) == "ok", (m, checks, cfg["loss_curves"])
    # Bytes per step, counted: the bf16 wire sends half the fp32 reduce-scatter's bytes,
    # none falling back (bf16 gradients upcast); FSDP2's bf16 gradients copied in as bf16
    # (NOTE [bf16 copy-in], the default) send the same bytes as a bf16 reduce-scatter's.
    b = cfg["bytes_per_step"]
    fp32, bf16, wire = b["lowcon@wire=fp32"], b["lowcon@wire=bf16"], b[split]
    assert fp32["wire_bytes"] == 0 and fp32["reduce_scatter_bytes"] > 0, b
    assert wire["reduce_scatter_bytes"] == 0 and 2 * wire["wire_bytes"] == fp32["reduce_scatter_bytes"], b
    assert wire["fallback_pieces"] == 0 and wire["wire_pieces"] > 0, b
    assert bf16["wire_bytes"] == 0 and 2 * bf16["reduce_scatter_bytes"] == fp32["reduce_scatter_bytes"], b
    assert all(b["lowcon"][k] == bf16[k] for k in ("reduce_scatter_bytes", "wire_bytes", "all_gather_bytes")), b
    assert bf16["all_gather_bytes"] == fp32["all_gather_bytes"] > 0, b
    assert "bytes per step to and from peers" in out, out
    # Every configuration ends with the pool trimmed: everything lowcon's pool modes
    # allocated was free again, so all of it went back.
    assert cfg["pool_trimmed_bytes"] > 0, cfg.get("pool_trimmed_bytes")


def test_hsdp_on_the_host_backend(tmp_path):
    """`--hsdp 2` at 4 ranks: every model on a 2 x 2 replicate x shard mesh, lowcon's hooks
    on the shard dimension (a group over that subgroup), FSDP2's replica all-reduce on gloo;
    lowcon trains the reference's model."""
    p = run_bench(
        "--hsdp", "2", "--sweep", "128x1:16", "--reduce-dtypes", "fp32", "--rounds", "2",
        "--warmup", "1", "--modes", "nccl,nccl-b,lowcon,nocomm", "--method", "models", "--out", str(tmp_path), nproc=4,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    doc = json.loads((tmp_path / "paired.json").read_text())
    assert doc["hsdp"] == 2, doc.get("hsdp")
    (cfg,) = doc["configs"]
    checks = {m: v["check"] for m, v in cfg["losses"]["modes"].items()}
    assert checks.get("lowcon") == "ok", (checks, cfg["loss_curves"])
    # The all-gathers ran on lowcon's 2-rank shard group: 1 peer's bytes per shard.
    assert cfg["bytes_per_step"]["lowcon"]["all_gather_bytes"] > 0, cfg["bytes_per_step"]


def test_hsdp_refuses_modes_it_cannot_place():
    p = subprocess.run([sys.executable, str(BENCH), "--cpu", "--hsdp", "2", "--modes", "nccl,nccl-ce"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "drop nccl-ce" in p.stderr, p.stderr


def test_fsdp2_memory_only_needs_no_nccl(tmp_path):
    """`--memory-only` (what ranks sharing a GPU can measure): peak memory per mode against
    nocomm-torch, no timing table."""
    p = run_bench(
        "--memory-only", "--sweep", "128x1:16", "--reduce-dtypes", "fp32", "--rounds", "2",
        "--warmup", "1", "--modes", "lowcon,lowcon@mem=pool,lowcon-pg,nocomm-torch", "--out", str(tmp_path),
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    (cfg,) = json.loads((tmp_path / "paired.json").read_text())["configs"]
    assert cfg["memory_only"] and set(cfg["memory"]) == {"lowcon", "lowcon@mem=pool", "lowcon-pg", "nocomm-torch"}, cfg
    # The pool mode's symmetric memory counts in its peak. (The modes share one group, so
    # the default's reading includes the pool mode's segments: measure the two in separate
    # processes, as the bench README says.)
    assert cfg["symmetric"]["lowcon@mem=pool"] > 0 and "vs nocomm-torch" in out and "median ms" not in out, out
    # Bytes per step are counted in memory-only runs too (the default sends FSDP2's bf16
    # gradients copied in as bf16: NOTE [bf16 copy-in]).
    b = cfg["bytes_per_step"]["lowcon"]
    assert b["reduce_scatter_bytes"] > 0 and b["wire_bytes"] == 0, cfg["bytes_per_step"]


class _RecordingGroup:
    """Stands in for a lowcon.Group: records the options of each reduce-scatter."""

    def __init__(self, world_size):
        self.world_size, self.rank, self.device, self.calls = world_size, 0, None, []

    def reduce_scatter(self, output, input, op, **options):
        self.calls.append((options["algorithm"], options["context"]))


@pytest.mark.parametrize("memory,world,out_bytes,asked", [
    ("pool", 2, 8 << 20, "auto"),
    ("pool", 4, 64 << 20, "auto"),
    ("pool", 2, 64 << 20, "sm-direct"),
    ("torch", 4, 4 << 10, "auto"),
    ("torch", 2, 64 << 20, "sm-direct"),
])
def test_the_fsdp2_reduce_scatter_leaves_the_choice_to_the_planner(memory, world, out_bytes, asked):
    # What won inside FSDP2 (ce-reduce reading torch's memory, ce-reduce from 8 MiB in the
    # pool at 2 ranks) is in the tuning tables now (host/src/plan/tables/, tested in
    # plan/tests.rs and test_plan.py): the hook passes the caller's choice and the hint.
    import torch

    import lowcon.fsdp

    g = _RecordingGroup(world)
    rs = lowcon.fsdp.LowconReduceScatter(g, asked, memory=memory)
    out = torch.empty(out_bytes // 4, dtype=torch.float32)
    rs(out, torch.empty(out.numel() * world, dtype=torch.float32))
    assert g.calls == [(asked, "fsdp")]


def test_the_hf_llama_model_is_the_one_the_arithmetic_counts():
    """`--model hf-llama` builds transformers' LlamaForCausalLM (on the meta device here:
    no memory); its parameters are what the benchmark's FLOP and byte counts assume."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(BENCH.parent))
    import fsdp2_model as fm

    cfg = fm.ModelConfig.for_tokens(512, 3, 64, kind="hf-llama")
    model = fm.build_model(cfg, "meta")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert len(fm.blocks(model)) == 3
    assert sum(p.numel() for p in model.parameters()) == fm.param_counts(cfg)["total"]
    attn = fm.blocks(model)[0].self_attn
    assert attn.k_proj.out_features == cfg.kv_heads * cfg.head_dim == 512  # 4 heads: 4 kv heads (min(8, 4))
    assert fm.blocks(model)[0].mlp.gate_proj.out_features == cfg.ffn


def test_the_time_budget_ends_a_configuration_and_keeps_its_rounds(tmp_path):
    # NOTE [budget within a configuration]: 40 rounds planned, 0.5 s of budget: the rounds
    # stop at a check (every 4 rounds, from the 4th), on every rank alike, and the rounds
    # done are analysed and written, saying so.
    p = run_bench(
        "--sweep", "128x1:16", "--reduce-dtypes", "fp32", "--rounds", "40", "--warmup", "1",
        "--modes", "nccl,nccl-b,nocomm", "--time-budget", "0.5", "--out", str(tmp_path),
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    (cfg,) = json.loads((tmp_path / "paired.json").read_text())["configs"]
    cut = cfg["rounds_cut"]
    assert cut is not None and cut["planned"] == 40 and cut["why"] == "time budget", cfg.get("rounds_cut")
    assert 4 <= cut["done"] < 40 and cut["done"] % 4 == 0, cut
    assert len(cfg["rounds"]) == cut["done"] and "stats" in cfg, cfg.keys()
    # NOTE [host per step]: the host's time per step is kept for every round and mode.
    assert len(cfg["host_rounds"]) == cut["done"] and all(r["nccl"] > 0 for r in cfg["host_rounds"]), cfg["host_rounds"]
    assert "the host's time to issue a step" in out, out
    assert f"after {cut['done']} of 40 rounds" in out, out


def test_gradient_accumulation_reduces_plain_f32_and_trains_the_same_model(tmp_path):
    # NOTE [gradient accumulation]: 2 passes a step, FSDP2 reducing after the second only.
    # The accumulated gradients carry no bf16 hint, so lowcon reduces them as plain f32
    # (4-byte elements on the links, no wire), and its model trains the reference's.
    p = run_bench(
        "--sweep", "128x1:16", "--reduce-dtypes", "fp32", "--rounds", "2", "--warmup", "1",
        "--modes", "nccl,lowcon,nocomm", "--method", "models", "--grad-accum", "2", "--out", str(tmp_path),
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    (cfg,) = json.loads((tmp_path / "paired.json").read_text())["configs"]
    assert cfg["grad_accum"] == 2, cfg.get("grad_accum")
    checks = {m: v["check"] for m, v in cfg["losses"]["modes"].items()}
    assert checks.get("lowcon") == "ok", (checks, cfg["loss_curves"])
    b = cfg["bytes_per_step"]["lowcon"]
    assert b["wire_bytes"] == 0 and b["reduce_scatter_bytes"] > 0, b
    # Without accumulation the same model's reduce-scatter sends bf16 (the copy-in): half.
    p1 = run_bench(
        "--sweep", "128x1:16", "--reduce-dtypes", "fp32", "--rounds", "2", "--warmup", "1",
        "--modes", "nccl,lowcon,nocomm", "--method", "models", "--out", str(tmp_path / "one"),
    )
    assert p1.returncode == 0, p1.stdout + p1.stderr
    (one,) = json.loads((tmp_path / "one" / "paired.json").read_text())["configs"]
    assert one["grad_accum"] == 1
    one_rs = one["bytes_per_step"]["lowcon"]["reduce_scatter_bytes"]
    assert 2 * one_rs == b["reduce_scatter_bytes"], (one["bytes_per_step"], b)
