"""One rank of the fault matrix; `fault_matrix.py` starts the ranks (by hand, under
`lowcon launch` or under torchrun).

    python faults.py BACKEND EXIT MOMENT      # BACKEND: gpu | host

The last rank is the victim (the last FAULT_VICTIMS ranks, default 1). At MOMENT it
leaves by EXIT while every other rank, the survivors, keeps calling; each survivor must
raise a lowcon error naming a victim, and prints `rank R: fault ok: detected <ms> ms
after the exit: <error>`; then, where its group exists, it shrinks the group to the
survivors and checks collectives on it (`rank R: then shrink ok: ... in <ms> ms`): an
all-gather, and a reduce-scatter with SUM and with MAX, of fresh random data, outputs
poisoned first, against numpy's result from every rank's data (exact for the
all-gather and MAX; SUM within 1e-5 relative, in f32).

EXIT: os_exit (`os._exit(0)`), sys_exit (`sys.exit(0)`: interpreter teardown, the
group's destructor runs), exception (an uncaught exception: teardown, exit status 1),
sigkill, sigterm; and sigstop: the victim stops itself (alive, its sockets open, a late
peer rather than a dead one), so the survivors must time out naming it (the driver
kills it afterwards).

MOMENT: ag (8 MiB all-gathers on torch's current stream with staged buffers on GPUs,
pipelined: never synchronised), rs (an all-gather and a 16 MiB reduce-scatter each
iteration, alternating on one stream), ll (64 KiB all-gathers with
algorithm "ll"), pool (the survivors grow the symmetric pool, a collective, as the
victim leaves), init (the victim leaves before creating the group: the survivors'
creation must fail, naming it, within the group's timeout), close (the victim closes
its group with calls in flight, then leaves), sync (the survivors make one call more
than the victim and wait in `synchronize()` as it leaves).

Environment: FAULT_DIR (where the victim writes its exit time), LOWCON_SYNC (kernel |
memop), FAULT_TIMEOUT (the group's timeout in seconds, default 10).
"""

import os
import signal
import sys
import time

import lowcon

BACKEND, EXIT, MOMENT = sys.argv[1:4]
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
VICTIMS = list(range(WORLD - int(os.environ.get("FAULT_VICTIMS", "1")), WORLD))
VICTIM = VICTIMS[0]  # the one whose leaving the calls below arrange; the others leave with it
SYNC = os.environ.get("LOWCON_SYNC", "kernel")
STAMP = os.path.join(os.environ.get("FAULT_DIR", "."), "victim-exit-time")
# The call before which the victim leaves. On a GPU, 200 calls leave many in flight on
# the survivors' streams; the host backend's calls end before they return, so 20 give the
# same picture (a group in use, then a peer gone) at a tenth of the CPU time, which CI's
# 8-rank cells on 2 cores spent mostly in this loop.
LEAVE_AT = 200 if BACKEND == "gpu" else 20


def leave():
    """The victim leaves by EXIT, after writing the time it does so."""
    # A file of this rank's own, renamed into place: with two victims, a shared temporary
    # name let one rename the other's half-written file (seen under load: an empty stamp
    # and a missing temporary).
    tmp = f"{STAMP}.{RANK}.tmp"
    with open(tmp, "w") as f:
        f.write(repr(time.time()))
    os.replace(tmp, STAMP)
    print(f"rank {RANK}: leaving by {EXIT} at the {MOMENT} moment", flush=True)
    if EXIT == "os_exit":
        os._exit(0)
    if EXIT == "sys_exit":
        sys.exit(0)
    if EXIT == "exception":
        raise RuntimeError(f"rank {RANK} fails on purpose (fault matrix)")
    sig = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigstop": signal.SIGSTOP}[EXIT]
    os.kill(os.getpid(), sig)
    time.sleep(60)


def verdict(err, g=None):
    """A survivor's error: it must name the victim. Then, where the group exists, the
    survivors shrink it (NOTE [shrink agreement]) and check an all-gather on the new one."""
    took = None
    for _ in range(100):  # the stamp lands a moment before the victim leaves
        if os.path.exists(STAMP):
            took = (time.time() - float(open(STAMP).read())) * 1e3
            break
        time.sleep(0.01)
    msg = str(err)
    if not any(f"rank {v}" in msg for v in VICTIMS):
        print(f"rank {RANK}: fault FAILED: the error names none of ranks {VICTIMS}: {type(err).__name__}: {msg}")
        sys.exit(2)
    print(f"rank {RANK}: fault ok: detected {took:.0f} ms after the exit: {type(err).__name__}: {msg}", flush=True)
    if g is not None:
        then_shrink(g)
    sys.exit(0)


def then_shrink(g):
    """The survivors shrink the group and check collectives on it (the matrix's "then
    shrink"): the time is to the end of the first, an all-gather."""
    import numpy as np

    t0 = time.monotonic()
    try:
        small = g.shrink()
        w, me, n = small.world_size, small.rank, 4096
        data = [np.random.default_rng(1000 + r).standard_normal(n * w).astype(np.float32) for r in range(w)]
        poison = np.full(n * w, np.nan, np.float32)
        out = to_lowcon(small, poison)
        small.all_gather(out, to_lowcon(small, data[me][:n]))
        small.synchronize()
        ms = (time.monotonic() - t0) * 1e3
        wrong = [] if np.array_equal(to_numpy(out), np.concatenate([d[:n] for d in data])) else ["all-gather"]
        for op in ("sum", "max"):
            out = to_lowcon(small, poison[:n])
            small.reduce_scatter(out, to_lowcon(small, data[me]), op)
            small.synchronize()
            parts = np.stack([d[me * n:(me + 1) * n] for d in data])
            want = parts.sum(0) if op == "sum" else parts.max(0)
            if not np.allclose(to_numpy(out), want, rtol=1e-5, atol=1e-5 * w):
                wrong.append(f"reduce-scatter {op}")
    except lowcon.Error as e:
        print(f"rank {RANK}: then shrink FAILED: {type(e).__name__}: {e}", flush=True)
        sys.exit(4)
    if wrong or w != WORLD - len(VICTIMS) or me != RANK:
        print(f"rank {RANK}: then shrink FAILED: rank {me} of {w}, wrong: {wrong}", flush=True)
        sys.exit(4)
    print(f"rank {RANK}: then shrink ok: rank {me} of {w} in {ms:.0f} ms (all-gather, reduce-scatter sum and max "
          "checked)", flush=True)


def to_lowcon(g, a):
    """A copy of numpy array `a` where the group's collectives take it."""
    if BACKEND == "gpu":
        import torch

        return torch.from_numpy(a.copy()).to(f"cuda:{g.device}")
    return a.copy()


def to_numpy(t):
    return t.cpu().numpy() if BACKEND == "gpu" else t


def tensors(g, dtype):
    """A maker of random arrays of k elements: torch tensors on this rank's GPU, or numpy."""
    if BACKEND == "gpu":
        import torch

        t = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
        return lambda k: torch.rand(k, device=f"cuda:{g.device}").to(t)
    import numpy as np

    return lambda k: np.random.default_rng(RANK).random(k, dtype=np.float32)


def calls(g):
    """The pipelined loop of the ag, rs, ll and close moments."""
    w = g.world_size
    if MOMENT == "ll":
        n, dtype, opts = 32 << 10 if BACKEND == "gpu" else 4096, "bf16", {"algorithm": "ll"}
    else:
        n, dtype, opts = (4 << 20) if BACKEND == "gpu" else 16384, "bf16", {}
    if BACKEND == "gpu":
        opts["sync"] = SYNC
    make = tensors(g, dtype)
    a, full = make(n), make(n * w)
    r_in, r_out = make((n // w) * w), make(n // w)
    for i in range(100000):
        if RANK in VICTIMS and i == LEAVE_AT:
            if MOMENT == "close":
                g.close()  # with this rank's calls still in flight
            if MOMENT == "sync":
                time.sleep(0.5)  # the survivors are in synchronize() by now
            leave()
        if MOMENT == "sync" and i == LEAVE_AT + 1:
            g.synchronize()
        g.all_gather(full, a, **opts)
        if MOMENT == "rs":
            g.reduce_scatter(r_out, r_in, "sum", **opts)
        if i % 50 == 0:
            g.check()
    g.synchronize()
    print(f"rank {RANK}: fault FAILED: 100000 calls succeeded although rank {VICTIM} left")
    sys.exit(3)


def pool(g):
    """Every rank allocates ever larger pool tensors (each growth is collective); the
    victim leaves just before a growth."""
    fw = "torch" if BACKEND == "gpu" else "numpy"
    held = []
    for i in range(1000):
        mb = 1 << min(i, 10)  # MiB, then 1 GiB at most per block (GPU), far less on the host
        n = (mb << 18) if BACKEND == "gpu" else (mb << 12)
        if RANK in VICTIMS and i == 3:
            leave()
        held.append(g.empty(n, "float32", framework=fw))
        if len(held) > 4:
            held.pop(0)
        out, inp = g.empty(2 * WORLD, "float32", framework=fw), g.empty(2, "float32", framework=fw)
        g.all_gather(out, inp)
        g.check()
    print(f"rank {RANK}: fault FAILED: 1000 pool growths succeeded although rank {VICTIM} left")
    sys.exit(3)


timeout = float(os.environ.get("FAULT_TIMEOUT", "10"))
if BACKEND == "gpu":
    import torch

    torch.cuda.set_device(lowcon.device_index())
if MOMENT == "init" and RANK in VICTIMS:
    leave()
try:
    g = lowcon.init(BACKEND, timeout=timeout)
    if MOMENT == "pool":
        pool(g)
    elif MOMENT == "init":
        print(f"rank {RANK}: fault FAILED: the group was created without rank {VICTIM}")
        sys.exit(3)
    else:
        calls(g)
except lowcon.Error as e:
    if RANK in VICTIMS:
        raise
    verdict(e, globals().get("g"))
