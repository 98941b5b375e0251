#!/usr/bin/env bash
# The device calls behind this folder (2026-11-28, nvidia-h200-x4), each from the repository
# root with a bundle carried (carry ["bundle"]), built here with `scripts/gpu-bundle.sh --pack`.
# Calls 1-2: the bundle of 05db297, plus the `lowcon` binary of branch watchdog-off-lock
# (4d53750, on 05db297: the watchdog queries completion events off the in-flight lock),
# xz-packed beside it as lowcon-wd. Calls 3-4: the bundle of 50a49dd (main: the branch
# merged, and host phases). `bash commands.sh N` runs call N.
set -uo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/o && nvidia-smi -L > /tmp/o/smi.txt; nvidia-smi topo -m >> /tmp/o/smi.txt
if [ "${1:-}" = 1 ] || [ "${1:-}" = 2 ]; then
  xz -dc bundle/lowcon-wd.xz > bundle/lowcon-wd && chmod +x bundle/lowcon-wd
  # A second bundle whose lowcon is the branch's, for the suites that take bundle/lowcon.
  rm -rf bundle-wd && cp -r bundle bundle-wd && cp bundle/lowcon-wd bundle-wd/lowcon
fi
hooks() { # host µs per FSDP2 hook at 4 GPUs, unprofiled, with the driver's share (and phases)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site bundle/wheels/lowcon-*.whl > /tmp/o/pip.txt 2>&1
  PYTHONPATH=/tmp/site timeout 200 python3 -m torch.distributed.run --nproc-per-node 4 \
    crates/lowcon-py/bench/hook_cost.py --numel 100663296 "$@" --json /tmp/o/hooks.json > /tmp/o/hooks.txt 2>&1
}
case ${1:-} in
1) # small messages: main against the branch at 4 ranks, which batches were slow; host µs per
   # FSDP2 hook at 4 GPUs, unprofiled, with what each hands the driver; the branch's checks
  NPROC=4 ROUNDS=3 timeout 220 bash scripts/probes/small_ab.sh bundle/lowcon bundle/lowcon-wd /tmp/ab \
    > /tmp/o/ab-summary.txt 2>&1
  python3 scripts/probes/slow_batches.py /tmp/ab > /tmp/o/slow-batches.txt 2>&1
  cp -r /tmp/ab /tmp/o/ab
  hooks
  tar -czf "$OUT/o.tgz" -C /tmp o
  mkdir -p "$OUT/c" && COMMIT=4d53750 OUT=$OUT/c PARTS=check BUDGET=200 bash bundle-wd/gpu-planner.sh ;;
2) # the branch's dead-peer suite at 4 GPUs; fused TP with the merged matmul-reduce-scatter probe
  mkdir -p "$OUT/d" "$OUT/t"
  COMMIT=4d53750 OUT=$OUT/d PARTS=deadpeer BUDGET=300 bash bundle-wd/gpu-planner.sh
  COMMIT=05db297 OUT=$OUT/t PARTS=tp TP_S=200 TP_ARGS="--modes gemm,lowcon,lowcon-twin,lowcon-each,lowcon-merged,symm-mem" \
    BUDGET=210 bash bundle/gpu-planner.sh ;;
3) # small messages with NCCL, 3 sweeps, at 4 ranks and at 2 (GPUs 0 and 1); host µs per hook
   # with phases, the modes twice in turn; coll-check with checked calls at 4 GPUs
  mkdir -p "$OUT/s4" "$OUT/s2"
  COMMIT=50a49dd OUT=$OUT/s4 PARTS=small SMALL_REPEAT=3 BUDGET=130 bash bundle/gpu-planner.sh
  COMMIT=50a49dd OUT=$OUT/s2 PARTS=small SMALL_NPROC=2 SMALL_REPEAT=3 BUDGET=130 bash bundle/gpu-planner.sh
  hooks --passes 2
  L=bundle/lowcon; LOWCON_CHECK_CALLS=1 timeout 90 "$L" launch --nproc-per-node 4 --tee -- "$L" selftest coll-check \
    --backend gpu > /tmp/o/checked-calls.txt 2>&1; echo "checked-calls coll-check w=4 rc=$?" | tee -a /tmp/o/checked-calls.txt
  tar -czf "$OUT/o.tgz" -C /tmp o ;;
4) # FSDP2 4096x12 at 1024 tokens, 4 GPUs, a sync each step, the host barrier after each nocomm step
  mkdir -p "$OUT/n"
  COMMIT=50a49dd OUT=$OUT/n PARTS=fsdp FSDP2_ARGS="--sync-each-step --align after-nocomm" FSDP_SWEEP="4096x12:1024" \
    FSDP_ROUNDS="${ROUNDS:-480}" FSDP_MODES="nccl,nccl-b,lowcon,nccl-ce,nocomm" FSDP_S=540 BUDGET=545 bash bundle/gpu-planner.sh ;;
6) # the honest floor (NOTE [honest floor]) beside the shipped path, 4096x12 at 1024 tokens, as call 4
  mkdir -p "$OUT/n"
  COMMIT=50a49dd OUT=$OUT/n PARTS=fsdp FSDP2_ARGS="--sync-each-step --align after-nocomm" FSDP_SWEEP="4096x12:1024" \
    FSDP_ROUNDS=1000 FSDP_MODES="nccl,nccl-b,lowcon,lowcon@traffic=1,nocomm" FSDP_S=270 BUDGET=275 bash bundle/gpu-planner.sh ;;
*) echo "usage: commands.sh 1|2|3|4|6" >&2; exit 2 ;;
esac
