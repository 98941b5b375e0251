#!/usr/bin/env bash
# FSDP2's bf16 copy-in (NOTE [bf16 copy-in] in lowcon/fsdp.py) against FSDP2's fp32 copy-in,
# one device call on a 4-GPU box, from a bundle (scripts/gpu-bundle.sh):
# `bash bundle/gpu-copy-in.sh` from the repository root; each part's logs and results
# are tarred into $OUT/PART/planner.tgz (gpu-planner.sh's paired runs). Parts (PARTS):
#   noisy  4096x12 at 1024 tokens, 4 GPUs, --sync-each-step, 60 rounds (H100's noisy row)
#   w2     8192x4 at 1024 tokens, GPUs 0 and 1, 20 rounds: the shipped plan (ce-reduce
#          reading the bf16 buffer in place), sm-direct packing it, the fp32 copy-in
#   mem2   peak memory at 2 GPUs, each lowcon plan in a job of its own (a job's modes
#          share one group and its workspaces): 8192x4, 6 rounds
#   w4     8192x4 and 4096x12 at 1024 tokens, 4 GPUs, 20 rounds (an H200 box's first look)
#   long   4096x12 at 4096 tokens, 4 GPUs, 20 rounds
#   overlap beside a saturated 8192^3 GEMM, 256 MiB per rank, 4 GPUs: the reduce-scatter as
#          lowcon.fsdp sends it (`bench overlap --bf16-in`: sm-direct at 64 CTAs, ce-reduce;
#          NCCL and NCCL-CE in f32 and bf16) and the all-gather (ce-pull), into
#          $OUT/overlap/
#   deadpeer a rank SIGKILLed between the replays of a bf16 input packed by sm-direct, 4
#          GPUs, kernel and memop sync (gpu-planner.sh's deadpeer steps of that name)
# COMMIT names the commit measured. Exit status 0 only if every part passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
base="nccl,nccl-b,lowcon,lowcon@copyin=fp32,nccl-ce,nocomm"
parts=" ${PARTS:-noisy w2 mem2} "
fail=0
run() { # run NAME ENV...: gpu-planner.sh with ENV, its tarball and log in $OUT/NAME
  local d="${OUT:-$here}/$1"; shift
  mkdir -p "$d"
  env OUT="$d" "$@" bash "$here/gpu-planner.sh" > "$d/log.txt" 2>&1 || fail=1
  tail -n 40 "$d/log.txt"
}
has() { [[ $parts == *" $1 "* ]]; }
has noisy && run noisy PARTS=fsdp FSDP2_ARGS="--sync-each-step" FSDP_SWEEP="4096x12:1024" FSDP_ROUNDS=60 \
  FSDP_MODES="$base" FSDP_S=200 BUDGET=210
has w2 && run w2 PARTS=fsdp2 FSDP2_W2_SWEEP="8192x4:1024" FSDP2_W2_ROUNDS=20 FSDP2_W2_S=120 BUDGET=130 \
  FSDP2_W2_MODES="nccl,nccl-b,lowcon,lowcon@rs=sm-direct,rs_ctas=64,pieces=4,lowcon@copyin=fp32,nccl-ce,nocomm"
for m in lowcon lowcon@rs=sm-direct,rs_ctas=64,pieces=4; do
  tag=${m//[@,=]/-}
  has mem2 && run "mem2-$tag" PARTS=fsdp2 FSDP2_W2_SWEEP="8192x4:1024" FSDP2_W2_ROUNDS=6 FSDP2_W2_S=60 BUDGET=70 \
    FSDP2_W2_MODES="nccl,$m,nocomm"
done
has w4 && run w4 PARTS=fsdp FSDP_SWEEP="8192x4:1024;4096x12:1024" FSDP_ROUNDS=20 FSDP_MODES="$base" FSDP_S=240 BUDGET=250
has long && run long PARTS=fsdp FSDP_SWEEP="4096x12:4096" FSDP_ROUNDS=20 FSDP_MODES="$base" FSDP_S=150 BUDGET=160
has deadpeer && run deadpeer PARTS=deadpeer STEPS_ONLY='bf16 input' BUDGET=170
if has overlap; then
  d="${OUT:-$here}/overlap"; mkdir -p "$d"
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  L="$here/lowcon"
  timeout -k 5 240 "$L" launch --nproc-per-node 4 -- "$L" bench overlap --collective reduce-scatter --bf16-in \
    --algorithms sm-direct,ce-reduce --ctas 64 --shard 256M --priority high --no-null > "$d/rs-bf16-in.txt" 2>&1 || fail=1
  timeout -k 5 150 "$L" launch --nproc-per-node 4 -- "$L" bench overlap --collective all-gather \
    --algorithms ce-pull --priority high --shard 256M --no-null > "$d/ag.txt" 2>&1 || fail=1
  tail -n 25 "$d/rs-bf16-in.txt" "$d/ag.txt"
fi
exit $fail
