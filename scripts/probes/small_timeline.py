"""Where an eager small collective's time goes on the GPU: kernel durations and the gaps
between one call's kernel and the next, for lowcon's LL calls and NCCL's, from a torch
profiler trace of back-to-back calls (eager, then replayed from a CUDA graph).

Run under torchrun, one process per GPU:
    python3 -m torch.distributed.run --nproc-per-node 4 scripts/probes/small_timeline.py \
        --bytes 16384 --calls 200 --out /tmp/timeline
Prints one line per (implementation, mode) on rank 0 with every rank's medians, and
writes each rank's numbers to OUT/rank{r}.json. Needs lowcon's wheel and torch.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import lowcon


def kernels(prof, prefix):
    """(start_us, dur_us) of the GPU kernels whose name starts with `prefix`, in order."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith(prefix):
            out.append((e.time_range.start, e.time_range.end - e.time_range.start))
    out.sort()
    return out


def summary(ks):
    if len(ks) < 3:
        return {"kernels": len(ks)}
    durs = [d for _, d in ks]
    gaps = [ks[i + 1][0] - (ks[i][0] + ks[i][1]) for i in range(len(ks) - 1)]
    span = ks[-1][0] + ks[-1][1] - ks[0][0]
    return {
        "kernels": len(ks),
        "dur_med": statistics.median(durs),
        "dur_p90": sorted(durs)[int(0.9 * len(durs))],
        "gap_med": statistics.median(gaps),
        "gap_p90": sorted(gaps)[int(0.9 * len(gaps))],
        "us_per_call": span / len(ks),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=16384, help="bytes per rank (bf16)")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", default="/tmp/timeline")
    a = ap.parse_args()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    g = lowcon.from_process_group()
    n = a.bytes // 2
    world = dist.get_world_size()
    inp = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(world * n, device="cuda", dtype=torch.bfloat16)
    rs_in = torch.randn(world * n, device="cuda", dtype=torch.bfloat16)
    rs_out = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.current_stream()
    ch = g.channel("probe")  # a capture needs a named channel (docs/python.md, "CUDA graphs")
    impls = {
        "lowcon-ag": ("lowcon_ll", lambda: g.all_gather(out, inp, algorithm="ll", channel=ch)),
        "lowcon-rs": ("lowcon_ll", lambda: g.reduce_scatter(rs_out, rs_in, algorithm="ll", channel=ch)),
        "nccl-ag": ("ncclDevKernel", lambda: dist.all_gather_into_tensor(out, inp)),
        "nccl-rs": ("ncclDevKernel", lambda: dist.reduce_scatter_tensor(rs_out, rs_in)),
    }
    res = {}
    for name, (prefix, call) in impls.items():
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        # CUDA activity only: tracing the CPU too made every rank host-bound (35-60 µs a call).
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            t = time.perf_counter()
            for _ in range(a.calls):
                call()
            host = (time.perf_counter() - t) * 1e6 / a.calls
            torch.cuda.synchronize()
        res[f"{name} eager"] = {**summary(kernels(prof, prefix)), "host_us": host}
        # Replayed: the same calls captured once.
        graph = torch.cuda.CUDAGraph()
        cs = torch.cuda.Stream()
        cs.wait_stream(s)
        with torch.cuda.stream(cs):
            call()
        s.wait_stream(cs)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(a.calls):
                call()
        replay = (lambda: g.replay(graph)) if name.startswith("lowcon") else graph.replay
        replay()
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            replay()
            torch.cuda.synchronize()
        res[f"{name} replayed"] = summary(kernels(prof, prefix))
        del graph
        dist.barrier()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(res, f, indent=1)
    everyone = [None] * world
    dist.all_gather_object(everyone, res)
    if rank == 0:
        print(f"# {a.bytes} bytes per rank, {a.calls} calls, LOWCON_LL_OVERLAP={os.environ.get('LOWCON_LL_OVERLAP', '1')}")
        print("# per rank: kernel µs median / gap µs median / µs per call (span over calls); host µs per eager call")
        for key in res:
            cells = []
            for r in everyone:
                x = r[key]
                if "dur_med" in x:
                    cells.append(f"{x['dur_med']:.1f}/{x['gap_med']:.1f}/{x['us_per_call']:.1f}"
                                 + (f" h{x['host_us']:.1f}" if "host_us" in x else ""))
                else:
                    cells.append(f"{x['kernels']} kernels")
            print(f"{key:22s} " + "  ".join(cells))
    # Each step of the teardown says when it is done: on 2026-11-27 one of them hung.
    dist.barrier()
    print(f"[{rank}] closing lowcon", flush=True)
    g.close()
    print(f"[{rank}] lowcon closed", flush=True)
    dist.destroy_process_group()
    print(f"[{rank}] process group destroyed", flush=True)


if __name__ == "__main__":
    main()
