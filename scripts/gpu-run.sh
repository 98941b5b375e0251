#!/usr/bin/env bash
# Runs lowcon's GPU tests on this machine: single-GPU checks, then (with 2+ GPUs) the
# multi-process suite at several world sizes with both sync methods, and the barrier
# benchmark. Prints a summary table; exit status 0 only if everything passed.
#
# scripts/gpu-bundle.sh copies this file to bundle/run.sh, next to the release binaries
# (lowcon, lowcon-gpu-tests) and gpu-dead-peer.sh, which it finds beside itself:
#
#     bash bundle/run.sh            # logs go to $OUT if set, else bundle/logs
#
# Environment: OUT (log folder), LOWCON_BUNDLE_PARTS (which parts, below),
# LOWCON_SANITIZE=0 (skip compute-sanitizer), LOWCON_TAR (tar the logs into this file).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$here/lowcon" ]; then
  echo "run.sh: no lowcon binary beside this script in $here: build the bundle with" \
    "scripts/gpu-bundle.sh and run bundle/run.sh" >&2
  exit 2
fi
out=${OUT:-$here/logs}
mkdir -p "$out"
# NVLink multicast must stay off on shared machines (see shared/GPU.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LOWCON_REQUIRE_GPU=1
# NCCL 2.28.9 (torch's wheel) over the system's 2.28.3 when present; cuBLAS for overlap.
py_nvidia=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
for d in "$py_nvidia/nccl/lib" "$py_nvidia/cublas/lib" /usr/local/cuda/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
# Which parts to run: single (single-GPU checks, compute-sanitizer), base (multi-process
# symmetric memory and sync), coll (collective tests),
# never (calls never wait for the GPU: enqueue timing, dead peers with queued calls,
# the driver's queue depth), capi (the C API's example program, built here with the
# system compiler), bench (sweeps with NCCL, overlap), python (the Python package with
# torch and CuPy: lowcon launch and torchrun, the pool, FSDP2 training against NCCL),
# fsdp2 (the paired end-to-end FSDP2 benchmark; LOWCON_FSDP2_ARGS passes options, e.g.
# "--profile"), overlap (the saturated interference benchmark at 2 GPUs: lowcon, NCCL,
# NCCL copy-engine and a null copy; LOWCON_OVERLAP_ARGS adds flags, e.g. "--trials 9"),
# graph (CUDA graphs: coll-graph on every GPU count, and replayed latency 8K..1M against
# NCCL's captured calls, with the host cost per call eager and replayed; graph-bench: the
# latency alone), fallback (the torch backend on CUDA tensors at 2 ranks: its own
# collectives and the calls it hands to NCCL, all-to-all and send/recv), shrink (2 GPUs:
# the survivor of a SIGKILL shrinks to a group of 1 and passes the suite, both syncs;
# 100 live shrinks with the memory check; the fault matrix's then-shrink column by hand
# and under --keep-going; the FSDP2 shrink example at 2 ranks -> 1).
# Default: all but fsdp2, overlap and shrink.
parts=${LOWCON_BUNDLE_PARTS:-single never capi base coll bench python graph}
has() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }
L="$here/lowcon"
summary="$out/summary.txt"
: > "$summary"
rc=0
# The logs are tarred even when a timeout stops this script (SIGTERM).
trap 'exit 143' TERM INT
trap '[ -n "${LOWCON_TAR:-}" ] && tar -C "$out" -czf "$LOWCON_TAR" . 2>/dev/null' EXIT
step() { # step NAME LOGFILE CMD...: runs CMD, logs it, records ok/FAILED with seconds
  local name=$1 log=$2; shift 2
  local t0 t s
  t0=$(date +%s.%N)
  echo "== $name" | tee -a "$out/$log"
  "$@" >> "$out/$log" 2>&1
  s=$?
  t=$(awk "BEGIN{print $(date +%s.%N) - $t0}")
  if [ $s -eq 0 ]; then printf '%-58s ok      %7.1f s\n' "$name" "$t" >> "$summary"
  else printf '%-58s FAILED  %7.1f s (exit %d, see %s)\n' "$name" "$t" "$s" "$log" >> "$summary"; rc=1; fi
  tail -n 6 "$out/$log" | grep -E "ok:|FAILED|failed|error" | tail -n 4
}
{ nvidia-smi -L; nvidia-smi topo -m; } > "$out/nvidia-smi.txt" 2>&1 || true
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
step "lowcon info" info.txt "$L" info
has single && step "single-GPU checks (lowcon-gpu-tests)" gpu-tests.txt timeout 300 "$here/lowcon-gpu-tests"
if has single && [ "${LOWCON_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck synccheck; do
    step "compute-sanitizer $tool (quick)" "sanitizer-$tool.txt" \
      timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 3 "$here/lowcon-gpu-tests" --quick
  done
fi
has base && step "host backend: barrier-stress x4 ranks" host.txt "$L" launch --nproc-per-node 4 --tee -- "$L" selftest barrier-stress
coll_at() { # the collective suite at world size $1
  local w=$1
    vis=$(seq -s, 0 $((w - 1)))
    local crun=(env "CUDA_VISIBLE_DEVICES=$vis" timeout 200 "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest)
    step "w=$w coll-check every algorithm/dtype/op (kernel+memop)" "coll-w$w.txt" "${crun[@]}" coll-check --backend gpu
    step "w=$w coll-stress 1000 calls x 2 streams (kernel)" "coll-w$w.txt" "${crun[@]}" coll-stress --backend gpu --method kernel
    step "w=$w coll-stress 1000 calls x 2 streams (memop)" "coll-w$w.txt" "${crun[@]}" coll-stress --backend gpu --method memop
    step "w=$w coll-bad-input" "coll-w$w.txt" "${crun[@]}" coll-bad-input --backend gpu
    step "w=$w coll-mapped: ordinary inputs read in place (kernel+memop)" "coll-w$w.txt" "${crun[@]}" coll-mapped
    for m in kernel memop; do
      # Ranks started by hand (no launcher): the library alone must name the dead rank.
      step "w=$w coll-dead-peer SIGKILL mid-loop, no launcher ($m)" "coll-dead-w$w.txt" \
        timeout 120 bash "$here/gpu-dead-peer.sh" "$vis" "$w" "$m" "$L" "$out"
    done
}
if [ "$ngpu" -ge 2 ] && has never; then
  w=2; vis=0,1
  nrun=(env "CUDA_VISIBLE_DEVICES=$vis" timeout 200 "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest)
  step "w=$w coll-enqueue 1000 calls x 2 streams (kernel)" never.txt "${nrun[@]}" coll-enqueue --method kernel
  step "w=$w coll-enqueue 1000 calls x 2 streams (memop)" never.txt "${nrun[@]}" coll-enqueue --method memop
  for m in kernel memop; do
    for k in 300 500; do
      step "w=$w coll-dead-peer, no launcher, kill at call $k ($m)" never-dead.txt \
        timeout 120 bash "$here/gpu-dead-peer.sh" "$vis" "$w" "$m" "$L" "$out" "$k"
    done
  done
  step "w=$w bench queue-depth (lowcon and NCCL)" bench-queue.txt env "CUDA_VISIBLE_DEVICES=$vis" timeout 120 \
    "$L" launch --nproc-per-node "$w" -- "$L" bench queue-depth
  step "w=$w bench all-gather --check 64K..16M" bench-check.txt env "CUDA_VISIBLE_DEVICES=$vis" timeout 120 \
    "$L" launch --nproc-per-node "$w" -- "$L" bench all-gather -b 64K -e 16M -f 16 --check --no-nccl --sync kernel,memop
  step "w=$w bench reduce-scatter --check 64K..16M" bench-check.txt env "CUDA_VISIBLE_DEVICES=$vis" timeout 120 \
    "$L" launch --nproc-per-node "$w" -- "$L" bench reduce-scatter -b 64K -e 16M -f 16 --check --no-nccl --sync kernel,memop
  step "w=$w bench overlap --mode burst --colls 110, NCCL alongside" bench-overlap-110.txt env "CUDA_VISIBLE_DEVICES=$vis" \
    timeout 300 "$L" launch --nproc-per-node "$w" -- "$L" bench overlap --mode burst --shard 64M --colls 110 --json "$out/overlap-110.json"
fi
if [ "$ngpu" -ge 2 ] && has overlap; then
  # The saturated interference benchmark, 2 GPUs, defaults: all-gather and
  # reduce-scatter, 64M and 256M shards, high and default priority, interleaved and
  # threaded enqueue, 7 trial pairs (about 2-4 minutes). Run it twice to see whether
  # the medians agree within a point.
  rm -f "${TMPDIR:-/tmp}"/lowcon-nccl-debug.* # NCCL's INIT logs (channel counts) of this run only
  # shellcheck disable=SC2086 # LOWCON_OVERLAP_ARGS is a list of flags
  step "w=2 bench overlap (saturated; lowcon, NCCL, NCCL-CE, null; NVML)" bench-saturated.txt \
    env CUDA_VISIBLE_DEVICES=0,1 timeout 420 "$L" launch --nproc-per-node 2 -- "$L" bench overlap \
    --json "$out/saturated.json" --csv "$out/saturated.csv" --plot "$out/saturated.png" ${LOWCON_OVERLAP_ARGS:-}
  cp "${TMPDIR:-/tmp}"/lowcon-nccl-debug.* "$out/" 2>/dev/null || true
fi
if [ "$ngpu" -ge 2 ] && has capi; then
  step "w=2 C API: lowcon_check.c as C11 and C++17, then a dead peer" capi.txt env CUDA_VISIBLE_DEVICES=0,1 \
    timeout 300 bash "$here/capi/capi-check.sh" gpu "$L" "$here/capi" "$here/capi" "$here/capi/lowcon_check.c" "$out/capi"
fi
if [ "$ngpu" -ge 2 ] && { has coll || has coll4; }; then
  coll_at "$ngpu"
  vis=$(seq -s, 0 $((ngpu - 1)))
  has coll && step "w=$ngpu coll-check with 1 GiB cases (kernel)" "coll-big.txt" env "CUDA_VISIBLE_DEVICES=$vis" timeout 200 "$L" launch --nproc-per-node "$ngpu" --tee -- "$L" selftest coll-check --backend gpu --method kernel --large 67108864
fi
if [ "$ngpu" -ge 2 ] && has bench; then
  vis=$(seq -s, 0 $((ngpu - 1)))
  b=(env "CUDA_VISIBLE_DEVICES=$vis" timeout 300 "$L" launch --nproc-per-node "$ngpu" -- "$L" bench)
  step "bench all-gather 64K..256M, NCCL alongside" bench-all-gather.txt "${b[@]}" all-gather -b 64K -e 256M -f 4 --sync kernel,memop --json "$out/all-gather.json" --csv "$out/all-gather.csv"
  step "bench reduce-scatter 64K..256M, NCCL alongside" bench-reduce-scatter.txt "${b[@]}" reduce-scatter -b 64K -e 256M -f 4 --sync kernel,memop --json "$out/reduce-scatter.json" --csv "$out/reduce-scatter.csv"
  step "bench reduce-scatter CTA sweep (ce-reduce, sm-direct, tma-reduce)" bench-rs-ctas.txt "${b[@]}" reduce-scatter -b 16M -e 256M -f 4 --algorithms ce-reduce,sm-direct,tma-reduce,tma-reduce-evict --ctas 2,4,8,16,32 --no-nccl --json "$out/rs-ctas.json"
  step "bench all-gather/reduce-scatter --check 64K..16M" bench-check.txt "${b[@]}" all-gather -b 64K -e 16M -f 16 --check --no-nccl --sync kernel,memop
  step "bench reduce-scatter --check 64K..16M" bench-check.txt "${b[@]}" reduce-scatter -b 64K -e 16M -f 16 --check --no-nccl --sync kernel,memop
  step "bench overlap --mode burst (GEMM + collectives), NCCL alongside" bench-overlap.txt "${b[@]}" overlap --mode burst --shard 64M --json "$out/overlap.json" --csv "$out/overlap.csv"
  step "plot" plot.txt "$L" bench plot --json "$out/all-gather.json" "$out/reduce-scatter.json" "$out/overlap.json" --out "$out/lowcon-4xh200.png"
fi
if [ "$ngpu" -ge 2 ] && has coll; then
  [ "$ngpu" -ge 4 ] && coll_at 3
  [ "$ngpu" -gt 2 ] && coll_at 2
fi
if [ "$ngpu" -ge 2 ] && has dead; then
  w=$ngpu; vis=$(seq -s, 0 $((w - 1)))
  for m in memop kernel; do
    step "w=$w coll-dead-peer SIGKILL mid-loop, no launcher ($m)" "coll-dead-w$w.txt" timeout 120 bash "$here/gpu-dead-peer.sh" "$vis" "$w" "$m" "$L" "$out"
  done
fi
if [ "$ngpu" -ge 2 ] && has collcheck; then # the correctness suite only, at the smaller worlds
  for w in 3 2; do
    [ "$w" -lt "$ngpu" ] || continue
    vis=$(seq -s, 0 $((w - 1)))
    step "w=$w coll-check every algorithm/dtype/op (kernel+memop)" "coll-w$w.txt" env "CUDA_VISIBLE_DEVICES=$vis" timeout 200 "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest coll-check --backend gpu
    step "w=$w coll-bad-input" "coll-w$w.txt" env "CUDA_VISIBLE_DEVICES=$vis" timeout 100 "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest coll-bad-input --backend gpu
  done
fi
if [ "$ngpu" -ge 2 ] && { has graph || has graph-bench; }; then
  vis=$(seq -s, 0 $((ngpu - 1)))
  has graph && step "w=$ngpu coll-graph: 12 captured calls x 1000 replays, two streams, refusals (kernel+memop)" graph.txt \
    env "CUDA_VISIBLE_DEVICES=$vis" timeout 300 "$L" launch --nproc-per-node "$ngpu" --tee -- "$L" selftest coll-graph
  for m in kernel memop; do
    has graph && step "w=$ngpu coll-graph: SIGKILL at replay 50, no launcher ($m)" graph.txt \
      env DP_SCENARIO=coll-graph bash "$here/gpu-dead-peer.sh" "$vis" "$ngpu" "$m" "$L" "$out" 50
  done
  b=(env "CUDA_VISIBLE_DEVICES=$vis" timeout 300 "$L" launch --nproc-per-node "$ngpu" -- "$L" bench)
  g=(-b 8K -e 1M -f 2 -n 20 --reps 25 --sync "kernel,memop" --graph)
  step "bench all-gather --graph 8K..1M, NCCL captured alongside" bench-graph.txt "${b[@]}" all-gather "${g[@]}" \
    --algorithms auto,ll,sm-oneshot,ce-pull --json "$out/graph-all-gather.json"
  step "bench reduce-scatter --graph 8K..1M, NCCL captured alongside" bench-graph.txt "${b[@]}" reduce-scatter "${g[@]}" \
    --algorithms auto,ll,sm-direct,ce-reduce --json "$out/graph-reduce-scatter.json"
fi
repo=$(cd "$here/.." && pwd)
pyt="$repo/crates/lowcon-py/tests"
if [ "$ngpu" -ge 2 ] && has shrink; then
  vis=0,1
  for m in kernel memop; do
    step "w=2 coll-shrink: SIGKILL at call 20, the survivor shrinks to 1 and passes the suite ($m)" shrink.txt \
      env DP_SCENARIO="coll-shrink --backend gpu" bash "$here/gpu-dead-peer.sh" "$vis" 2 "$m" "$L" "$out" 20
  done
  step "w=2 coll-shrink: 100 shrinks of a live group, no leak" shrink.txt env "CUDA_VISIBLE_DEVICES=$vis" \
    timeout 240 "$L" launch --nproc-per-node 2 --tee -- "$L" selftest coll-shrink --backend gpu --healthy 100
  step "python: install the wheel (shrink)" shrink.txt python3 -m pip install -q --no-deps --force-reinstall \
    "$here"/wheels/lowcon-*.whl
  step "w=2 python: fault matrix with then shrink (hand, keep-going; kernel, memop)" shrink.txt \
    env "CUDA_VISIBLE_DEVICES=$vis" LOWCON_BIN="$L" timeout 400 python3 "$pyt/fault_matrix.py" --backend gpu \
    --launchers hand,keep-going --exits sigkill,sigterm --moments ag,rs,pool --syncs kernel,memop --timeout 10 \
    --out "$out/faults-shrink"
  step "w=2 python: FSDP2 shrinks 2 -> 1, re-shards a checkpoint, ends at the no-death loss" shrink.txt \
    env "CUDA_VISIBLE_DEVICES=$vis" LOWCON_BIN="$L" LOWCON_PYTEST_SHRINK_WORLD=2 timeout 300 \
    python3 -m pytest -q -s -p no:cacheprovider "$pyt/test_fsdp2_shrink.py"
fi
if [ "$ngpu" -ge 2 ] && has benchrs; then # reduce-scatter sweep and small all-gathers only
  vis=$(seq -s, 0 $((ngpu - 1)))
  b=(env "CUDA_VISIBLE_DEVICES=$vis" timeout 300 "$L" launch --nproc-per-node "$ngpu" -- "$L" bench)
  step "bench reduce-scatter 64K..256M, NCCL alongside" bench-reduce-scatter.txt "${b[@]}" reduce-scatter -b 64K -e 256M -f 4 --json "$out/reduce-scatter.json" --csv "$out/reduce-scatter.csv"
  step "bench all-gather 64K..1M (auto, one-shot CTAs)" bench-ag-small.txt "${b[@]}" all-gather -b 64K -e 1M -f 4 --algorithms auto,sm-oneshot,ce-push --json "$out/ag-small.json"
  step "bench overlap reduce-scatter" bench-overlap-rs.txt "${b[@]}" overlap --mode burst --shard 64M --collective reduce-scatter --no-nccl --json "$out/overlap-rs.json"
fi
if [ "$ngpu" -ge 2 ] && has base; then
  sizes="$ngpu"; [ "$ngpu" -ge 4 ] && sizes="$sizes 3"; sizes="$sizes 2"
  for w in $(echo "$sizes" | tr ' ' '\n' | awk '!seen[$0]++'); do
    vis=$(seq -s, 0 $((w - 1)))
    run=(env "CUDA_VISIBLE_DEVICES=$vis" timeout 200 "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest)
    step "w=$w gpu-mapping" "multi-w$w.txt" "${run[@]}" gpu-mapping
    step "w=$w gpu-barrier-stress 100k (kernel+memop)" "multi-w$w.txt" "${run[@]}" gpu-barrier-stress
    step "w=$w gpu-publish-signal 10k (kernel+memop)" "multi-w$w.txt" "${run[@]}" gpu-publish-signal
    step "w=$w gpu-skip-barrier (kernel+memop)" "multi-w$w.txt" "${run[@]}" gpu-skip-barrier
    step "w=$w gpu-dead-peer (kernel)" "multi-w$w.txt" "${run[@]}" gpu-dead-peer --method kernel
    step "w=$w gpu-dead-peer (memop)" "multi-w$w.txt" "${run[@]}" gpu-dead-peer --method memop
    step "w=$w gpu-mismatched-size" "multi-w$w.txt" "${run[@]}" gpu-mismatched-size
    step "w=$w gpu-same-device" "multi-w$w.txt" env LOWCON_DEVICE=0 "CUDA_VISIBLE_DEVICES=$vis" timeout 100 "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest gpu-same-device
    step "w=$w gpu-memory-release" "multi-w$w.txt" "${run[@]}" gpu-memory-release
    step "w=$w bench barrier" "bench-barrier.txt" env "CUDA_VISIBLE_DEVICES=$vis" timeout 120 "$L" launch --nproc-per-node "$w" -- "$L" bench barrier --json
  done
  # The legacy-IPC fallback path, forced, at the full world size.
  vis=$(seq -s, 0 $((ngpu - 1)))
  ipc=(env LOWCON_MEM_HANDLES=ipc "CUDA_VISIBLE_DEVICES=$vis" timeout 200 "$L" launch --nproc-per-node "$ngpu" --tee -- "$L" selftest)
  step "w=$ngpu IPC handles: gpu-mapping" multi-ipc.txt "${ipc[@]}" gpu-mapping
  step "w=$ngpu IPC handles: gpu-publish-signal 2k (kernel+memop)" multi-ipc.txt "${ipc[@]}" gpu-publish-signal --rounds 2000
  step "w=$ngpu IPC handles: gpu-barrier-stress 10k (kernel+memop)" multi-ipc.txt "${ipc[@]}" gpu-barrier-stress --iters 10000
  step "w=$ngpu IPC handles: gpu-memory-release" multi-ipc.txt "${ipc[@]}" gpu-memory-release
fi
# The Python package (python) and the FSDP2 end-to-end benchmark (fsdp2): the wheel
# from bundle/wheels, the tests from the repository beside the bundle (pyt, above).
if [ "$ngpu" -ge 2 ] && { has python || has fsdp2 || has fallback; }; then
  step "python: install the wheel (and pytest from bundle/pywheels)" python.txt \
    bash -c "python3 -m pip install -q --no-deps --force-reinstall $here/wheels/lowcon-*.whl && { python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links $here/pywheels pytest; }"
fi
if [ "$ngpu" -ge 2 ] && has python; then
  export LOWCON_BIN="$L"
  lp=(timeout 240 "$L" launch --nproc-per-node 2 --tee --)
  tr=(timeout 240 python3 -m torch.distributed.run --nproc-per-node 2)
  step "python: torch tensors, every algorithm (lowcon launch)" python.txt "${lp[@]}" python3 "$pyt/gpu_torch_worker.py"
  step "python: pool, reuse, CuPy, two groups (lowcon launch)" python.txt "${lp[@]}" python3 "$pyt/gpu_pool_worker.py"
  step "python: pool, reuse, CuPy, two groups (torchrun)" python.txt "${tr[@]}" --master-port 29511 "$pyt/gpu_pool_worker.py"
  step "python: SIGKILLed rank named, ranks by hand (GPU)" python.txt env LOWCON_PYTEST_BACKEND=gpu timeout 120 \
    python3 -m pytest -q -p no:cacheprovider "$pyt/test_host.py" -k sigkilled
  step "python: FSDP2 training on lowcon vs NCCL (torchrun)" python-fsdp.txt "${tr[@]}" --master-port 29521 "$pyt/gpu_fsdp_worker.py"
  step "python: the torch.distributed backend on CUDA tensors" python.txt env LOWCON_PYTEST_BACKEND=gpu timeout 300 \
    python3 -m pytest -q -p no:cacheprovider "$pyt/test_torch_backend.py"
  for v in 3.11 3.13; do
    if command -v "python$v" >/dev/null; then
      step "python$v: host-backend tests" python.txt timeout 200 "python$v" -m pytest -q -p no:cacheprovider "$pyt/test_host.py"
    else
      echo "python$v: not on this machine" >> "$out/python.txt"
    fi
  done
fi
if [ "$ngpu" -ge 2 ] && has fallback && ! has python; then
  step "python: the torch.distributed backend on CUDA tensors (NCCL fallback: all-to-all, send/recv)" python.txt \
    env LOWCON_BIN="$L" LOWCON_PYTEST_BACKEND=gpu timeout 300 \
    python3 -m pytest -q -p no:cacheprovider "$pyt/test_torch_backend.py"
fi
if [ "$ngpu" -ge 2 ] && has fsdp2; then
  read -r -a fargs <<< "${LOWCON_FSDP2_ARGS:-}"
  step "fsdp2: paired end-to-end benchmark (${LOWCON_FSDP2_ARGS:-default sweep})" fsdp2.txt \
    timeout "${LOWCON_FSDP2_TIMEOUT:-560}" bash "$repo/crates/lowcon-py/bench/run_fsdp2.sh" "$out/fsdp2" "${fargs[@]}"
fi
echo
echo "== summary"
cat "$summary"
if [ -s "$out/bench-barrier.txt" ]; then echo; grep -v '^{' "$out/bench-barrier.txt" | grep -v '^==' ; fi
for f in python-fsdp fsdp2 capi never bench-queue bench-overlap-110 bench-all-gather bench-reduce-scatter bench-rs-ctas bench-overlap bench-saturated; do
  [ -s "$out/$f.txt" ] && { echo; grep -v '^==' "$out/$f.txt" | grep -v '^\s*$' | grep -v 'done   $' | tail -n 80; }
done
echo "== overall: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc
