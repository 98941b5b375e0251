#!/usr/bin/env bash
# Two builds of lowcon, one FSDP2 step: the bundle's wheel ("new") against the one in
# bundle/wheels-base ("base": `BUNDLE_BASE=COMMIT scripts/gpu-bundle.sh --pack` builds it),
# each in its own fsdp2_paired.py run, alternating base, new, base, new (REPEAT pairs,
# default 2), in one job on every GPU of the box. NCCL is the common reference: each run
# pairs lowcon with NCCL and NCCL's A/A twin round by round, and fsdp2_builds.py says
# whether lowcon's ratio to NCCL moved between the builds by more than the A/A noise.
# From the repository root with the bundle beside it:
#
#     bash bundle/gpu-builds.sh             # logs and the verdict tarred into $OUT/builds.tgz
#
# SWEEP (default 8192x4:1024), ROUNDS (12), MODES (nccl,nccl-b,lowcon), REPEAT (2). Exit
# status 0 only if every run passed (the verdict is in summary.txt either way).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
out=/tmp/builds; rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
trap 'tar -C "$out" -czf "${OUT:-$here}/builds.tgz" . 2>/dev/null' EXIT
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget "${BUDGET:-570}"
if ! ls "$here"/wheels-base/lowcon-*.whl > /dev/null 2>&1; then
  echo "gpu-builds.sh: no base wheel in $here/wheels-base: bundle with BUNDLE_BASE=COMMIT" | tee -a "$out/summary.txt"
  exit 2
fi
ngpu=$(nvidia-smi -L | wc -l)
{ nvidia-smi -L; echo "new: $(git -C "$repo" log -1 --format='%h %cd' 2>/dev/null)"; echo "base: $(cat "$here/wheels-base/COMMIT")"; } \
  > "$out/smi.txt" 2>&1
for b in base new; do
  src=$here/wheels; [ "$b" = base ] && src=$here/wheels-base
  python3 -m pip install -q --no-index --no-deps --target "/tmp/site-$b" "$src"/lowcon-*.whl >> "$out/pip.txt" 2>&1
done
bench=$repo/crates/lowcon-py/bench
tr=(python3 -m torch.distributed.run --nproc-per-node "$ngpu")
specs=()
for i in $(seq "${REPEAT:-2}"); do
  for b in base new; do
    st "paired $b run $i" log.txt 150 env PYTHONPATH="/tmp/site-$b" "${tr[@]}" "$bench/fsdp2_paired.py" \
      --out "$out/$b-$i" --time-budget 110 --modes "${MODES:-nccl,nccl-b,lowcon}" --reduce-dtypes fp32 \
      --rounds "${ROUNDS:-12}" --sweep "${SWEEP:-8192x4:1024}"
    specs+=("$b=$out/$b-$i")
  done
done
python3 "$bench/fsdp2_builds.py" "${specs[@]}" > "$out/verdict.txt" 2>&1
cat "$out/verdict.txt" | tee -a "$out/summary.txt"
cat "$out/summary.txt"
# shellcheck disable=SC2154  # failures: set by steps_budget (gpu-steps.sh)
exit $((failures > 0))
