#!/usr/bin/env bash
# The device calls behind this folder (2026-11-28, nvidia-h200-x4), each from the repository
# root with the bundle of 05db297 carried (carry ["bundle"]), built here with
# `scripts/gpu-bundle.sh --pack`, plus the `lowcon` binary of branch watchdog-off-lock
# (4d53750, on 05db297: the watchdog queries completion events off the in-flight lock),
# xz-packed beside it as lowcon-wd. `bash commands.sh N` runs call N.
set -uo pipefail
: "${OUT:?the folder of the device tool}"
tar -xJf bundle/bundle.txz && cp scripts/gpu-*.sh bundle/
xz -dc bundle/lowcon-wd.xz > bundle/lowcon-wd && chmod +x bundle/lowcon-wd
# A second bundle whose lowcon is the branch's, for the suites that take bundle/lowcon.
rm -rf bundle-wd && cp -r bundle bundle-wd && cp bundle/lowcon-wd bundle-wd/lowcon
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/o && nvidia-smi -L > /tmp/o/smi.txt; nvidia-smi topo -m >> /tmp/o/smi.txt
case ${1:-} in
1) # small messages: main against the branch at 4 ranks, which batches were slow; host µs per
   # FSDP2 hook at 4 GPUs, unprofiled, with what each hands the driver; the branch's checks
   NPROC=4 ROUNDS=3 timeout 220 bash scripts/probes/small_ab.sh bundle/lowcon bundle/lowcon-wd /tmp/ab \
    > /tmp/o/ab-summary.txt 2>&1
  python3 scripts/probes/slow_batches.py /tmp/ab > /tmp/o/slow-batches.txt 2>&1
  cp -r /tmp/ab /tmp/o/ab
  python3 -m pip install -q --no-index --no-deps --target /tmp/site bundle/wheels/lowcon-*.whl > /tmp/o/pip.txt 2>&1
  PYTHONPATH=/tmp/site timeout 150 python3 -m torch.distributed.run --nproc-per-node 4 \
    crates/lowcon-py/bench/hook_cost.py --numel 100663296 --json /tmp/o/hooks.json > /tmp/o/hooks.txt 2>&1
  tar -czf "$OUT/o.tgz" -C /tmp o
  mkdir -p "$OUT/c" && COMMIT=4d53750 OUT=$OUT/c PARTS=check BUDGET=200 bash bundle-wd/gpu-planner.sh ;;
2) # the branch's dead-peer suite at 4 GPUs; fused TP with the merged matmul-reduce-scatter probe
  mkdir -p "$OUT/d" "$OUT/t"
  COMMIT=4d53750 OUT=$OUT/d PARTS=deadpeer BUDGET=300 bash bundle-wd/gpu-planner.sh
  COMMIT=05db297 OUT=$OUT/t PARTS=tp TP_S=200 TP_ARGS="--modes gemm,lowcon,lowcon-twin,lowcon-each,lowcon-merged,symm-mem" \
    BUDGET=210 bash bundle/gpu-planner.sh ;;
*) echo "usage: commands.sh 1|2" >&2; exit 2 ;;
esac
