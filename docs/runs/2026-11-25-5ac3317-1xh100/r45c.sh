#!/usr/bin/env bash
# Rough edges, 1x H100: captured sync (graph_sync, NOTE [captured sync]), the host time of
# a replay and its parts (coll-graph at 1, 2 and 4 ranks), the watchdog's wakes (NOTE
# [watchdog wakes]) with the dead-peer steps, the torch worker's graph timings, the C check.
set -u
R=/tmp/r45c; mkdir -p "$R"
outer=$OUT
run_shared() { # name, env..., then gpu-shared's variables
  local name=$1; shift
  env "$@" OUT="$R/$name" bash bundle/gpu-shared.sh > "$R/$name.txt" 2>&1
  tail -14 "$R/$name.txt"
}
# One rank alone on the GPU (no MPS): the driver's own host times.
mkdir -p "$R/w1"
timeout 120 bundle/lowcon launch --nproc-per-node 1 --tee -- bundle/lowcon selftest coll-graph --replays 100 \
  > "$R/w1/graph-w1.txt" 2>&1; echo "w=1 coll-graph rc=$?"
run_shared rust SHARED_WORLDS="2 4" SHARED_PARTS=rust SHARED_BUDGET=330 GRAPH_REPLAYS=100 \
  STEPS_ONLY="coll-graph: 12|gpu-dead-peer|SIGKILL at replay 50, no launcher|coll-dead-peer SIGKILL mid-loop"
grep -o "host µs per replay[^;]*" "$R"/w1/graph-w1.txt "$R"/rust/graph-w*.txt
grep -o "memop nodes/nodes by graph_sync[^;]*" "$R"/w1/graph-w1.txt "$R"/rust/graph-w*.txt
run_shared py SHARED_WORLDS=2 SHARED_PARTS=python SHARED_BUDGET=150 STEPS_ONLY="install the wheel|torch tensors"
grep -h "host us" "$R"/py/python-w2.txt
run_shared capi SHARED_WORLDS=2 SHARED_PARTS=capi SHARED_BUDGET=80
tar -C /tmp -czf "$outer/r45c.tgz" r45c
