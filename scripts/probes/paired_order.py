#!/usr/bin/env python3
"""Where in its round a paired FSDP2 step ran, and what ran before it.

    python3 scripts/probes/paired_order.py PAIRED_JSON [PAIRED_JSON...]

`fsdp2_paired.py` runs each round's modes in an order drawn from
`random.Random(seed * 7919 + index)` (index: the configuration's 1-based place in the
run, failed ones counted), warm-up rounds included; the results keep each mode's step
time per round but not the order. This draws the orders again and prints, per
configuration and mode, the median step by its position in the round and by the mode
that ran just before it ("start": first in its round), so that effects of the order
(a round's first step after `--sync-each-step`'s synchronisation, the step after
`nocomm`, which no collective keeps the ranks in step through) can be seen and sized.
"""
import json
import random
import statistics
import sys
from collections import defaultdict


def orders(modes, seed, index, warmup, rounds):
    """The order of each recorded round, as fsdp2_paired.py drew it."""
    rng = random.Random(seed * 7919 + index)
    drawn = [rng.sample(modes, len(modes)) for _ in range(warmup + rounds)]
    return drawn[warmup:]


def effects(config, index):
    """(mode -> position -> [ms], mode -> previous mode -> [ms]) of one configuration."""
    modes, rounds = config["modes"], config["rounds"]
    by_pos, by_prev = defaultdict(lambda: defaultdict(list)), defaultdict(lambda: defaultdict(list))
    for order, r in zip(orders(modes, config["seed"], index, config["warmup_rounds"], len(rounds)), rounds):
        for i, m in enumerate(order):
            by_pos[m][i].append(r[m])
            by_prev[m][order[i - 1] if i else "start"].append(r[m])
    return by_pos, by_prev


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for path in argv:
        with open(path) as f:
            doc = json.load(f)
        for index, c in enumerate(doc.get("configs", []), 1):
            if not c.get("rounds") or not c.get("modes"):
                continue
            by_pos, by_prev = effects(c, index)
            print(f"{path}: {c['shape']} at {c['tokens_per_rank']} tokens, {len(c['rounds'])} rounds, "
                  f"median step ms (n)")
            for m in c["modes"]:
                pos = "  ".join(f"{i}: {statistics.median(v):.1f} ({len(v)})" for i, v in sorted(by_pos[m].items()))
                prev = "  ".join(f"{p}: {statistics.median(v):.1f} ({len(v)})" for p, v in sorted(by_prev[m].items()))
                print(f"  {m}\n    by position   {pos}\n    after         {prev}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
