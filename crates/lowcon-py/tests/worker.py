"""One rank of a lowcon Python check, started by `lowcon launch` (or by hand for "dead").

    python worker.py check|bad|dead [host|gpu]

check: all-gather and reduce-scatter on fresh random data against a numpy (or torch)
reference, outputs poisoned before every call, every algorithm, dtypes, ops, odd counts.
Tolerances: exact for all-gather and for sum/min/max over small integers (exact in f32 and
f16); avg within 1e-6 relative (f32) or 1e-3 (f16).
bad: bad arguments raise lowcon.InvalidArgument naming the rank and sizes; the group still works.
dead: the last rank SIGKILLs itself; the others must get lowcon.PeerError naming it.
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
            for algo in ("auto", "ce-pull", "ce-push", "sm-oneshot"):
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
                for algo in ("auto", "ce-reduce", "sm-direct", "tma-reduce"):
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
    return f"{checks} checks, {w} ranks"


def bad(g):
    r, w = g.rank, g.world_size
    cases = [
        ("output too small", lambda: g.all_gather(np.zeros(3 * w - 1, np.float32), np.zeros(3, np.float32)),
         [f"rank {r}", f"{3 * w - 1} elements"]),
        ("dtype mismatch", lambda: g.all_gather(np.zeros(3 * w, np.float64), np.zeros(3, np.float32)),
         ["dtype"]),
        ("i32 reduce-scatter", lambda: g.reduce_scatter(np.zeros(3, np.int32), np.zeros(3 * w, np.int32)),
         ["i32"]),
        ("not contiguous", lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(6, np.float32)[::2]),
         ["not contiguous"]),
        ("unknown op", lambda: g.reduce_scatter(np.zeros(3, np.float32), np.zeros(3 * w, np.float32), "prod"),
         ["prod"]),
        ("unknown algorithm", lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(3, np.float32),
                                                   algorithm="ring"), ["ring"]),
        ("channel out of range", lambda: g.all_gather(np.zeros(3 * w, np.float32), np.zeros(3, np.float32),
                                                      channel=99), ["channel 99"]),
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
    inp = np.ones(4096, np.float32)
    out = np.zeros(4096 * g.world_size, np.float32)
    g.all_gather(out, inp)
    if g.rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(100000):
            g.all_gather(out, inp)
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
        return f"named rank {victim} after {took * 1e3:.0f} ms: {e}"
    fail("100000 calls succeeded although a peer died")


def sigint(g):
    """Rank 0 waits in an all-gather that rank 1 never joins; the test sends it SIGINT."""
    if g.rank == 1:
        time.sleep(3)
        return "sat it out"
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


g = lowcon.init(BACKEND, timeout=20)
result = {"check": check, "bad": bad, "dead": dead, "sigint": sigint}[MODE](g)
print(f"rank {g.rank}: {MODE} ok: {result}", flush=True)
if MODE not in ("dead", "sigint"):
    g.close()
