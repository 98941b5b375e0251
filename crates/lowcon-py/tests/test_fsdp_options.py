"""The options `lowcon.fsdp`'s reduce-scatter hook hands the group, per call: a group
that records them stands in for lowcon's (no ranks, no launcher). Skipped where torch
is not installed."""

import pytest

torch = pytest.importorskip("torch")
fsdp = pytest.importorskip("lowcon.fsdp")


class Recorder:
    """What the hook needs of a group: rank, world_size, reduce_scatter (recorded)."""

    def __init__(self, world):
        self.rank, self.world_size = 0, world
        self.calls = []

    def reduce_scatter(self, output, input, op, **options):
        self.calls.append(dict(options, op=op))


def one_call(world, wire, numel=1 << 22, dtype=torch.float32, **options):
    g = Recorder(world)
    rs = fsdp.LowconReduceScatter(g, wire=wire, **options)
    rs(torch.empty(numel, dtype=dtype), torch.empty(world * numel, dtype=dtype))
    assert len(g.calls) == 1
    return g.calls[0]


def test_the_wire_takes_64_ctas_at_2_ranks():
    # NOTE [wire CTAs inside FSDP2]: 16 CTAs made the FSDP2 step slower than the fp32 wire.
    o = one_call(2, "bf16")
    assert (o["wire"], o["algorithm"], o["ctas"]) == ("bf16", "ce-reduce", fsdp.WIRE_CTAS_2)
    assert fsdp.WIRE_CTAS_2 == 64


def test_a_callers_ctas_wins_over_the_wires():
    assert one_call(2, "bf16", ctas=16)["ctas"] == 16


def test_other_world_sizes_and_the_fp32_path_keep_the_librarys_ctas():
    # Measured at 2 ranks only; without the wire nothing changes.
    assert "ctas" not in one_call(4, "bf16")
    o = one_call(2, None)
    assert "ctas" not in o and "wire" not in o
    # A bf16 reduce-scatter never takes the wire (nothing to split).
    assert "ctas" not in one_call(2, "bf16", dtype=torch.bfloat16)
