"""One rank of the FSDP2 bf16-wire check (NOTE [bf16 wire]), on the CPU with lowcon's host
backend (CI) or on GPUs (LOWCON_PYTEST_BACKEND=gpu; ranks may share one), under
`lowcon launch`:

    lowcon launch --nproc-per-node 2 -- python fsdp_wire_worker.py

An MLP of bf16 parameters (FSDP2 `fully_shard` per layer, `param_dtype=bf16`,
`reduce_dtype=fp32`), trained with SGD from identical seeds on fixed data, in these modes:

- Gloo (the reference), with and without gradient accumulation (two micro-batches, the
  first without gradient sync);
- lowcon with the fp32 wire (`reduce_scatter_wire=None`);
- lowcon with `install`'s defaults (`"auto"`, `copy_in="bf16"`): FSDP2's bf16 gradients
  copied in as bf16 and reduced into its fp32 output (NOTE [bf16 copy-in]), and fp32
  for the reduce of accumulated gradients;
- lowcon with the bf16 wire and FSDP2's fp32 copy-in (`copy_in="fp32"`);
- lowcon with the bf16 wire forced (`reduce_scatter_wire="bf16"`: copied in as bf16), and
  forced on accumulated gradients (the copy-in meets fp32 gradients: every piece falls back);
- lowcon with the fp32 wire and ce-reduce's one reduction launch per call
  (`reduce_launch="once"`; `ll`'s small chunks at 2 ranks launch as they do).

Every lowcon reduce-scatter is checked where it happens: the same input (for a bf16
copy-in, the bf16 buffer behind FSDP2's placeholder, upcast) also goes through lowcon's
fp32 ce-reduce, and the two outputs must be equal bit for bit. Then:
- the losses of every lowcon mode equal the fp32 wire's bit for bit (deterministic
  algorithms on GPUs), and Gloo's within max(1e-4 x |loss|, 10 x Gloo's run-to-run);
- without accumulation, every reduce carried bf16: copied in as bf16 (no wire bytes, the
  reduce-scatter bytes halved), or over the bf16 wire with no piece fallen back (the
  fp32 inputs are bf16 values upcast); with accumulation and "auto", none did; forced,
  pieces fell back, the copy-in having met fp32 gradients (the counters, `Group.stats()`).
Prints "rank R: fsdp-wire ok: ..." on success.
"""

import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import lowcon
import lowcon.fsdp

BACKEND = os.environ.get("LOWCON_PYTEST_BACKEND", "host")
DIM, LAYERS, BATCH, STEPS = 256, 3, 32, 6
rank = int(os.environ["RANK"])
if BACKEND == "gpu":
    dev = torch.device("cuda", lowcon.device_index())
    torch.cuda.set_device(dev)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
else:
    dev = torch.device("cpu")
    torch.set_num_threads(1)
dist.init_process_group("gloo")
g = lowcon.init(BACKEND, timeout=60)
world = g.world_size


def fail(msg):
    print(f"rank {rank}: fsdp-wire FAILED: {msg}", flush=True)
    sys.exit(1)


class Checked(lowcon.fsdp.LowconReduceScatter):
    """The hooks, plus a check of every call: the fp32 ce-reduce of the same input must give
    the same bits."""

    checked = 0

    def __call__(self, output_tensor, input_tensor, group=None, op=None, async_op=False):
        name, _ = lowcon.fsdp._op_name(dist.ReduceOp.SUM if op is None else op, None)
        want = torch.empty_like(output_tensor)
        ref = input_tensor
        if lowcon.fsdp._is_placeholder(input_tensor):
            # NOTE [bf16 copy-in]: the buffer FSDP2's copy-in filled, as fp32.
            ref = lowcon.fsdp._COPY_IN[input_tensor.data_ptr()].float()
        self.group.reduce_scatter(want, ref, name, algorithm="ce-reduce", sync=self.options["sync"],
                                  channel=self.options.get("channel"))
        super().__call__(output_tensor, input_tensor, group, op, async_op)
        if not torch.equal(output_tensor.view(torch.int32), want.view(torch.int32)):
            bad = (output_tensor.view(torch.int32) != want.view(torch.int32)).sum().item()
            fail(f"a reduce-scatter of {input_tensor.numel()} ({self.wire}, wire calls {self.wire_calls}) differs "
                 f"from the fp32 path in {bad} elements")
        Checked.checked += 1
        return None


def train(mode, accumulate=False, wire="auto", **rs_options):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(DIM, DIM), nn.GELU()) for _ in range(LAYERS)],
                          nn.Linear(DIM, 8)).to(dev)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    rs = None
    if mode == "lowcon":
        lowcon.fsdp.install(model, g, reduce_scatter_wire=wire, reduce_scatter_copy_in=rs_options.get("copy_in", "bf16"))
        rs = Checked(g, "auto", "kernel", wire=wire, **rs_options)
        for m in model.modules():
            if hasattr(m, "set_custom_reduce_scatter"):
                m.set_custom_reduce_scatter(rs)
        # install's post_backward wrappers tell whichever lowcon hook the group holds.
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)
    target = torch.randn(BATCH, 8, generator=gen).to(dev)
    before = g.stats()
    losses = []
    for _ in range(STEPS):
        micro = 2 if accumulate else 1
        total = torch.zeros((), device=dev)
        for k in range(micro):
            if accumulate:
                model.set_requires_gradient_sync(k == micro - 1)
            x = torch.randn(BATCH, DIM, generator=gen).to(dev)
            loss = ((model(x).float() - target) ** 2).mean() / micro
            loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(total)
        losses.append(total.item() / world)
    g.check()
    after = g.stats()
    moved = {k: after[k] - before[k] for k in after}
    return losses, rs, moved


def bits(xs):
    return [float(x).hex() for x in xs]


ref, _, _ = train("ref")
ref_again, _, _ = train("ref")
ref_acc, _, _ = train("ref", accumulate=True)
calib = max(abs(a - b) for a, b in zip(ref, ref_again))


def close(got, want, what):
    tol = max(1e-4 * max(abs(x) for x in want), 10 * calib)
    d = max(abs(a - b) for a, b in zip(got, want))
    if not d <= tol:
        fail(f"{what}: losses {got} differ from Gloo's {want} by {d:.3e} > {tol:.3e}")
    return d


f32, rs32, m32 = train("lowcon", wire=None)
auto, rsa, ma = train("lowcon", wire="auto")
auto32, rsa32, ma32 = train("lowcon", wire="auto", copy_in="fp32")
f32_acc, _, _ = train("lowcon", accumulate=True, wire=None)
auto_acc, rsaa, maa = train("lowcon", accumulate=True, wire="auto")
forced_acc, rsf, mf = train("lowcon", accumulate=True, wire="bf16")
forced, rsb, mb = train("lowcon", wire="bf16")
once, _, _ = train("lowcon", wire=None, reduce_launch="once")
try:
    Checked(g, "auto", "kernel", wire="auto", reduce_launch="once")
except lowcon.InvalidArgument as e:
    if "needs wire=None" not in str(e):
        fail(f"reduce_launch='once' with the wire refused with {e!r}")
else:
    fail("reduce_launch='once' with the bf16 wire was accepted")
if rs32.wire_calls != 0 or m32["wire_bytes"] != 0:
    fail(f"reduce_scatter_wire=None sent {rs32.wire_calls} calls over the bf16 wire")
if (rsa.plain_calls != 0 or rsa.wire_calls == 0 or rsa.copy_in_calls != (rsa.wire_calls if world > 1 else 0)
        or ma["fallback_pieces"] != 0 or ma["wire_bytes"] != 0
        or ma["reduce_scatter_bytes"] - ma32["reduce_scatter_bytes"] != ma32["wire_bytes"]):
    # (Both count the check's own fp32 reduce-scatters alike.)
    fail(f"auto without accumulation: {rsa.wire_calls} hinted ({rsa.copy_in_calls} copied in as bf16) and "
         f"{rsa.plain_calls} fp32 calls, counters {ma} (fp32 copy-in: {ma32}): every reduce should carry FSDP2's "
         "bf16 gradients as they are, the bytes the bf16 wire would send")
if rsa32.plain_calls != 0 or rsa32.copy_in_calls != 0 or ma32["fallback_pieces"] != 0 or (
        world > 1 and ma32["wire_bytes"] == 0):
    fail(f"auto, fp32 copy-in: {rsa32.wire_calls} wire and {rsa32.plain_calls} fp32 calls, counters {ma32}: "
         "every reduce should go over the bf16 wire with no fallback (bf16 gradients upcast)")
if rsaa.wire_calls != 0 or rsaa.plain_calls == 0 or rsaa.copy_in_calls != 0:
    fail(f"auto with accumulation: {rsaa.wire_calls} reduces of accumulated gradients went over the bf16 wire")
if world > 1 and (rsb.copy_in_calls == 0 or rsb.copy_in_calls != rsb.wire_calls):
    fail(f"the bf16 wire forced (install(reduce_scatter_wire='bf16')): {rsb.copy_in_calls} of {rsb.wire_calls} "
         "hinted calls copied in as bf16; want all (install's wrapper tells the hook FSDP2's group size)")
if rsf.wire_calls == 0 or mf["fallback_pieces"] == 0 or rsf.copy_in_calls != 0:
    fail(f"the forced bf16 wire on accumulated gradients: {rsf.wire_calls} calls, counters {mf}: pieces should "
         "fall back")
for what, got, want in [("auto", auto, f32), ("auto, fp32 copy-in", auto32, f32), ("bf16 forced", forced, f32),
                        ("auto, accumulated", auto_acc, f32_acc),
                        ("bf16 forced, accumulated", forced_acc, f32_acc), ("one launch per call", once, f32)]:
    if bits(got) != bits(want):
        fail(f"{what}: losses {got} are not the fp32 wire's {want} bit for bit")
d1 = close(f32, ref, "lowcon fp32")
d2 = close(f32_acc, ref_acc, "lowcon fp32, accumulated")
if rank == 0:
    print(f"Gloo losses: {' '.join(f'{x:.6f}' for x in ref)}; run to run {calib:.1e}")
    print(f"lowcon vs Gloo: {d1:.2e}, accumulated {d2:.2e}; bf16 copy-in: {rsa.copy_in_calls} calls, "
          f"{ma['reduce_scatter_bytes'] - ma32['reduce_scatter_bytes']} bytes; bf16 wire: {rsa32.wire_calls} calls, "
          f"{ma32['wire_bytes']} wire bytes, {ma32['fallback_pieces']} fallback pieces (fp32 would have sent "
          f"{2 * ma32['wire_bytes']}); forced on accumulated gradients: {mf['fallback_pieces']} of "
          f"{mf['wire_pieces']} pieces fell back")
print(f"rank {rank}: fsdp-wire ok: {Checked.checked} reduce-scatters bit-exact, 8 lowcon modes' losses equal the "
      f"fp32 wire's bit for bit, Gloo's within tolerance, {world} ranks, {BACKEND}", flush=True)
dist.barrier()
g.close()
dist.destroy_process_group()
gc.collect()  # groups kept by cycles go before the interpreter does (python.md: Shutdown)
