#!/usr/bin/env python3
"""Which batches of a sweep were slow: for each lowcon row of the `lowcon bench` JSON files
in DIR (rows that kept `batches_us`, since 2026-11-28), the fastest batch, and the index
and µs per call of each batch over SLOW (1.5) times it. A periodic pattern (every sixth
batch, say) points at something that runs on a clock; the first batch alone, at a warm-up.

    python3 scripts/probes/slow_batches.py DIR [--all]    # --all: NCCL's rows too
"""
import glob
import json
import os
import sys

from small_table import SLOW  # one threshold for both probes


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    everyone = "--all" in argv
    dirs = [a for a in argv if a != "--all"]
    rows = 0
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, "*.json"))):
            for line in open(f):
                r = json.loads(line)
                b = [float(x) for x in (r.get("batches_us") or "").split()]
                if not b or (r["implementation"] != "lowcon" and not everyone):
                    continue
                rows += 1
                fast = min(b)
                slow = [(i, x) for i, x in enumerate(b) if x > SLOW * fast]
                mode = "replayed" if r.get("graph") else "eager"
                print(f"{os.path.basename(f)} {r['implementation']} {r['algorithm']} {mode} {r['size']}: "
                      f"fastest {fast:.1f}, {len(slow)}/{len(b)} slow: "
                      + " ".join(f"#{i} {x:.1f}" for i, x in slow))
    if not rows:
        print(f"slow_batches: no rows with batches_us under {' '.join(dirs)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
