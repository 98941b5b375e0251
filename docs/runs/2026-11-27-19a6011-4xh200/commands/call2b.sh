#!/usr/bin/env bash
# shellcheck disable=SC2086,SC2129  # a record of what ran, kept as it ran
# The exact commands of one device call of this run (docs/runs/2026-11-27-19a6011-4xh200), run
# from the repository root with the bundle carried as bundle/; OUT is the device's output folder.
set -x
PARTS=profile PROFILE_SWEEP="4096x12:1024;8192x4:1024" PROFILE_MODES=nccl,lowcon,lowcon@rssync=memop PROFILE_ROUNDS=16 PROFILE_S=200 BUDGET=205 bash bundle/gpu-planner.sh > /tmp/p4.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w4.tgz
PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="4096x12:1024;8192x4:1024" PROFILE_MODES=nccl,lowcon,lowcon@rs=sm-direct PROFILE_ROUNDS=12 PROFILE_S=110 BUDGET=115 bash bundle/gpu-planner.sh > /tmp/p2.txt 2>&1; mv "$OUT"/planner.tgz "$OUT"/profile-w2.tgz
for f in profile-w4 profile-w2; do mkdir -p /tmp/x/$f; tar -xzf "$OUT"/$f.tgz -C /tmp/x/$f; grep -B3 -A2 "method models" /tmp/x/$f/profile.txt | tail -8; grep -A25 "^profile per step" /tmp/x/$f/profile/table.txt | cut -c1-175; done
