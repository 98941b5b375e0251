#!/usr/bin/env bash
# The device calls of this run, in order, from the repository root with the bundle
# (BUNDLE_BASE=dcc4eb7 scripts/gpu-bundle.sh --pack, at 960d990) carried as bundle/.
set -uo pipefail
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
# 1. the plan-driven paths at 4 real GPUs (summary-check.txt)
PARTS="check plan pygpu" BUDGET=560 bash bundle/gpu-planner.sh
# 2. FSDP2's step, the build before the refactor against this one (builds/)
REPEAT=2 ROUNDS=12 bash bundle/gpu-builds.sh
# 3. the torch worker with its time, then the shared-rank suites on GPU 0 (summary-shared.txt)
PARTS=pygpu STEPS_ONLY=gpu_torch_worker TORCH_WORKER_S=200 BUDGET=210 bash bundle/gpu-planner.sh
SHARED_WORLDS="2 4" SHARED_PARTS="rust capi" SHARED_BUDGET=370 SHARED_GPU=0 bash bundle/gpu-shared.sh
# 4. the 4-rank dead peers and C API the last call's limit cut; the 2-GPU tune and FSDP2 run
SHARED_WORLDS=4 SHARED_PARTS="rust capi" STEPS_ONLY="dead-peer|C API" SHARED_BUDGET=220 SHARED_GPU=0 bash bundle/gpu-shared.sh
PARTS="tune2 fsdp2" BUDGET=330 FSDP2_W2_S=230 FSDP2_W2_ROUNDS=12 bash bundle/gpu-planner.sh
# 5. (nothing came back: the call's 450 s limit ended it before its results were tarred)
SHARED_WORLDS="2 4" SHARED_PARTS="python tp" SHARED_BUDGET=400 SHARED_GPU=0 bash bundle/gpu-shared.sh
