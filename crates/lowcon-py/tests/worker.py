"""One rank of a lowcon Python check, started by `lowcon launch` (or by hand for "dead").

    python worker.py check|bad|dead [host|gpu]

check: all-gather and reduce-scatter on fresh random data against a numpy (or torch)
reference, outputs poisoned before every call, every algorithm, dtypes, ops, odd counts.
Tolerances: exact for all-gather and for sum/min/max over small integers (exact in f32 and
f16); avg within 1e-6 relative (f32) or 1e-3 (f16).
bad: bad arguments raise lowcon.InvalidArgument naming the rank and sizes; the group still works.
dead: the last rank SIGKILLs itself; the others must get lowcon.PeerError naming it.
pool: tensors from the symmetric pool (g.empty): collectives in place on them against
numpy, offsets that agree across ranks, reuse, stats; then a rank that allocates out of
order must make every rank raise, naming the disagreement (LOWCON_POOL_CHECK_EVERY=1).
checkcalls (LOWCON_CHECK_CALLS=1 on every rank): calls the ranks agree on run; an
all-gather where rank 0 asks for 1008 elements and the others 1000, and a reduce-scatter
where the last rank asks for max and the others sum, raise lowcon.InvalidArgument on every
rank naming each rank's call; the group still works after.
Prints "rank R: <mode> ok: ..." and exits 0 on success.
"""

import os
import signal
import sys
import time

import numpy as np

import lowcon

MODE = sys.argv[1]
BACKEND = sys.argv[2] if len(sys.argv) > 2 else "host"


def fail(msg):
    print(f"rank {os.environ.get('RANK')}: {MODE} FAILED: {msg}", flush=True)
    sys.exit(1)


def data(seed, rank, n, dtype):
    """Rank `rank`'s data for test `seed`: small odd integers, exact in every dtype used."""
    rng = np.random.default_rng([seed, rank])
    return (rng.integers(-15, 16, size=n) * 2 + 1).astype(dtype)


# Poison: values the data (odd integers) never takes.
POISON = {np.float32: np.nan, np.float16: np.nan, np.int32: 2**31 - 2, np.uint8: 0xFE}


def check(g):
    r, w = g.rank, g.world_size
    checks = 0
    seed = 0
    for n in (1, 1023, 70001):
        for dtype in (np.float32, np.float16, np.int32, np.uint8):
            for algo in ("auto", "ce-pull", "ce-push", "sm-oneshot", "ll"):
                seed += 1
                inp = data(seed, r, n, dtype)
                out = np.full(n * w, POISON[dtype], dtype=dtype)
                g.all_gather(out, inp, algorithm=algo)
                want = np.concatenate([data(seed, p, n, dtype) for p in range(w)])
                if not np.array_equal(out, want):  # NaN poison left anywhere also fails
                    bad = np.flatnonzero(out != want)
                    fail(f"all-gather n={n} {np.dtype(dtype)} {algo}: {bad.size} wrong, first at {bad[0]}")
                checks += 1
        for dtype in (np.float32, np.float16):
            for op in ("sum", "avg", "min", "max"):
                for algo in ("auto", "ce-reduce", "sm-direct", "tma-reduce", "ll"):
                    seed += 1
                    inp = data(seed, r, n * w, dtype)
                    out = np.full(n, np.nan, dtype=dtype)
                    g.reduce_scatter(out, inp, op, algorithm=algo)
                    chunks = [data(seed, p, n * w, dtype)[r * n:(r + 1) * n].astype(np.float32) for p in range(w)]
                    acc = chunks[0].copy()
                    for c in chunks[1:]:  # f32, rank order, as lowcon does
                        acc = np.minimum(acc, c) if op == "min" else np.maximum(acc, c) if op == "max" else acc + c
                    if op == "avg":
                        acc = acc / np.float32(w)
                    want = acc.astype(dtype)
                    tol = (1e-3 if dtype == np.float16 else 1e-6) if op == "avg" else 0
                    err = np.abs(out.astype(np.float64) - want.astype(np.float64))
                    if not (np.all(np.isfinite(out)) and np.all(err <= tol * np.maximum(1, np.abs(want)))):
                        fail(f"reduce-scatter n={n} {np.dtype(dtype)} {op} {algo}: worst error {np.nanmax(err)}")
                    checks += 1
    # In place (the input is this rank's slice of the output), as FSDP calls it.
    seed += 1
    out = np.full(4 * w, np.nan, dtype=np.float32)
    out[r * 4:(r + 1) * 4] = data(seed, r, 4, np.float32)
    g.all_gather(out, out[r * 4:(r + 1) * 4])
    if not np.array_equal(out, np.concatenate([data(seed, p, 4, np.float32) for p in range(w)])):
        fail("in-place all-gather")
    checks += 1
    # Host rendezvous (stats()): the group's creation made some; calls whose workspaces
    # are already grown make none (a collective call meets its peers through the pads).
    made = g.stats()["host_rendezvous"]
    if made <= 0:
        fail(f"host_rendezvous {made} after creating the group and growing workspaces: the store's waits are counted")
    # Where the host time went (NOTE [host time]): every call counted and timed, the
    # rendezvous within it; the clock alone agrees with stats().
    clock0, s0 = g.host_clock(), g.stats()
    if clock0 != (s0["host_calls"], s0["host_call_ns"], s0["host_rendezvous_ns"], s0["mailbox_wait_ns"]):
        fail(f"host_clock() {clock0} differs from stats() {s0}")
    # The mailbox's post waits are a part of the rendezvous; the host backend has no mailbox.
    if s0["mailbox_waits"] != 0 or s0["mailbox_wait_ns"] != 0:
        fail(f"mailbox waits on the host backend: {s0}")
    if s0["host_calls"] <= 0 or s0["host_call_ns"] <= 0 or s0["host_rendezvous_ns"] <= 0:
        fail(f"host time not counted after calls and the group's creation: {clock0}")
    for k in range(3):
        inp = data(seed + k, r, 70001, np.float32)
        out = np.full(70001 * w, np.nan, dtype=np.float32)
        g.all_gather(out, inp, algorithm="ce-pull")
        if not np.array_equal(out, np.concatenate([data(seed + k, p, 70001, np.float32) for p in range(w)])):
            fail(f"all-gather after the counters, call {k}")
    if g.stats()["host_rendezvous"] != made:
        fail(f"3 calls of sizes seen before made {g.stats()['host_rendezvous'] - made} host rendezvous (want 0)")
    calls, call_ns, rdv_ns, mailbox_ns = g.host_clock()
    if calls != clock0[0] + 3 or call_ns <= clock0[1] or rdv_ns != clock0[2] or mailbox_ns != clock0[3]:
        fail(f"3 calls without rendezvous: host_clock {clock0} -> {(calls, call_ns, rdv_ns, mailbox_ns)} (want 3 "
             "more calls, more call time, the same rendezvous time)")
    checks += 1
    return f"{checks} checks, {w} ranks"


def wire(g):
    """The bf16 wire from Python: f32 over bf16, bit for bit against the f32 call on the same
    data, with the counters checked (stats()), for bf16-exact data (no fallback) and data
    with one inexact value per chunk (a fallback piece per peer); its refusals."""
    r, w = g.rank, g.world_size
    checks = 0
    for k, (n, inexact, op) in enumerate([(1, False, "sum"), (1023, False, "avg"), (70001, True, "max"),
                                          (4099, True, "sum")]):
        base = data(100 + k, r, n * w, np.float32)
        # bf16-exact: odd integers times 2^-5; one value per chunk not so with `inexact`.
        inp = (base / np.float32(32)).astype(np.float32)
        if inexact:
            inp[::n] += np.float32(2.0 ** -20)
        before = g.stats()
        got = np.full(n, np.nan, np.float32)
        g.reduce_scatter(got, inp, op, wire="bf16")
        after = g.stats()
        want = np.full(n, np.nan, np.float32)
        g.reduce_scatter(want, inp, op, algorithm="ce-reduce")
        if got.tobytes() != want.tobytes():
            bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            fail(f"wire bf16 n={n} {op}: {bad.size} elements differ from the f32 call, first at {bad[0]}")
        moved = {key: after[key] - before[key] for key in after}
        peers = w - 1
        if moved["wire_bytes"] != peers * n * 2 or moved["fallback_pieces"] != (peers if inexact else 0):
            fail(f"wire bf16 n={n} inexact={inexact}: counters moved by {moved}")
        checks += 1
    # sm-direct carries the wire too (NOTE [the wire read directly]): bit for bit the f32 call's.
    got = np.full(1023, np.nan, np.float32)
    inp = (data(120, r, 1023 * w, np.float32) / np.float32(32)).astype(np.float32)
    g.reduce_scatter(got, inp, "sum", wire="bf16", algorithm="sm-direct")
    want = np.full(1023, np.nan, np.float32)
    g.reduce_scatter(want, inp, "sum", algorithm="ce-reduce")
    if got.tobytes() != want.tobytes():
        fail("wire bf16 on sm-direct: not the f32 call's result")
    for kwargs, what in [(dict(wire="f16"), "only bf16"), (dict(wire="bf16", algorithm="tma-reduce"), "ce-reduce"),
                         (dict(wire="bf16", algorithm="ll"), "ce-reduce")]:
        try:
            g.reduce_scatter(np.zeros(8, np.float32), np.zeros(8 * w, np.float32), "sum", **kwargs)
        except lowcon.InvalidArgument as e:
            if what not in str(e) or f"rank {r}" not in str(e):
                fail(f"{kwargs}: refused with {e!r}, not naming {what!r}")
        else:
            fail(f"{kwargs} was not refused")
        checks += 1
    try:
        g.all_gather(np.zeros(8 * w, np.float32), np.zeros(8, np.float32), wire="bf16")
    except TypeError:
        checks += 1  # all_gather takes no wire at all
    else:
        fail("all_gather took a wire")
    # ce-reduce's one reduction launch per call: the per-piece result, bit for bit.
    n = 70001
    inp = data(200, r, n * w, np.float32)
    once, pieces = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    g.reduce_scatter(once, inp, "avg", algorithm="ce-reduce", pipeline=3, reduce_launch="once")
    g.reduce_scatter(pieces, inp, "avg", algorithm="ce-reduce", pipeline=3, reduce_launch="pieces")
    if once.tobytes() != pieces.tobytes():
        fail("reduce_launch once: not the per-piece result bit for bit")
    checks += 1
    for kwargs, what in [(dict(reduce_launch="later"), "auto, pieces or once"),
                         (dict(reduce_launch="once", algorithm="sm-direct"), "ce-reduce only, not sm-direct"),
                         (dict(reduce_launch="once", wire="bf16"), "no wire")]:
        try:
            g.reduce_scatter(np.zeros(8, np.float32), np.zeros(8 * w, np.float32), "sum", **kwargs)
        except lowcon.InvalidArgument as e:
            if what not in str(e):
                fail(f"{kwargs}: refused with {e!r}, not naming {what!r}")
        else:
            fail(f"{kwargs} was not refused")
        checks += 1
    return f"{checks} checks, {w} ranks"


def bad(g):
    r, w = g.rank, g.world_size
    cases = [
        ("output too small", lambda: g.all_gather(np.zeros(3 * w - 1, np.float32), np.zeros(3, np.float32)),
         [f"rank {r}", f"{3 * w - 1} elements"]),
        ("dtype mismatch", lambda: g.all_gather(np.zeros(3 * w, np.float64), np.zeros(3, np.float32)),
         ["dtype"]),
        ("i32 reduce-scatter with avg",
         lambda: g.reduce_scatter(np.zeros(3, np.int32), np.zeros(3 * w, np.int32), "avg"),
         [f"rank {r}", "reduce-scatter of i32 with avg"]),
        ("not contiguous", lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(6, np.float32)[::2]),
         ["not contiguous"]),
        ("unknown op", lambda: g.reduce_scatter(np.zeros(3, np.float32), np.zeros(3 * w, np.float32), "prod"),
         ["prod"]),
        ("unknown algorithm", lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(3, np.float32),
                                                   algorithm="ring"), [f"rank {r}", "ring"]),
        ("unknown sync", lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(3, np.float32),
                                              sync="fast"), [f"rank {r}", 'sync "fast"', '"auto"', '"memop"']),
        ("unknown context", lambda: g.reduce_scatter(np.zeros(3, np.float32), np.zeros(3 * w, np.float32),
                                                     context="train"), [f"rank {r}", "train"]),
        ("channel out of range", lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(3, np.float32),
                                                      channel=99), ["channel 99"]),
        ("traffic floor of another kind", lambda: g.traffic(np.zeros(3 * w, np.float32), np.zeros(3, np.float32),
                                                            "all-reduce"), [f"rank {r}", "all-reduce"]),
        ("traffic floor on the host backend", lambda: g.traffic(np.zeros(3 * w, np.float32),
                                                                np.zeros(3, np.float32), "all-gather"),
         [f"rank {r}", "host backend"]),
        ("honest floor on the host backend", lambda: g.reduce_scatter(np.zeros(3, np.float32),
                                                                      np.zeros(3 * w, np.float32), traffic=True),
         [f"rank {r}", "host backend", "traffic"]),
        ("honest floor's all-gather on the host backend",
         lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(3, np.float32), traffic=True),
         [f"rank {r}", "host backend", "traffic"]),
    ]
    for what, call, needles in cases:
        try:
            call()
        except lowcon.InvalidArgument as e:
            if not isinstance(e, ValueError):
                fail(f"{what}: InvalidArgument is not a ValueError")
            for s in needles:
                if s not in str(e):
                    fail(f"{what}: the message does not mention {s!r}: {e}")
        except Exception as e:  # noqa: BLE001 - any other type is the failure reported
            fail(f"{what}: expected lowcon.InvalidArgument, got {type(e).__name__}: {e}")
        else:
            fail(f"{what}: accepted")
    try:
        g.all_gather(np.zeros(3 * w, np.float32), [1.0, 2.0, 3.0])
    except TypeError as e:
        if "__dlpack__" not in str(e):
            fail(f"a list: {e}")
    else:
        fail("a list was accepted")
    # The group still works after refused calls.
    out = np.zeros(2 * w, np.float32)
    g.all_gather(out, np.full(2, r + 1, np.float32))
    if not np.array_equal(out, np.repeat(np.arange(1, w + 1, dtype=np.float32), 2)):
        fail(f"the group is broken after bad calls: {out}")
    g.check()
    return f"{len(cases) + 1} bad calls refused, group still works"


def dead(g):
    victim = g.world_size - 1
    if BACKEND == "gpu":  # torch tensors; GPU calls only enqueue, so synchronize now and then
        import torch

        inp = torch.ones(4096, device=f"cuda:{g.device}")
        out = torch.zeros(4096 * g.world_size, device=f"cuda:{g.device}")
    else:
        inp = np.ones(4096, np.float32)
        out = np.zeros(4096 * g.world_size, np.float32)
    g.all_gather(out, inp)
    g.synchronize()
    if g.rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for i in range(100000):
            g.all_gather(out, inp)
            if BACKEND == "gpu" and i % 64 == 63:
                g.synchronize()
    except lowcon.PeerError as e:
        took = time.monotonic() - t0
        if f"peer rank {victim}" not in str(e):
            fail(f"the error does not name rank {victim}: {e}")
        try:
            g.check()
        except lowcon.PeerError as e2:
            if f"peer rank {victim}" not in str(e2):
                fail(f"check() does not name rank {victim}: {e2}")
        else:
            fail("check() passed after a peer died")
        # The survivors shrink the group (here to one rank) and go on.
        rank, world = g.rank, g.world_size
        t1 = time.monotonic()
        small = g.shrink()
        g.close()
        shrunk = time.monotonic() - t1
        if (small.rank, small.world_size) != (rank, world - 1):
            fail(f"after the shrink: rank {small.rank} of {small.world_size}")
        if BACKEND == "gpu":
            x = torch.arange(5, dtype=torch.float32, device=f"cuda:{small.device}") + 10 * small.rank
            o = torch.full((5 * small.world_size,), float("nan"), device=f"cuda:{small.device}")
        else:
            x = np.arange(5, dtype=np.float32) + 10 * small.rank
            o = np.full(5 * small.world_size, np.nan, np.float32)
        small.all_gather(o, x)
        small.synchronize()
        want = np.concatenate([np.arange(5, dtype=np.float32) + 10 * p for p in range(small.world_size)])
        got = o.cpu().numpy() if BACKEND == "gpu" else o
        if not np.array_equal(got, want):
            fail(f"the shrunken group's all-gather: {got} != {want}")
        small.close()
        return (f"named rank {victim} after {took * 1e3:.0f} ms: {e}; shrank to rank {rank} of {world - 1} in "
                f"{shrunk * 1e3:.0f} ms and all-gathered")
    fail("100000 calls succeeded although a peer died")


def pool(g):
    r, w = g.rank, g.world_size
    checks = 0
    blocks = []
    for i, n in enumerate((1, 1023, 70001, 300000)):
        out = g.empty(n * w, np.float32)
        if not (isinstance(out, np.ndarray) and out.shape == (n * w,) and out.dtype == np.float32):
            fail(f"g.empty gave {type(out)} {getattr(out, 'shape', None)} {getattr(out, 'dtype', None)}")
        blocks.append(out)
        for algo in ("auto", "ce-pull", "ce-push", "sm-oneshot", "ll"):
            out[:] = np.nan
            out[r * n:(r + 1) * n] = data(100 + i, r, n, np.float32)
            g.all_gather(out, out[r * n:(r + 1) * n], algorithm=algo)  # in place, as FSDP2 calls it
            want = np.concatenate([data(100 + i, p, n, np.float32) for p in range(w)])
            if not np.array_equal(out, want):
                fail(f"in-place all-gather on pool memory n={n} {algo}: {np.count_nonzero(out != want)} wrong")
            checks += 1
        for algo in ("auto", "ce-reduce", "sm-direct", "ll"):
            inp = g.empty(n * w, np.float32)
            inp[:] = data(200 + i, r, n * w, np.float32)
            res = np.full(n, np.nan, np.float32)
            g.reduce_scatter(res, inp, "sum", algorithm=algo)
            want = sum(data(200 + i, p, n * w, np.float32)[r * n:(r + 1) * n] for p in range(w))
            if not np.array_equal(res, want):
                fail(f"reduce-scatter from pool memory n={n} {algo}: {np.count_nonzero(res != want)} wrong")
            checks += 1
            del inp
    # Offsets agree: every rank's block addresses relative to its first block (one segment
    # holds them all: the test sets LOWCON_POOL_SEGMENT_MB=16), gathered.
    rel = np.array([b.ctypes.data - blocks[0].ctypes.data for b in blocks], np.int64).view(np.int32)
    allrel = np.zeros(rel.size * w, np.int32)
    g.all_gather(allrel, rel)
    if not all(np.array_equal(allrel[p * rel.size:(p + 1) * rel.size], rel) for p in range(w)):
        fail(f"pool offsets differ between ranks: {allrel}")
    checks += 1
    # Reuse: a freed block comes back for the next allocation of its size on its stream.
    st = g.pool_stats()
    addr = blocks[1].ctypes.data
    del blocks[1], out
    again = g.empty(1023 * w, np.float32)
    st2 = g.pool_stats()
    if again.ctypes.data != addr or st2["pool_bytes"] != st["pool_bytes"] or st2["allocations"] != st["allocations"] + 1:
        fail(f"no reuse: {addr:#x} -> {again.ctypes.data:#x}, {st} -> {st2}")
    if lowcon.memory_stats(g)["pool_bytes"] < 300000 * w * 4:
        fail(f"pool_bytes too small: {st2}")
    checks += 1
    del again, blocks
    # Trim: a block bigger than a segment gets a segment of its own; once freed on every
    # rank, pool_trim gives it back, keeps the segment a live block holds, and the pool
    # grows again (a new segment) for the next such block, with correct collectives.
    keep = g.empty(64 * w, np.float32)
    big_n = (20 << 20) // 4 // w
    for round_ in range(2):
        big = g.empty(big_n * w, np.float32)
        big[:] = np.nan
        big[r * big_n:(r + 1) * big_n] = data(300 + round_, r, big_n, np.float32)
        g.all_gather(big, big[r * big_n:(r + 1) * big_n])
        want = np.concatenate([data(300 + round_, p, big_n, np.float32) for p in range(w)])
        if not np.array_equal(big, want):
            fail(f"all-gather on a big pool block, round {round_}: {np.count_nonzero(big != want)} wrong")
        before = g.pool_stats()["pool_bytes"]
        del big
        released = g.pool_trim()
        after = g.pool_stats()
        if released < big_n * w * 4 or after["pool_bytes"] != before - released or after["live_blocks"] != 1:
            fail(f"trim round {round_}: released {released} of {before}, now {after}")
    keep[:] = np.nan
    keep[r * 64:(r + 1) * 64] = r + 1
    g.all_gather(keep, keep[r * 64:(r + 1) * 64])
    if not np.array_equal(keep, np.repeat(np.arange(1, w + 1, dtype=np.float32), 64)):
        fail(f"all-gather on the block a trim kept: {keep}")
    if g.pool_trim() != 0:
        fail("a second trim released a segment a live block holds")
    del keep
    checks += 1
    # Out of order: rank 0 keeps an extra block, so the next allocation lands elsewhere
    # there; the next collective on pool memory must fail on every rank, naming it.
    extra = g.empty(1000, np.float32) if r == 0 else None
    x = g.empty(64 * w, np.float32)
    every = int(os.environ.get("LOWCON_POOL_CHECK_EVERY", "64"))
    # Strict checks (N = 1) refuse the first call; lagged ones name it within 2N calls.
    calls = 1 if every == 1 else 2 * every + 1
    try:
        for _ in range(calls):
            g.all_gather(x, x[r * 64:(r + 1) * 64])
    except lowcon.PeerError as e:
        if "no longer agree" not in str(e) or f"rank {r}" not in str(e):
            fail(f"the mismatch error does not say what and where: {e}")
    else:
        fail(f"{calls} all-gathers on disagreeing pool offsets ran (checks every {every})")
    del extra, x
    return f"{checks} checks, {w} ranks, mismatch named"


def twogroups(g):
    """A second group from the same environment (torchrun mode: rank 0 hosts one store
    for both), used interleaved with the first."""
    g2 = lowcon.init(BACKEND, name="second", timeout=20)
    r, w = g.rank, g.world_size
    for i in range(20):
        for grp, k in ((g, 1), (g2, 2)):
            out = np.full(3 * w, np.nan, np.float32)
            grp.all_gather(out, np.full(3, k * 100 + i * 10 + r, np.float32))
            want = np.repeat(np.array([k * 100 + i * 10 + p for p in range(w)], np.float32), 3)
            if not np.array_equal(out, want):
                fail(f"group {k} call {i}: {out}")
    g2.close()
    return "40 calls on two groups"


def pystore(g):
    """Two groups over a Python store (tests/filestore.py, torch's store methods), the
    second a subgroup-style name; collectives on both; a wait for a missing rank times
    out naming the key."""
    from filestore import FileStore

    r, w = g.rank, g.world_size
    store = FileStore(os.environ["LOWCON_TEST_STORE_DIR"])
    gs = [lowcon.from_store(store, r, w, backend=BACKEND, name=n, timeout=20) for n in ("pg-0", "pg-1")]
    for i, grp in enumerate(gs):
        out = np.full(5 * w, np.nan, np.float32)
        grp.all_gather(out, np.full(5, 10 * i + r, np.float32))
        if not np.array_equal(out, np.repeat(np.array([10 * i + p for p in range(w)], np.float32), 5)):
            fail(f"group {i} over the Python store: {out}")
        res = np.full(3, np.nan, np.float32)
        grp.reduce_scatter(res, np.arange(3 * w, dtype=np.float32) + r, "sum")
        want = sum(np.arange(3 * w, dtype=np.float32)[r * 3:(r + 1) * 3] + p for p in range(w))
        if not np.array_equal(res, want):
            fail(f"reduce-scatter over the Python store: {res} vs {want}")
    for grp in gs:
        grp.close()
    # A world of w + 1 never completes: the error names the store key, within the timeout.
    t0 = time.monotonic()
    try:
        lowcon.from_store(store, r, w + 1, backend=BACKEND, name="never", timeout=1)
    except lowcon.Error as e:
        if "Python store" not in str(e):
            fail(f"the rendezvous timeout does not say where: {e}")
    else:
        fail("a group of a rank that never comes was made")
    return f"2 groups over a Python store; missing rank named after {time.monotonic() - t0:.1f} s"


def sigint(g):
    """Rank 0 waits in an all-gather that rank 1 never joins; the test sends it SIGINT."""
    if g.rank == 1:
        sys.stdin.readline()  # until the test closes it: after rank 0 is done
        return "sat it out"
    # Python's own Ctrl-C handler, even if this process inherited SIGINT ignored (a parent
    # that ignores it passes that on: then Python installs no handler, and the test hung).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("rank 0: waiting", flush=True)
    t0 = time.monotonic()
    try:
        g.all_gather(np.zeros(8 * g.world_size, np.float32), np.ones(8, np.float32))
    except KeyboardInterrupt:
        took = time.monotonic() - t0
        try:
            g.check()
        except lowcon.PeerError as e:
            if "aborted" not in str(e):
                fail(f"check() after Ctrl-C: {e}")
        else:
            fail("the group still works after Ctrl-C aborted it")
        return f"KeyboardInterrupt after {took:.2f} s, group aborted"
    fail("the all-gather returned although rank 1 never joined")


def checkcalls(g):
    """NOTE [checked calls]: disagreements fail on every rank, naming every rank's call."""
    r, w = g.rank, g.world_size
    out = np.full(8 * w, np.nan, np.float32)
    g.all_gather(out, np.full(8, r, np.float32))  # agreed: runs
    if not np.array_equal(out, np.repeat(np.arange(w, dtype=np.float32), 8)):
        fail(f"agreed all-gather: {out}")
    n = 1008 if r == 0 else 1000
    try:
        g.all_gather(np.zeros(n * w, np.float32), np.zeros(n, np.float32))
    except lowcon.InvalidArgument as e:
        msg = str(e)
        # The host backend writes its buffers' sizes in bytes.
        want = [f"rank {r}:", "disagree", "rank 0: all-gather of 4032 bytes of f32 into", f"{4032 * w} bytes of f32",
                "all-gather of 4000 bytes of f32 into", f"{4000 * w} bytes of f32"]
        if any(x not in msg for x in want):
            fail(f"the mismatched all-gather's error misses one of {want}: {msg}")
    else:
        fail("an all-gather the ranks disagree on ran")
    op = "max" if r == w - 1 else "sum"
    try:
        g.reduce_scatter(np.zeros(4, np.float32), np.ones(4 * w, np.float32), op)
    except lowcon.InvalidArgument as e:
        last = f"rank {w - 1}: reduce-scatter (max)"
        if last not in str(e) or "reduce-scatter (sum)" not in str(e):
            fail(f"the mismatched reduce-scatter's error misses {last!r} or the others' sum: {e}")
    else:
        fail("a reduce-scatter the ranks disagree on ran")
    res = np.full(4, np.nan, np.float32)
    g.reduce_scatter(res, np.ones(4 * w, np.float32), "sum")  # the group still works
    if not np.array_equal(res, np.full(4, w, np.float32)):
        fail(f"the reduce-scatter after the refusals: {res}")
    return "disagreements refused on every rank, naming each rank's call"


g = lowcon.init(BACKEND, timeout=20)
result = {"check": check, "bad": bad, "dead": dead, "sigint": sigint, "pool": pool,
          "twogroups": twogroups, "pystore": pystore, "wire": wire, "checkcalls": checkcalls}[MODE](g)
print(f"rank {g.rank}: {MODE} ok: {result}", flush=True)
if MODE not in ("dead", "sigint", "pool"):
    g.close()
