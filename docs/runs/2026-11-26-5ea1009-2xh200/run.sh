#!/usr/bin/env bash
# The 2-GPU run's bundle B (the bf16 wire, the reduction beside a GEMM, fused TP), in two
# device calls, from the repository root with the bundle carried:
#   bash <this file> tp-rs     # fused TP (tp_bench.py), the reduce-scatter sweep with and
#                              # without the bf16 wire against NCCL f32/bf16, and the
#                              # saturated benchmark (NCCL-CE's all-gather; the wire at 64 CTAs)
#   bash <this file> fsdp2     # FSDP2 paired (gpu-fsdp2.sh part bundle-b)
set -uo pipefail
part=${1:?tp-rs or fsdp2}
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
out=/tmp/bb-$part; rm -rf "$out"; mkdir -p "$out"
outer=${OUT:-/tmp}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/smi.txt"
if [ "$part" = fsdp2 ]; then
  # First fused TP again at the Llama shape: the all-gather's barriers as memops since
  # the tp-rs part (its kernel barriers waited for the GEMM to free an SM).
  python3 -m pip install -q --no-deps --force-reinstall "$repo"/bundle/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
  timeout 100 python3 -m torch.distributed.run --nproc-per-node 2 "$repo/crates/lowcon-py/bench/tp_bench.py" \
    --rounds 20 --json "$out/tp-8192-memop.json" 2>&1 | grep -v -e FutureWarning -e enable_symm_mem -e socket.cpp \
    | tee "$out/tp-8192-memop.txt"
  OUT=$out PARTS=bundle-b timeout 450 bash "$repo/bundle/gpu-fsdp2.sh" | grep -v "target missed"
  tar -C /tmp -czf "$outer/bb-$part.tgz" "bb-$part"
  exit 0
fi
py_nvidia=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
for d in "$py_nvidia/nccl/lib" "$py_nvidia/cublas/lib"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
python3 -m pip install -q --no-deps --force-reinstall "$repo"/bundle/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
L=$repo/bundle/lowcon
tb=$repo/crates/lowcon-py/bench/tp_bench.py
echo "== tp_bench, Llama MLP: tokens 8192, hidden 8192, ffn 28672"
timeout 200 python3 -m torch.distributed.run --nproc-per-node 2 "$tb" --rounds 20 --json "$out/tp-8192.json" \
  2>&1 | grep -v FutureWarning | grep -v enable_symm_mem | tee "$out/tp-8192.txt"
echo "== tp_bench, tokens 4096"
timeout 120 python3 -m torch.distributed.run --nproc-per-node 2 "$tb" --tokens 4096 --rounds 15 --json "$out/tp-4096.json" \
  2>&1 | grep -v FutureWarning | grep -v enable_symm_mem | tee "$out/tp-4096.txt"
echo "== reduce-scatter f32 over the bf16 wire, ce-reduce 16 and 64 CTAs, NCCL f32 and bf16"
timeout 150 "$L" launch --nproc-per-node 2 -- "$L" bench reduce-scatter --dtype f32 --wire bf16 --algorithms ce-reduce \
  --ctas 16,64 -b 1M -e 1G --reps 3 --json "$out/rs-wire.json" 2>&1 | tee "$out/rs-wire.txt"
echo "== reduce-scatter f32, no wire, ce-reduce 16 and 64 CTAs"
timeout 100 "$L" launch --nproc-per-node 2 -- "$L" bench reduce-scatter --dtype f32 --algorithms ce-reduce \
  --ctas 16,64 -b 1M -e 1G --reps 3 --no-nccl --json "$out/rs-f32.json" 2>&1 | tee "$out/rs-f32.txt"
echo "== saturated GEMM: all-gather 256M (NCCL-CE's slowdown is the target's bound)"
timeout 100 "$L" launch --nproc-per-node 2 -- "$L" bench overlap --collective all-gather --algorithms ce-pull --priority high --shard 256M \
  --no-null --json "$out/overlap-ag.json" 2>&1 | tee "$out/overlap-ag.txt"
echo "== saturated GEMM: reduce-scatter 256M over the bf16 wire, ce-reduce, 64 CTAs"
timeout 100 "$L" launch --nproc-per-node 2 -- "$L" bench overlap --collective reduce-scatter --wire bf16 \
  --algorithms ce-reduce --shard 256M --ctas 64 --priority high --no-null --json "$out/overlap-rs-wire.json" \
  2>&1 | tee "$out/overlap-rs-wire.txt"
tar -C /tmp -czf "$outer/bb-$part.tgz" "bb-$part"
