#!/usr/bin/env bash
# Catches the coll-mapped two-thread stall (docs/design.md, "Enough hardware queues"):
# `lowcon selftest coll-mapped` (with CALLS set, only its two-thread part, CALLS
# all-gathers per thread: `--threads-only`, which did not stall in 10 runs on 2026-11-28
# where the whole test stalled in 2 of 6) at WORLD ranks sharing one GPU (under MPS when
# its daemon starts), RUNS times, each watched. A run still going after STALL_S seconds
# (default 45: the whole test takes about 24 s at 4 shared ranks on an H100, and a stalled
# wait times out at 60 s) has every
# rank's threads dumped (gdb or cuda-gdb where either is installed; always each thread's
# name, kernel wait channel, syscall and kernel stack from /proc) before it is killed, so
# the log says where each thread waits. From the repository root with the bundle beside it:
#
#     WORLD=4 RUNS=8 bash bundle/gpu-stall.sh          # logs tarred into $OUT/stall.tgz
#
# Debug lines (RUST_LOG=lowcon=debug) name the verifier's submissions and releases per
# channel. Stops after STALLS stalls (default 2). Exit status 0 only if no run stalled.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
L="$here/lowcon"
out=/tmp/stall; rm -rf "$out"; mkdir -p "$out"
world=${WORLD:-4}; runs=${RUNS:-8}; stall_s=${STALL_S:-45}; max_stalls=${STALLS:-2}
only=(); [ -n "${CALLS:-}" ] && only=(--threads-only "$CALLS")
trap 'tar -C "$out" -czf "${OUT:-$here}/stall.tgz" . 2>/dev/null' EXIT
mps_dir=$(mktemp -d "${TMPDIR:-/tmp}/lowcon-mps.XXXXXX")
export CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
  trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; tar -C "$out" -czf "${OUT:-$here}/stall.tgz" . 2>/dev/null' EXIT
  export CUDA_VISIBLE_DEVICES=0
  echo "MPS on" | tee -a "$out/summary.txt"
else
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  echo "MPS off: time-sliced contexts" | tee -a "$out/summary.txt"
fi
nvidia-smi -L >> "$out/summary.txt" 2>&1
dbg=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null || true)
echo "debugger: ${dbg:-none}" | tee -a "$out/summary.txt"

dump() { # dump PID: every thread of one rank
  local pid=$1 t
  echo "=== pid $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)"
  for t in /proc/"$pid"/task/*; do
    printf '%s %-18s wchan=%-24s syscall=%s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)" \
      "$(cat "$t/wchan" 2>/dev/null)" "$(cut -d' ' -f1-3 "$t/syscall" 2>/dev/null)"
    sed 's/^/      /' "$t/stack" 2>/dev/null | head -12
  done
  if [ -n "$dbg" ]; then
    timeout 60 "$dbg" -q -batch -p "$pid" -ex "set pagination off" -ex "thread apply all bt 24" 2>&1 | \
      grep -v "^\[New LWP\|^\[Thread debugging\|^Using host libthread" | head -400
  fi
}

stalls=0
for i in $(seq "$runs"); do
  log=$out/run$i.log
  t0=$(date +%s)
  RUST_LOG=lowcon=debug "$L" launch --nproc-per-node "$world" --gpus 1 --tee -- "$L" selftest coll-mapped "${only[@]}" > "$log" 2>&1 &
  job=$!
  while kill -0 "$job" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$stall_s" ]; do sleep 0.5; done
  if kill -0 "$job" 2>/dev/null; then
    stalls=$((stalls + 1))
    echo "run $i: STALLED after ${stall_s} s: threads dumped in stall$i.txt" | tee -a "$out/summary.txt"
    for pid in $(pgrep -f "selftest coll-mapped" | grep -v "^$job\$"); do
      [ "$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" = "" ] && continue
      grep -q "launch" "/proc/$pid/cmdline" 2>/dev/null && continue
      dump "$pid"
    done > "$out/stall$i.txt" 2>&1
    pkill -9 -f "selftest coll-mapped"; wait "$job" 2>/dev/null
    # The debug lines of the stalled channels, last ones per rank.
    grep -E "verifier|channel [56]" "$log" | tail -80 > "$out/stall$i-verifier.txt"
    gzip -f "$log"
  else
    wait "$job"; rc=$?
    echo "run $i: rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
    if [ "$rc" = 0 ]; then rm -f "$log"; else gzip -f "$log"; fi
  fi
  [ "$stalls" -ge "$max_stalls" ] && break
done
echo "stalls: $stalls" | tee -a "$out/summary.txt"
exit $((stalls > 0))
