#!/usr/bin/env bash
# lowcon's multi-rank GPU suites on ONE GPU: 2, 3, 4 and 8 ranks sharing it
# (LOWCON_SHARE_GPU=1), under MPS when its daemon starts; or, with SHARED_GPU a list, on
# those GPUs round-robin. For checking correctness on a 1- or 2-GPU machine; nothing here
# measures speed (the ranks share the copy engines and SMs; on one GPU nothing crosses
# NVLink). scripts/gpu-bundle.sh copies it into the bundle:
#
#     bash bundle/gpu-shared.sh          # $OUT/shared.tgz and $OUT/summary.txt, else bundle/logs-shared
#
# With $OUT set (a device tool's folder, which brings back a few files), the logs go to
# /tmp/shared and leave as one file, $OUT/shared.tgz (written on exit; SHARED_TAR names
# another), beside a copy of summary.txt. Give the device call a minute more than
# SHARED_BUDGET (MPS's start and stop run outside it).
#
# Environment:
#   SHARED_WORLDS   world sizes (default "2 3 4 8")
#   SHARED_PARTS    any of: tp (the fused tensor-parallel ops: tp_worker.py, tp_mlp.py),
#                   rust (barriers, signals, mapping, memory, every collective
#                   with both sync methods, bad input, dead peers: SIGKILL and a clean
#                   exit with calls in flight), capi (the C check and its dead peers),
#                   python (torch tensors, the pool and CuPy, a SIGKILLed rank, the
#                   torch.distributed backend, FSDP2 with hooks against Gloo; at 2
#                   ranks the fault matrix with its then-shrink column, at 3 the FSDP2
#                   shrink example); default all
#   SHARED_BUDGET   seconds for the whole run (default 560: one 10-minute device call;
#                   all parts at every size take three: "rust capi" at 2 3 4 8, python
#                   at 2 3 4, python at 8)
#   STEPS_ONLY      an extended regex: only the steps whose names match run (e.g.
#                   "coll-mapped|FSDP2"; set-up steps always run)
#   SHARED_GPU      the GPU to share (default 0), or a list ("0,1"): the ranks then go
#                   round-robin over those GPUs (rank r on the (r mod n)-th), so that at 4
#                   and 8 ranks on a 2-GPU box every rank has peers on its own GPU and
#                   across NVLink: the nearest this box comes to 8 GPUs (correctness only)
#   SHARED_LOGS     the log folder (default /tmp/shared with $OUT, else bundle/logs-shared):
#                   one per instance where instances run side by side on several GPUs of
#                   one box (each with SHARED_GPU, SHARED_TAR and different SHARED_WORLDS;
#                   its summary then goes to SHARED_TAR's name with -summary.txt)
#   SHARED_SKIP_INSTALL=1  the wheel and pytest are installed already (side-by-side runs)
#   SHRINKS         live shrinks in the leak check (default 100)
#   SHARED_MPS=0    do not start MPS (time-sliced contexts: correct, about 200x slower
#                   barriers)
# Exit status 0 only if every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
L="$here/lowcon"
if [ ! -x "$L" ]; then
  echo "gpu-shared.sh: no lowcon binary beside this script in $here: build the bundle with" \
    "scripts/gpu-bundle.sh and run bundle/gpu-shared.sh" >&2
  exit 2
fi
if [ -n "${OUT:-}" ]; then
  out=${SHARED_LOGS:-/tmp/shared}; rm -rf "$out"; SHARED_TAR=${SHARED_TAR:-$OUT/shared.tgz}
else
  out=${SHARED_LOGS:-$here/logs-shared}
fi
mkdir -p "$out"
: > "$out/summary.txt"
# The wheel installed by the caller (instances run side by side must not reinstall it at once).
[ -n "${SHARED_SKIP_INSTALL:-}" ] && touch "$out/.wheel"
# Where the summary goes beside the tarball: $OUT/summary.txt, or for an instance with
# logs of its own (SHARED_LOGS) TAR-summary.txt beside its tarball.
summary_copy=${OUT:+$OUT/summary.txt}
[ -n "${SHARED_LOGS:-}" ] && [ -n "${SHARED_TAR:-}" ] && summary_copy=${SHARED_TAR%.tgz}-summary.txt
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget "${SHARED_BUDGET:-560}"
worlds=${SHARED_WORLDS:-2 3 4 8}
parts=${SHARED_PARTS:-rust capi python}
has() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }

# NVLink multicast stays off on shared machines (shared/GPU.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SHARED_GPU=${SHARED_GPU:-0}
SHARED_GPU=${SHARED_GPU// /}
export LOWCON_REQUIRE_GPU=1 LOWCON_SHARE_GPU=1 CUDA_VISIBLE_DEVICES=$SHARED_GPU
IFS=, read -r -a shared_gpus <<< "$SHARED_GPU"
ngpu=${#shared_gpus[@]}
# Each MPS client asks for the 8 hardware work queues a process has without MPS: with
# fewer, lowcon's calls on several streams share a queue and can deadlock across ranks
# (seen at 2 ranks under MPS: coll-stress's two streams stopped at their 6th call).
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-8}
# No CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: the group caps its kernels' CTAs when ranks share
# a GPU (NOTE [shared CTAs], host/src/plan/mod.rs); a per-client SM cap of 12% left too
# few SMs for torch's kernels beside them (FSDP2 at 8 ranks stopped; uncapped it passed).
# 32 work queues per client is too many for 8 MPS clients ("device busy or unavailable").
# CPU references in every rank: a thread or two each, as torchrun gives them.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export PYTHONUNBUFFERED=1
py_nvidia=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
for d in "$py_nvidia/nccl/lib" "$py_nvidia/cublas/lib" /usr/local/cuda/lib64; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

# MPS: one daemon for this run, its pipe and log folders of its own, stopped on any exit.
mps=off
mps_dir=$(mktemp -d "${TMPDIR:-/tmp}/lowcon-mps.XXXXXX")
mps_started=0
stop_mps() {
  if [ "$mps_started" = 1 ]; then
    CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe nvidia-cuda-mps-control <<< quit >/dev/null 2>&1
    for _ in $(seq 50); do pgrep -f "nvidia-cuda-mps-(control|server)" >/dev/null || break; sleep 0.1; done
    cp "$mps_dir/log/control.log" "$out/mps-control.log" 2>/dev/null
    cp "$mps_dir/log/server.log" "$out/mps-server.log" 2>/dev/null
    mps_started=0
  fi
  rm -rf "$mps_dir"
}
trap 'exit 143' TERM INT
trap 'stop_mps; if [ -n "${SHARED_TAR:-}" ]; then tar -C "$out" -czf "$SHARED_TAR" . 2>/dev/null; [ -n "$summary_copy" ] && cp "$out/summary.txt" "$summary_copy"; fi' EXIT
if [ "${SHARED_MPS:-1}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  # A daemon that started but does not answer is stopped (on exit) and not used.
  if nvidia-cuda-mps-control -d; then
    mps_started=1
    sleep 0.5
    if echo get_server_list | nvidia-cuda-mps-control >/dev/null; then mps=on; fi
  fi
  if [ "$mps" != on ]; then
    stop_mps
    mps_dir=$(mktemp -d "${TMPDIR:-/tmp}/lowcon-mps.XXXXXX")
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
fi
if [ "$mps" = on ]; then
  # A client of this daemon numbers the GPUs the daemon sees, not the machine's: the
  # daemon sees SHARED_GPU alone, its devices 0 .. n-1 (with CUDA_VISIBLE_DEVICES=1 kept,
  # every rank's cuInit found no device; seen 2026-11-27 running two instances on a 2-GPU box).
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((ngpu - 1)))
  export CUDA_VISIBLE_DEVICES
  echo "gpu-shared: MPS daemon started on GPU(s) ${SHARED_GPU:-0} (pipes in $mps_dir/pipe)" | tee -a "$out/summary.txt"
else
  echo "gpu-shared: MPS is not running (disabled, missing or failed to start): the ranks' contexts are" \
    "time-sliced; the checks are the same, the barriers far slower" | tee -a "$out/summary.txt"
fi
{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv; } > "$out/nvidia-smi.txt" 2>&1
st "lowcon info" info.txt 30 "$L" info

if has rust; then
  # One rank: nothing crosses a link (seen 2026-11-25: ce-reduce of a symmetric input
  # panicked there, on a workspace it never needed).
  st "w=1 coll-check and coll-wire (kernel+memop)" coll-w1.txt 200 bash -c \
    "'$L' launch --nproc-per-node 1 --tee -- '$L' selftest coll-check --backend gpu --large 70001 && \
     '$L' launch --nproc-per-node 1 --tee -- '$L' selftest coll-wire --backend gpu --replays 5"
fi
for w in $worlds; do
  run=("$L" launch --nproc-per-node "$w" --gpus "$ngpu" --tee --)
  if has rust; then
    st "w=$w gpu-mapping" "rust-w$w.txt" 60 "${run[@]}" "$L" selftest gpu-mapping
    st "w=$w gpu-same-device refused without the opt-in" "rust-w$w.txt" 60 \
      env LOWCON_SHARE_GPU=0 LOWCON_DEVICE=0 "$L" launch --nproc-per-node "$w" --tee -- "$L" selftest gpu-same-device
    st "w=$w gpu-barrier-stress 10k (kernel+memop)" "rust-w$w.txt" 120 "${run[@]}" "$L" selftest gpu-barrier-stress --iters 10000
    st "w=$w gpu-publish-signal 2k (kernel+memop)" "rust-w$w.txt" 120 "${run[@]}" "$L" selftest gpu-publish-signal --rounds 2000
    st "w=$w gpu-skip-barrier (kernel+memop)" "rust-w$w.txt" 120 "${run[@]}" "$L" selftest gpu-skip-barrier
    st "w=$w gpu-dead-peer (kernel)" "rust-w$w.txt" 60 "${run[@]}" "$L" selftest gpu-dead-peer --method kernel
    st "w=$w gpu-dead-peer (memop)" "rust-w$w.txt" 60 "${run[@]}" "$L" selftest gpu-dead-peer --method memop
    st "w=$w gpu-mismatched-size" "rust-w$w.txt" 60 "${run[@]}" "$L" selftest gpu-mismatched-size
    st "w=$w gpu-memory-release" "rust-w$w.txt" 60 "${run[@]}" "$L" selftest gpu-memory-release
    st "w=$w coll-check every algorithm/dtype/op (kernel+memop)" "coll-w$w.txt" 200 "${run[@]}" "$L" selftest coll-check --backend gpu
    for m in kernel memop; do
      st "w=$w coll-stress 1000 calls x 2 streams ($m)" "coll-w$w.txt" 120 "${run[@]}" "$L" selftest coll-stress --backend gpu --method "$m"
    done
    st "w=$w coll-bad-input" "coll-w$w.txt" 60 "${run[@]}" "$L" selftest coll-bad-input --backend gpu
    st "w=$w coll-wire: bf16 wire bit-exact vs f32, counters, graph replays (kernel+memop)" "wire-w$w.txt" 200 \
      "${run[@]}" "$L" selftest coll-wire --backend gpu --replays "${WIRE_REPLAYS:-20}"
    st "w=$w coll-mapped: ordinary inputs read in place (kernel+memop)" "coll-w$w.txt" 120 "${run[@]}" "$L" selftest coll-mapped
    # 1000 replays up to 4 ranks, 300 beyond. Most of a replay's time is the test's CPU
    # reference (refill and check: 45 of 48 ms per replay at 4 ranks on one H200, 2026-11-28,
    # ea8ac1c), which grows with the ranks; since it runs on rayon, 1000 replays at 4 ranks
    # take 104 s of the step's 240 (on one thread they outran it).
    replays=${GRAPH_REPLAYS:-$([ "$w" -le 4 ] && echo 1000 || echo 300)}
    st "w=$w coll-graph: 12 captured calls x $replays replays, two streams, refusals (kernel+memop)" \
      "graph-w$w.txt" 240 "${run[@]}" "$L" selftest coll-graph --replays "$replays"
    for m in kernel memop; do
      st "w=$w coll-graph: SIGKILL at replay 50, no launcher ($m)" "graph-w$w.txt" 90 \
        env DP_SCENARIO=coll-graph bash "$here/gpu-dead-peer.sh" "$CUDA_VISIBLE_DEVICES" "$w" "$m" "$L" "$out" 50
    done
    for m in kernel memop; do
      st "w=$w coll-shrink: SIGKILL at call 20, the survivors shrink and pass the suite ($m)" "shrink-w$w.txt" 120 \
        env DP_SCENARIO="coll-shrink --backend gpu" bash "$here/gpu-dead-peer.sh" "$CUDA_VISIBLE_DEVICES" "$w" "$m" "$L" "$out" 20
    done
    st "w=$w coll-shrink: ${SHRINKS:-100} shrinks of a live group, no leak" "shrink-w$w.txt" 240 \
      "${run[@]}" "$L" selftest coll-shrink --backend gpu --healthy "${SHRINKS:-100}"
    for m in kernel memop; do
      # Ranks by hand (no launcher): the library alone names the dead rank.
      st "w=$w coll-dead-peer SIGKILL mid-loop, no launcher ($m)" "dead-w$w.txt" 90 \
        bash "$here/gpu-dead-peer.sh" "$CUDA_VISIBLE_DEVICES" "$w" "$m" "$L" "$out"
      st "w=$w coll-dead-peer clean exit, 16 MiB calls queued ($m)" "dead-w$w.txt" 90 \
        env DP_ARGS="--exit exit --elems 4194304 --staged" bash "$here/gpu-dead-peer.sh" "$CUDA_VISIBLE_DEVICES" "$w" "$m" "$L" "$out"
    done
  fi
  if has capi; then
    st "w=$w C API: lowcon_check.c as C11 and C++17, then dead peers" "capi-w$w.txt" 150 \
      env CAPI_WORLDS="$w" bash "$here/capi/capi-check.sh" gpu "$L" "$here/capi" "$here/capi" "$here/capi/lowcon_check.c" "$out/capi-w$w"
  fi
  if has python || has tp; then
    repo=$(cd "$here/.." && pwd)
    pyt="$repo/crates/lowcon-py/tests"
    if [ ! -f "$out/.wheel" ]; then
      st "python: install the wheel (and pytest from bundle/pywheels)" python.txt 120 \
        bash -c "python3 -m pip install -q --no-deps --force-reinstall $here/wheels/lowcon-*.whl && { python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links $here/pywheels pytest; }"
      touch "$out/.wheel"
    fi
    export LOWCON_BIN="$L"
    port=$((29600 + w))
  fi
  if has tp; then
    st "w=$w tp: fused ops against the reference, gradients, bad input" "tp-w$w.txt" 200 \
      "${run[@]}" python3 "$pyt/tp_worker.py" check gpu
    st "w=$w tp: the first matmul starts before the last piece lands (serial control fails)" "tp-w$w.txt" 120 \
      "${run[@]}" python3 "$pyt/tp_worker.py" overlap
    st "w=$w tp: ${TP_CALLS:-1000} calls eager and ${TP_CALLS:-1000} replays, every piece current" "tp-w$w.txt" 240 \
      "${run[@]}" python3 "$pyt/tp_worker.py" fresh "${TP_CALLS:-1000}"
    st "w=$w tp: the last rank dies, the others get a named error and drained streams" "tp-w$w.txt" 120 \
      "$L" launch --nproc-per-node "$w" --gpus "$ngpu" --keep-going --tee -- python3 "$pyt/tp_worker.py" dead
    st "w=$w tp: a producer that calls the group is refused, the group aborted" "tp-w$w.txt" 60 \
      "$L" launch --nproc-per-node "$w" --gpus "$ngpu" --keep-going --tee -- python3 "$pyt/tp_worker.py" reenter
    st "w=$w tp: the TP MLP example trains as DTensor's parallelize_module does" "tp-w$w.txt" 200 \
      "${run[@]}" python3 "$repo/crates/lowcon-py/examples/tp_mlp.py"
  fi
  if has python; then
    st "w=$w python: torch tensors, every algorithm (lowcon launch)" "python-w$w.txt" 240 "${run[@]}" python3 "$pyt/gpu_torch_worker.py"
    st "w=$w python: pool, reuse, CuPy, two groups (torchrun)" "python-w$w.txt" 240 \
      python3 -m torch.distributed.run --nproc-per-node "$w" --master-port "$port" "$pyt/gpu_pool_worker.py"
    st "w=$w python: the torch.distributed backend on CUDA tensors" "python-w$w.txt" 300 \
      env LOWCON_PYTEST_BACKEND=gpu LOWCON_PYTEST_WORLD="$w" python3 -m pytest -q -p no:cacheprovider "$pyt/test_torch_backend.py"
    if [ "$w" = 2 ]; then
      # NCCL refuses ranks sharing a GPU, so the fallback to NCCL is checked with one rank.
      st "w=1 python: the torch.distributed backend's NCCL fallback on CUDA tensors (one rank)" "python-w1.txt" 120 \
        env LOWCON_SHARE_GPU=0 LOWCON_PYTEST_BACKEND=gpu LOWCON_PYTEST_WORLD=1 \
        python3 -m pytest -q -p no:cacheprovider "$pyt/test_torch_backend.py" -k ops
    fi
    st "w=$w python: FSDP2 with lowcon's hooks against Gloo (torchrun)" "python-fsdp-w$w.txt" 300 \
      python3 -m torch.distributed.run --nproc-per-node "$w" --master-port $((port + 20)) "$pyt/gpu_fsdp_worker.py"
    if [ "$w" = 2 ] || [ "$w" = 4 ]; then
      st "w=$w python: FSDP2 over the bf16 wire, bit-exact vs fp32, with and without accumulation" \
        "python-fsdp-wire-w$w.txt" 300 env LOWCON_PYTEST_BACKEND=gpu LOWCON_PYTEST_LAUNCH="--gpus $ngpu" \
        LOWCON_PYTEST_WIRE_WORLDS="$w" python3 -m pytest -q -s -p no:cacheprovider "$pyt/test_fsdp2_wire.py"
    fi
    if [ "$w" = 2 ]; then
      st "w=$w python: a SIGKILLed rank named, ranks by hand" "python-w$w.txt" 120 \
        env LOWCON_PYTEST_BACKEND=gpu python3 -m pytest -q -p no:cacheprovider "$pyt/test_host.py" -k sigkilled
      # The fault matrix is of 2 ranks; here they share the GPU. Signals, where a
      # group exists, with the then-shrink column, by hand and under --keep-going.
      st "w=$w python: fault matrix with then shrink (hand, keep-going; kernel, memop)" "faults-w$w.txt" 300 \
        env LOWCON_SHARE_GPU=1 LOWCON_DEVICE=0 CUDA_DEVICE_MAX_CONNECTIONS=8 python3 "$pyt/fault_matrix.py" \
        --backend gpu --launchers hand,keep-going --exits sigkill,sigterm --moments ag,rs,pool \
        --syncs kernel,memop --timeout 10 --out "$out/faults-w$w"
    fi
    if [ "$w" = 3 ]; then
      st "w=3 python: FSDP2 shrinks 3 -> 2, re-shards a checkpoint, ends at the no-death loss" \
        "python-fsdp-shrink.txt" 300 env LOWCON_PYTEST_LAUNCH="--gpus $ngpu" \
        python3 -m pytest -q -s -p no:cacheprovider "$pyt/test_fsdp2_shrink.py"
    fi
  fi
done
rm -f "$out/.wheel"
echo "== gpu-shared: MPS $mps; $failures step(s) failed" | tee -a "$out/summary.txt"
[ "$failures" = 0 ]
