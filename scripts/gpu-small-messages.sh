#!/usr/bin/env bash
# One GPU call for the few-SM and small-message collectives on 2 GPUs: the suite
# with the new algorithms (both sync methods, stress, enqueue, a dead peer, 1 GiB
# cases), the all-gather and reduce-scatter sweeps with NCCL (64 KiB .. 256 MiB), the
# reduce-scatter CTA comparison, the saturated overlap benchmark, and FSDP2 training
# on lowcon (auto picks `ll` for small shards) against NCCL. Run from a bundle
# (scripts/gpu-bundle.sh) as `bash bundle/gpu-small-messages.sh`; logs are tarred into
# $OUTDIR/logs.tgz. Every step has a deadline, so the whole run stays under ~9 minutes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
out=/tmp/l; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget "${BUDGET:-500}"
trap 'tar -C "$out" -czf "${OUTDIR:-$here}/logs.tgz" . 2>/dev/null' EXIT
L="$here/lowcon"
l2=("$L" launch --nproc-per-node 2 --)
lt=("$L" launch --nproc-per-node 2 --tee --)
nvidia-smi -L > "$out/smi.txt" 2>&1
for m in kernel memop; do
  st "coll-check w=2 $m" coll.txt 40 "${lt[@]}" "$L" selftest coll-check --backend gpu --method "$m"
  st "coll-stress w=2 $m (ll in the rotation)" coll.txt 30 "${lt[@]}" "$L" selftest coll-stress --backend gpu --method "$m"
done
st "coll-enqueue w=2 kernel" coll.txt 30 "${lt[@]}" "$L" selftest coll-enqueue --method kernel
for m in kernel memop; do
  st "coll-dead-peer $m, kill at 300" dead.txt 70 bash "$here/gpu-dead-peer.sh" 0,1 2 "$m" "$L" "$out" 300
done
b=("${l2[@]}" "$L" bench)
st "bench all-gather 64K..256M (all, NCCL)" ag.txt 70 "${b[@]}" all-gather -b 64K -e 256M -f 4 --sync kernel,memop --json "$out/ag.json"
st "bench reduce-scatter 64K..256M (all, NCCL)" rs.txt 70 "${b[@]}" reduce-scatter -b 64K -e 256M -f 4 --sync kernel --json "$out/rs.json"
st "bench reduce-scatter 16M..256M, 8 and 16 CTAs" rs-ctas.txt 40 "${b[@]}" reduce-scatter -b 16M -e 256M -f 4 --algorithms sm-direct,tma-reduce,tma-push-reduce --ctas 8,16 --no-nccl --json "$out/rs-ctas.json"
st "bench overlap saturated (null-local)" sat.txt 140 "${b[@]}" overlap --null-local --json "$out/sat.json" --csv "$out/sat.csv" --plot "$out/sat.png"
python3 -m pip install -q --no-deps --force-reinstall "$here"/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
st "FSDP2 training on lowcon vs NCCL (torchrun)" fsdp.txt 60 python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29521 "$repo/crates/lowcon-py/tests/gpu_fsdp_worker.py"
st "coll-check w=2 kernel with 1 GiB cases" coll-big.txt 120 "${lt[@]}" "$L" selftest coll-check --backend gpu --method kernel --large 67108864
cat "$out/summary.txt"
