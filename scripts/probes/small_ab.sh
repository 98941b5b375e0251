#!/usr/bin/env bash
# Small messages, builds of lowcon alternating in one job:
#   small_ab.sh BASE NEW OUTDIR [NAME=PATH ...]
# runs, ROUNDS times (3), a sweep of each build in turn (BASE, NEW, then each NAME=PATH) for
# each collective and dtype (AB_COLLS, AB_DTYPES), replayed and eager, 8 KiB to 1 MiB per
# rank, kernel sync, `auto` and `ll` (no NCCL), at NPROC ranks (4), each sweep's JSON into
# OUTDIR (emptied first). Then prints, for each size, the median over rounds of each build's
# time, and its ratio to BASE's.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: small_ab.sh BASE NEW OUTDIR [NAME=PATH ...]" >&2; exit 2; }
declare -A path=([base]=$1 [new]=$2)
out=$3; shift 3
names=(base new)
for kv in "$@"; do
  n=${kv%%=*} p=${kv#*=}
  [[ $kv == *=* && $n =~ ^[a-z0-9]+$ && -z ${path[$n]:-} ]] ||
    { echo "small_ab: '$kv' is not NAME=PATH with a new lower-case name" >&2; exit 2; }
  path[$n]=$p; names+=("$n")
done
for n in "${names[@]}"; do
  [ -x "${path[$n]}" ] || { echo "small_ab: build $n (${path[$n]}) is not an executable" >&2; exit 2; }
done
rm -rf "$out" && mkdir -p "$out"
np=${NPROC:-4}
for k in $(seq "${ROUNDS:-3}"); do
  for c in ${AB_COLLS:-all-gather reduce-scatter}; do
    for d in ${AB_DTYPES:-bf16}; do
      for b in "${names[@]}"; do
        L=${path[$b]}
        timeout 60 "$L" launch --nproc-per-node "$np" --tee -- "$L" bench "$c" -b 8K -e 1M -f 2 -n 20 --reps 25 \
          --dtype "$d" --sync kernel --graph --algorithms auto,ll --no-nccl --json "$out/$b-$c-$d-$k.json" \
          > "$out/$b-$c-$d-$k.txt" 2>&1 || echo "small_ab: $b $c $d #$k failed ($?)"
      done
    done
  done
done
python3 - "$out" "${names[@]}" <<'PY'
import json, glob, os, statistics, sys
from collections import defaultdict
out, names = sys.argv[1], sys.argv[2:]
t = defaultdict(list)  # (bench, dtype, algorithm, graph, size, build) -> [us]
for f in glob.glob(os.path.join(out, "*.json")):
    build = os.path.basename(f).split("-", 1)[0]
    for line in open(f):
        r = json.loads(line)
        if r["implementation"] != "lowcon":
            continue
        t[(r["bench"], r["dtype"], r["algorithm"], r["graph"], r["size"], build)].append(r["time_us"])
print("lowcon, median over rounds of each sweep's time, us: " + " / ".join(names)
      + " (each over base)")
for key in sorted({k[:5] for k in t}):
    m = [t.get(key + (n,)) for n in names]
    if not all(m):
        continue
    med = [statistics.median(v) for v in m]
    mode = "graph" if key[3] else "eager"
    cells = " / ".join(f"{v:6.2f}" for v in med)
    ratios = " ".join(f"{v / med[0]:.3f}" for v in med[1:])
    print(f"{key[0]:15} {key[1]:5} {key[2]:5} {mode:5} {key[4]:>8}  {cells}  ({ratios})  n={'/'.join(str(len(v)) for v in m)}")
PY
