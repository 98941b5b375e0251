#!/usr/bin/env bash
# The device calls behind this folder (2026-11-28, nvidia-h200-x2: 2x H200; 4x and H100 were
# not lent), each from the repository root with the bundle of 9534748 carried (carry
# ["bundle"], scripts/gpu-bundle.sh --pack), the tree at edb1a6f (calls 1 and 2) and at
# 28f65f8 (calls 3 and 4: --align's barrier on a gloo group since d5b0c1e). `bash commands.sh N` runs call N.
set -uo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
case ${1:-} in
1) # FSDP2 4096x12 at 1024 tokens, 2 GPUs, a sync each step: with the ranks aligned before every
   # step (--align every-step, NOTE [aligned steps]) and without, 300 rounds each; in both, the
   # shipped rule (memop waits for the bf16 copy-in's reduce-scatter) against kernel waits
  mkdir -p "$OUT/al" "$OUT/pl"
  for v in al pl; do
    a="--sync-each-step"; [ $v = al ] && a="--sync-each-step --align every-step"
    COMMIT=9534748 OUT=$OUT/$v PARTS=fsdp2 W2_SWEEP="4096x12:1024" W2_ROUNDS=300 W2_S=245 \
      W2_MODES="nccl,nccl-b,lowcon,lowcon@rssync=kernel,nccl-ce,nocomm" PLANNER_BUDGET=255 BUDGET=260 \
      FSDP2_ARGS="$a" bash bundle/gpu-w2.sh
  done ;;
2) # world 4 and 8 over both GPUs, ranks round-robin (every rank has peers on its own GPU and
   # across NVLink): the Rust suites and the fused TP ops, under MPS
  GRAPH_REPLAYS=200 SHRINKS=20 SHARED_GPU=0,1 SHARED_WORLDS="4 8" SHARED_PARTS="rust tp" SHARED_BUDGET=480 \
    SHARED_TAR=$OUT/mixed.tgz bash bundle/gpu-shared.sh ;;
3) # call 1's aligned half again, its barrier now on a gloo group of its own (call 1's, on the
   # default NCCL group, had not finished in 245 s): 10 rounds first, then 300
  mkdir -p "$OUT/a10" "$OUT/al"
  COMMIT=9534748+ OUT=$OUT/a10 PARTS=fsdp2 W2_SWEEP="4096x12:1024" W2_ROUNDS=10 W2_S=80 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rssync=kernel,nccl-ce,nocomm" PLANNER_BUDGET=85 BUDGET=90 \
    FSDP2_ARGS="--sync-each-step --align every-step" bash bundle/gpu-w2.sh &&
  COMMIT=9534748+ OUT=$OUT/al PARTS=fsdp2 W2_SWEEP="4096x12:1024" W2_ROUNDS=300 W2_S=245 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rssync=kernel,nccl-ce,nocomm" PLANNER_BUDGET=255 BUDGET=260 \
    FSDP2_ARGS="--sync-each-step --align every-step" bash bundle/gpu-w2.sh ;;
4) # right after call 3, on its lease: call 1's plain half again (no --align), for the A/A
   # noise and the order effects of one box side by side
  mkdir -p "$OUT/pl"
  COMMIT=9534748+ OUT=$OUT/pl PARTS=fsdp2 W2_SWEEP="4096x12:1024" W2_ROUNDS=300 W2_S=245 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rssync=kernel,nccl-ce,nocomm" PLANNER_BUDGET=255 BUDGET=260 \
    FSDP2_ARGS="--sync-each-step" bash bundle/gpu-w2.sh ;;
*) echo "usage: commands.sh 1|2|3|4" >&2; exit 2 ;;
esac
