#!/usr/bin/env bash
# The paired FSDP2 benchmark on one GPU box: every mode in one torchrun job (steps
# alternating per round), then the table and the plot. See README.md beside this file.
#
#   crates/lowcon-py/bench/run_fsdp2.sh [OUT] [fsdp2_paired.py options...]
#
# OUT defaults to $OUT/fsdp2 when $OUT is set (the GPU machine's output folder), else
# fsdp2-out. It receives paired.json, paired.txt (the log), fsdp2.png and, with
# --profile, one gzipped chrome trace per configuration and mode. Options, for example:
# --sweep '4096x12:1024,4096' --reduce-dtypes fp32 --rounds 40 --profile
# --modes nccl,nccl-b,lowcon,lowcon@sync=memop,nocomm --nproc 2 (default: every GPU).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

out=${OUT:+$OUT/fsdp2}
out=${out:-fsdp2-out}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  out=$1
  shift
fi
nproc=
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --nproc) nproc=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
mkdir -p "$out"

# Never NVLink multicast (NVLS) on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# lowcon's wheel: the GPU bundle carries it; install it when it is not there yet.
if ! python3 -c 'import lowcon' 2>/dev/null; then
  for whl in "$here"/../../../bundle/wheels/lowcon-*.whl; do
    [ -f "$whl" ] && python3 -m pip install --quiet --no-deps "$whl" && break
  done
fi
nproc=${nproc:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
python3 -c 'import torch; print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version(), "GPUs", torch.cuda.device_count())'
python3 -m torch.distributed.run --nproc-per-node "$nproc" "$here/fsdp2_paired.py" --out "$out" "${args[@]}" \
  2>&1 | tee "$out/paired.txt"
python3 "$here/fsdp2_paired.py" --report "$out/paired.json" --plot "$out/fsdp2.png"
