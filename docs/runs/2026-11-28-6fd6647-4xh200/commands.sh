#!/usr/bin/env bash
# The two device calls of this run (asked as nvidia-h100-x4; the device lent 4x H200), from
# the repository root with the bundle of 6fd6647 carried, built with the transformers
# wheels (BUNDLE_HF=1 scripts/gpu-bundle.sh --pack): kept for the record.
set -euo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
python3 -m pip install -q --no-index --no-deps --target /tmp/site bundle/hfwheels/*.whl
# 1: 2048 tokens per rank, 15 rounds.
mkdir -p "$OUT/hf" && COMMIT=6fd6647 OUT=$OUT/hf PARTS=fsdp FSDP2_ARGS="--model hf-llama" FSDP_SWEEP="4096x8:2048" \
  FSDP_ROUNDS=15 FSDP_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" FSDP_S=230 BUDGET=240 bash bundle/gpu-planner.sh
# 2: 2048 and 8192 tokens per rank, 25 rounds.
mkdir -p "$OUT/hf2" && COMMIT=6fd6647 OUT=$OUT/hf2 PARTS=fsdp FSDP2_ARGS="--model hf-llama" FSDP_SWEEP="4096x8:2048,8192" \
  FSDP_ROUNDS=25 FSDP_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" FSDP_S=195 BUDGET=200 bash bundle/gpu-planner.sh
