#!/usr/bin/env bash
# 2x H200, 2026-11-25, commit aa1ee23 (bundle from scripts/gpu-bundle.sh): the FSDP2 hooks'
# bf16-wire reduce-scatter at 64 CTAs (NOTE [wire CTAs inside FSDP2]) against 16, 128 and
# the fp32 wire, paired; then the wire's reduce-scatter beside a saturated GEMM at 16 and
# 64 CTAs. Run from the repository root with the bundle carried: bash <this file>.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
out=${OUT:-/tmp/out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FSDP2_ARGS="--warmup 8 --sweep 8192x4:1024;4096x12:1024,4096 --modes nccl,nccl-b,lowcon,lowcon@rs_ctas=16,lowcon@rs_ctas=128,lowcon@wire=fp32,lowcon@wire=fp32,rs_ctas=64,nccl-ce,nocomm" \
  PARTS=bundle-a timeout 400 bash "$repo/bundle/gpu-fsdp2.sh" | grep -v "target missed"
py_nvidia=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
for d in "$py_nvidia/nccl/lib" "$py_nvidia/cublas/lib"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
L=$repo/bundle/lowcon
for c in 16 64; do
  echo "== bench overlap reduce-scatter, bf16 wire, ce-reduce, 256M, $c CTAs"
  timeout 120 "$L" launch --nproc-per-node 2 -- "$L" bench overlap --collective reduce-scatter --wire bf16 \
    --algorithms ce-reduce --shard 256M --ctas "$c" --priority high --no-null --json "$out/overlap-ctas$c.json" \
    2>&1 | tee "$out/overlap-ctas$c.txt"
done
