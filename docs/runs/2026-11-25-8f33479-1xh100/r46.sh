#!/usr/bin/env bash
# The house (three floors, lowcon::Group) on 1x H100: the single-GPU checks, then the
# shared-GPU suites at 2 and 4 ranks (Rust, the C check, Python), with the graph step
# at 100 replays and 30 live shrinks to fit one call.
set -u
R=/tmp/r46; mkdir -p "$R"
outer=$OUT
LOWCON_REQUIRE_GPU=1 timeout 120 bundle/lowcon-gpu-tests > "$R/gpu-tests.txt" 2>&1; echo "lowcon-gpu-tests rc=$?"
tail -3 "$R/gpu-tests.txt"
env OUT="$R/shared" SHARED_WORLDS="2 4" SHARED_BUDGET=540 GRAPH_REPLAYS=100 SHRINKS=30 \
  bash bundle/gpu-shared.sh > "$R/shared.txt" 2>&1
grep -E "ok|FAILED|failed" "$R/shared.txt" | tail -60
tar -C /tmp -czf "$outer/r46.tgz" r46
