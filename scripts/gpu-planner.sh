#!/usr/bin/env bash
# The planner's GPU run on a 4-GPU box (one device call, about 9 minutes), from a bundle
# (scripts/gpu-bundle.sh): `PARTS="..." bash bundle/gpu-planner.sh` from the repository
# root; logs and results are tarred into $OUT/planner.tgz. Parts, separated by spaces:
#   check   the plan-driven schedules at 4 real GPUs: coll-check (CHECK_METHODS, default
#           kernel), coll-wire, coll-bad-input, coll-mapped
#   tune    lowcon bench tune at 4 ranks (tune2: at 2, on GPUs 0 and 1): the tables
#   info    lowcon info at 2, 4 and 8 ranks: what the planner picks, from which table
#   small   small messages at 4 ranks, --graph sweeps 8K..1M (eager and replayed), auto
#           and ll against NCCL, bf16 and f32 (SMALL_DTYPES), all-gather and reduce-scatter;
#           SMALL_TAG names the files (small-TAG-...) of a run with other settings;
#           SMALL_NPROC=2 runs it at 2 ranks (GPUs 0 and 1)
#   fsdp    FSDP2 paired at 4 ranks, 4096x12 and 8192x4 at 1024 tokens, fp32 reduce,
#           20 rounds: NCCL, its A/A twin, lowcon as planned and candidates, NCCL-CE,
#           no communication (FSDP_SWEEP, FSDP_ROUNDS, FSDP_S override)
#   smallfsdp FSDP2 paired at 4 ranks, the small model 2048x8 at 256 and 1024 tokens, 60 rounds
#           (SMALLFSDP_ROUNDS): NCCL, its twin, lowcon, NCCL-CE, no communication
#   confirm FSDP2 paired at 4 ranks, 4096x12 at 1024 and 4096 tokens and 8192x4 at 1024,
#           30 rounds (CONFIRM_ROUNDS): NCCL, its twin, lowcon as shipped, NCCL-CE, no
#           communication (CONFIRM_MODES, CONFIRM_SWEEP, CONFIRM_S)
#   fsdp2   FSDP2 paired at 2 ranks (GPUs 0 and 1), 4096x12 and 8192x4 at 1024 tokens,
#           20 rounds: the 2-GPU regression check (FSDP2_W2_MODES, _SWEEP, _ROUNDS, _S override)
#   ctas    small messages at 4 ranks, 64K..1M, bf16: ll, and sm-direct / sm-oneshot at the
#           default, 32, 64 and 128 CTAs, eager and replayed, NCCL beside (CTAS_REPEAT runs, 3;
#           CTAS_NPROC=2: at 2 ranks; CTAS_RS_ONLY=1: the reduce-scatters only)
#   churn   FSDP2 under allocator churn at 4 ranks (fsdp2_churn.py): NCCL, then lowcon, each in
#           its own job, CHURN_STEPS (2000) steps of a 2048x8 model, a new sequence length each
#           (CHURN_ARGS: more options), empty_cache() every 37: device memory in use over time
#   churn2  as churn at 2 ranks, NCCL on GPUs 0 and 1 beside lowcon on GPUs 2 and 3, at once
#           (one deadline, CHURN_S, for both)
#   tp      tp_bench.py at 4 ranks, 20 rounds (TP_ARGS: more options, e.g. --profile DIR)
#   pygpu   the bindings on 4 GPUs with every call planned: the C check, tp_worker.py check,
#           FSDP2 training against NCCL (gpu_fsdp_worker.py), the torch backend's ops,
#           torch tensors through every algorithm
#   plan    what only a GPU plans comes from the table (plan_gpu_worker.py, a table of its own
#           and the shipped one): CTAs, sync, map_ordinary, lowcon.tp's released reduce-scatter;
#           and the honest floor's traffic calls leave every path correct (traffic_gpu_worker.py)
#   timeline small LL calls against NCCL's at 4 ranks, eager and replayed, from a torch profiler
#           trace (scripts/probes/small_timeline.py, TIMELINE_BYTES): kernel time and the gaps
#           between calls, with NOTE [LL launch overlap] on and off (LOWCON_LL_OVERLAP)
#   deadpeer a rank dies at 4 ranks (SIGKILL, kernel and memop sync; a clean exit under 16 MiB
#           staged calls; one during graph replays; SIGKILL and a clean exit between the bf16
#           wire's own graph launches, SIGKILL between those of a bf16 input packed by
#           sm-direct, and between calls that read it in place): the survivors name it
#           (gpu-dead-peer.sh)
#   graphcost the host's time per cudaGraphLaunch by what the graph holds (kernels, memop waits,
#           copies, the wire's shapes), with 8 and 32 hardware queues, and with the host's
#           caches flushed before each call
#           (scripts/probes/graph_launch_cost.cu, built here with nvcc)
#   profile FSDP2 paired at 4 ranks with --profile, 8192x4 and 4096x12 at 1024 tokens, 15
#           rounds: lowcon, NCCL-CE, NCCL, no communication (waits, kernels, host µs, copy
#           rates); PROFILE_SWEEP, PROFILE_MODES, PROFILE_ROUNDS, PROFILE_S override;
#           PROFILE_NPROC=2 runs it at 2 ranks (GPUs 0 and 1)
# The parts run in this order: check, the FSDP2 ones, tune, info, small, tp. FSDP_MODES overrides the fsdp part's modes. Every step has a deadline (BUDGET, default
# 540 s in all). Exit status 0 only if every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/.." && pwd)
out=/tmp/planner; rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
parts=" ${PARTS:-check tune info small fsdp} "
for p in $parts; do
  case $p in check|tune|tune2|info|small|ctas|fsdp|smallfsdp|churn|churn2|confirm|fsdp2|tp|pygpu|profile|plan|timeline|deadpeer|graphcost) ;;
    *) echo "gpu-planner.sh: unknown part $p" >&2; exit 2;;
  esac
done
has() { [[ $parts == *" $1 "* ]]; }
trap 'tar -C "$out" -czf "${OUT:-$here}/planner.tgz" . 2>/dev/null' EXIT
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget "${BUDGET:-540}"
L="$here/lowcon"
{ nvidia-smi -L; nvidia-smi topo -m; git -C "$repo" log -1 --format='commit %h %cd' 2>/dev/null; } > "$out/smi.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$here"/wheels/lowcon-*.whl > "$out/pip.txt" 2>&1
export PYTHONPATH=/tmp/site
bench=$repo/crates/lowcon-py/bench
l4=("$L" launch --nproc-per-node 4 --tee --)
vis2="CUDA_VISIBLE_DEVICES=0,1"
l2=(env "$vis2" "$L" launch --nproc-per-node 2 --tee --)
if has check; then
  for m in ${CHECK_METHODS:-kernel}; do
    st "coll-check w=4 $m" check.txt 50 "${l4[@]}" "$L" selftest coll-check --backend gpu --method "$m"
  done
  st "coll-wire w=4" check.txt 50 "${l4[@]}" "$L" selftest coll-wire --backend gpu
  st "coll-bad-input w=4" check.txt 30 "${l4[@]}" "$L" selftest coll-bad-input --backend gpu
  st "coll-mapped w=4 (addresses predicted)" check.txt "${MAPPED_S:-150}" env LOWCON_TIMEOUT_MS="${MAPPED_TIMEOUT_MS:-30000}" \
    "${l4[@]}" "$L" selftest coll-mapped
fi
tr4=(python3 -m torch.distributed.run --nproc-per-node 4)
if has timeline; then
  for o in 1 0; do
    st "timeline LOWCON_LL_OVERLAP=$o w=4" timeline.txt 60 env LOWCON_LL_OVERLAP=$o "${tr4[@]}" --master-port 29531 \
      "$repo/scripts/probes/small_timeline.py" --bytes "${TIMELINE_BYTES:-16384}" --out "$out/timeline-$o"
  done
fi
if has graphcost; then
  st "graph launch cost (nvcc)" graphcost.txt 60 nvcc -O2 -arch=sm_90 -o /tmp/graph_launch_cost \
    "$repo/scripts/probes/graph_launch_cost.cu" -lcuda
  for c in 8 32; do
    st "graph launch cost, $c queues" graphcost.txt 60 env CUDA_DEVICE_MAX_CONNECTIONS=$c /tmp/graph_launch_cost 1
  done
  st "graph launch cost, 32 queues, cold caches" graphcost.txt 120 env CUDA_DEVICE_MAX_CONNECTIONS=32 PROBE_COLD=1 \
    /tmp/graph_launch_cost 1
fi
if has deadpeer; then
  for m in kernel memop; do
    st "dead peer w=4 $m (SIGKILL)" deadpeer.txt 80 bash "$here/gpu-dead-peer.sh" 0,1,2,3 4 "$m" "$L" "$out" 300
  done
  st "dead peer w=4 (clean exit under staged calls)" deadpeer.txt 80 env DP_ARGS="--exit exit --elems 4194304 --staged" \
    bash "$here/gpu-dead-peer.sh" 0,1,2,3 4 kernel "$L" "$out" 300
  st "dead peer w=4 (during graph replays)" deadpeer.txt 80 env DP_SCENARIO="coll-graph" \
    bash "$here/gpu-dead-peer.sh" 0,1,2,3 4 kernel "$L" "$out" 50
  # NOTE [wire replays]: the victim dies between the wire's own graph launches.
  for m in kernel memop; do
    st "dead peer w=4 $m (SIGKILL, wire replays)" deadpeer.txt 80 env DP_ARGS="--wire --elems 1048576" \
      bash "$here/gpu-dead-peer.sh" 0,1,2,3 4 "$m" "$L" "$out" 200
  done
  st "dead peer w=4 (clean exit, wire replays)" deadpeer.txt 80 env DP_ARGS="--exit exit --wire --elems 1048576" \
    bash "$here/gpu-dead-peer.sh" 0,1,2,3 4 memop "$L" "$out" 200
  # FSDP2's bf16 copy-in: a bf16 input into f32 packed by sm-direct, replayed as the wire.
  for m in kernel memop; do
    st "dead peer w=4 $m (SIGKILL, bf16 input packed, replays)" deadpeer.txt 80 \
      env DP_ARGS="--bf16-in --elems 1048576" bash "$here/gpu-dead-peer.sh" 0,1,2,3 4 "$m" "$L" "$out" 200
    st "dead peer w=4 $m (SIGKILL, bf16 input read in place)" deadpeer.txt 80 \
      env DP_ARGS="--bf16-in --in-place --elems 1048576" bash "$here/gpu-dead-peer.sh" 0,1,2,3 4 "$m" "$L" "$out" 200
  done
fi
read -r -a extra <<< "${FSDP2_ARGS:-}"
tr2=(env "$vis2" python3 -m torch.distributed.run --nproc-per-node 2)
paired() { # paired NAME SECONDS TORCHRUN... -- OPTIONS...: one paired run into $out/NAME
  local name=$1 t=$2; shift 2
  local -a run=()
  while [ "$1" != "--" ]; do run+=("$1"); shift; done; shift
  st "paired $name" "$name.txt" "$t" "${run[@]}" "$bench/fsdp2_paired.py" --out "$out/$name" --time-budget $((t - 40)) \
    "$@" "${extra[@]}"
  python3 "$bench/fsdp2_paired.py" --report "$out/$name/paired.json" --plot "$out/$name/fsdp2.png" \
    > "$out/$name/table.txt" 2>&1 && cat "$out/$name/table.txt"
}
modes=${FSDP_MODES:-nccl,nccl-b,lowcon,lowcon@sync=memop,lowcon@pieces=4,lowcon@rs_ctas=128,nccl-ce,nocomm}
if has pygpu; then
  pyt=$repo/crates/lowcon-py/tests
  st "C check w=4 (GPU, dead peers)" capi.txt 150 env CAPI_WORLDS=4 bash "$here/capi/capi-check.sh" gpu "$L" "$here/capi" \
    "$here/capi" "$here/capi/lowcon_check.c" "$out/capi"
  st "tp_worker check gpu w=4" py.txt 90 "${l4[@]}" python3 "$pyt/tp_worker.py" check gpu
  st "gpu_fsdp_worker w=4 (FSDP2 vs NCCL)" py.txt 120 "${tr4[@]}" --master-port 29521 "$pyt/gpu_fsdp_worker.py"
  st "gpu_torch_worker w=4 (every algorithm)" py.txt "${TORCH_WORKER_S:-270}" "${l4[@]}" python3 "$pyt/gpu_torch_worker.py"
fi
if has plan; then
  pyt=$repo/crates/lowcon-py/tests
  python3 "$pyt/plan_gpu_worker.py" write-table "$out/plan-table.txt"
  st "plan_gpu_worker w=4 (a table of its own)" plan.txt 60 env LOWCON_TUNING="$out/plan-table.txt" "${l4[@]}" \
    python3 "$pyt/plan_gpu_worker.py" ours
  st "plan_gpu_worker w=4 (the shipped table)" plan.txt 60 "${l4[@]}" python3 "$pyt/plan_gpu_worker.py" shipped
  st "traffic_gpu_worker w=4" plan.txt 60 "${l4[@]}" python3 "$pyt/traffic_gpu_worker.py"
fi
prof=("${tr4[@]}"); [ "${PROFILE_NPROC:-4}" = 2 ] && prof=("${tr2[@]}")
has profile && paired profile "${PROFILE_S:-240}" "${prof[@]}" -- --sweep "${PROFILE_SWEEP:-8192x4:1024;4096x12:1024}" \
  --reduce-dtypes fp32 --rounds "${PROFILE_ROUNDS:-15}" --profile --modes "${PROFILE_MODES:-nccl,lowcon,nccl-ce,nocomm}"
has fsdp && paired fsdp "${FSDP_S:-330}" "${tr4[@]}" -- --sweep "${FSDP_SWEEP:-4096x12:1024;8192x4:1024}" --reduce-dtypes fp32 \
  --rounds "${FSDP_ROUNDS:-20}" --modes "$modes"
has smallfsdp && paired smallfsdp "${SMALLFSDP_S:-150}" "${tr4[@]}" -- --sweep "2048x8:256,1024" --reduce-dtypes fp32 \
  --rounds "${SMALLFSDP_ROUNDS:-60}" --modes "${SMALLFSDP_MODES:-nccl,nccl-b,lowcon,nccl-ce,nocomm}"
has confirm && paired confirm "${CONFIRM_S:-420}" "${tr4[@]}" -- --sweep "${CONFIRM_SWEEP:-4096x12:1024,4096;8192x4:1024}" --reduce-dtypes fp32 \
  --rounds "${CONFIRM_ROUNDS:-30}" --modes "${CONFIRM_MODES:-nccl,nccl-b,lowcon,nccl-ce,nocomm}"
has fsdp2 && paired fsdp2 "${FSDP2_W2_S:-240}" "${tr2[@]}" -- --sweep "${FSDP2_W2_SWEEP:-4096x12:1024;8192x4:1024}" \
  --reduce-dtypes fp32 --rounds "${FSDP2_W2_ROUNDS:-20}" --modes "${FSDP2_W2_MODES:-nccl,nccl-b,lowcon,nccl-ce,nocomm}"
src="$(date +%F), commit ${COMMIT:-$(git -C "$repo" log -1 --format=%h 2>/dev/null || echo "?")}"
# The box's GPU model, in the tables' source lines (H100 and H200 boxes both run this).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | sed 's/^NVIDIA //')
has tune && st "bench tune w=4" tune.txt 100 "${l4[@]}" "$L" bench tune --out "$out/tune-w4.txt" \
  --source "$src, 4x ${gpu:-?}: lowcon bench tune"
has tune2 && st "bench tune w=2" tune.txt 80 "${l2[@]}" "$L" bench tune --out "$out/tune-w2.txt" \
  --source "$src, 2x ${gpu:-?} (GPUs 0 and 1 of a 4-GPU box): lowcon bench tune"
if has info; then
  for w in 2 4 8; do st "info --world $w" info.txt 20 "$L" info --world "$w"; done
  [ -f "$out/tune-w4.txt" ] && st "info --world 4 with the tuned table" info.txt 20 env LOWCON_TUNING="$out/tune-w4.txt" "$L" info --world 4
fi
if has small; then
  t=${SMALL_TAG:+$SMALL_TAG-}
  ls=("${l4[@]}"); [ "${SMALL_NPROC:-4}" = 2 ] && ls=("${l2[@]}")
  for k in $(seq "${SMALL_REPEAT:-1}"); do
    for c in all-gather reduce-scatter; do
      for d in ${SMALL_DTYPES:-bf16 f32}; do
        st "small $t$c $d w=${SMALL_NPROC:-4} (graph) #$k" "small-$t$c-$d-$k.txt" 45 "${ls[@]}" "$L" bench "$c" -b 8K -e 1M -f 2 -n 20 \
          --reps 25 --dtype "$d" --sync kernel --graph --algorithms auto,ll --json "$out/small-$t$c-$d-$k.json"
      done
    done
  done
fi
if has ctas; then
  lc=("${l4[@]}"); [ "${CTAS_NPROC:-4}" = 2 ] && lc=("${l2[@]}")
  for k in $(seq "${CTAS_REPEAT:-3}"); do
    st "ctas reduce-scatter bf16 w=${CTAS_NPROC:-4} #$k" "ctas-rs-$k.txt" 60 "${lc[@]}" "$L" bench reduce-scatter -b 64K -e 1M -f 2 \
      -n 20 --reps 25 --dtype bf16 --sync kernel --graph --algorithms ll,sm-direct --ctas default,32,64,128 \
      --json "$out/ctas-rs-$k.json"
    [ -n "${CTAS_RS_ONLY:-}" ] && continue
    st "ctas all-gather bf16 w=${CTAS_NPROC:-4} #$k" "ctas-ag-$k.txt" 60 "${lc[@]}" "$L" bench all-gather -b 64K -e 1M -f 2 \
      -n 20 --reps 25 --dtype bf16 --sync kernel --graph --algorithms ll,sm-oneshot --ctas default,32,64,128 \
      --json "$out/ctas-ag-$k.json"
  done
fi
if has churn; then
  read -r -a churn_args <<< "${CHURN_ARGS:-}"
  for m in nccl lowcon; do
    st "churn $m w=4" churn.txt "${CHURN_S:-300}" "${tr4[@]}" --master-port 29531 "$bench/fsdp2_churn.py" --mode "$m" \
      --out "$out/churn" --steps "${CHURN_STEPS:-2000}" "${churn_args[@]}"
  done
  python3 "$bench/fsdp2_churn.py" --report "$out"/churn/churn-*.json > "$out/churn/report.txt" 2>&1 && cat "$out/churn/report.txt"
fi
if has churn2; then
  read -r -a churn_args <<< "${CHURN_ARGS:-}"
  mkdir -p "$out/churn"
  # shellcheck disable=SC2016 # expanded by the inner shell
  st "churn nccl w=2 (GPUs 0,1) beside lowcon w=2 (GPUs 2,3)" churn.txt "${CHURN_S:-300}" bash -c '
    script=$1 dir=$2 steps=$3; shift 3
    CUDA_VISIBLE_DEVICES=0,1 python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29531 "$script" \
      --mode nccl --out "$dir" --steps "$steps" "$@" > "$dir/nccl.log" 2>&1 & a=$!
    CUDA_VISIBLE_DEVICES=2,3 python3 -m torch.distributed.run --nproc-per-node 2 --master-port 29541 "$script" \
      --mode lowcon --out "$dir" --steps "$steps" "$@" > "$dir/lowcon.log" 2>&1 & b=$!
    trap "kill $a $b 2>/dev/null" TERM
    wait $a; ra=$?; wait $b; rb=$?
    tail -n 5 "$dir/nccl.log" "$dir/lowcon.log"; [ $ra = 0 ] && [ $rb = 0 ]' \
    churn2 "$bench/fsdp2_churn.py" "$out/churn" "${CHURN_STEPS:-2000}" "${churn_args[@]}"
  python3 "$bench/fsdp2_churn.py" --report "$out"/churn/churn-*.json > "$out/churn/report.txt" 2>&1 && cat "$out/churn/report.txt"
fi
read -r -a tp_args <<< "${TP_ARGS:-}"
has tp && st "tp_bench w=4" tp.txt "${TP_S:-120}" "${tr4[@]}" "$bench/tp_bench.py" --rounds 20 --json "$out/tp.json" \
  "${tp_args[@]}"
cat "$out/summary.txt"
echo "$failures step(s) failed"
[ "$failures" = 0 ]
