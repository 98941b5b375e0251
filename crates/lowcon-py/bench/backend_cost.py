"""Host time per call through the torch.distributed backend against lowcon's own call:
what `dist.all_gather_into_tensor(..., group=<lowcon group>)` adds over `g.all_gather`.

    torchrun --nproc-per-node 2 backend_cost.py [--device cpu|cuda] [--calls 2000] [--numel 1024]

Both call the same lowcon group on the same tensors, alternating (ABAB) so that drifts
hit both; medians and 90th percentiles of the host µs of one call, and the median of the
per-pair differences. On CUDA the stream is synchronised every 8 calls, outside the
timed calls, so that a full queue never times the GPU. On CPU (lowcon's host backend)
each call also moves the data, which both pay alike, and whose time (100 µs and more,
with its own jitter) hides a few µs of difference. `--dry` swaps lowcon's native calls
for no-ops that take the same arguments, so that only the Python layers are timed: the
difference is then exactly what the backend adds, on any device.
"""

import gc
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import lowcon
import lowcon.distributed


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--numel", type=int, default=1024)
    p.add_argument("--dry", action="store_true", help="native calls are no-ops: time the Python layers only")
    args = p.parse_args()
    if args.device == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    dist.init_process_group("lowcon")
    pg = dist.group.WORLD
    g = pg.lowcon_group
    if args.dry:
        class Dry:  # the native group's call signatures, doing nothing
            def all_gather(self, output, input, **kw):
                pass

            def reduce_scatter(self, output, input, op, **kw):
                pass

            def check(self):
                pass

        real, g._g = g._g, Dry()
    w, r = dist.get_world_size(), dist.get_rank()
    out = torch.empty(w * args.numel, device=dev)
    inp = torch.ones(args.numel, device=dev)
    rs_out = torch.empty(args.numel, device=dev)
    rs_in = torch.ones(w * args.numel, device=dev)
    calls = {
        "all-gather": (lambda: g.all_gather(out, inp), lambda: dist.all_gather_into_tensor(out, inp)),
        "reduce-scatter": (lambda: g.reduce_scatter(rs_out, rs_in, "sum"),
                           lambda: dist.reduce_scatter_tensor(rs_out, rs_in)),
    }
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows = []
    for name, (direct, backend) in calls.items():
        times = {"lowcon": [], "backend": []}
        for i in range(args.calls + 50):
            if i % 8 == 0:
                sync()
            for key, fn in (("lowcon", direct), ("backend", backend)):
                t0 = time.perf_counter()
                fn()
                if i >= 50:
                    times[key].append(1e6 * (time.perf_counter() - t0))
        sync()
        diff = statistics.median(b - a for a, b in zip(times["lowcon"], times["backend"]))
        q = lambda xs: sorted(xs)[int(0.9 * len(xs))]  # noqa: E731
        rows.append((name, statistics.median(times["lowcon"]), q(times["lowcon"]), statistics.median(times["backend"]),
                     q(times["backend"]), diff))
    if r == 0:
        print(f"host µs per call, {w} ranks, {dev.type}, {args.numel} f32 per rank, {args.calls} pairs"
              f"{', native calls replaced by no-ops (--dry)' if args.dry else ''}")
        print(f"{'op':<16}{'g.* median':>12}{'p90':>8}{'backend median':>16}{'p90':>8}{'paired diff':>13}")
        for row in rows:
            print(f"{row[0]:<16}{row[1]:>12.1f}{row[2]:>8.1f}{row[3]:>16.1f}{row[4]:>8.1f}{row[5]:>13.1f}")
    if args.dry:
        g._g = real
    dist.barrier()
    dist.destroy_process_group()
    gc.collect()  # groups kept by cycles go before the interpreter does (python.md: Shutdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
