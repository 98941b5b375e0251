"""The planner decides for every entry point (NOTE [one planner]): a tuning table in a
temporary file (LOWCON_TUNING) changes the plan that auto calls, lowcon.fsdp's hooks,
lowcon.tp's ops and the torch.distributed backend each run, on the host backend at 2
ranks (plan_worker.py). Evidence per entry point: the plan the library logs for the call
(LOWCON_DEBUG=1: its context and the table rule it came from) and, for the bf16 wire,
the bytes the group counted. Skipped where torch is not installed."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port  # P and P + 1 free: lowcon's store takes MASTER_PORT + 1

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "plan_worker.py")

# Every rule distinct from the shipped host table's (host/src/plan/tables/host.txt), one
# per context; the wire is off for FSDP2 here where the shipped table sends it.
TABLE = """lowcon-tuning 1
machine gpu=host world=*
source test_plan.py: a table whose every rule differs from the shipped one
all-gather context=fsdp algorithm=ce-push
all-gather context=tp algorithm=sm-oneshot
all-gather algorithm=ce-pull
reduce-scatter context=fsdp algorithm=tma-reduce
reduce-scatter context=tp algorithm=sm-direct ctas=3
reduce-scatter algorithm=ce-reduce piece=1K
"""


def run(mode, table=None):
    env = {**os.environ, "LOWCON_DEBUG": "1", "LOWCON_TORCH_WIRE": "auto"}
    env.pop("LOWCON_TUNING", None)
    if table is not None:
        env["LOWCON_TUNING"] = str(table)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                        str(free_port()), WORKER, mode], capture_output=True, text=True, timeout=300, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in range(2):
        assert f"rank {r}: plan {mode} ok" in out, out
    return out


def logged(out, what, context):
    """The (algorithm, origin) of each plan the ranks logged for `what` in `context` (the
    ranks' stderr lines may interleave: no rank prefix is required)."""
    pat = re.compile(rf"plan: {re.escape(what)} \({context}\): algorithm=(\S+) [^\n]*?origin=(\S+)")
    return {m.groups() for m in pat.finditer(out)}


def number(out, label):
    return int(re.search(rf"rank 0: plan {label} (\d+)", out).group(1))


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "mine.txt"
    path.write_text(TABLE)
    return path


def line_of(rule):
    return TABLE.splitlines().index(rule) + 1


def test_a_table_of_ours_decides_auto_fsdp_and_tp_calls(table):
    out = run("direct", table)
    t = str(table)
    assert logged(out, "all-gather", "alone") == {("ce-pull", f"{t}:{line_of('all-gather algorithm=ce-pull')}")}, out
    assert logged(out, "reduce-scatter", "alone") == {
        ("ce-reduce", f"{t}:{line_of('reduce-scatter algorithm=ce-reduce piece=1K')}")}, out
    assert logged(out, "all-gather", "fsdp") == {("ce-push", f"{t}:{line_of('all-gather context=fsdp algorithm=ce-push')}")}
    assert logged(out, "reduce-scatter", "fsdp") == {
        ("tma-reduce", f"{t}:{line_of('reduce-scatter context=fsdp algorithm=tma-reduce')}")}, out
    assert number(out, "fsdp-wire-bytes") == 0, "the table sends no wire for FSDP2"
    assert logged(out, "all-gather", "tp") == {("sm-oneshot", f"{t}:{line_of('all-gather context=tp algorithm=sm-oneshot')}")}
    assert logged(out, "reduce-scatter", "tp") == {
        ("sm-direct", f"{t}:{line_of('reduce-scatter context=tp algorithm=sm-direct ctas=3')}")}, out
    # g.plan() says what the calls ran.
    assert re.search(r'rank 0: plan tp-rs \{.*"ctas": 3.*"origin": "' + re.escape(t), out), out
    assert re.search(r'rank 0: plan fsdp-rs \{.*"algorithm": "tma-reduce"', out), out


def test_the_shipped_table_decides_without_one(table):
    out = run("direct")
    for what, ctx in [("all-gather", "alone"), ("reduce-scatter", "fsdp"), ("reduce-scatter", "tp")]:
        origins = {o for _, o in logged(out, what, ctx)}
        assert origins and all(o.startswith("shipped:host.txt:") for o in origins), (what, ctx, out)
    assert logged(out, "reduce-scatter", "fsdp") and number(out, "fsdp-wire-bytes") > 0, out


def test_the_torch_backend_gets_fsdps_plans(table):
    ours = run("backend", table)
    t = str(table)
    assert logged(ours, "reduce-scatter", "fsdp") == {
        ("tma-reduce", f"{t}:{line_of('reduce-scatter context=fsdp algorithm=tma-reduce')}")}, ours
    assert logged(ours, "all-gather", "fsdp") == {("ce-push", f"{t}:{line_of('all-gather context=fsdp algorithm=ce-push')}")}
    assert number(ours, "backend-wire-bytes") == 0
    shipped = run("backend")
    assert number(shipped, "backend-wire-bytes") > 0, "the shipped table sends FSDP2's exact gradients as bf16"
    assert {a for a, _ in logged(shipped, "reduce-scatter", "fsdp")} == {"ce-reduce"}, shipped
