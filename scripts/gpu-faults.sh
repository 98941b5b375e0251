#!/usr/bin/env bash
# One GPU call for dead-peer handling on 2 GPUs: the collective suite with both sync
# methods (memop waits live in the shared host pad), barrier latency and a small-size
# all-gather sweep against the previous binary (bundle/lowcon-before, when present),
# then the fault matrix: Rust (`selftest coll-dead-peer`, SIGKILL and a clean exit with
# 16 MiB staged calls piled up), C (capi-check.sh: SIGKILL, and a clean exit with
# unsynchronised 16 MiB calls) and Python (fault_matrix.py: five exits, six moments,
# ranks by hand, under `lowcon launch` and under torchrun). Run from a bundle
# (scripts/gpu-bundle.sh) as `bash bundle/gpu-faults.sh` from the repository root; logs
# are tarred into $OUT/faults.tgz. Every step has a deadline (BUDGET seconds in all,
# default 540). PARTS picks parts, separated by spaces: suite, bench, rust, c,
# python-hand (the by-hand cells) and python-launchers (torchrun, lowcon launch, and
# group creation). Default: suite bench rust c. The two Python parts take about 5
# minutes each on 2x H200: run each in a device call of its own.
# Exit status 0 only if every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
out=/tmp/faults; rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget "${BUDGET:-540}"
parts=" ${PARTS:-suite bench rust c} "
for p in $parts; do
  case $p in suite|bench|rust|c|python-hand|python-launchers) ;;
    *) echo "gpu-faults.sh: unknown part $p (parts: suite bench rust c python-hand python-launchers)" >&2; exit 2;;
  esac
done
has() { [[ $parts == *" $1 "* ]]; }
trap 'tar -C "$out" -czf "${OUT:-$here}/faults.tgz" . 2>/dev/null' EXIT
L="$here/lowcon"
lt=("$L" launch --nproc-per-node 2 --tee --)
{ nvidia-smi -L; git -C "$repo" log -1 --format='commit %h %cd' 2>/dev/null; } > "$out/smi.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$here"/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
export PYTHONPATH=/tmp/site
has suite && for m in kernel memop; do
  st "coll-check w=2 $m" coll.txt 60 "${lt[@]}" "$L" selftest coll-check --backend gpu --method "$m"
  st "coll-stress w=2 $m" coll.txt 30 "${lt[@]}" "$L" selftest coll-stress --backend gpu --method "$m"
done
has bench && for bin in lowcon lowcon-before; do
  [ -x "$here/$bin" ] || continue
  st "bench barrier ($bin)" barrier.txt 40 "$L" launch --nproc-per-node 2 -- "$here/$bin" bench barrier --json
  st "bench all-gather 64K..64M memop ($bin)" ag.txt 60 "$L" launch --nproc-per-node 2 -- "$here/$bin" bench \
    all-gather -b 64K -e 64M -f 4 --sync memop --algorithms ce-pull,sm-oneshot --no-nccl
done
dp() { # dp METHOD EXIT ELEMS [--staged]: Rust, ranks by hand
  local m=$1 how=$2 n=$3; shift 3
  DP_ARGS="--exit $how --elems $n $*" st "Rust coll-dead-peer $m, $how, $n f32 $*" dead-rust.txt 70 \
    bash "$here/gpu-dead-peer.sh" 0,1 2 "$m" "$L" "$out" 300
}
has rust && for m in kernel memop; do
  dp "$m" sigkill 16384
  dp "$m" exit 4194304 --staged
done
has c && st "C: lowcon_check.c, then dead peers (SIGKILL; clean exit, 16 MiB calls queued)" capi.txt 120 \
  bash "$here/capi/capi-check.sh" gpu "$L" "$here/capi" "$here/capi" "$here/capi/lowcon_check.c" "$out/capi"
fm=(env LOWCON_BIN="$L" python3 "$repo/crates/lowcon-py/tests/fault_matrix.py" --backend gpu --limit 30 --timeout 10
  --out "$out/py")
if has python-hand; then
st "Python: by hand, kernel, every exit x ag,rs,ll,pool,close,sync" py.txt 240 "${fm[@]}" --launchers hand --syncs kernel --moments ag,rs,ll,pool,close,sync
st "Python: by hand, memop, every exit x ag,rs,close,sync" py.txt 150 "${fm[@]}" --launchers hand --syncs memop --moments ag,rs,close,sync
st "Python: by hand, a stopped peer x ag,rs (kernel, memop)" py.txt 120 "${fm[@]}" --launchers hand --syncs kernel,memop --moments ag,rs --exits sigstop
fi
if has python-launchers; then
st "Python: torchrun, kernel and memop, every exit x ag" py.txt 120 "${fm[@]}" --launchers torchrun --syncs kernel,memop --moments ag
st "Python: lowcon launch, every exit x ag" py.txt 50 "${fm[@]}" --launchers launch --moments ag
st "Python: by hand, every exit x init" py.txt 90 "${fm[@]}" --launchers hand --moments init
fi
cat "$out/summary.txt"
[ -f "$out/py.txt" ] && grep -h "^| gpu" "$out/py.txt" > "$out/faults-gpu.md"
grep -hE "ok: call|failed .* ms after|capi dead-peer ok" "$out"/dead-rust.txt "$out"/capi.txt "$out"/dp-*.log 2>/dev/null | head -20
echo "$failures step(s) failed"
[ "$failures" = 0 ]
