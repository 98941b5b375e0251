#!/usr/bin/env bash
# GPU run 2: the LL algorithms (all-gather and reduce-scatter) checked and
# measured against sm-oneshot/sm-direct/ce-push and NCCL at small sizes; stress with LL
# in the rotation; a dead peer during LL calls; Python with "ll".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
out=/tmp/l; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
end=$((SECONDS + ${BUDGET:-330}))
trap 'tar -C "$out" -czf "$OUTDIR/logs.tgz" . 2>/dev/null' EXIT
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
st() { local name=$1 log=$2 t=$3; shift 3; local t0=$SECONDS; echo "== $name" >> "$out/$log"; timeout "$(left "$t")" "$@" >> "$out/$log" 2>&1; local s=$?; printf '%-60s %s %4d s\n' "$name" "$([ $s = 0 ] && echo ok || echo "FAILED($s)")" $((SECONDS - t0)) | tee -a "$out/summary.txt"; }
L="$here/lowcon"
l2=("$L" launch --nproc-per-node 2 --)
lt=("$L" launch --nproc-per-node 2 --tee --)
st "coll-check w=2 kernel" coll.txt 40 "${lt[@]}" "$L" selftest coll-check --backend gpu --method kernel
st "coll-check w=2 memop" coll.txt 40 "${lt[@]}" "$L" selftest coll-check --backend gpu --method memop
st "coll-stress w=2 kernel (LL in the rotation)" coll.txt 40 "${lt[@]}" "$L" selftest coll-stress --backend gpu --method kernel
st "coll-stress w=2 memop" coll.txt 40 "${lt[@]}" "$L" selftest coll-stress --backend gpu --method memop
st "coll-enqueue w=2 kernel" coll.txt 40 "${lt[@]}" "$L" selftest coll-enqueue --method kernel
st "coll-bad-input w=2" coll.txt 40 "${lt[@]}" "$L" selftest coll-bad-input --backend gpu
st "coll-dead-peer kernel, kill at 300" dead.txt 70 bash "$here/gpu-dead-peer.sh" 0,1 2 kernel "$L" "$out" 300
st "bench ag 64K..4M ll/sm-oneshot/ce-push vs NCCL" small.txt 40 "${l2[@]}" "$L" bench all-gather -b 64K -e 4M -f 2 --algorithms ll,sm-oneshot,ce-push --sync kernel --check --json "$out/ag.json"
st "bench rs 64K..4M ll/sm-direct vs NCCL" small.txt 40 "${l2[@]}" "$L" bench reduce-scatter -b 64K -e 4M -f 2 --algorithms ll,sm-direct --sync kernel --check --json "$out/rs.json"
st "bench ag ll ctas 4..32, 8K..16M" ctas.txt 40 "${l2[@]}" "$L" bench all-gather -b 8K -e 16M -f 4 --algorithms ll --ctas 4,8,16,32 --no-nccl --json "$out/ag-ctas.json"
st "bench rs ll ctas 4..32, 8K..16M" ctas.txt 40 "${l2[@]}" "$L" bench reduce-scatter -b 8K -e 16M -f 4 --algorithms ll --ctas 4,8,16,32 --no-nccl --json "$out/rs-ctas.json"
python3 -m pip install -q --no-deps --force-reinstall "$here"/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
st "python torch worker (lowcon launch)" py.txt 60 "${l2[@]}" python3 "$repo/crates/lowcon-py/tests/gpu_torch_worker.py"
cat "$out/summary.txt"
