#!/usr/bin/env bash
# Runs the whole workspace's tests RUNS times (default 5) with a busy loop on every core,
# as a loaded CI machine would (the rough-edges issue: a death during shrink missed its
# bound beside a parallel build). Prints each run's result and the failed tests' names;
# logs go to LOG_DIR (default target/under-load). Exits non-zero if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
runs=${1:-5}
log_dir=${LOG_DIR:-target/under-load}
mkdir -p "$log_dir"
cargo test --workspace --locked --no-run -q >/dev/null 2>&1 || { echo "test-under-load: the tests do not build"; exit 2; }
loads=()
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  loads+=("$!")
done
trap 'kill "${loads[@]}" 2>/dev/null' EXIT
failed=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  if cargo test --workspace --locked --no-fail-fast > "$log_dir/run$i.txt" 2>&1; then
    echo "run $i: ok ($(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1))
    echo "run $i: FAILED ($(( $(date +%s) - start )) s): $(grep -E '^    [a-z_:0-9]+$|^---- ' "$log_dir/run$i.txt" | tr '\n' ' ')"
  fi
done
echo "test-under-load: $failed of $runs runs failed (busy loops on $(nproc) cores; logs in $log_dir)"
[ "$failed" = 0 ]
