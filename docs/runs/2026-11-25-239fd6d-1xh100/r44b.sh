#!/usr/bin/env bash
# Issue 44, call B: the harness (reduce vs reduce-once), then shared-rank checks at 4 and 8.
set -u
L=bundle/lowcon
K=/tmp/r44/k; mkdir -p "$K"
nvidia-smi -L > "$K/gpu.txt"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
py_nvidia=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
for d in "$py_nvidia/cublas/lib" "$py_nvidia/nccl/lib" /usr/local/cuda/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
t0=$(date +%s)
timeout 200 $L bench reduce-kernels --world 2 --kernels reduce,reduce-once \
  --shapes 4x512,8x512,16x512 --pieces 1,4,16 --json "$K/once.json" > "$K/once.txt" 2>&1
echo "harness rc=$? $(( $(date +%s) - t0 )) s" >> "$K/times.txt"
cat "$K/once.txt"
tar -C /tmp/r44 -czf "$OUT/k.tgz" k
outer=$OUT  # the tar goes to the device tool's $OUT; the logs to /tmp
SHARED_TAR=$outer/shared.tgz SHARED_BUDGET=${BUDGET:-360} SHARED_WORLDS="4 8" SHARED_PARTS="rust capi" GRAPH_REPLAYS=50 \
  STEPS_ONLY="coll-check|coll-graph: 12|C API|coll-bad-input" OUT=/tmp/r44/shared bash bundle/gpu-shared.sh > /tmp/r44/shared.txt 2>&1
tail -25 /tmp/r44/shared.txt; cp /tmp/r44/shared.txt "$OUT/"
cat "$K/times.txt"
