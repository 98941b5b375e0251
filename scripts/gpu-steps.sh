#!/usr/bin/env bash
# Sourced by the GPU run scripts (gpu-faults.sh, gpu-fsdp2.sh, gpu-small-messages.sh):
# steps that each run under a deadline taken from one budget, logged, with one summary
# line each. The script sets `out` (its log folder) first, then calls `steps_budget S`.
#
#   st NAME LOG SECONDS CMD...   run CMD with at most SECONDS (fewer when the budget is
#                                nearly spent, at least 5; none once it is spent: the
#                                step is SKIPPED), its output appended to $out/LOG;
#                                "NAME ok|FAILED(status)|SKIPPED seconds" goes to the
#                                terminal and $out/summary.txt; `failures` counts them.

# shellcheck disable=SC2154  # out: set by the script that sources this one
steps_budget() { steps_end=$((SECONDS + $1)); failures=0; }

# The deadline of a step that asks for $1 seconds: what is left of the budget, at least 5.
left() { local l=$((steps_end - SECONDS)); [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5)); }

# STEPS_ONLY: an extended regex; steps whose names do not match it are skipped (set-up
# steps, whose names say "install", always run).
skip_step() { [ -n "${STEPS_ONLY:-}" ] && ! [[ $1 =~ $STEPS_ONLY || $1 == *install* ]]; }

st() {
  local name=$1 log=$2 t=$3; shift 3
  skip_step "$name" && return 0
  # A spent budget skips the step (a failure: not everything ran), so that a script ends
  # near its budget however many steps are left, not 5 to 10 s later per step.
  if [ $((steps_end - SECONDS)) -le 0 ]; then
    printf '%-64s %s\n' "$name" "SKIPPED (budget spent)" | tee -a "$out/summary.txt"
    failures=$((failures + 1))
    return 0
  fi
  local t0=$SECONDS
  echo "== $name" >> "$out/$log"
  timeout -k 5 "$(left "$t")" "$@" >> "$out/$log" 2>&1
  local s=$?
  printf '%-64s %s %4d s\n' "$name" "$([ $s = 0 ] && echo ok || echo "FAILED($s)")" $((SECONDS - t0)) \
    | tee -a "$out/summary.txt"
  [ $s = 0 ] || failures=$((failures + 1))
  return 0
}
