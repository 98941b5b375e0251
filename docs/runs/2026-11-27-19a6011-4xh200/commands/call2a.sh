#!/usr/bin/env bash
# shellcheck disable=SC2086,SC2129  # a record of what ran, kept as it ran
# The exact commands of one device call of this run (docs/runs/2026-11-27-19a6011-4xh200), run
# from the repository root with the bundle carried as bundle/; OUT is the device's output folder.
set -x
nvcc -O2 -arch=sm_90 -o /tmp/glc scripts/probes/graph_launch_cost.cu -lcuda > "$OUT"/graphcost-cold.txt 2>&1
CUDA_DEVICE_MAX_CONNECTIONS=32 PROBE_COLD=1 timeout 60 /tmp/glc 1 >> "$OUT"/graphcost-cold.txt 2>&1
timeout 90 bundle/lowcon launch --nproc-per-node 4 --tee -- bundle/lowcon selftest coll-wire --backend gpu > "$OUT"/check-wire-w4.txt 2>&1; echo "rc=$?" >> "$OUT"/check-wire-w4.txt
PARTS=profile PROFILE_SWEEP="4096x12:1024;8192x4:1024" PROFILE_MODES=nccl,lowcon,lowcon@rssync=memop PROFILE_ROUNDS=16 PROFILE_S=200 BUDGET=205 bash bundle/gpu-planner.sh > /tmp/p4.txt 2>&1; mv bundle/planner.tgz "$OUT"/profile-w4.tgz
PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="4096x12:1024" PROFILE_MODES=nccl,lowcon,lowcon@rssync=memop PROFILE_ROUNDS=12 PROFILE_S=110 BUDGET=115 bash bundle/gpu-planner.sh > /tmp/p2.txt 2>&1; mv bundle/planner.tgz "$OUT"/profile-w2.tgz
grep -v "^$" "$OUT"/graphcost-cold.txt | tail -20; tail -2 "$OUT"/check-wire-w4.txt | cut -c1-600
for f in /tmp/p4.txt /tmp/p2.txt; do grep -E "step\(s\) failed|FAIL" $f; done
for f in profile-w4 profile-w2; do mkdir -p /tmp/x/$f; tar -xzf "$OUT"/$f.tgz -C /tmp/x/$f; grep -A40 "^profile per step" /tmp/x/$f/profile/table.txt | cut -c1-175; done
