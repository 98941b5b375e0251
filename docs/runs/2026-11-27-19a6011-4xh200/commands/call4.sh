#!/usr/bin/env bash
# shellcheck disable=SC2086,SC2129  # a record of what ran, kept as it ran
# The exact commands of one device call of this run (docs/runs/2026-11-27-19a6011-4xh200), run
# from the repository root with the bundle carried as bundle/; OUT is the device's output folder.
set -x
for c in "4096x12:1024 3" "8192x4:1024 8"; do set -- $c
PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="$1" PROFILE_MODES=nccl,lowcon,lowcon@pieces=$2 PROFILE_ROUNDS=12 PROFILE_S=80 BUDGET=85 bash bundle/gpu-planner.sh > /tmp/p.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w2-p$2.tgz
PARTS=fsdp2 FSDP2_W2_SWEEP="$1" FSDP2_W2_MODES=nccl,nccl-b,lowcon,lowcon@pieces=$2 FSDP2_W2_ROUNDS=20 FSDP2_W2_S=110 BUDGET=115 bash bundle/gpu-planner.sh > /tmp/f.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/fsdp2-w2-p$2.tgz
done
for f in "$OUT"/*.tgz; do d=/tmp/x/$(basename $f .tgz); mkdir -p $d; tar -xzf $f -C $d; echo "== $f"; grep -h -A6 "^shape .*vs nccl" $d/*/table.txt | head -8; grep -h -A6 "^profile per step" $d/profile/table.txt 2>/dev/null | cut -c1-120; grep -h -A7 "what one hook" $d/profile/table.txt 2>/dev/null | grep reduce-scatter; done
