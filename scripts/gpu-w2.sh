#!/usr/bin/env bash
# What a 2-GPU box can measure of FSDP2's shipped plan (the bf16 copy-in, NOTE [bf16
# copy-in]) and of small messages at 2 ranks, one device call per PARTS list, from a
# bundle (scripts/gpu-bundle.sh): `PARTS="..." bash bundle/gpu-w2.sh` from the repository
# root. Logs go to /tmp/w2 and leave as $OUT/w2.tgz (one file), with $OUT/summary.txt.
# Parts:
#   check    coll-wire at 2 real GPUs (the bf16 input on sm-direct, replays), and a rank
#            SIGKILLed between the replays of a bf16 input packed by sm-direct, and between
#            the calls that read it in place (kernel, memop)
#   overlap  beside a saturated 8192^3 GEMM, 256 MiB per rank: the reduce-scatter FSDP2
#            ships (`bench overlap --bf16-in`, each of OVERLAP_RS, ALGORITHM:CTAS entries;
#            NCCL and NCCL-CE in f32 and bf16) and the all-gather (ce-pull; OVERLAP_AG=
#            leaves it out); OVERLAP_FLAGS replaces --bf16-in (empty: a bf16 reduce-scatter)
#   fsdp2    FSDP2 paired at 2 ranks, 8192x4 and 4096x12 at 1024 tokens, fp32 reduce, 20
#            rounds: NCCL, its A/A twin, lowcon as shipped, its fp32 copy-in, NCCL-CE,
#            no communication (W2_SWEEP, W2_ROUNDS, W2_S, W2_MODES override)
#   mem2     peak memory at 2 ranks, 8192x4, lowcon as shipped in a job of its own beside
#            NCCL (a job's modes share one group and its workspaces; W2_MEM_MODES overrides)
#   small    small messages at 2 ranks (gpu-planner.sh's part, SMALL_REPEAT sweeps, 3)
# W2_NPROC=4 runs check and overlap at 4 ranks (GPUs 0-3) on a 4-GPU box; fsdp2, mem2 and
# small stay at 2 (gpu-planner.sh has the 4-rank FSDP2 parts).
# COMMIT names the commit measured. Exit status 0 only if every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=/tmp/w2; rm -rf "$out"; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
np=${W2_NPROC:-2}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((np - 1)))}
IFS=, read -r -a visible <<< "$CUDA_VISIBLE_DEVICES"
if [ "${#visible[@]}" -lt "$np" ]; then
  echo "gpu-w2.sh: W2_NPROC=$np ranks, but CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES names ${#visible[@]} GPUs" >&2
  exit 2
fi
parts=" ${PARTS:-check overlap small} "
has() { [[ $parts == *" $1 "* ]]; }
trap 'tar -C "$out" -czf "${OUT:-$here}/w2.tgz" . 2>/dev/null; cp "$out/summary.txt" "${OUT:-$here}/" 2>/dev/null' EXIT
# shellcheck source=scripts/gpu-steps.sh
. "$here/gpu-steps.sh"
steps_budget "${BUDGET:-540}"
L="$here/lowcon"
lw=("$L" launch --nproc-per-node "$np" --tee --)
{ nvidia-smi -L; nvidia-smi topo -m; echo "commit ${COMMIT:-?}"; } > "$out/smi.txt" 2>&1
if has check; then
  st "coll-wire w=$np" check.txt 90 "${lw[@]}" "$L" selftest coll-wire --backend gpu --replays 20
  for m in kernel memop; do
    st "dead peer w=$np $m (SIGKILL, bf16 input packed, replays)" deadpeer.txt 80 \
      env DP_ARGS="--bf16-in --elems 1048576" bash "$here/gpu-dead-peer.sh" "$CUDA_VISIBLE_DEVICES" "$np" "$m" "$L" "$out" 200
    st "dead peer w=$np $m (SIGKILL, bf16 input read in place)" deadpeer.txt 80 \
      env DP_ARGS="--bf16-in --in-place --elems 1048576" bash "$here/gpu-dead-peer.sh" "$CUDA_VISIBLE_DEVICES" "$np" "$m" "$L" "$out" 200
  done
fi
if has overlap; then
  # OVERLAP_RS: ALGORITHM:CTAS entries (a bench variant such as ce-reduce/once, and a CTA
  # count or "default"); NCCL and NCCL-CE beside the first only.
  nccl=()
  read -r -a rsflags <<< "${OVERLAP_FLAGS---bf16-in}"
  for e in ${OVERLAP_RS:-sm-direct:64 sm-direct:16 ce-reduce:default}; do
    a=${e%%:*} c=${e##*:} tag=${e//[:\/]/-}
    st "overlap rs ${rsflags[*]} $a ctas=$c w=$np" "overlap-rs-$tag.txt" 150 "${lw[@]}" "$L" bench overlap \
      --collective reduce-scatter "${rsflags[@]}" --algorithms "$a" --ctas "$c" --shard 256M --priority high --no-null \
      "${nccl[@]}" --json "$out/overlap-rs-$tag.json"
    nccl=(--no-nccl)
  done
  [ -n "${OVERLAP_AG-1}" ] && st "overlap ag ce-pull w=$np" overlap-ag.txt 120 "${lw[@]}" "$L" bench overlap \
    --collective all-gather --algorithms ce-pull --shard 256M --priority high --no-null --json "$out/overlap-ag.json"
fi
if [[ $parts == *" fsdp2 "* || $parts == *" mem2 "* || $parts == *" small "* ]]; then
  p=()
  has fsdp2 && p+=(fsdp2)
  has small && p+=(small)
  # The step's deadline follows the FSDP2 run's own budget (W2_S) plus the small sweeps'
  # time; the script's BUDGET still bounds it.
  st "gpu-planner.sh ${p[*]} w=2" planner.txt $((${W2_S:-240} + 180)) env OUT="$out" PARTS="${p[*]}" SMALL_NPROC=2 \
    SMALL_REPEAT="${SMALL_REPEAT:-3}" FSDP2_W2_SWEEP="${W2_SWEEP:-8192x4:1024;4096x12:1024}" \
    FSDP2_W2_ROUNDS="${W2_ROUNDS:-20}" FSDP2_W2_S="${W2_S:-240}" \
    FSDP2_W2_MODES="${W2_MODES:-nccl,nccl-b,lowcon,lowcon@copyin=fp32,nccl-ce,nocomm}" BUDGET="${PLANNER_BUDGET:-400}" \
    bash "$here/gpu-planner.sh"
  mkdir -p "$out/mem2"
  has mem2 && st "gpu-planner.sh fsdp2 w=2, peak memory" mem2.txt 90 env OUT="$out/mem2" PARTS=fsdp2 \
    FSDP2_W2_SWEEP="8192x4:1024" FSDP2_W2_ROUNDS=6 FSDP2_W2_S=60 FSDP2_W2_MODES="${W2_MEM_MODES:-nccl,lowcon,nocomm}" BUDGET=75 \
    bash "$here/gpu-planner.sh"
fi
cat "$out/summary.txt"
[ "$failures" = 0 ]
