#!/usr/bin/env bash
# shellcheck disable=SC2086,SC2129  # a record of what ran, kept as it ran
# The exact commands of one device call of this run (docs/runs/2026-11-27-19a6011-4xh200), run
# from the repository root with the bundle carried as bundle/; OUT is the device's output folder.
set -x
OUT="$OUT"/shared SHARED_WORLDS="2 4" SHARED_PARTS="rust python" STEPS_ONLY="coll-wire|FSDP2" SHARED_BUDGET=260 bash bundle/gpu-shared.sh > /tmp/shared.txt 2>&1; echo "shared rc=$?"
tar -C "$OUT" -czf "$OUT"/shared.tgz shared && rm -rf "$OUT"/shared
PARTS=profile PROFILE_SWEEP="4096x12:1024;8192x4:1024" PROFILE_MODES=nccl,lowcon PROFILE_ROUNDS=16 PROFILE_S=120 BUDGET=125 bash bundle/gpu-planner.sh > /tmp/p4.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w4.tgz
PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="4096x12:1024;8192x4:1024" PROFILE_MODES=nccl,lowcon PROFILE_ROUNDS=16 PROFILE_S=100 BUDGET=105 bash bundle/gpu-planner.sh > /tmp/p2.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w2.tgz
tail -25 /tmp/shared.txt | cut -c1-200
for f in "$OUT"/profile*.tgz; do d=/tmp/x/$(basename $f .tgz); mkdir -p $d; tar -xzf $f -C $d; echo "== $f"; grep -h "step(s) failed" $d/summary.txt; grep -h -A6 "^shape .*vs nccl" $d/*/table.txt | head -7; grep -h -A3 "lowcon's own memory" $d/profile/table.txt; grep -h -A6 "^profile per step" $d/profile/table.txt 2>/dev/null | cut -c1-120; grep -h -A8 "what one hook" $d/profile/table.txt 2>/dev/null | grep reduce-scatter; done
