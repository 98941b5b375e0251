#!/usr/bin/env bash
# The four device calls of this run, in order (kind nvidia-h100-x2, which gave 2x H200;
# carry ["bundle"]). The bundle is scripts/gpu-bundle.sh's at e9b3144, packed as
# bundle/bundle.txz (the tree and the bundle together passed the tool's 64 MiB); calls 2-4
# carry the fixed gpu-shared.sh (and call 4 the fixed C check) in it, the binaries unchanged.
set -euo pipefail
case ${1:?call 1-4} in
  1) tar -xJf bundle/bundle.txz && OUT=$OUT HALVES=rust bash docs/runs/2026-11-27-e9b3144-2xh200/commands/shared.sh ;;
  2) tar -xJf bundle/bundle.txz && OUT=$OUT HALVES=python bash docs/runs/2026-11-27-e9b3144-2xh200/commands/shared.sh ;;
  3) tar -xJf bundle/bundle.txz && OUT=$OUT HALVES=rust4 bash docs/runs/2026-11-27-e9b3144-2xh200/commands/shared.sh ;;
  # STEPS_ONLY was meant to keep the C check and coll-graph only, but shared.sh then
  # passed its own (empty) filter to each instance, so every rust4 step ran again (fixed
  # since: an instance's own filter, else STEPS_ONLY).
  4) tar -xJf bundle/bundle.txz && OUT=$OUT HALVES=rust4 STEPS_ONLY='C API|coll-graph: 12' \
       bash docs/runs/2026-11-27-e9b3144-2xh200/commands/shared.sh ;;
esac
