#!/usr/bin/env bash
# One run of `lowcon selftest coll-dead-peer` with ranks started by hand (no launcher):
# the library alone must name the dead rank. Called by gpu-run.sh (bundle/run.sh), from
# the bundle, as
#
#     gpu-dead-peer.sh VISIBLE_DEVICES WORLD_SIZE METHOD LOWCON_BINARY LOG_DIR [KILL_AT]
#
# KILL_AT (default 300) is the call before which the victim dies: with the calls never
# waiting for the GPU, up to that many of its calls may still be queued on its GPU.
# DP_ARGS adds selftest flags (e.g. "--exit exit --elems 4194304 --staged": a clean
# exit, after which the survivor's 16 MiB staged calls fill its stream's queue); the
# victim must then exit 0 instead of dying of SIGKILL. DP_SCENARIO replaces the
# selftest and its backend flag (default "coll-dead-peer --backend gpu"; "coll-graph"
# kills a rank while the others replay a captured graph).
# It starts a store, then WORLD_SIZE ranks on VISIBLE_DEVICES; the last rank is the victim
# (it leaves mid-loop, by SIGKILL unless DP_ARGS says otherwise). Each rank logs to
# LOG_DIR/dp-METHOD-wWORLD_SIZE-rRANK.log, which is printed when the rank ends. A watchdog
# records where every rank still alive after 60 s is (state of each thread, and a gdb
# backtrace when gdb is present), then kills it. Exit status 0 only if the victim ended as
# expected (SIGKILL: 137; a clean exit: 0) and every other rank exited 0.
vis=$1 w=$2 m=$3 L=$4 out=$5 k=${6:-300}
read -r -a extra <<< "${DP_ARGS:-}"
read -r -a scenario <<< "${DP_SCENARIO:-coll-dead-peer --backend gpu}"
want=137
case " ${DP_ARGS:-} " in *" --exit exit "*) want=0;; esac
tag=$(echo "${DP_SCENARIO:-} ${DP_ARGS:-}" | tr -c 'a-z0-9' '_' | tr -s _)
port=$((29700 + RANDOM % 200))
"$L" store serve --bind "127.0.0.1:$port" & sp=$!
sleep 0.3
pids=()
for r in $(seq 0 $((w - 1))); do
  CUDA_VISIBLE_DEVICES=$vis RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
    LOWCON_DEBUG=1 LOWCON_TIMEOUT_MS=20000 \
    LOWCON_STORE_ADDR=127.0.0.1:$port "$L" selftest "${scenario[@]}" --method "$m" \
    --victim $((w - 1)) --kill-at "$k" "${extra[@]}" > "$out/dp-$m-w$w-k$k$tag-r$r.log" 2>&1 &
  pids[r]=$!
done
# Watchdog: if a rank is still alive after 60 s, record where every rank is.
(
  sleep 60
  for r in $(seq 0 $((w - 1))); do
    p=${pids[r]}
    [ -d "/proc/$p" ] || continue
    echo "-- rank $r (pid $p) still running: $(grep State "/proc/$p/status")"
    for t in "/proc/$p/task"/*; do
      echo "   $(cat "$t/comm") $(cat "$t/wchan" 2>/dev/null) $(grep State "$t/status")"
    done
    command -v gdb >/dev/null &&
      timeout 20 gdb -p "$p" -batch -ex "thread apply all bt 12" 2>&1 | grep -E "^#|^Thread" | head -60
    kill -9 "$p"
  done
) & wd=$!
ok=0
for r in $(seq 0 $((w - 1))); do
  wait "${pids[r]}"
  s=$?
  grep -v "released .* awaited pad slots" "$out/dp-$m-w$w-k$k$tag-r$r.log"
  if [ "$r" -eq $((w - 1)) ]; then
    [ $s -eq "$want" ] || ok=1
  else
    [ $s -eq 0 ] || ok=1
  fi
done
kill $wd 2>/dev/null
kill $sp
nvidia-smi --query-gpu=index,memory.used --format=csv
exit $ok
