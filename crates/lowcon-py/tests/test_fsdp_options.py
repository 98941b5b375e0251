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


class TensorRecorder(Recorder):
    """A Recorder that also keeps each call's input and output tensors."""

    def reduce_scatter(self, output, input, op, **options):
        super().reduce_scatter(output, input, op, **options)
        self.calls[-1].update(input=input, output=output)


def foreach_reduce_steps(rs, grads, world):
    """What torch 2.11's foreach_reduce does with the hook, in its order: allocate the
    fp32 input, copy the gradients in (through the module function install patches),
    allocate the output, call."""
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as fc

    numel = sum(g.numel() for g in grads)
    inp = rs.allocate((numel,), dtype=torch.float32, device=torch.device("cpu"))
    fc.foreach_reduce_scatter_copy_in(grads, inp, world)
    out = rs.allocate((numel // world,), dtype=torch.float32, device=torch.device("cpu"))
    rs(out, inp)
    return inp, out


@pytest.mark.parametrize("world", [2, 4])
def test_bf16_gradients_are_copied_in_as_bf16_and_reduced_into_fp32(world):
    # NOTE [bf16 copy-in]: FSDP2's fp32 input is a placeholder over a bf16 buffer, which
    # the patched copy-in fills in FSDP2's chunk order; the call reduces that buffer.
    g = TensorRecorder(world)
    rs = fsdp.LowconReduceScatter(g, wire="auto")
    rs._exact, rs._fsdp_world = True, world  # as install's post_backward wrapper says
    grads = [torch.randn(8 * world, 3).to(torch.bfloat16), torch.randn(4 * world).to(torch.bfloat16)]
    inp, out = foreach_reduce_steps(rs, grads, world)
    assert inp.dtype == torch.float32 and inp.stride() == (0,) and inp.numel() == 28 * world
    (call,) = g.calls
    assert call["input"].dtype == torch.bfloat16 and call["output"] is out and "bf16_exact" not in call
    # What FSDP2's own copy-in would have written, upcast: the same values, in order.
    want = torch.empty(28 * world, dtype=torch.float32)
    torch._chunk_cat(grads, 0, world, out=want.view(world, -1))
    assert torch.equal(call["input"].float(), want)
    assert (rs.copy_in_calls, rs.wire_calls, rs.plain_calls) == (1, 1, 0)
    assert not fsdp._COPY_IN, "the call took its buffer"
    # FSDP2 holds the placeholder; its storage is the bf16 buffer's.
    assert inp.untyped_storage().data_ptr() == call["input"].data_ptr()
    # A pre-division (FSDP2 divides in place where it must) cannot be lost: it raises.
    with pytest.raises(RuntimeError):
        inp.div_(2.0)


def test_the_copy_in_stays_fp32_where_it_must():
    # No hint (accumulated gradients, wire None), one rank, copy_in="fp32", an algorithm
    # named that takes no bf16 input, FSDP2's reduce-scatter group not the lowcon group's
    # size (FSDP2 copies a one-rank group's input itself), or no word from install's
    # wrapper: FSDP2's own fp32 input, as before.
    for world, wire, exact, copy_in, algorithm, fsdp_world in [
        (4, "auto", False, "bf16", "auto", 4), (4, None, True, "bf16", "auto", 4), (1, "auto", True, "bf16", "auto", 1),
        (4, "auto", True, "fp32", "auto", 4), (4, "auto", True, "bf16", "tma-reduce", 4),
        (4, "auto", True, "bf16", "ll", 4), (4, "auto", True, "bf16", "auto", 1), (4, "auto", True, "bf16", "auto", None),
    ]:
        g = TensorRecorder(world)
        rs = fsdp.LowconReduceScatter(g, algorithm, wire=wire, copy_in=copy_in)
        rs._exact, rs._fsdp_world = exact, fsdp_world
        inp, _ = foreach_reduce_steps(rs, [torch.randn(4 * world).to(torch.bfloat16)], world)
        assert inp.stride() == (1,) and g.calls[0]["input"] is inp and rs.copy_in_calls == 0, (world, wire, copy_in)
    # The algorithms that take a bf16 input do get it.
    for algorithm in ("ce-reduce", "sm-direct"):
        g = TensorRecorder(4)
        rs = fsdp.LowconReduceScatter(g, algorithm, wire="auto")
        rs._exact, rs._fsdp_world = True, 4
        foreach_reduce_steps(rs, [torch.randn(16).to(torch.bfloat16)], 4)
        assert g.calls[0]["input"].dtype == torch.bfloat16 and g.calls[0]["algorithm"] == algorithm
    with pytest.raises(fsdp.InvalidArgument, match="copy_in 'bf8'"):
        fsdp.LowconReduceScatter(Recorder(2), wire="auto", copy_in="bf8")


def test_gradients_that_are_not_bf16_fill_a_real_fp32_input():
    # The copy-in meets fp32 gradients (accumulated ones, with wire="bf16"): FSDP2's own
    # fp32 copy-in into a real input, reduced as the wire's hinted call.
    g = TensorRecorder(2)
    rs = fsdp.LowconReduceScatter(g, wire="bf16")
    rs._fsdp_world = 2
    grads = [torch.randn(16)]
    inp, _ = foreach_reduce_steps(rs, grads, 2)
    (call,) = g.calls
    assert call["input"].dtype == torch.float32 and call["input"].stride() == (1,)
    assert torch.equal(call["input"], torch.cat([grads[0][:8], grads[0][8:]]))
    assert call["wire"] == "bf16" and rs.copy_in_calls == 0 and rs.wire_calls == 1


def test_a_placeholder_no_call_took_is_dropped_at_the_next_one():
    # FSDP2 raising between allocate and the call leaves a placeholder behind: the hook's
    # next input drops its buffer (one input in flight per hook), nothing accumulates.
    g = TensorRecorder(2)
    rs = fsdp.LowconReduceScatter(g, wire="auto")
    rs._exact, rs._fsdp_world = True, 2
    before = len(fsdp._COPY_IN)
    first = rs.allocate((64,), dtype=torch.float32, device=torch.device("cpu"))
    assert fsdp._is_placeholder(first) and len(fsdp._COPY_IN) == before + 1
    inp, _ = foreach_reduce_steps(rs, [torch.randn(64).to(torch.bfloat16)], 2)
    assert first.data_ptr() not in fsdp._COPY_IN and len(fsdp._COPY_IN) == before
    assert g.calls[-1]["input"].dtype == torch.bfloat16


def test_a_placeholder_without_its_buffer_is_an_error():
    g = TensorRecorder(2)
    rs = fsdp.LowconReduceScatter(g, wire="auto")
    rs._exact, rs._fsdp_world = True, 2
    inp = rs.allocate((64,), dtype=torch.float32, device=torch.device("cpu"))
    fsdp._COPY_IN.pop(inp.data_ptr())
    out = rs.allocate((32,), dtype=torch.float32, device=torch.device("cpu"))
    with pytest.raises(fsdp.InvalidArgument, match="without FSDP2's copy-in"):
        rs(out, inp)
