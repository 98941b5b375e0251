#!/usr/bin/env bash
# Rough edges, 1x H100: the torch worker's graph timings after track_replay's changes.
set -u
R=/tmp/r45b; mkdir -p "$R"
outer=$OUT
env OUT="$R/py" SHARED_WORLDS=2 SHARED_PARTS=python SHARED_BUDGET=200 STEPS_ONLY="install the wheel|torch tensors" \
  bash bundle/gpu-shared.sh > "$R/py.txt" 2>&1
tail -4 "$R/py.txt"
grep -h "host us" "$R"/py/python-w2.txt
tar -C /tmp -czf "$outer/r45b.tgz" r45b
