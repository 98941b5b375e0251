#!/usr/bin/env bash
# The device calls behind this folder (2026-11-28), each from a bundle built at COMMIT
# (scripts/gpu-bundle.sh --pack; carry ["bundle"]); every call asked for nvidia-h100-x2
# and was lent 2x H200, except the shared-rank call (nvidia-h200, one H200).
# Each call starts with: tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
set -uo pipefail
call() { echo "== $*"; }
case ${1:-} in
ea8ac1c-a) # overlap: the reduce-scatter FSDP2 shipped (packed) and ce-reduce; the all-gather
  COMMIT=ea8ac1c PARTS="check overlap" BUDGET=560 bash bundle/gpu-w2.sh ;;
ea8ac1c-b) # overlap of a bf16 reduce-scatter per launch form; FSDP2 at 2 GPUs; peak memory
  OVERLAP_FLAGS='' OVERLAP_AG='' OVERLAP_RS="ce-reduce/once:16 ce-reduce/once:32 ce-reduce/pieces:16 sm-direct:16 sm-direct:64" \
    COMMIT=ea8ac1c PARTS=overlap BUDGET=100 bash bundle/gpu-w2.sh
  COMMIT=ea8ac1c PARTS="fsdp2 mem2" BUDGET=440 bash bundle/gpu-w2.sh ;;
ea8ac1c-shared) # one H200: 1000 graph replays at 2 and 4 shared ranks
  SHARED_PARTS=rust SHARED_WORLDS="2 4" STEPS_ONLY="coll-graph: 12" GRAPH_REPLAYS=1000 SHARED_BUDGET=400 \
    bash bundle/gpu-shared.sh ;;
dad3642) # the bf16 input read in place: coll-wire, overlap, FSDP2 candidates
  STEPS_ONLY="coll-wire" PARTS=check BUDGET=80 bash bundle/gpu-w2.sh
  OVERLAP_FLAGS="--bf16-in --map-ordinary yes" OVERLAP_RS="sm-direct:16 sm-direct:32 sm-direct:64" OVERLAP_AG='' \
    PARTS=overlap BUDGET=150 bash bundle/gpu-w2.sh
  OVERLAP_RS="sm-direct:64" OVERLAP_AG='' PARTS=overlap BUDGET=60 bash bundle/gpu-w2.sh
  W2_SWEEP="8192x4:1024" W2_ROUNDS=20 W2_S=230 PLANNER_BUDGET=240 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rsmap=yes,rs_ctas=16,lowcon@rsmap=yes,rs_ctas=64,nccl-ce,nocomm" \
    PARTS=fsdp2 BUDGET=260 bash bundle/gpu-w2.sh ;;
c3f69d0) # dead peers, overlap at 8 and 16 CTAs, FSDP2 at 30 rounds, peak memory in a job of its own
  STEPS_ONLY="dead peer" PARTS=check BUDGET=200 bash bundle/gpu-w2.sh
  OVERLAP_FLAGS="--bf16-in --map-ordinary yes" OVERLAP_RS="sm-direct:8 sm-direct:16" OVERLAP_AG='' PARTS=overlap \
    BUDGET=100 bash bundle/gpu-w2.sh
  W2_SWEEP="8192x4:1024;4096x12:1024" W2_ROUNDS=30 W2_S=260 PLANNER_BUDGET=270 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rsmap=yes,rs_ctas=8,lowcon@rsmap=yes,rs_ctas=16,nccl-ce,nocomm" \
    W2_MEM_MODES="nccl,lowcon@rsmap=yes,rs_ctas=16,nocomm" PARTS="fsdp2 mem2" BUDGET=380 bash bundle/gpu-w2.sh ;;
bea1cb6) # the 2x H200 table reads it in place: FSDP2 confirmation, overlap, coll-wire at 3 and 4 shared ranks
  W2_SWEEP="8192x4:1024" W2_ROUNDS=30 W2_S=200 PLANNER_BUDGET=210 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rsmap=yes,rs_ctas=16,lowcon@rsmap=no,rs_ctas=64,lowcon@rs=ce-reduce,rsmap=yes,nccl-ce,nocomm" \
    PARTS=fsdp2 BUDGET=220 bash bundle/gpu-w2.sh
  OVERLAP_FLAGS="--bf16-in --map-ordinary yes" OVERLAP_RS="sm-direct:16" OVERLAP_AG='' PARTS=overlap BUDGET=60 \
    bash bundle/gpu-w2.sh
  SHARED_PARTS=rust SHARED_WORLDS="3 4" STEPS_ONLY="coll-wire" SHARED_BUDGET=150 bash bundle/gpu-shared.sh ;;
bea1cb6-profile) # host µs per hook, a rendezvous per reduce-scatter
  COMMIT=bea1cb6 PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="8192x4:1024;4096x12:1024" PROFILE_MODES="nccl,lowcon" \
    PROFILE_ROUNDS=16 PROFILE_S=220 BUDGET=230 CUDA_VISIBLE_DEVICES=0,1 bash bundle/gpu-planner.sh ;;
56bee51) # predicted addresses: coll-mapped, coll-wire, host µs per hook, the step
  export CUDA_VISIBLE_DEVICES=0,1 L=bundle/lowcon
  timeout 100 $L launch --nproc-per-node 2 -- $L selftest coll-mapped
  timeout 60 $L launch --nproc-per-node 2 -- $L selftest coll-wire --backend gpu
  COMMIT=56bee51 PARTS="profile fsdp2" PROFILE_NPROC=2 PROFILE_SWEEP="8192x4:1024;4096x12:1024" \
    PROFILE_MODES="nccl,lowcon" PROFILE_ROUNDS=16 PROFILE_S=100 FSDP2_W2_SWEEP="8192x4:1024" FSDP2_W2_ROUNDS=20 \
    FSDP2_W2_S=90 FSDP2_W2_MODES="nccl,nccl-b,lowcon,lowcon@rsmap=no,rs_ctas=64,nccl-ce,nocomm" BUDGET=190 \
    bash bundle/gpu-planner.sh ;;
*) call "usage: commands.sh ea8ac1c-a|ea8ac1c-b|ea8ac1c-shared|dad3642|c3f69d0|bea1cb6|bea1cb6-profile|56bee51"; exit 2 ;;
esac
