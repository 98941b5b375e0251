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
# Runs lowcon's GPU tests on this machine. Exit status: 0 all passed, non-zero otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/logs}
mkdir -p "$out"
# NVLink multicast must stay off on shared machines (see shared/GPU.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LOWCON_REQUIRE_GPU=1
rc=0
{ nvidia-smi -L; nvidia-smi topo -m; } > "$out/nvidia-smi.txt" 2>&1 || true
echo "== lowcon info"
"$here/lowcon" info 2>&1 | tee "$out/info.txt" || rc=1
echo "== lowcon-gpu-tests"
"$here/lowcon-gpu-tests" 2>&1 | tee "$out/gpu-tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
if [ "${LOWCON_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck synccheck; do
    echo "== compute-sanitizer --tool $tool lowcon-gpu-tests --quick"
    compute-sanitizer --tool "$tool" --error-exitcode 3 "$here/lowcon-gpu-tests" --quick \
      > "$out/sanitizer-$tool.txt" 2>&1
    s=$?
    tail -n 3 "$out/sanitizer-$tool.txt"
    [ "$s" -eq 0 ] || { echo "compute-sanitizer $tool: exit $s"; rc=1; }
  done
fi
echo "== overall: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc
RUN
chmod +x bundle/run.sh
du -sh bundle
