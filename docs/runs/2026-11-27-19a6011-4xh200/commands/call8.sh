#!/usr/bin/env bash
# shellcheck disable=SC2086,SC2129  # a record of what ran, kept as it ran
# The exact commands of one device call of this run (docs/runs/2026-11-27-19a6011-4xh200), run
# from the repository root with the bundle carried as bundle/; OUT is the device's output folder.
# Call 8 (07d0336): the small model at 2 GPUs, 600 rounds with a sync each step; the
# all-gather hook's host time at 2 GPUs; coll-mapped at 4 GPUs once more. Run from the
# repository root.
set -x
L=bundle/lowcon
PARTS=fsdp2 FSDP2_ARGS="--sync-each-step" FSDP2_W2_SWEEP="2048x8:256,1024" FSDP2_W2_MODES=nccl,nccl-b,lowcon FSDP2_W2_ROUNDS=600 FSDP2_W2_S=200 BUDGET=205 bash bundle/gpu-planner.sh > /tmp/f.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/small-w2.tgz
PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="4096x12:1024" PROFILE_MODES=nccl,lowcon PROFILE_ROUNDS=16 PROFILE_S=60 BUDGET=65 bash bundle/gpu-planner.sh > /tmp/p.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w2.tgz
timeout 100 $L launch --nproc-per-node 4 --tee -- $L selftest coll-mapped > "$OUT"/mapped-w4.txt 2>&1; echo "coll-mapped rc=$?" >> "$OUT"/mapped-w4.txt
grep -E "rc=|ok:|FAILED" "$OUT"/mapped-w4.txt | cut -c1-200 | tail -6
for f in "$OUT"/small-w2.tgz "$OUT"/profile-w2.tgz; do d=/tmp/x/$(basename $f .tgz); mkdir -p $d; tar -xzf $f -C $d; echo "== $f"; grep -h "step(s) failed" $d/summary.txt; grep -h -A8 "^shape .*vs nccl" $d/*/table.txt | head -9; grep -h "target missed" $d/*/table.txt; grep -h -A5 "^profile per step" $d/profile/table.txt 2>/dev/null | cut -c1-120; grep -h -A6 "what one hook" $d/profile/table.txt 2>/dev/null | cut -c1-130; done
