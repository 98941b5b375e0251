#!/usr/bin/env bash
# The fused kernels' speed with their head by value (this bundle's `lowcon`, 5606a7e)
# against 11 scalar parameters (`lowcon-before`, d587aa9's, carried gzipped): one rank
# on one GPU (lowcon bench refuses ranks sharing a GPU), 8 KiB to 1 MiB, every output
# checked, the two binaries alternated three times.
set -u
[ -f bundle/lowcon-before.gz ] && gunzip -f bundle/lowcon-before.gz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LOWCON_REQUIRE_GPU=1
for round in 1 2 3; do
  for b in lowcon-before lowcon; do
    L=bundle/$b
    echo "== round $round $b"
    timeout 60 "$L" launch --nproc-per-node 1 -- "$L" bench all-gather -b 8K -e 1M -f 4 --algorithms sm-oneshot \
      --no-nccl --check
    timeout 60 "$L" launch --nproc-per-node 1 -- "$L" bench reduce-scatter -b 8K -e 1M -f 4 \
      --algorithms sm-direct,tma-reduce,tma-push-reduce --no-nccl --check
  done
done 2>&1 | tee "${OUT:-/tmp}/fused-ab.txt"
