#!/usr/bin/env bash
# GPU run 1 (code as of aff766f): tma-push-reduce checked and measured; the
# saturated overlap benchmark after the measurement fixes, twice (A, B) with null+local;
# the copy-engine hint variant; small-size baselines against NCCL.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=/tmp/l; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
end=$((SECONDS + ${BUDGET:-500}))
trap 'tar -C "$out" -czf "$OUTDIR/logs.tgz" . 2>/dev/null' EXIT
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
st() { local name=$1 log=$2 t=$3; shift 3; local t0=$SECONDS; echo "== $name" >> "$out/$log"; timeout "$(left "$t")" "$@" >> "$out/$log" 2>&1; local s=$?; printf '%-60s %s %4d s\n' "$name" "$([ $s = 0 ] && echo ok || echo "FAILED($s)")" $((SECONDS - t0)) | tee -a "$out/summary.txt"; }
L="$here/lowcon"
l2=("$L" launch --nproc-per-node 2 --)
lt=("$L" launch --nproc-per-node 2 --tee --)
nvidia-smi -L > "$out/smi.txt" 2>&1
st "coll-check w=2 kernel (large 64M)" coll.txt 60 "${lt[@]}" "$L" selftest coll-check --backend gpu --method kernel --large 67108864
st "coll-check w=2 memop" coll.txt 40 "${lt[@]}" "$L" selftest coll-check --backend gpu --method memop
st "bench rs push-reduce/tma/sm-direct 2,4,8 CTAs --check" rs.txt 60 "${l2[@]}" "$L" bench reduce-scatter -b 16M -e 256M -f 4 --algorithms tma-push-reduce,tma-reduce,sm-direct --ctas 2,4,8 --check --no-nccl --json "$out/rs.json"
st "bench ag small 64K..4M vs NCCL" small.txt 40 "${l2[@]}" "$L" bench all-gather -b 64K -e 4M -f 2 --sync kernel,memop --json "$out/ag-small.json"
st "bench rs small 64K..4M vs NCCL" small.txt 40 "${l2[@]}" "$L" bench reduce-scatter -b 64K -e 4M -f 2 --sync kernel,memop --json "$out/rs-small.json"
st "overlap saturated A (null-local)" satA.txt 130 "${l2[@]}" "$L" bench overlap --null-local --json "$out/satA.json" --csv "$out/satA.csv" --plot "$out/satA.png"
st "overlap saturated B (null-local)" satB.txt 130 "${l2[@]}" "$L" bench overlap --null-local --json "$out/satB.json" --csv "$out/satB.csv"
st "overlap all-gather, LOWCON_COPY_ENGINE_HINT=1" hint.txt 60 env LOWCON_COPY_ENGINE_HINT=1 "${l2[@]}" "$L" bench overlap --collective all-gather --priority high --no-nccl --json "$out/hint.json"
cat "$out/summary.txt"
