#!/usr/bin/env bash
# Small messages, two builds of lowcon alternating in one job: `small_ab.sh BASE NEW OUTDIR`
# runs, ROUNDS times (3), a sweep of BASE then one of NEW for each collective and dtype
# (AB_COLLS, AB_DTYPES), replayed and eager, 8 KiB to 1 MiB per rank, kernel sync, `auto`
# and `ll` (no NCCL), at NPROC ranks (4), each sweep's JSON into OUTDIR (emptied first).
# Then prints, for each size, the median over rounds of each build's time, and their ratio.
set -uo pipefail
base=$1 new=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
np=${NPROC:-4}
for k in $(seq "${ROUNDS:-3}"); do
  for c in ${AB_COLLS:-all-gather reduce-scatter}; do
    for d in ${AB_DTYPES:-bf16}; do
      for b in base new; do
        L=$base; [ $b = new ] && L=$new
        timeout 60 "$L" launch --nproc-per-node "$np" --tee -- "$L" bench "$c" -b 8K -e 1M -f 2 -n 20 --reps 25 \
          --dtype "$d" --sync kernel --graph --algorithms auto,ll --no-nccl --json "$out/$b-$c-$d-$k.json" \
          > "$out/$b-$c-$d-$k.txt" 2>&1 || echo "small_ab: $b $c $d #$k failed ($?)"
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, glob, os, statistics, sys
from collections import defaultdict
t = defaultdict(list)  # (bench, dtype, algorithm, graph, size, build) -> [us]
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    build = os.path.basename(f).split("-", 1)[0]
    for line in open(f):
        r = json.loads(line)
        if r["implementation"] != "lowcon":
            continue
        t[(r["bench"], r["dtype"], r["algorithm"], r["graph"], r["size"], build)].append(r["time_us"])
print("lowcon, median over rounds of each sweep's time, us: base / new (new / base)")
for key in sorted({k[:5] for k in t}):
    b, n = t.get(key + ("base",)), t.get(key + ("new",))
    if b and n:
        mb, mn = statistics.median(b), statistics.median(n)
        mode = "graph" if key[3] else "eager"
        print(f"{key[0]:15} {key[1]:5} {key[2]:5} {mode:5} {key[4]:>8}  {mb:6.2f} / {mn:6.2f}  ({mn / mb:.3f})  n={len(b)}/{len(n)}")
PY
