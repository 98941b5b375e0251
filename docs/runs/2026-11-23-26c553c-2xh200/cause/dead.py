# Diagnostic: the scenario with knobs. Env: SYNC, STREAM (legacy|created),
# OPS (both|ag|rs), POOL (0|1), EXIT (os_exit|sigkill), N (elements), KILL_AT.
import faulthandler, os, signal, sys, time
faulthandler.dump_traceback_later(int(os.environ.get("DUMP_AFTER", "14")), exit=False, file=sys.stderr)
import torch, lowcon
rank = int(os.environ["RANK"]); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
sync = os.environ.get("SYNC", "kernel")
ops = os.environ.get("OPS", "both")
g = lowcon.init()
n = int(os.environ.get("N", str(1 << 22)))
kill_at = int(os.environ.get("KILL_AT", "300"))
stream = torch.cuda.Stream() if os.environ.get("STREAM") == "created" else torch.cuda.current_stream()
with torch.cuda.stream(stream):
    if os.environ.get("POOL") == "1":
        a = g.empty(n, torch.bfloat16); a.fill_(1)
        full = g.empty(n * g.world_size, torch.bfloat16)
        r_in = g.empty(n, torch.float32); r_in.fill_(1)
        r_out = g.empty(n // g.world_size, torch.float32)
    else:
        a = torch.ones(n, device="cuda", dtype=torch.bfloat16); full = torch.empty(n * g.world_size, device="cuda", dtype=torch.bfloat16)
        r_out = torch.empty(n // g.world_size, device="cuda", dtype=torch.float32); r_in = torch.ones(n, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    t_kill = None
    try:
        for i in range(100000):
            if i == kill_at:
                t_kill = time.time()
                if rank == 1:
                    print(f"rank 1: exiting at {t_kill:.3f}", flush=True)
                    if os.environ.get("EXIT") == "sigkill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    os._exit(0)
            if i % 100 == 0 or (t_kill and i % 10 == 0):
                print(f"rank {rank}: call {i} at {time.time():.3f}", flush=True)
            if ops in ("both", "ag"):
                g.all_gather(full, a, sync=sync)
            if ops in ("both", "rs"):
                g.reduce_scatter(r_out, r_in, "sum", sync=sync)
            if i % 50 == 0:
                g.check()
        g.synchronize()
        print(f"rank {rank}: no error", flush=True); sys.exit(1)
    except lowcon.PeerError as e:
        print(f"rank {rank}: PeerError {time.time() - t_kill:.3f} s after the kill point: {e}", flush=True)
        faulthandler.cancel_dump_traceback_later()
        sys.exit(0)
