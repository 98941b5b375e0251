#!/usr/bin/env bash
# Builds crates/lowcon-capi/examples/lowcon_check.c against lowcon's C library with the
# system compilers, as C11 (shared library) and as C++17 (static library), and runs it:
#
#     capi-check.sh BACKEND LOWCON_BINARY LIB_DIR INCLUDE_DIR SOURCE WORK_DIR
#
# BACKEND is host (CI: 2 and 3 ranks) or gpu (2 ranks, built with the CUDA runtime found
# next to nvcc or in /usr/local/cuda). Each build runs under `lowcon launch`, checking
# results against a CPU reference and the bad-input codes; then dead-peer runs with
# ranks started by hand (a launcher would stop the job when a rank dies): the last rank
# SIGKILLs itself, or exits cleanly with calls piled up, and the others must get
# lowconRemoteError naming it. Exit status 0
# only if everything passed; scripts/test.sh (host) and gpu-run.sh (gpu) call it.
# CAPI_WORLDS overrides the world sizes of the checked runs (gpu-shared.sh).
set -uo pipefail
if [ $# -ne 6 ]; then
  echo "usage: $0 host|gpu LOWCON_BINARY LIB_DIR INCLUDE_DIR SOURCE WORK_DIR" >&2
  exit 2
fi
backend=$1 L=$2 lib=$3 inc=$4 src=$5 work=$6
mkdir -p "$work"
rc=0
fail() { echo "capi-check: FAILED: $*"; rc=1; }

extra=() libs=()
if [ "$backend" = gpu ]; then
  cuda=/usr/local/cuda
  if command -v nvcc >/dev/null; then cuda=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd); fi
  extra=(-DLOWCON_EXAMPLE_CUDA -isystem "$cuda/include")
  libs=("-L$cuda/lib64" -lcudart "-Wl,-rpath,$cuda/lib64")
  worlds="2"
else
  worlds="2 3"
fi
worlds=${CAPI_WORLDS:-$worlds}   # gpu-shared.sh: the world size of ranks sharing one GPU

cc -std=c11 -Wall -Wextra -Werror -pedantic -D_POSIX_C_SOURCE=200809L "${extra[@]}" "-I$inc" "$src" \
  "-L$lib" -llowcon_capi "-Wl,-rpath,$lib" "${libs[@]}" -o "$work/check_c" || fail "C11 build"
if [ -f "$lib/liblowcon_capi.a" ]; then
  c++ -std=c++17 -Wall -Wextra -Werror -pedantic "${extra[@]}" "-I$inc" -x c++ "$src" -x none \
    "$lib/liblowcon_capi.a" -lpthread -ldl -lm "${libs[@]}" -o "$work/check_cpp" || fail "C++17 build (static)"
else
  c++ -std=c++17 -Wall -Wextra -Werror -pedantic "${extra[@]}" "-I$inc" -x c++ "$src" -x none \
    "-L$lib" -llowcon_capi "-Wl,-rpath,$lib" "${libs[@]}" -o "$work/check_cpp" || fail "C++17 build (shared)"
fi
[ $rc -eq 0 ] || exit $rc

for w in $worlds; do
  if timeout 300 "$L" launch --nproc-per-node "$w" --tee -- "$work/check_c" "$backend"; then
    echo "capi-check: C, $backend, $w ranks: ok"
  else
    fail "C, $backend, $w ranks"
  fi
done
if timeout 300 "$L" launch --nproc-per-node 2 --tee -- "$work/check_cpp" "$backend"; then
  echo "capi-check: C++, $backend, 2 ranks: ok"
else
  fail "C++, $backend, 2 ranks"
fi

# Dead peer, no launcher: a store, then two ranks; rank 1 dies. Twice: by SIGKILL with a
# synchronize every 100 calls, and by a clean _exit(0) while the survivor's calls pile up
# unsynchronised (on GPUs, 16 MiB each: the stream's queue fills and the enqueue blocks
# in the driver).
dead_run() { # dead_run NAME EXIT ELEMS SYNC_EVERY VICTIM_STATUS
  local name=$1 how=$2 elems=$3 every=$4 want=$5
  local port=$((29300 + RANDOM % 300)) store pids=() r s0 s1
  "$L" store serve --bind "127.0.0.1:$port" & store=$!
  sleep 0.3
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
      LOWCON_STORE_ADDR=127.0.0.1:$port LOWCON_TIMEOUT_MS=10000 LOWCON_CHECK_DEAD_EXIT=$how \
      LOWCON_CHECK_DEAD_ELEMS=$elems LOWCON_CHECK_DEAD_SYNC_EVERY=$every \
      timeout 120 "$work/check_c" "$backend" dead > "$work/dead-$name-r$r.log" 2>&1 &
    pids[r]=$!
  done
  wait "${pids[0]}"; s0=$?
  wait "${pids[1]}"; s1=$?
  kill "$store" 2>/dev/null
  wait "$store" 2>/dev/null
  cat "$work/dead-$name-r0.log"
  if [ $s0 -eq 0 ] && [ $s1 -eq "$want" ]; then
    echo "capi-check: dead peer ($name), $backend: ok"
  else
    fail "dead peer ($name), $backend (survivor exit $s0, victim exit $s1, expected $want)"
    cat "$work/dead-$name-r1.log"
  fi
}
dead_run sigkill sigkill 4096 100 137
if [ "$backend" = gpu ]; then deep=4194304; else deep=65536; fi
dead_run exit-queued exit "$deep" 0 0
[ $rc -eq 0 ] && echo "capi-check: all ok ($backend)"
exit $rc
