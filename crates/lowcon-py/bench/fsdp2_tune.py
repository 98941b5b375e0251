"""FSDP2's reduce-scatter rows of a tuning table, measured on this box: the table's own
row and its variants run paired in one FSDP2 job (`fsdp2_paired.py`), and the table is
rewritten with the winner first and the evidence above it (NOTE [tuning tables]):

    lowcon launch --nproc-per-node 4 -- lowcon bench tune --out box.txt    # alone rules; FSDP2 rows carried
    python3 fsdp2_tune.py --table box.txt --nproc 4 --sweep 8192x4:1024    # FSDP2 rows measured here (minutes)
    LOWCON_TUNING=box.txt python3 train.py                                  # every rank loads it

Which rows: `--copy-in bf16` (the default, what `lowcon.fsdp` sends with bf16 parameters
and an fp32 reduce: NOTE [bf16 copy-in]) measures the rows for FSDP2's bf16 gradients
copied in as bf16 (`reduce-scatter context=fsdp dtype=bf16 out=f32 ...`); `--copy-in fp32`
the rows for its fp32 gradients over the bf16 wire (`context=fsdp dtype=f32 exact=yes
... wire=bf16`), with every lowcon mode run as `copyin=fp32`.

The candidates (`variants`): the table's first FSDP2 row of that kind (mode `lowcon`,
run with `LOWCON_TUNING` set to the table); the other
algorithm (`lowcon@rs=ce-reduce` or `lowcon@rs=sm-direct`: the table's row for it where
it has one, which is what a caller naming it runs; for a bf16 input, ce-reduce reads it
in place, `map=yes`, as FSDP2's ordinary-memory rule has it); for a bf16 input on
sm-direct, the row reading it in place on 16 CTAs (`lowcon@rsmap=yes,rs_ctas=16`, NOTE
[bf16 input read in place]) or, from such a row, packing it on 64
(`lowcon@rsmap=no,rs_ctas=64`); and the first row with 32 and 128
CTAs and with the sync it does not name (`lowcon@rs_ctas=32`, `lowcon@rs_ctas=128`, and
`lowcon@rssync=kernel` from a memop row, else `lowcon@rssync=memop`: beside FSDP2's
GEMMs a kernel barrier waits for an SM, and on 4x H200 the in-place reduce-scatter cost a
saturated GEMM 19% with it against 8% with memop). A variant replaces the row only where its median step ratio to
NCCL's is lower at every shape measured and its 95% interval lies below the row's at
one at least, and only if the A/A twin's interval lies within [0.98, 1.02]; otherwise
the row stays, and the comment says why. The rows of that kind (exactly its selectors;
rows bounded by bytes, mode or memory kind are left alone) are rewritten with the
comments right above them: the winner first, then the first row of each other algorithm,
so a caller naming an algorithm still gets its row; the other candidates' rows follow as
comments (`# also measured ...`), since a rule behind an earlier one of its algorithm is
never read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import fsdp2_stats as st

HERE = os.path.dirname(os.path.abspath(__file__))
AA_BOUNDS = (0.98, 1.02)
# The comment that keeps a measured variant no call would read (rewrite()).
ALSO = "# also measured "


# A rule's selectors (host/src/plan/table.rs); the other keys are choices.
SELECTORS = ("context", "dtype", "out", "mem", "bytes", "exact", "mode")
# The two kinds of FSDP2 rows, by copy-in: their selectors exactly, the wire they send,
# what the rewritten block's comment calls them.
FAMILIES = {
    "bf16": ({"context": "fsdp", "dtype": "bf16", "out": "f32"}, None,
             "FSDP2's bf16 gradients copied in as bf16 (NOTE [bf16 copy-in])"),
    "fp32": ({"context": "fsdp", "dtype": "f32", "exact": "yes"}, "bf16", "FSDP2's fp32 gradients over the bf16 wire"),
}


def _keys(line: str) -> Dict[str, str]:
    return dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)


def is_fsdp_row(line: str, copy_in: str = "bf16") -> bool:
    """A reduce-scatter rule for FSDP2's gradients of that copy-in (FAMILIES): its
    selectors exactly (no byte range, mode or memory kind: such rows are left alone)."""
    words = line.split()
    if not words or words[0] != "reduce-scatter":
        return False
    keys = _keys(line)
    sel, wire, _ = FAMILIES[copy_in]
    return {k: v for k, v in keys.items() if k in SELECTORS} == sel and keys.get("wire") == wire


def is_fsdp_wire_row(line: str) -> bool:
    """A rule for FSDP2's fp32 gradients over the bf16 wire (`is_fsdp_row`, fp32 copy-in)."""
    return is_fsdp_row(line, "fp32")


def family(row: str) -> str:
    """The copy-in a row of FSDP2's is for."""
    return "bf16" if _keys(row).get("dtype") == "bf16" else "fp32"


def mode_for(mode: str, copy_in: str) -> str:
    """The paired run's mode spec: with the fp32 copy-in, every lowcon mode says so."""
    if copy_in == "bf16":
        return mode
    return mode + ("," if "@" in mode else "@") + "copyin=fp32"


def edit_row(row: str, changes: Dict[str, Optional[str]]) -> str:
    """`row` with `changes` applied (key -> value; None removes the key), new keys last."""
    words = row.split()
    out, seen = [words[0]], set()
    for w in words[1:]:
        key = w.split("=", 1)[0]
        if key in changes:
            seen.add(key)
            if changes[key] is not None:
                out.append(f"{key}={changes[key]}")
        else:
            out.append(w)
    out += [f"{k}={v}" for k, v in changes.items() if k not in seen and v is not None]
    return " ".join(out)


def variants(rows: Sequence[str]) -> Dict[str, str]:
    """The paired modes to run and the table row each stands for, the table's own first
    row first. A caller naming the other algorithm (`rs=...`) gets the table's row for it
    where there is one (the planner's first rule that names it), so that row is what the
    mode measures; else the first row with that algorithm and the planner's pieces, its mode
    naming the row's CTAs and sync."""
    row = rows[0]
    kind = family(row)
    algo = _keys(row).get("algorithm", "auto")
    out = {mode_for("lowcon", kind): row}
    for other in ("ce-reduce", "sm-direct"):
        if algo != other:
            named = next((r for r in rows if _keys(r).get("algorithm") == other), None)
            if named is not None:
                out[mode_for(f"lowcon@rs={other}", kind)] = named
                continue
            # No row of its own: the mode names the row's CTAs and sync, so that the row
            # written is what ran (else the table's first rule naming the algorithm would).
            changes: Dict[str, Optional[str]] = {"algorithm": other, "piece": None, "max_pieces": None}
            if kind == "bf16":
                # ce-reduce reads a bf16 input in place (FSDP2's ordinary-memory rule);
                # sm-direct packs it and maps nothing.
                changes["map"] = "yes" if other == "ce-reduce" else None
            keys = _keys(row)
            mode = f"lowcon@rs={other}" + "".join(
                f",{opt}={keys[k]}" for k, opt in (("ctas", "rs_ctas"), ("sync", "rssync")) if k in keys)
            out[mode_for(mode, kind)] = edit_row(row, changes)
    if kind == "bf16" and algo == "sm-direct":
        # NOTE [bf16 input read in place]: sm-direct reading the bf16 input where it is
        # (one launch, 16 CTAs: the 2x H200 rule), or packing it (64 CTAs), whichever the
        # row does not.
        if _keys(row).get("map") == "yes":
            out[mode_for("lowcon@rsmap=no,rs_ctas=64", kind)] = edit_row(row, {"map": None, "ctas": "64"})
        else:
            out[mode_for("lowcon@rsmap=yes,rs_ctas=16", kind)] = edit_row(row, {"map": "yes", "ctas": "16"})
    for ctas in (32, 128):
        out[mode_for(f"lowcon@rs_ctas={ctas}", kind)] = edit_row(row, {"ctas": str(ctas)})
    other_sync = "kernel" if _keys(row).get("sync") == "memop" else "memop"
    out[mode_for(f"lowcon@rssync={other_sync}", kind)] = edit_row(row, {"sync": other_sync})
    # A variant that is the table's row again (32 or 128 CTAs where the row has them)
    # would only measure the row twice.
    own = out[mode_for("lowcon", kind)]
    return {m: r for m, r in out.items() if r != own or m == mode_for("lowcon", kind)}


def _ci(stats: Dict[str, Any]) -> Tuple[float, float, float]:
    return stats["ratio"], stats["ratio_lo"], stats["ratio_hi"]


def choose(configs: Sequence[Dict[str, Any]], modes: Sequence[str]) -> Tuple[str, List[str]]:
    """The winning mode among `modes` (the first is the table's own row) over the
    configurations of a paired run, and the evidence, one comment line per mode and
    configuration (module docs). A variant must have a lower median than the row at every
    shape and an interval below the row's at one; among such variants, the one with the
    lower median at every shape than the one kept so far (in `modes`' order)."""
    own = modes[0]
    lines: List[str] = []
    aa_ok = True
    for c in configs:
        st = c["stats"]
        aa = st.get("nccl-b")
        where = f"{c['shape']}, {c['tokens_per_rank']} tokens"
        if aa is None:
            aa_ok = False
            lines.append(f"{where}: no A/A twin (nccl-b): nothing replaced")
        else:
            _, lo, hi = _ci(aa)
            ok = AA_BOUNDS[0] <= lo and hi <= AA_BOUNDS[1]
            aa_ok = aa_ok and ok
            lines.append(f"{where}: A/A {aa['ratio']:.3f} [{lo:.3f}, {hi:.3f}]{'' if ok else ': too wide, nothing replaced'}")
        for m in modes:
            if m in st:
                r, lo, hi = _ci(st[m])
                removed = st[m].get("removed")
                share = f", {100 * removed:.0f}% of NCCL's excess removed" if removed is not None else ""
                lines.append(f"  {m}: {r:.3f} [{lo:.3f}, {hi:.3f}] of NCCL's step{share}")
        if "nccl-ce" in st:
            lines.append(f"  nccl-ce: {st['nccl-ce']['ratio']:.3f}")
    best = own
    if aa_ok:
        for m in modes[1:]:
            pairs = [(_ci(c["stats"][m]), _ci(c["stats"][own])) for c in configs if m in c["stats"] and own in c["stats"]]
            if len(pairs) != len(configs) or not pairs:
                continue
            never_worse = all(cand[1] < mine[2] and cand[0] < mine[0] for cand, mine in pairs)
            resolved = any(cand[2] < mine[1] for cand, mine in pairs)
            beats_best = best == own or all(
                _ci(c["stats"][m])[0] < _ci(c["stats"][best])[0] for c in configs)
            if never_worse and resolved and beats_best:
                best = m
    return best, lines


def rewrite(text: str, rows: Dict[str, str], best: str, evidence: Sequence[str], source: str) -> str:
    """The table `text` with its FSDP2 rows of `rows`' kind replaced: `best`'s row first,
    then the first row of each other algorithm (the one a caller naming it gets), the other
    variants as comments (no rule behind an earlier one of its algorithm is ever read), the
    evidence in comments above; `source` in its source line, as this kind's FSDP2 rows'
    (replacing what a run before this one wrote there for this kind)."""
    lines = text.splitlines()
    kind = family(next(iter(rows.values())))
    is_row = lambda line: is_fsdp_row(line, kind)  # noqa: E731
    # The comments right above each such row described the rows replaced: they go too.
    drop = set()
    for i, line in enumerate(lines):
        if line.startswith(ALSO) and is_row(line[len(ALSO):].split(": ", 1)[-1]):
            drop.add(i)  # a run before this one's unread variants
        if is_row(line):
            drop.add(i)
            j = i - 1
            # Another kind's unread variants (written below its rows) are not this one's.
            while j >= 0 and lines[j].startswith("#") and not lines[j].startswith(ALSO) and j not in drop:
                drop.add(j)
                j -= 1
    out: List[str] = []
    placed = False
    block = [f"# {FAMILIES[kind][2]}, measured by fsdp2_tune.py ({source}):"]
    block += [f"# {e}" for e in evidence]
    own = next(iter(rows))
    block.append(f"# Chosen: {best}" + ("" if best == own else " (resolved faster than the table's row)"))
    ordered = [rows[best]] + [r for m, r in rows.items() if m != best]
    # The first rule naming an algorithm is the one every call of it gets (table.rs): a
    # later row of the same algorithm would never be read, so it is kept as a comment.
    # The rules first, then those comments, so the rules stay together.
    seen, algorithms, unread = set(), set(), []
    for r in ordered:
        if r not in seen:
            seen.add(r)
            algo = _keys(r).get("algorithm")
            if algo in algorithms:
                unread.append(f"{ALSO}(unread behind the {algo} row above): {r}")
            else:
                block.append(r)
                algorithms.add(algo)
    block += unread
    # This kind's evidence in the source line replaces the one a run before this one wrote.
    mine = f"; FSDP2 {kind} rows: "
    earlier = re.compile(re.escape(mine) + r".*?(?=; FSDP2 \w+ rows: |$)")
    for i, line in enumerate(lines):
        if is_row(line) and not placed:
            out += block
            placed = True
        if i in drop:
            continue
        if line.startswith("source "):
            line = f"{earlier.sub('', line)}{mine}{source}"
        out.append(line)
    if not placed:
        out += [""] + block
    return "\n".join(out) + "\n"


def paired_command(args: argparse.Namespace, modes: Sequence[str]) -> List[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
           os.path.join(HERE, "fsdp2_paired.py"), "--out", args.out, "--sweep", args.sweep, "--reduce-dtypes", "fp32",
           "--rounds", str(args.rounds), "--modes", ",".join(["nccl", "nccl-b", *modes, "nccl-ce", "nocomm"])]
    if args.model != "blocks":
        cmd += ["--model", args.model]
    if args.cpu:
        cmd += ["--cpu", "--method", "models"]
    return cmd


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", required=True, help="the tuning table to measure and rewrite (lowcon bench tune's)")
    p.add_argument("--nproc", type=int, default=2, help="GPUs (ranks)")
    p.add_argument("--sweep", default="8192x4:1024", help="the model shapes, as fsdp2_paired.py's --sweep")
    p.add_argument("--model", default="blocks", help="as fsdp2_paired.py's --model")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--out", default="", help="where the paired run's files go (default: beside the table)")
    p.add_argument("--results", help="a paired.json already measured: rewrite from it, run nothing")
    p.add_argument("--dry-run", action="store_true", help="print the paired run's command and the candidates")
    p.add_argument("--cpu", action="store_true", help="the host backend (a smoke test of the script)")
    p.add_argument("--copy-in", choices=tuple(FAMILIES), default="bf16",
                   help="which rows: FSDP2's bf16 gradients copied in as bf16 (lowcon.fsdp's default), or its fp32 "
                        "gradients over the bf16 wire (copy_in=\"fp32\")")
    args = p.parse_args(argv)
    with open(args.table) as f:
        text = f.read()
    table_rows = [line.strip() for line in text.splitlines() if is_fsdp_row(line, args.copy_in)]
    if not table_rows:
        sel, wire, what = FAMILIES[args.copy_in]
        want = " ".join(f"{k}={v}" for k, v in sel.items()) + (f" ... wire={wire}" if wire else " ...")
        print(f"fsdp2_tune: {args.table} has no row for {what} (reduce-scatter {want}): start from lowcon bench "
              "tune's table", file=sys.stderr)
        return 2
    rows = variants(table_rows)
    args.out = args.out or os.path.splitext(os.path.abspath(args.table))[0] + "-fsdp2"
    cmd = paired_command(args, list(rows))
    if args.dry_run:
        print(f"LOWCON_TUNING={args.table} " + " ".join(cmd))
        for m, r in rows.items():
            print(f"  {m}: {r}")
        return 0
    results = args.results or os.path.join(args.out, "paired.json")
    if not args.results:
        os.makedirs(args.out, exist_ok=True)
        env = {**os.environ, "LOWCON_TUNING": os.path.abspath(args.table)}
        rc = subprocess.run(cmd, env=env).returncode
        if rc != 0:
            print(f"fsdp2_tune: the paired run failed (exit {rc}); {args.table} is unchanged", file=sys.stderr)
            return rc
    with open(results) as f:
        doc = json.load(f)
    # The evidence in today's statistics, as `fsdp2_paired.py --report` prints them.
    configs = [c for c in st.reanalyse(doc) if "stats" in c]
    if not configs:
        print(f"fsdp2_tune: {results} holds no measured configuration; {args.table} is unchanged", file=sys.stderr)
        return 1
    best, evidence = choose(configs, list(rows))
    env = doc.get("env", {})
    gpu = env.get("device_name") or ("the host backend" if args.cpu else "this box")
    ranks = env.get("world_size", args.nproc)
    shapes = "; ".join(f"{c['shape']}:{c['tokens_per_rank']}" for c in configs)
    # fsdp2_paired.py's results hold every round's step times: the count is their number.
    rounds = configs[0].get("rounds", args.rounds)
    rounds = len(rounds) if isinstance(rounds, list) else rounds
    source = f"{datetime.date.today()}, {ranks} ranks of {gpu}, {shapes}, {rounds} rounds ({results})"
    with open(args.table, "w") as f:
        f.write(rewrite(text, rows, best, evidence, source))
    print("\n".join(evidence))
    print(f"fsdp2_tune: {best} chosen; {args.table} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
