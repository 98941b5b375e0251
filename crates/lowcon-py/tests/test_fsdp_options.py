"""What `lowcon.fsdp`'s reduce-scatter hook hands the group, per call: hints, never
choices (NOTE [one planner]: the planner in the library decides). A group that records
the options stands in for lowcon's (no ranks, no launcher). Skipped where torch is not
installed."""

import pytest

torch = pytest.importorskip("torch")
fsdp = pytest.importorskip("lowcon.fsdp")

CHOICES = ("algorithm", "ctas", "pipeline", "reduce_launch", "map_ordinary")


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
    rs._exact = True  # as install's post_backward wrapper says for bf16 gradients
    rs(torch.empty(numel, dtype=dtype), torch.empty(world * numel, dtype=dtype))
    assert len(g.calls) == 1
    return g.calls[0]


@pytest.mark.parametrize("world", [2, 4, 8])
def test_bf16_gradients_are_hinted_and_nothing_is_chosen(world):
    o = one_call(world, "auto")
    assert (o["context"], o["bf16_exact"], o["algorithm"], o["sync"]) == ("fsdp", True, "auto", "auto")
    assert "wire" not in o and not any(k in o for k in CHOICES[1:]), o


def test_wire_bf16_asks_for_the_wire_outright():
    o = one_call(4, "bf16")
    assert (o["wire"], o["bf16_exact"], o["algorithm"]) == ("bf16", True, "auto"), o


def test_a_context_of_the_callers_wins():
    assert one_call(4, "auto", context="tp")["context"] == "tp"


def test_the_same_call_gets_the_same_options_at_every_world():
    assert one_call(2, "bf16") == one_call(4, "bf16") == one_call(8, "bf16")
    assert one_call(2, None, numel=64) == one_call(4, None, numel=64)


def test_no_wire_gives_no_hint_and_bf16_gradients_need_none():
    # None: no hint and no wire of the hook's own (NOTE [one planner]: the planner's
    # choice, which the shipped tables make fp32 for calls without the hint).
    o = one_call(4, None)
    assert "wire" not in o and "bf16_exact" not in o, o
    o = one_call(4, "bf16", dtype=torch.bfloat16)
    assert "bf16_exact" not in o and "wire" not in o, o


def test_a_callers_options_pass_as_they_are():
    o = one_call(4, "bf16", ctas=16, algorithm="ce-reduce", sync="memop")
    assert (o["ctas"], o["algorithm"], o["sync"], o["bf16_exact"]) == (16, "ce-reduce", "memop", True)


class FakeParamGroup:
    """What the accumulation watch needs of FSDP2's FSDPParamGroup: post_backward (which
    calls the reduce-scatter hook), _reduce_scatter_comm and fsdp_params."""

    class Param:
        def __init__(self, accumulated):
            self.unsharded_accumulated_grad = object() if accumulated else None

    def __init__(self, hook, accumulated=False):
        self._reduce_scatter_comm = hook
        self.fsdp_params = [self.Param(accumulated)]

    def post_backward(self):
        self._reduce_scatter_comm(torch.empty(64), torch.empty(4 * 64))


class Timer:
    """A profiler's wrapper around a hook, as fsdp2_modes.HostTimes makes."""

    def __init__(self, hook):
        self.wrapped = hook

    def __call__(self, *a, **k):
        return self.wrapped(*a, **k)


@pytest.mark.parametrize("wrapped", [False, True])
def test_the_accumulation_watch_reaches_wrapped_hooks(wrapped):
    g = Recorder(4)
    rs = fsdp.LowconReduceScatter(g, wire="auto")
    pg = FakeParamGroup(Timer(rs) if wrapped else rs)
    fsdp._watch_accumulation(pg)
    pg.post_backward()
    assert g.calls[-1].get("bf16_exact") is True, g.calls[-1]
    # Accumulated gradients are not bf16-exact: no hint.
    pg.fsdp_params = [FakeParamGroup.Param(True)]
    pg.post_backward()
    assert "bf16_exact" not in g.calls[-1] and rs._exact is False, g.calls[-1]
