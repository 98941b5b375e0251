#!/usr/bin/env bash
# Diagnoses the HSDP 2x2 stall at 8192x4 (4x H200, 2026-11-26/27): FSDP2 on a replicate x
# shard mesh, lowcon on the shard dim, stalls in its first steps until a verify-word wait
# times out. Runs lowcon alone with traces, dumps every rank's Python threads (faulthandler,
# SIGABRT) and, where gdb exists, rank 1's native threads, while it hangs; then the same
# with prediction off. Logs go to $OUT/hsdp-hang/. From the repository root, with a bundle.
set -uo pipefail
out=${OUT:-/tmp}/hsdp-hang; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --target /tmp/site bundle/wheels/lowcon-*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONFAULTHANDLER=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
bench=crates/lowcon-py/bench
{ command -v gdb py-spy; nvidia-smi --query-gpu=memory.used,memory.total --format=csv; } > "$out/tools.txt" 2>&1
run() { # run NAME MODES SECONDS [ENV...]
  local name=$1 modes=$2 t=$3; shift 3
  env "$@" timeout -k 5 "$t" python3 -m torch.distributed.run --nproc-per-node 4 "$bench/fsdp2_paired.py" --hsdp 2 \
    --sweep 8192x4:1024 --reduce-dtypes fp32 --rounds "${ROUNDS:-3}" --modes "$modes" --out "$out/$name" > "$out/$name.txt" 2>&1 &
  local pid=$!
  for _ in $(seq $((t - 15))); do sleep 1; kill -0 $pid 2>/dev/null || break; done
  if kill -0 $pid 2>/dev/null; then
    nvidia-smi > "$out/$name-smi.txt" 2>&1
    # The workers (not torchrun's agent), ascending pids: rank 0 first.
    mapfile -t w < <(pgrep -af "fsdp2_paired.py" | grep -v torch.distributed.run | awk '{print $1}' | sort -n)
    if command -v gdb > /dev/null && [ "${#w[@]}" -ge 2 ]; then
      timeout 25 gdb -p "${w[1]}" -batch -ex "thread apply all bt 12" > "$out/$name-gdb-rank1.txt" 2>&1
    fi
    pkill -ABRT -f "python3 .*fsdp2_paired.py --hsdp" ; sleep 3
  fi
  wait $pid; echo "$name exit $?" >> "$out/summary.txt"
}
# HANG_MODES: the first run's modes instead (the failing job's: nccl,nccl-b,lowcon,nocomm);
# ONLY_FIRST=1: that run alone.
run lowcon "${HANG_MODES:-nccl,lowcon}" "${HANG_S:-75}" LOWCON_TIMEOUT_MS=120000 LOWCON_DEBUG=1
[ -n "${ONLY_FIRST:-}" ] || run predict0 nccl,lowcon@predict=0 75 LOWCON_TIMEOUT_MS=120000
tar -C "${OUT:-/tmp}" -czf "${OUT:-/tmp}/hsdp-hang.tgz" hsdp-hang
cat "$out/summary.txt" "$out/tools.txt"
