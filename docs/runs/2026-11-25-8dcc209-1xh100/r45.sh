#!/usr/bin/env bash
# Rough edges, 1x H100: memop graphs batched (host time per replay, track_replay), with
# LOWCON_MEMOP_BATCH=0 for the unbatched layout in the same call; correctness at 2 and 4.
set -u
R=/tmp/r45; mkdir -p "$R"
outer=$OUT
run_shared() { # name, env..., then gpu-shared's variables
  local name=$1; shift
  env "$@" OUT="$R/$name" bash bundle/gpu-shared.sh > "$R/$name.txt" 2>&1
  tail -12 "$R/$name.txt"
}
run_shared py-batch SHARED_WORLDS=2 SHARED_PARTS=python SHARED_BUDGET=200 STEPS_ONLY="install the wheel|torch tensors"
run_shared py-nobatch LOWCON_MEMOP_BATCH=0 SHARED_WORLDS=2 SHARED_PARTS=python SHARED_BUDGET=200 STEPS_ONLY="install the wheel|torch tensors"
grep -h "graph" "$R"/py-batch/python-w2.txt "$R"/py-nobatch/python-w2.txt | grep "host us"
run_shared rust SHARED_WORLDS="2 4" SHARED_PARTS=rust SHARED_BUDGET=260 GRAPH_REPLAYS=100 \
  STEPS_ONLY="coll-graph: 12|gpu-barrier-stress|gpu-skip-barrier|gpu-dead-peer \(memop\)|SIGKILL at replay 50, no launcher \(memop\)|coll-stress 1000 calls x 2 streams \(memop\)"
tar -C /tmp -czf "$outer/r45.tgz" r45
