#!/usr/bin/env bash
# The shared-rank GPU suites at 2 and 4 ranks: instances of gpu-shared.sh side by side,
# each sharing ONE GPU among its ranks under its own MPS daemon (HALVES below). Run from
# the repository root with the bundle carried:
#     OUT=DIR bash docs/runs/<this run>/commands/shared.sh                 # 4 GPUs
#     OUT=DIR HALVES=rust bash ...; OUT=DIR HALVES=python bash ...         # 2 GPUs
# Logs go to a scratch folder; DIR gets their tarball and the summaries (the device tool
# brings back a few files, not folders).
set -uo pipefail
B=bundle
O=$(mktemp -d /tmp/shared.XXXXXX)
mkdir -p "${OUT:=$B/logs-shared4}"
mkdir -p "$O"
nvidia-smi -L > "$O/nvidia-smi.txt" 2>&1
# One install of the wheel and pytest for all four (the instances would race on it).
python3 -m pip install -q --no-deps --force-reinstall $B/wheels/lowcon-*.whl > "$O/pip.txt" 2>&1
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links $B/pywheels pytest >> "$O/pip.txt" 2>&1
inst() { # inst NAME GPU WORLD PARTS [STEPS_ONLY]: one gpu-shared.sh, its wheel already installed
  local name=$1 gpu=$2 w=$3 parts=$4 only=${5:-}
  mkdir -p "$O/$name"; touch "$O/$name/.wheel"
  OUT=$O/$name SHARED_GPU=$gpu SHARED_WORLDS=$w SHARED_PARTS=$parts STEPS_ONLY=${only:-${STEPS_ONLY:-}} SHARED_BUDGET=${BUDGET:-530} \
    bash $B/gpu-shared.sh > "$O/$name.log" 2>&1
}
t0=$SECONDS
# What runs, one GPU each, GPUs taken in order: rust2 (the Rust suites and the C check at
# 2 ranks, the single-GPU checks, the 2-rank fault matrix, in turn), rust4 (the Rust
# suites, the C check and tp at 4 ranks), python2 (the Python suites and tp at 2 ranks),
# python4 (the Python suites at 4 ranks); "rust" and "python" name both of theirs. All
# four at once on a 4-GPU machine; on 2 GPUs, two calls: HALVES=rust, HALVES=python.
halves=${HALVES:-rust python}
parts=" $halves "
parts=${parts// rust / rust2 rust4 }
parts=${parts// python / python2 python4 }
g=0
if [[ $parts == *" rust2 "* ]]; then
  # Three things in turn, within one device call (600 s) together.
  { BUDGET=280 inst rust-w2 $g 2 "rust capi"
    CUDA_VISIBLE_DEVICES=$g LOWCON_BUNDLE_PARTS=single LOWCON_SANITIZE=0 OUT=$O/single \
      timeout 90 bash $B/run.sh > "$O/single.log" 2>&1
    BUDGET=160 inst faults-w2 $g 2 python "fault matrix"; } &
  g=$((g + 1))
fi
if [[ $parts == *" rust4 "* ]]; then inst rust-w4 $g 4 "rust capi tp" & g=$((g + 1)); fi
if [[ $parts == *" python2 "* ]]; then
  inst python-w2 $g 2 "python tp" "torch|pool|backend|FSDP|SIGKILLed|tp:" &
  g=$((g + 1))
fi
if [[ $parts == *" python4 "* ]]; then inst python-w4 $g 4 python & fi
wait
echo "all done in $((SECONDS - t0)) s" > "$O/time.txt"
for f in "$O"/*/summary.txt; do echo "### $f"; cat "$f"; done > "$O/summary-all.txt"
cat "$O/summary-all.txt" "$O/time.txt"
cp "$O/summary-all.txt" "$O/time.txt" "$OUT/"
tar -C "$O" -czf "$OUT/shared-${halves// /-}-logs.tgz" . 2>/dev/null
grep -q FAILED "$O/summary-all.txt" && exit 1 || exit 0
