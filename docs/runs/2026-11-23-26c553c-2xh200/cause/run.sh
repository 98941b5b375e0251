#!/usr/bin/env bash
# Diagnostic run for the dead-peer hang. Carry: bundle.
# (As run: from a scratch folder diag/ in the repository root, holding this file and dead.py.)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site bundle/wheels/lowcon-*.whl || exit 1
export PYTHONPATH=/tmp/site
out=${OUT:-/tmp/out}; mkdir -p "$out/d"
variant() { # name, env...
  local name=$1; shift
  echo "=== $name"
  ( env "$@" LOWCON_DEBUG=1 DUMP_AFTER=12 timeout -s KILL "${LIMIT:-20}" python3 -m torch.distributed.run --nproc-per-node 2 diag/dead.py > "$out/d/$name.log" 2>&1 ) &
  local bg=$!
  sleep 10
  for p in $(pgrep -f "diag/dead.py"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -q '^RANK=0' || continue
    echo "-- pid $p alive at 10 s" >> "$out/d/$name.stacks"
    for t in "/proc/$p"/task/*; do echo "  $(cat "$t/comm") $(cat "$t/wchan") $(grep State "$t/status")"; done >> "$out/d/$name.stacks"
  done
  wait $bg; echo "rc=$?" >> "$out/d/$name.log"
  grep -E "PeerError|no error|rc=|exiting|watchdog has been|group failed" "$out/d/$name.log" | grep -v "released" | head -8
  pkill -9 -f diag/dead.py; sleep 1
}
variant k-legacy-both SYNC=kernel
variant m-legacy-both SYNC=memop
variant k-created-both SYNC=kernel STREAM=created
variant m-created-both SYNC=memop STREAM=created
variant k-legacy-sigkill SYNC=kernel EXIT=sigkill
tar -C "$out" -czf "$out/diag.tgz" d && rm -rf "$out/d"
