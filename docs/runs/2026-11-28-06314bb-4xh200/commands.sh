#!/usr/bin/env bash
# The device calls of this run (asked as nvidia-h100-x4; the device lent 4x H200), from
# the repository root with the bundle carried (scripts/gpu-bundle.sh --pack): kept for the
# record. Calls 1 and 2 ran the bundle of 06314bb, call 3 that of bd8bd83 (the 2-rank
# tables' rule for FSDP2's bf16 copy-in moved from ce-reduce to sm-direct; nothing else).
set -euo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
# 1 (06314bb): 4096x12 with a sync each step at 4 GPUs; 8192x4 at 2 GPUs; peak memory
# per plan in jobs of their own.
COMMIT=06314bb PARTS="noisy w2 mem2" bash bundle/gpu-copy-in.sh
# 2 (06314bb): 8192x4 and 4096x12 at 4 GPUs, 20 rounds.
COMMIT=06314bb PARTS="w4" bash bundle/gpu-copy-in.sh
# 2b (06314bb): 4096x12 at 1024 and 4096 tokens, 40 rounds.
mkdir -p "$OUT/w4b" && COMMIT=06314bb OUT=$OUT/w4b PARTS=fsdp FSDP_SWEEP="4096x12:1024,4096" FSDP_ROUNDS=40 \
  FSDP_MODES="nccl,nccl-b,lowcon,lowcon@copyin=fp32,nccl-ce,nocomm" FSDP_S=280 BUDGET=290 bash bundle/gpu-planner.sh
# 3 (bd8bd83): 4096x12 at 1024 tokens, 60 rounds; 8192x4 at 2 GPUs as shipped; the
# 2-rank Python suite on GPU 0 (alone).
mkdir -p "$OUT/h" && COMMIT=bd8bd83 OUT=$OUT/h PARTS="fsdp fsdp2" FSDP_SWEEP="4096x12:1024" FSDP_ROUNDS=60 \
  FSDP_MODES="nccl,nccl-b,lowcon,lowcon@copyin=fp32,nccl-ce,nocomm" FSDP_S=110 FSDP2_W2_SWEEP="8192x4:1024" \
  FSDP2_W2_ROUNDS=20 FSDP2_W2_S=60 FSDP2_W2_MODES="nccl,nccl-b,lowcon,lowcon@copyin=fp32,nccl-ce,nocomm" BUDGET=175 \
  bash bundle/gpu-planner.sh
python3 -m pip install -q --no-deps --force-reinstall bundle/wheels/lowcon-*.whl
SHARED_SKIP_INSTALL=1 SHARED_BUDGET=330 SHARED_GPU=0 SHARED_WORLDS=2 SHARED_PARTS=python SHARED_LOGS=/tmp/s0 \
  SHARED_TAR=$OUT/py2.tgz bash bundle/gpu-shared.sh
