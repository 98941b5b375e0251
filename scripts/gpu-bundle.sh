#!/usr/bin/env bash
# Builds lowcon's release binaries here and puts them, with a run script, into bundle/
# (ignored by git). On a GPU machine, one command runs the GPU tests and prints a table:
#
#     bash bundle/run.sh            # logs go to $OUT if set, else bundle/logs
#
# With the workplace's device tool: run `scripts/gpu-bundle.sh` here, then on the device
# `bash bundle/run.sh` with carry = ["bundle"].
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p lowcon-tests --bin lowcon-gpu-tests -p lowcon-cli --bin lowcon
rm -rf bundle
mkdir -p bundle
cp target/release/lowcon-gpu-tests target/release/lowcon bundle/
strip --strip-debug bundle/lowcon-gpu-tests bundle/lowcon 2>/dev/null || true
cat > bundle/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs lowcon's GPU tests on this machine: single-GPU checks, then (with 2+ GPUs) the
# multi-process suite at several world sizes with both sync methods, and the barrier
# benchmark. Prints a summary table; exit status 0 only if everything passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/logs}
mkdir -p "$out"
# NVLink multicast must stay off on shared machines (see shared/GPU.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LOWCON_REQUIRE_GPU=1
L="$here/lowcon"
summary="$out/summary.txt"
: > "$summary"
rc=0
step() { # step NAME LOGFILE CMD...: runs CMD, logs it, records ok/FAILED with seconds
  local name=$1 log=$2; shift 2
  local t0=$(date +%s.%N)
  echo "== $name" | tee -a "$out/$log"
  "$@" >> "$out/$log" 2>&1
  local s=$?
  local t=$(awk "BEGIN{print $(date +%s.%N) - $t0}")
  if [ $s -eq 0 ]; then printf '%-58s ok      %7.1f s\n' "$name" "$t" >> "$summary"
  else printf '%-58s FAILED  %7.1f s (exit %d, see %s)\n' "$name" "$t" "$s" "$log" >> "$summary"; rc=1; fi
  tail -n 6 "$out/$log" | grep -E "ok:|FAILED|failed|error" | tail -n 4
}
{ nvidia-smi -L; nvidia-smi topo -m; } > "$out/nvidia-smi.txt" 2>&1 || true
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
step "lowcon info" info.txt "$L" info
step "single-GPU checks (lowcon-gpu-tests)" gpu-tests.txt "$here/lowcon-gpu-tests"
if [ "${LOWCON_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck synccheck; do
    step "compute-sanitizer $tool (quick)" "sanitizer-$tool.txt" \
      compute-sanitizer --tool "$tool" --error-exitcode 3 "$here/lowcon-gpu-tests" --quick
  done
fi
step "host backend: barrier-stress x4 ranks" host.txt "$L" launch --nproc-per-node 4 --tee -- "$L" selftest barrier-stress
if [ "$ngpu" -ge 2 ]; then
  sizes="$ngpu"; [ "$ngpu" -ge 4 ] && sizes="$sizes 3"; sizes="$sizes 2"
  for w in $(echo $sizes | tr ' ' '\n' | awk '!seen[$0]++'); do
    vis=$(seq -s, 0 $((w - 1)))
    run() { CUDA_VISIBLE_DEVICES=$vis "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest "$@"; }
    step "w=$w gpu-mapping" "multi-w$w.txt" run gpu-mapping
    step "w=$w gpu-barrier-stress 100k (kernel+memop)" "multi-w$w.txt" run gpu-barrier-stress
    step "w=$w gpu-publish-signal 10k (kernel+memop)" "multi-w$w.txt" run gpu-publish-signal
    step "w=$w gpu-skip-barrier (kernel+memop)" "multi-w$w.txt" run gpu-skip-barrier
    step "w=$w gpu-dead-peer (kernel)" "multi-w$w.txt" run gpu-dead-peer --method kernel
    step "w=$w gpu-dead-peer (memop)" "multi-w$w.txt" run gpu-dead-peer --method memop
    step "w=$w gpu-mismatched-size" "multi-w$w.txt" run gpu-mismatched-size
    step "w=$w gpu-same-device" "multi-w$w.txt" env LOWCON_DEVICE=0 CUDA_VISIBLE_DEVICES=$vis "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest gpu-same-device
    step "w=$w gpu-memory-release" "multi-w$w.txt" run gpu-memory-release
    step "w=$w bench barrier" "bench-barrier.txt" env CUDA_VISIBLE_DEVICES=$vis "$L" launch --nproc-per-node "$w" -- "$L" bench barrier --json
  done
  # The legacy-IPC fallback path, forced, at the full world size.
  vis=$(seq -s, 0 $((ngpu - 1)))
  ipc() { env LOWCON_MEM_HANDLES=ipc CUDA_VISIBLE_DEVICES=$vis "$L" launch --nproc-per-node "$ngpu" --tee -- "$L" selftest "$@"; }
  step "w=$ngpu IPC handles: gpu-mapping" multi-ipc.txt ipc gpu-mapping
  step "w=$ngpu IPC handles: gpu-publish-signal 2k (kernel+memop)" multi-ipc.txt ipc gpu-publish-signal --rounds 2000
  step "w=$ngpu IPC handles: gpu-barrier-stress 10k (kernel+memop)" multi-ipc.txt ipc gpu-barrier-stress --iters 10000
  step "w=$ngpu IPC handles: gpu-memory-release" multi-ipc.txt ipc gpu-memory-release
fi
echo
echo "== summary"
cat "$summary"
if [ -s "$out/bench-barrier.txt" ]; then echo; grep -v '^{' "$out/bench-barrier.txt" | grep -v '^==' ; fi
echo "== overall: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc
RUN
chmod +x bundle/run.sh
du -sh bundle
