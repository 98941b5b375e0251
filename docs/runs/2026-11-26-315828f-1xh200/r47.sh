#!/usr/bin/env bash
# Fused tensor parallelism (lowcon.tp, the arrivals and the released reduce-scatter) on
# one GPU, in one call: the tp part of gpu-shared.sh at 2, 4 and 8 ranks sharing the GPU
# under MPS (outputs and gradients, overlap with its serial control, 1000 eager calls
# and 1000 replays, a dead peer, the TP MLP example against DTensor), the C check at 2
# ranks (arrivals and the released reduce-scatter from C), the Rust GPU tests, and
# tp_bench.py dry-run at one rank.
set -u
R=/tmp/r47; mkdir -p "$R"
outer=$OUT
nvidia-smi -L
LOWCON_REQUIRE_GPU=1 timeout 90 bundle/lowcon-gpu-tests > "$R/gpu-tests.txt" 2>&1
echo "lowcon-gpu-tests rc=$?"; tail -2 "$R/gpu-tests.txt"
env OUT="$R/tp" SHARED_WORLDS="2 4 8" SHARED_PARTS="tp" SHARED_BUDGET=330 TP_CALLS="${TP_CALLS:-1000}" \
  bash bundle/gpu-shared.sh > "$R/tp.txt" 2>&1
grep -E " ok | FAILED|step\(s\) failed" "$R/tp.txt" | tail -30
grep -hE "tp (check|overlap|fresh|dead) ok|tp_mlp: ok|FAILED" "$R"/tp/tp-w*.txt 2>/dev/null | sort | uniq -c | sort -rn | head -30
env OUT="$R/capi" SHARED_WORLDS="2" SHARED_PARTS="capi" SHARED_BUDGET=90 bash bundle/gpu-shared.sh > "$R/capi.txt" 2>&1
grep -E " ok | FAILED|step\(s\) failed" "$R/capi.txt" | tail -5
timeout 100 python3 -m torch.distributed.run --nproc-per-node 1 crates/lowcon-py/bench/tp_bench.py \
  --tokens 4096 --hidden 4096 --ffn 8192 --rounds 4 --json "$R/tp_bench_1rank.json" > "$R/tp_bench_1rank.txt" 2>&1
echo "tp_bench dry run rc=$?"; tail -25 "$R/tp_bench_1rank.txt"
tar -C /tmp -czf "$outer/r47.tgz" r47
