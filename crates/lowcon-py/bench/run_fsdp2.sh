#!/usr/bin/env bash
# Issue 18's benchmark on one GPU box: FSDP2 training steps in every mode (nccl,
# nccl-rerun, nccl-ce, lowcon), each mode in its own torchrun, then one merged table
# (stdout), fsdp2.json and fsdp2.png in the output folder.
#
#   crates/lowcon-py/bench/run_fsdp2.sh [OUT] [fsdp2_step.py options...]
#
# OUT defaults to $OUT/fsdp2 when $OUT is set (the GPU machine's output folder), else
# fsdp2-out. Examples of options: --quick (a ~1-minute smoke run of every mode),
# --modes nccl,lowcon, --lowcon-ag ce-pull --lowcon-rs ce-reduce --lowcon-sync memop,
# --nproc 4, --sweep '4096x8:256,16384'. The default sweep of the four modes is sized
# for one 10-minute command on 2 H200s (--mode-timeout 140 s per mode).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

out=${OUT:+$OUT/fsdp2}
out=${out:-fsdp2-out}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  out=$1
  shift
fi

# Never NVLink multicast (NVLS) on these machines; fsdp2_step.py sets it too.
export NCCL_NVLS_ENABLE=0
# lowcon's wheel: the GPU bundle carries it; install it when it is not there yet.
if ! python3 -c 'import lowcon' 2>/dev/null; then
  for whl in "$here"/../../../bundle/wheels/lowcon-*.whl; do
    [ -f "$whl" ] && python3 -m pip install --quiet --no-deps "$whl" && break
  done
fi

modes=nccl,nccl-rerun,nccl-ce,lowcon
for arg in "$@"; do
  case $arg in --modes | --modes=*) modes= ;; esac
done
python3 -c 'import torch; print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version(), "GPUs", torch.cuda.device_count())'
exec python3 "$here/fsdp2_step.py" ${modes:+--modes "$modes"} --out "$out" "$@"
