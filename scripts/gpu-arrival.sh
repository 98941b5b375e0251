#!/usr/bin/env bash
# Arrival-driven all-gathers (NOTE [arrival-driven all-gather], host/src/coll/gpu.rs) on a
# 4-GPU box, in one device call: the collectives' checks at 4 real GPUs with memop sync
# (the suite's in-order and any-order ce-pull cases, the stress loop cycling through the
# arrivals, coll-mapped's predicted calls on any-order), then FSDP2 paired in one job with
# the shipped plan (one barrier) beside lowcon@arrival=in-order and any-order, NCCL, its A/A
# twin, NCCL-CE and no communication. From the repository root with the bundle beside it:
#
#     PARTS="check fsdp2" bash bundle/gpu-arrival.sh     # logs tarred into $OUT/arrival.tgz
#
# PARTS: check, fsdp2 (8192x4 and 4096x12 at 1024 tokens, fp32 reduce), fsdp2-sync (4096x12
# at 1024 tokens with --sync-each-step), mapped10 (coll-mapped MAPPED_RUNS times, default 10: the stall).
# ROUNDS (default 20); MODES (the paired modes); SWEEP (the fsdp2 part's); NAME (default
# arrival: the log folder /tmp/NAME and $OUT/NAME.tgz). Exit status 0 only if every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
L="$here/lowcon"
name=${NAME:-arrival}
out=/tmp/$name; rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
parts=" ${PARTS:-check fsdp2} "
has() { [[ $parts == *" $1 "* ]]; }
trap 'tar -C "$out" -czf "${OUT:-$here}/$name.tgz" . 2>/dev/null' EXIT
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget "${BUDGET:-570}"
ngpu=$(nvidia-smi -L | wc -l)
{ nvidia-smi -L; git -C "$repo" log -1 --format='commit %h %cd' 2>/dev/null; } > "$out/smi.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$here"/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
export PYTHONPATH=/tmp/site
bench=$repo/crates/lowcon-py/bench
run=("$L" launch --nproc-per-node "$ngpu" --tee -- "$L" selftest)
if has check; then
  st "w=$ngpu coll-check every algorithm/dtype/op, arrivals (memop)" coll.txt 150 "${run[@]}" coll-check --backend gpu --method memop
  st "w=$ngpu coll-stress 1000 calls x 2 streams, arrivals (memop)" coll.txt 60 "${run[@]}" coll-stress --backend gpu --method memop
  st "w=$ngpu coll-mapped (kernel+memop; predicted calls any-order)" coll.txt 120 "${run[@]}" coll-mapped
fi
if has mapped10; then
  for i in $(seq "${MAPPED_RUNS:-10}"); do
    st "w=$ngpu coll-mapped run $i" mapped10.txt 60 "${run[@]}" coll-mapped
  done
fi
tr=(python3 -m torch.distributed.run --nproc-per-node "$ngpu")
modes=${MODES:-nccl,nccl-b,lowcon,lowcon@arrival=in-order,lowcon@arrival=any-order,nccl-ce,nocomm}
paired() { # paired NAME SECONDS OPTIONS...
  local name=$1 t=$2; shift 2
  st "paired $name" log.txt "$t" "${tr[@]}" "$bench/fsdp2_paired.py" --out "$out/$name" --time-budget $((t - 40)) \
    --modes "$modes" --reduce-dtypes fp32 --rounds "${ROUNDS:-20}" "$@"
  python3 "$bench/fsdp2_paired.py" --report "$out/$name/paired.json" > "$out/$name/table.txt" 2>&1 && cat "$out/$name/table.txt"
}
has fsdp2 && paired fsdp2 330 --sweep "${SWEEP:-8192x4:1024;4096x12:1024}"
has fsdp2-sync && paired fsdp2-sync 200 --sweep "4096x12:1024" --sync-each-step
cat "$out/summary.txt"
# shellcheck disable=SC2154  # failures: set by steps_budget (gpu-steps.sh)
exit $((failures > 0))
