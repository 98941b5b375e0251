#!/usr/bin/env bash
# Lists the source and doc files past 800 lines (the recorded runs in docs/runs/ aside):
# a long file is a question, not a rule; host/tests/layout.rs fails only past 1,000.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-800}
git ls-files -- '*.rs' '*.py' '*.sh' '*.c' '*.h' '*.md' '*.toml' ':!:docs/runs/*' |
  while IFS= read -r f; do
    [ -f "$f" ] || continue
    n=$(wc -l <"$f")
    [ "$n" -gt "$limit" ] && printf '%6d  %s\n' "$n" "$f"
  done | sort -rn || true
