#!/usr/bin/env bash
# GPU run 5: after the pool's cross-stream fix and lagged checks: the pool
# worker (torchrun), the FSDP2 check, the profile, and the FSDP2 benchmark (reduced).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
out=/tmp/l; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
end=$((SECONDS + ${BUDGET:-250}))
trap 'tar -C "$out" -czf "$OUTDIR/logs.tgz" . 2>/dev/null' EXIT
left() { local l=$((end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }
st() { local name=$1 log=$2 t=$3; shift 3; local t0=$SECONDS; echo "== $name" >> "$out/$log"; timeout "$(left "$t")" "$@" >> "$out/$log" 2>&1; local s=$?; printf '%-60s %s %4d s\n' "$name" "$([ $s = 0 ] && echo ok || echo "FAILED($s)")" $((SECONDS - t0)) | tee -a "$out/summary.txt"; }
python3 -m pip install -q --no-deps --force-reinstall "$here"/wheels/lowcon-*.whl
tr=(python3 -m torch.distributed.run --nproc-per-node 2)
st "pool, reuse, CuPy, two groups (torchrun)" pool.txt 40 "${tr[@]}" --master-port 29511 "$repo/crates/lowcon-py/tests/gpu_pool_worker.py"
grep -E "ok:|FAILED" "$out/pool.txt" | head -3
st "profile 2048x8:256 nccl, lowcon auto, lowcon memop" prof.txt 60 "${tr[@]}" --master-port 29531 "$repo/crates/lowcon-py/bench/profile_step.py" --modes nccl,lowcon
grep -E "^====|host time|hook calls|pool after" "$out/prof.txt"
st "fsdp2 bench (reduced sweep)" fsdp2.txt 105 bash "$repo/crates/lowcon-py/bench/run_fsdp2.sh" "$out/fsdp2" --sweep "2048x8:256,1024,4096,16384" --mode-timeout 32 --modes nccl,nccl-rerun,lowcon
grep -E "^(nccl|lowcon)" "$out/fsdp2.txt" | tail -n 14
st "fsdp2 training check (torchrun)" fsdp.txt 45 "${tr[@]}" --master-port 29521 "$repo/crates/lowcon-py/tests/gpu_fsdp_worker.py"
grep -E "fsdp ok|FAILED" "$out/fsdp.txt" | head -3
cat "$out/summary.txt"
