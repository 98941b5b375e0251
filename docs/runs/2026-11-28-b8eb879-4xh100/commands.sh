#!/usr/bin/env bash
# The two device calls of this run (nvidia-h100-x4), from the repository root with the
# bundle of b8eb879 carried (scripts/gpu-bundle.sh --pack): kept for the record.
set -euo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
# 1: coll-wire at 4 GPUs, FSDP2 paired at 4 GPUs and at 2 (GPUs 0 and 1).
COMMIT=b8eb879 PARTS="check fsdp fsdp2" STEPS_ONLY='coll-wire|paired' \
  FSDP_MODES="nccl,nccl-b,lowcon,lowcon@copyin=fp32,nccl-ce,nocomm" FSDP_SWEEP="8192x4:1024;4096x12:1024" \
  FSDP_ROUNDS=20 FSDP_S=300 FSDP2_W2_MODES="nccl,nccl-b,lowcon,lowcon@copyin=fp32,nccl-ce,nocomm" \
  FSDP2_W2_SWEEP="8192x4:1024" FSDP2_W2_ROUNDS=20 FSDP2_W2_S=160 BUDGET=540 bash bundle/gpu-planner.sh
# 2: the shared-rank suites, four instances side by side, one GPU each.
python3 -m pip install -q --no-deps --force-reinstall bundle/wheels/lowcon-*.whl
export SHARED_SKIP_INSTALL=1 SHARED_BUDGET=500
SHARED_GPU=0 SHARED_WORLDS=2 SHARED_PARTS=python SHARED_LOGS=/tmp/s0 SHARED_TAR=$OUT/py2.tgz bash bundle/gpu-shared.sh &
SHARED_GPU=1 SHARED_WORLDS=4 SHARED_PARTS=python SHARED_LOGS=/tmp/s1 SHARED_TAR=$OUT/py4.tgz bash bundle/gpu-shared.sh &
SHARED_GPU=2 SHARED_WORLDS="2 4" SHARED_PARTS=tp SHARED_LOGS=/tmp/s2 SHARED_TAR=$OUT/tp.tgz bash bundle/gpu-shared.sh &
SHARED_GPU=3 SHARED_WORLDS="1 4" SHARED_PARTS=rust SHARED_LOGS=/tmp/s3 SHARED_TAR=$OUT/rust14.tgz bash bundle/gpu-shared.sh &
wait
