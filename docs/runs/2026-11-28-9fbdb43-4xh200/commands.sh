#!/usr/bin/env bash
# The device calls behind this folder (2026-11-28, nvidia-h200-x4), each from the repository
# root with the bundle of 9fbdb43 carried (carry ["bundle"]), built here with
# `scripts/gpu-bundle.sh --pack`, plus three other builds of the `lowcon` binary, xz-packed
# beside it: lowcon-base (ce7ebe5, before the LL reduce-scatter loaded its own source first),
# lowcon-b2 (branch ll-batch2-main, bc1dd89: LL loads batched by 2) and lowcon-sb (ll-send-batch,
# 79cd984, cherry-picked onto 9fbdb43: LL sends hoisted). `bash commands.sh N` runs call N.
set -uo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
case ${1:-} in
1) # small messages: four builds A/B at 4 ranks; the shipped build's sweeps x3; fused TP with
   # the merged all-gather-matmul; FSDP2 profiled at 4 GPUs (host µs per hook, in place)
  for b in base b2 sb; do xz -dc "bundle/lowcon-$b.xz" > "bundle/lowcon-$b" && chmod +x "bundle/lowcon-$b"; done
  mkdir -p "$OUT/s" "$OUT/t" "$OUT/p" /tmp/ab-out
  nvidia-smi -L > /tmp/ab-out/smi.txt; nvidia-smi topo -m >> /tmp/ab-out/smi.txt
  NPROC=4 ROUNDS=3 timeout 200 bash scripts/probes/small_ab.sh bundle/lowcon-base bundle/lowcon /tmp/ab \
    b2=bundle/lowcon-b2 sb=bundle/lowcon-sb > /tmp/ab-out/ab-summary.txt 2>&1
  cp -r /tmp/ab /tmp/ab-out/ab && tar -czf "$OUT/ab.tgz" -C /tmp ab-out
  COMMIT=9fbdb43 OUT=$OUT/s PARTS=small SMALL_REPEAT=3 BUDGET=110 bash bundle/gpu-planner.sh
  COMMIT=9fbdb43 OUT=$OUT/t PARTS=tp TP_S=150 TP_ARGS="--modes gemm,lowcon,lowcon-twin,lowcon-merged,symm-mem" \
    BUDGET=150 bash bundle/gpu-planner.sh
  COMMIT=9fbdb43 OUT=$OUT/p PARTS=profile PROFILE_S=120 BUDGET=120 bash bundle/gpu-planner.sh ;;
2) # FSDP2 4096x12 at 1024 tokens, 4 GPUs, a sync each step, the host barrier after each nocomm step
  mkdir -p "$OUT/n"
  COMMIT=9fbdb43 OUT=$OUT/n PARTS=fsdp FSDP2_ARGS="--sync-each-step --align after-nocomm" FSDP_SWEEP="4096x12:1024" \
    FSDP_ROUNDS="${ROUNDS:-480}" FSDP_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" FSDP_S=540 BUDGET=545 bash bundle/gpu-planner.sh ;;
3) # the same without the barrier (plain, as 2026-11-28 fd82cbc's 300-round run)
  mkdir -p "$OUT/n"
  COMMIT=9fbdb43 OUT=$OUT/n PARTS=fsdp FSDP2_ARGS="--sync-each-step" FSDP_SWEEP="4096x12:1024" \
    FSDP_ROUNDS="${ROUNDS:-480}" FSDP_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" FSDP_S=540 BUDGET=545 bash bundle/gpu-planner.sh ;;
*) echo "usage: commands.sh 1|2|3" >&2; exit 2 ;;
esac
