#!/usr/bin/env bash
# 2x H200: the fused all-gather-matmul with its first GEMM after the entry barrier
# (Arrivals.wait_started): tp_bench at the Llama shape, the probe and the trace again;
# then the fused ops' checks at 2 ranks (one GPU each) and the C check on 2 GPUs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
out=/tmp/started; rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --force-reinstall "$repo"/bundle/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
quiet() { grep -v -e socket.cpp -e FutureWarning -e enable_symm_mem -e OMP_NUM -e '^\*\*\*' -e UserWarning -e _warn_once; }
tr=(python3 -m torch.distributed.run --nproc-per-node 2)
timeout 100 "${tr[@]}" "$repo/crates/lowcon-py/bench/tp_bench.py" --rounds 20 --ops ag-mm \
  --json "$out/tp-8192.json" 2>&1 | quiet | tee "$out/tp-8192.txt"
timeout 60 "${tr[@]}" "$here/agmm_probe.py" 2>&1 | quiet | tee "$out/agmm_probe.txt"
timeout 60 "${tr[@]}" "$here/agmm_trace.py" 2>&1 | quiet > "$out/agmm_trace.txt"
head -24 "$out/agmm_trace.txt"
L=$repo/bundle/lowcon
for m in "check gpu" overlap "fresh 300"; do
  # shellcheck disable=SC2086
  timeout 120 "$L" launch --nproc-per-node 2 --tee -- python3 "$repo/crates/lowcon-py/tests/tp_worker.py" $m 2>&1 \
    | tee -a "$out/tp-worker.txt" | grep -E "tp .* ok|FAILED"
done
timeout 150 bash "$repo/bundle/capi/capi-check.sh" gpu "$L" "$repo/bundle/capi" "$repo/bundle/capi" \
  "$repo/bundle/capi/lowcon_check.c" "$out/capi" > "$out/capi.txt" 2>&1
echo "capi-check gpu rc=$?"; tail -2 "$out/capi.txt"
tar -C /tmp -czf "${OUT:-/tmp}/started.tgz" started
