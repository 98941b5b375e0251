#!/usr/bin/env bash
# The five device calls behind this folder (2026-11-28, nvidia-h200-x4: 4x H200, one lease),
# each from the repository root with the bundle of fd82cbc carried (carry ["bundle"]),
# built here with the transformers wheels: BUNDLE_HF=1 scripts/gpu-bundle.sh --pack.
# Kept for the record: `bash commands.sh N` runs call N.
set -uo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
case ${1:-} in
1) # coll-wire and coll-mapped at 4 GPUs; FSDP2 paired, the in-place candidates against the packed rule
  mkdir -p "$OUT/a" && COMMIT=fd82cbc OUT=$OUT/a PARTS="check fsdp" STEPS_ONLY="coll-wire|coll-mapped|paired" MAPPED_S=120 \
    FSDP_SWEEP="8192x4:1024;4096x12:4096" FSDP_ROUNDS=20 FSDP_S=400 \
    FSDP_MODES="nccl,nccl-b,lowcon,lowcon@rs_ctas=32,lowcon@rsmap=no,rs_ctas=64,nccl-ce,nocomm" BUDGET=575 bash bundle/gpu-planner.sh ;;
2) # beside a saturated GEMM; dead peers in place; transformers' Llama; 4096x12 at 1024 tokens
  python3 -m pip install -q --no-index --no-deps --target /tmp/site bundle/hfwheels/*.whl
  mkdir -p "$OUT/o" "$OUT/d" "$OUT/hf" "$OUT/n"
  W2_NPROC=4 COMMIT=fd82cbc OUT=$OUT/o OVERLAP_FLAGS="--bf16-in --map-ordinary yes" OVERLAP_RS="sm-direct:16 sm-direct:32" \
    PARTS=overlap BUDGET=200 bash bundle/gpu-w2.sh
  COMMIT=fd82cbc OUT=$OUT/d PARTS=deadpeer STEPS_ONLY="read in place" BUDGET=60 bash bundle/gpu-planner.sh
  COMMIT=fd82cbc OUT=$OUT/hf PARTS=fsdp FSDP2_ARGS="--model hf-llama" FSDP_SWEEP="4096x8:2048,8192" FSDP_ROUNDS=25 \
    FSDP_MODES="nccl,nccl-b,lowcon,lowcon@rsmap=no,rs_ctas=64,nccl-ce,nocomm" FSDP_S=250 BUDGET=255 bash bundle/gpu-planner.sh
  COMMIT=fd82cbc OUT=$OUT/n PARTS=fsdp FSDP_SWEEP="4096x12:1024" FSDP_ROUNDS=60 \
    FSDP_MODES="nccl,nccl-b,lowcon,lowcon@rsmap=no,rs_ctas=64,nccl-ce,nocomm" FSDP_S=100 BUDGET=100 bash bundle/gpu-planner.sh ;;
3) # 4096x12 at 1024 tokens with a sync each step; small messages at 4 ranks, one sweep
  mkdir -p "$OUT/n" "$OUT/s"
  COMMIT=fd82cbc OUT=$OUT/n PARTS=fsdp FSDP2_ARGS="--sync-each-step" FSDP_SWEEP="4096x12:1024" FSDP_ROUNDS=80 \
    FSDP_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" FSDP_S=290 BUDGET=290 bash bundle/gpu-planner.sh
  COMMIT=fd82cbc OUT=$OUT/s PARTS=small SMALL_REPEAT=1 BUDGET=200 bash bundle/gpu-planner.sh ;;
4) # fused TP; HSDP 2x2, 60 rounds
  mkdir -p "$OUT/t" "$OUT/h"
  COMMIT=fd82cbc OUT=$OUT/t PARTS=tp TP_S=150 BUDGET=150 bash bundle/gpu-planner.sh
  COMMIT=fd82cbc OUT=$OUT/h PARTS=fsdp FSDP2_ARGS="--hsdp 2 --sync-each-step" FSDP_SWEEP="2048x8:1024;4096x12:1024" \
    FSDP_ROUNDS=60 FSDP_MODES="nccl,nccl-b,lowcon,nocomm" FSDP_S=250 BUDGET=250 bash bundle/gpu-planner.sh ;;
5) # 4096x12 at 1024 tokens, 300 rounds with a sync each step; HSDP 2x2, 250 rounds
  mkdir -p "$OUT/n" "$OUT/h"
  COMMIT=fd82cbc OUT=$OUT/n PARTS=fsdp FSDP2_ARGS="--sync-each-step" FSDP_SWEEP="4096x12:1024" FSDP_ROUNDS=300 \
    FSDP_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" FSDP_S=280 BUDGET=280 bash bundle/gpu-planner.sh
  COMMIT=fd82cbc OUT=$OUT/h PARTS=fsdp FSDP2_ARGS="--hsdp 2 --sync-each-step" FSDP_SWEEP="2048x8:1024;4096x12:1024" \
    FSDP_ROUNDS=250 FSDP_MODES="nccl,nccl-b,lowcon,nocomm" FSDP_S=250 BUDGET=250 bash bundle/gpu-planner.sh ;;
*) echo "usage: commands.sh 1|2|3|4|5" >&2; exit 2 ;;
esac
