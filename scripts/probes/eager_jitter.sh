#!/usr/bin/env bash
# Eager small calls at NPROC ranks (4), under host-side variants, alternating in one job:
#   eager_jitter.sh LOWCON OUTDIR
# Each of ROUNDS (3) rounds runs, for each collective (EJ_COLLS), a bf16 eager sweep 8 KiB to
# 1 MiB per rank (`auto` with kernel sync, NCCL beside), once per variant:
#   plain     as a user runs it
#   pin2      each rank's process bound to two cores of its own (16 r, 16 r + 1: its
#             calling thread and lowcon's threads stay on them, off the other ranks')
#   overlap0  LOWCON_LL_OVERLAP=0 (NOTE [LL launch overlap] off)
# and prints, per size, each variant's median over rounds of `auto`'s time and of its
# slowest batch, and NCCL's time: whether the erratic eager cells (a batch's spread 6 to
# 25 µs) follow the host's scheduling or the LL kernels' overlap.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: eager_jitter.sh LOWCON OUTDIR" >&2; exit 2; }
L=$(realpath "$1") out=$2
[ -x "$L" ] || { echo "eager_jitter: $L is not an executable" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"
np=${NPROC:-4}
for k in $(seq "${ROUNDS:-3}"); do
  for c in ${EJ_COLLS:-reduce-scatter all-gather}; do
    for v in plain pin2 overlap0; do
      args=(bench "$c" -b 8K -e 1M -f 2 -n 20 --reps 25 --dtype bf16 --sync kernel --algorithms auto
            --json "$out/$v-$c-$k.json")
      case $v in
        plain) cmd=("$L" "${args[@]}") ;;
        pin2) # shellcheck disable=SC2016 # expanded by the rank's own shell
          cmd=(bash -c 'exec taskset -c "$((LOCAL_RANK * 16)),$((LOCAL_RANK * 16 + 1))" "$@"' pin "$L" "${args[@]}") ;;
        overlap0) cmd=(env LOWCON_LL_OVERLAP=0 "$L" "${args[@]}") ;;
      esac
      timeout 60 "$L" launch --nproc-per-node "$np" --tee -- "${cmd[@]}" > "$out/$v-$c-$k.txt" 2>&1 ||
        echo "eager_jitter: $v $c #$k failed ($?)"
    done
  done
done
python3 - "$out" <<'PY'
import json, glob, os, statistics, sys
from collections import defaultdict
t = defaultdict(list)  # (bench, size, variant, implementation) -> [(us, slowest batch us)]
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    v = os.path.basename(f).split("-", 1)[0]
    for line in open(f):
        r = json.loads(line)
        if r.get("graph"):
            continue
        t[(r["bench"], r["size"], v, r["implementation"])].append((r["time_us"], r.get("time_us_max") or 0.0))
vs = ["plain", "pin2", "overlap0"]
print("eager bf16, median over rounds: auto us (slowest batch) per variant; NCCL us (plain)")
for b, s in sorted({(k[0], k[1]) for k in t}):
    cells = []
    for v in vs:
        x = t.get((b, s, v, "lowcon"))
        cells.append(f"{statistics.median(a for a, _ in x):5.1f} ({statistics.median(m for _, m in x):5.1f})" if x else "   -")
    n = t.get((b, s, "plain", "nccl"))
    nccl = f"{statistics.median(a for a, _ in n):5.1f}" if n else "-"
    print(f"{b:15} {s:>8}  " + "  ".join(f"{v}: {c}" for v, c in zip(vs, cells)) + f"  nccl: {nccl}")
PY
