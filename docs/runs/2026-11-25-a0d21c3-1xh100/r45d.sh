#!/usr/bin/env bash
# Rough edges, 1x H100: where Python's track_replay time goes (the torch worker), the
# shrink and dead-peer steps after NOTE [watched set-up] and NOTE [watchdog wakes] at 2,
# 3 and 4 shared ranks, coll-graph at 2, the C check.
set -u
R=/tmp/r45d; mkdir -p "$R"
outer=$OUT
run_shared() { # name, env..., then gpu-shared's variables
  local name=$1; shift
  env "$@" OUT="$R/$name" bash bundle/gpu-shared.sh > "$R/$name.txt" 2>&1
  tail -24 "$R/$name.txt"
}
run_shared py SHARED_WORLDS=2 SHARED_PARTS=python SHARED_BUDGET=150 STEPS_ONLY="install the wheel|torch tensors"
grep -h "host us\|track_replay's parts" "$R"/py/python-w2.txt
run_shared rust SHARED_WORLDS="2 3 4" SHARED_PARTS=rust SHARED_BUDGET=330 GRAPH_REPLAYS=100 SHRINKS=30 \
  STEPS_ONLY="coll-shrink|gpu-dead-peer|coll-dead-peer SIGKILL mid-loop|w=2 coll-graph: 12"
run_shared capi SHARED_WORLDS=2 SHARED_PARTS=capi SHARED_BUDGET=80
tar -C /tmp -czf "$outer/r45d.tgz" r45d
