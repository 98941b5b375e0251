#!/usr/bin/env bash
# The house, finished (the Python collective and pool, the checks' Runner and the fused
# head on lowcon::Group and lowcon_abi::FusedHead), on one GPU, in two calls:
# `r46.sh rust` (the single-GPU checks; the fused kernels' speed, this bundle's `lowcon`
# against `lowcon-before`, d587aa9's, 2 ranks sharing the GPU under MPS, alternated twice
# times; then the Rust and C suites with 2 and 4 ranks sharing the GPU) and `r46.sh python`
# (the Python suites at 2 and 4); the graph step at 100 replays and 30 live shrinks.
set -u
part=${1:?rust or python}
R=/tmp/r46-$part; mkdir -p "$R"
outer=$OUT
if [ "$part" = rust ]; then
  LOWCON_REQUIRE_GPU=1 timeout 120 bundle/lowcon-gpu-tests > "$R/gpu-tests.txt" 2>&1
  echo "lowcon-gpu-tests rc=$?"; tail -3 "$R/gpu-tests.txt"
  parts="rust capi"
else
  parts=python
fi
env OUT="$R/shared" SHARED_WORLDS="2 4" SHARED_PARTS="$parts" SHARED_BUDGET="$([ "$part" = rust ] && echo 440 || echo 540)" GRAPH_REPLAYS=100 SHRINKS=30 \
  bash bundle/gpu-shared.sh > "$R/shared.txt" 2>&1
grep -E " ok | FAILED|step\(s\) failed" "$R/shared.txt" | tail -70
tar -C /tmp -czf "$outer/r46-$part.tgz" "r46-$part"
