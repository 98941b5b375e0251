#!/usr/bin/env bash
# shellcheck disable=SC2086,SC2129  # a record of what ran, kept as it ran
# The exact commands of one device call of this run (docs/runs/2026-11-27-19a6011-4xh200), run
# from the repository root with the bundle carried as bundle/; OUT is the device's output folder.
# Call 7 (the bundle of the in-place all-gather change): checks at 4 GPUs, host µs per hook,
# the small model at 256 tokens, FSDP2 with shared ranks. Run from the repository root.
set -x
L=bundle/lowcon
timeout 100 $L launch --nproc-per-node 4 --tee -- $L selftest coll-check --backend gpu --method kernel > "$OUT"/check-w4.txt 2>&1; echo "coll-check rc=$?" >> "$OUT"/check-w4.txt
timeout 100 $L launch --nproc-per-node 4 --tee -- $L selftest coll-mapped >> "$OUT"/check-w4.txt 2>&1; echo "coll-mapped rc=$?" >> "$OUT"/check-w4.txt
PARTS=profile PROFILE_SWEEP="4096x12:1024" PROFILE_MODES=nccl,lowcon PROFILE_ROUNDS=16 PROFILE_S=80 BUDGET=85 bash bundle/gpu-planner.sh > /tmp/p4.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w4.tgz
PARTS=confirm CONFIRM_SWEEP="2048x8:256" CONFIRM_MODES=nccl,nccl-b,lowcon FSDP2_ARGS="--sync-each-step" CONFIRM_ROUNDS=150 CONFIRM_S=170 BUDGET=175 bash bundle/gpu-planner.sh > /tmp/c.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/small-w4.tgz
OUT="$OUT"/shared SHARED_WORLDS="4" SHARED_PARTS="python" STEPS_ONLY="FSDP2" SHARED_BUDGET=100 bash bundle/gpu-shared.sh > /tmp/shared.txt 2>&1; echo "shared rc=$?"
tar -C "$OUT" -czf "$OUT"/shared.tgz shared && rm -rf "$OUT"/shared
grep -E "rc=|ok:|FAILED" "$OUT"/check-w4.txt | cut -c1-160 | tail -12; tail -6 /tmp/shared.txt
for f in "$OUT"/profile-w4.tgz "$OUT"/small-w4.tgz; do d=/tmp/x/$(basename $f .tgz); mkdir -p $d; tar -xzf $f -C $d; echo "== $f"; grep -h "step(s) failed" $d/summary.txt; grep -h -A6 "^shape .*vs nccl" $d/*/table.txt | head -7; grep -h -A5 "^profile per step" $d/profile/table.txt 2>/dev/null | cut -c1-120; grep -h -A6 "what one hook" $d/profile/table.txt 2>/dev/null | cut -c1-130; done
