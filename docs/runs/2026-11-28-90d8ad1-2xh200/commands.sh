#!/usr/bin/env bash
# The device call behind this folder (nvidia-h200-x2; 4x H200 was no longer lent), from the
# repository root with the bundle of 90d8ad1 carried (scripts/gpu-bundle.sh --pack) and the
# release `lowcon` of fd82cbc beside it as bundle/lowcon-base.xz (strip --strip-debug, xz).
set -uo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
xz -dc bundle/lowcon-base.xz > /tmp/lowcon-base && chmod +x /tmp/lowcon-base
mkdir -p "$OUT/ab"
for m in kernel memop; do
  timeout 90 bundle/lowcon launch --nproc-per-node 2 --tee -- bundle/lowcon selftest coll-check --backend gpu --method "$m"
done > "$OUT/ab/check.txt" 2>&1
NPROC=2 ROUNDS=3 AB_DTYPES="bf16 f32" bash scripts/probes/small_ab.sh /tmp/lowcon-base bundle/lowcon /tmp/ab-logs \
  > "$OUT/ab/summary.txt" 2>&1
tar czf "$OUT/ab/ab.tgz" -C /tmp ab-logs
SHARED_PARTS=rust SHARED_GPU=0 SHARED_WORLDS="3 4 8" STEPS_ONLY="coll-check" SHARED_BUDGET=200 SHARED_TAR=$OUT/shared.tgz \
  bash bundle/gpu-shared.sh
