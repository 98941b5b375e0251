#!/usr/bin/env bash
# Runs shellcheck (default severity) on every shell script of the repository: files that
# git tracks, or that are new and not ignored, whose name ends in .sh or .bash or whose
# first line is a sh/bash/dash/ksh shebang (so .ci/run and new scripts are covered with no
# list to keep). Part of scripts/test.sh; runs alone too.
#
# The shellcheck used: $SHELLCHECK if set, else the pinned one that scripts/setup.sh
# installs into .tools/shellcheck/bin/shellcheck, else one on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

sc=${SHELLCHECK:-.tools/shellcheck/bin/shellcheck}
if [ ! -x "$sc" ]; then
  if ! sc=$(command -v shellcheck); then
    echo "shellcheck.sh: no shellcheck (.tools/shellcheck/bin/shellcheck nor on PATH);" \
      "run scripts/setup.sh" >&2
    exit 1
  fi
fi

scripts=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue # tracked, but deleted in the work tree
  case $f in
    *.sh | *.bash) scripts+=("$f") ;;
    *) if head -c 200 "$f" | head -n 1 | LC_ALL=C grep -qE '^#!.*[/ ](ba|da|k)?sh([[:space:]]|$)'; then
         scripts+=("$f")
       fi ;;
  esac
done < <(git ls-files -z --cached --others --exclude-standard | sort -z)
if [ ${#scripts[@]} -eq 0 ]; then
  echo "shellcheck.sh: found no shell script (is this a git work tree?)" >&2
  exit 1
fi

echo "shellcheck $("$sc" --version | sed -n 's/^version: //p') on ${#scripts[@]} scripts: ${scripts[*]}"
"$sc" "${scripts[@]}"
