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
  # d587aa9's binary travels compressed (the working tree's 64 MiB).
  [ -f bundle/lowcon-before.gz ] && gunzip -f bundle/lowcon-before.gz
  (
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export LOWCON_REQUIRE_GPU=1 LOWCON_SHARE_GPU=1 CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_MAX_CONNECTIONS=8
    m=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$m/pipe CUDA_MPS_LOG_DIRECTORY=$m/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && sleep 0.5
    for round in 1 2; do
      for b in lowcon-before lowcon; do
        L=bundle/$b
        echo "== round $round $b all-gather sm-oneshot"
        timeout 60 "$L" launch --nproc-per-node 2 -- "$L" bench all-gather -b 8K -e 1M -f 4 --algorithms sm-oneshot \
          --sync kernel --no-nccl --check
        echo "== round $round $b reduce-scatter sm-direct, tma-reduce"
        timeout 60 "$L" launch --nproc-per-node 2 -- "$L" bench reduce-scatter -b 8K -e 1M -f 4 \
          --algorithms sm-direct,tma-reduce --sync kernel --no-nccl --check
      done
    done
    echo quit | nvidia-cuda-mps-control
  ) > "$R/fused-ab.txt" 2>&1
  grep -E "^==|sm-oneshot|sm-direct|tma-reduce" "$R/fused-ab.txt" | grep -v "^#" | head -80
  parts="rust capi"
else
  parts=python
fi
env OUT="$R/shared" SHARED_WORLDS="2 4" SHARED_PARTS="$parts" SHARED_BUDGET=$([ "$part" = rust ] && echo 440 || echo 540) GRAPH_REPLAYS=100 SHRINKS=30 \
  bash bundle/gpu-shared.sh > "$R/shared.txt" 2>&1
grep -E " ok | FAILED|step\(s\) failed" "$R/shared.txt" | tail -70
tar -C /tmp -czf "$outer/r46-$part.tgz" "r46-$part"
