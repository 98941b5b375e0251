#!/usr/bin/env bash
# The device calls behind this folder (2026-11-28, nvidia-h200-x2: 2x H200; 4x and H100 were
# not lent), each from the repository root with the bundle of ce7ebe5 carried (carry
# ["bundle"], scripts/gpu-bundle.sh --pack) and the release `lowcon` of the ll-send-batch
# candidate (79cd984, ce7ebe5 + NOTE [LL sends hoisted]) beside it as bundle/lowcon-sb.xz
# (strip --strip-debug, xz). Kept for the record: `bash commands.sh N` runs call N.
set -uo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
[ -f bundle/lowcon-sb.xz ] && xz -dc bundle/lowcon-sb.xz > bundle/lowcon-sb && chmod +x bundle/lowcon-sb
case ${1:-} in
1) # FSDP2 at 2 GPUs: the in-place rule's kernel sync against memop, and the packed rule before it;
   # then 4096x12 at 1024 tokens with a sync each step, 300 rounds
  mkdir -p "$OUT/a" "$OUT/n"
  COMMIT=ce7ebe5 OUT=$OUT/a PARTS=fsdp2 W2_SWEEP="8192x4:1024;4096x12:4096" W2_ROUNDS=30 W2_S=250 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rssync=memop,lowcon@rsmap=no,rs_ctas=64,nccl-ce,nocomm" PLANNER_BUDGET=260 \
    BUDGET=265 bash bundle/gpu-w2.sh
  COMMIT=ce7ebe5 OUT=$OUT/n PARTS=fsdp2 W2_SWEEP="4096x12:1024" W2_ROUNDS=300 W2_S=285 \
    W2_MODES="nccl,nccl-b,lowcon,lowcon@rssync=memop,nccl-ce,nocomm" PLANNER_BUDGET=290 BUDGET=295 \
    FSDP2_ARGS="--sync-each-step" bash bundle/gpu-w2.sh ;;
2) # small messages at 2 ranks, 3 sweeps; the ll-send-batch candidate against ce7ebe5 (A/B, 4
   # alternating rounds); the candidate's coll-check at 2 real GPUs and at 3, 4 and 8 ranks sharing GPU 0
  mkdir -p "$OUT/s" "$OUT/ab"
  COMMIT=ce7ebe5 OUT=$OUT/s PARTS=small SMALL_REPEAT=3 BUDGET=150 bash bundle/gpu-w2.sh
  NPROC=2 ROUNDS=4 AB_DTYPES="bf16 f32" bash scripts/probes/small_ab.sh bundle/lowcon bundle/lowcon-sb /tmp/ab-logs \
    > "$OUT/ab/summary.txt" 2>&1
  tar czf "$OUT/ab/ab.tgz" -C /tmp ab-logs
  for m in kernel memop; do
    timeout 90 bundle/lowcon-sb launch --nproc-per-node 2 --tee -- bundle/lowcon-sb selftest coll-check --backend gpu --method "$m"
  done > "$OUT/ab/check.txt" 2>&1
  rm -rf /tmp/bsb && cp -r bundle /tmp/bsb && cp bundle/lowcon-sb /tmp/bsb/lowcon
  SHARED_PARTS=rust SHARED_GPU=0 SHARED_WORLDS="3 4 8" STEPS_ONLY="coll-check|coll-wire" SHARED_BUDGET=150 \
    SHARED_TAR=$OUT/shared.tgz bash /tmp/bsb/gpu-shared.sh ;;
3) # what a user runs to tune a 2-GPU box: lowcon bench tune, then fsdp2_tune.py on two model shapes
  mkdir -p "$OUT/t"
  python3 -m pip install -q --no-index --no-deps --target /tmp/site bundle/wheels/lowcon-*.whl
  export PYTHONPATH=/tmp/site NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
  { timeout 100 bundle/lowcon launch --nproc-per-node 2 --tee -- bundle/lowcon bench tune --out "$OUT/t/box.txt" \
      --source "2026-11-28, commit ce7ebe5, 2x H200: lowcon bench tune"
    cp "$OUT/t/box.txt" "$OUT/t/box-before.txt"
    timeout 420 python3 crates/lowcon-py/bench/fsdp2_tune.py --table "$OUT/t/box.txt" --nproc 2 \
      --sweep "8192x4:1024;4096x12:4096" --out /tmp/tune-run
    LOWCON_TUNING=$OUT/t/box.txt bundle/lowcon info --world 2
  } > "$OUT/t/tune.txt" 2>&1
  tar czf "$OUT/t/tune-run.tgz" -C /tmp tune-run ;;
4) # 4096x12 at 1024 tokens at 2 GPUs, 550 rounds with a sync each step (300 left the A/A twin at 0.028)
  mkdir -p "$OUT/n"
  COMMIT=ce7ebe5 OUT=$OUT/n PARTS=fsdp2 W2_SWEEP="4096x12:1024" W2_ROUNDS=550 W2_S=420 \
    W2_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" PLANNER_BUDGET=425 BUDGET=430 \
    FSDP2_ARGS="--sync-each-step" bash bundle/gpu-w2.sh ;;
5) # the LL reduce-scatter loading its own source before the waits (branch ll-own-first, carried
   # as bundle/lowcon-own.xz) against ce7ebe5: A/B at 2 ranks (the all-gathers, unchanged, as
   # the control), coll-check at 2 real GPUs, coll-check and coll-wire at 3, 4 and 8 shared ranks
  xz -dc bundle/lowcon-own.xz > bundle/lowcon-own && chmod +x bundle/lowcon-own
  mkdir -p "$OUT/own"
  NPROC=2 ROUNDS=4 AB_DTYPES="bf16 f32" bash scripts/probes/small_ab.sh bundle/lowcon bundle/lowcon-own /tmp/own-logs \
    > "$OUT/own/summary.txt" 2>&1
  for m in kernel memop; do
    timeout 90 bundle/lowcon-own launch --nproc-per-node 2 --tee -- bundle/lowcon-own selftest coll-check --backend gpu --method "$m"
  done > "$OUT/own/check.txt" 2>&1
  rm -rf /tmp/bown && cp -r bundle /tmp/bown && cp bundle/lowcon-own /tmp/bown/lowcon
  SHARED_PARTS=rust SHARED_GPU=0 SHARED_WORLDS="3 4 8" STEPS_ONLY="coll-check|coll-wire" SHARED_BUDGET=150 \
    SHARED_TAR=$OUT/own/shared.tgz bash /tmp/bown/gpu-shared.sh ;;
6) # with the bundle of 354c63e (ce7ebe5 plus the LL own-source change): the host's time per
   # FSDP2 hook at 2 GPUs, the 2x H200 rule (kernel sync) against memop sync, with NCCL
  mkdir -p "$OUT/p"
  COMMIT=354c63e OUT=$OUT/p PARTS=profile PROFILE_NPROC=2 PROFILE_SWEEP="8192x4:1024;4096x12:1024" \
    PROFILE_MODES="nccl,lowcon,lowcon@rssync=memop" PROFILE_ROUNDS=16 PROFILE_S=200 BUDGET=205 \
    CUDA_VISIBLE_DEVICES=0,1 bash bundle/gpu-planner.sh ;;
7) # the same lease as 6: LL lines loaded in batches of 2 (branch ll-batch2-main, bc1dd89, carried
   # as bundle/lowcon-b2.xz) against 354c63e at 2 ranks, and its coll-check
  xz -dc bundle/lowcon-b2.xz > bundle/lowcon-b2 && chmod +x bundle/lowcon-b2
  mkdir -p "$OUT/b2"
  NPROC=2 ROUNDS=3 bash scripts/probes/small_ab.sh bundle/lowcon bundle/lowcon-b2 /tmp/ab-b2 > "$OUT/b2/summary.txt" 2>&1
  for m in kernel memop; do
    timeout 60 bundle/lowcon-b2 launch --nproc-per-node 2 --tee -- bundle/lowcon-b2 selftest coll-check --backend gpu --method "$m"
  done > "$OUT/b2/check.txt" 2>&1 ;;
*) echo "usage: commands.sh 1|2|3|4|5|6|7" >&2; exit 2 ;;
esac
