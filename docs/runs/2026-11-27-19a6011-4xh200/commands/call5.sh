#!/usr/bin/env bash
# shellcheck disable=SC2086,SC2129  # a record of what ran, kept as it ran
# The exact commands of one device call of this run (docs/runs/2026-11-27-19a6011-4xh200), run
# from the repository root with the bundle carried as bundle/; OUT is the device's output folder.
set -x
timeout 90 bundle/lowcon launch --nproc-per-node 4 --tee -- bundle/lowcon selftest coll-wire --backend gpu > "$OUT"/check-wire-w4.txt 2>&1; echo "rc=$?" >> "$OUT"/check-wire-w4.txt
PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="4096x12:1024;8192x4:1024" PROFILE_MODES=nccl,lowcon,lowcon@pieces=2 PROFILE_ROUNDS=12 PROFILE_S=110 BUDGET=115 bash bundle/gpu-planner.sh > /tmp/p.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w2.tgz
PARTS=fsdp2 FSDP2_W2_SWEEP="8192x4:1024" FSDP2_W2_MODES=nccl,nccl-b,lowcon,lowcon@pieces=2,lowcon@pieces=16 FSDP2_W2_ROUNDS=20 FSDP2_W2_S=110 BUDGET=115 bash bundle/gpu-planner.sh > /tmp/f.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/fsdp2-w2.tgz
PARTS=confirm CONFIRM_SWEEP="8192x4:1024,4096" CONFIRM_MODES=nccl,nccl-b,lowcon,lowcon@pieces=4 CONFIRM_ROUNDS=20 CONFIRM_S=230 BUDGET=235 bash bundle/gpu-planner.sh > /tmp/c.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/confirm-w4.tgz
tail -1 "$OUT"/check-wire-w4.txt
for f in "$OUT"/*.tgz; do d=/tmp/x/$(basename $f .tgz); mkdir -p $d; tar -xzf $f -C $d; echo "== $f"; grep -h "step(s) failed" $d/summary.txt; grep -h -A8 "^shape .*vs nccl" $d/*/table.txt | head -12; grep -h -A8 "^profile per step" $d/profile/table.txt 2>/dev/null | cut -c1-120; grep -h -A8 "what one hook" $d/profile/table.txt 2>/dev/null | grep reduce-scatter; done
