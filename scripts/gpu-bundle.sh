#!/usr/bin/env bash
# Builds lowcon's release binaries here and puts them into bundle/ (ignored by git), with
# the run script scripts/gpu-run.sh (as bundle/run.sh) and its helper
# scripts/gpu-dead-peer.sh. On a GPU machine, one command runs the GPU tests and prints a
# table:
#
#     bash bundle/run.sh            # logs go to $OUT if set, else bundle/logs
#
# With the workplace's device tool: run `scripts/gpu-bundle.sh` here, then on the device
# `bash bundle/run.sh` with carry = ["bundle"]; `scripts/gpu-bundle.sh --pack` when the
# tree and the bundle together pass what the tool carries (see the end of this script).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p lowcon-tests --bin lowcon-gpu-tests -p lowcon-cli --bin lowcon
cargo build --release --locked -p lowcon-capi --lib
rm -rf bundle
mkdir -p bundle/capi
cp target/release/lowcon-gpu-tests target/release/lowcon bundle/
strip --strip-debug bundle/lowcon-gpu-tests bundle/lowcon 2>/dev/null || true
# The C API: the shared library (the static one is checked in CI), the header, the
# example program and the script that builds and runs it there with the system compiler.
cp target/release/liblowcon_capi.so crates/lowcon-capi/include/lowcon.h crates/lowcon-capi/examples/lowcon_check.c \
  crates/lowcon-capi/examples/lowcon_check_wire.h crates/lowcon-capi/examples/lowcon_check_pieces.h \
  scripts/capi-check.sh bundle/capi/
strip --strip-debug bundle/capi/liblowcon_capi.so 2>/dev/null || true
# The Python package: the release wheel (installed there with pip --no-deps, no Rust).
scripts/build-python.sh --release bundle/wheels
# pytest for the GPU machine, which cannot reach a package index.
python3 -m pip download -q --only-binary=:all: --python-version 3.12 -d bundle/pywheels pytest==9.2.0
# transformers for the FSDP2 benchmark's --model hf-llama (BUNDLE_HF=1, about 28 MB): the
# GPU machines have torch and numpy, not transformers (gpu-fsdp2.sh installs it).
if [ "${BUNDLE_HF:-0}" = 1 ]; then
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d bundle/hfwheels "transformers==5.24.0"
  rm -f bundle/hfwheels/numpy-*.whl
fi
# BUNDLE_BASE=COMMIT: that commit's release wheel too, in bundle/wheels-base, for
# gpu-builds.sh (the FSDP2 step of two builds, paired through NCCL in one job). Built in a
# throwaway worktree, with a target folder of its own (target/base).
if [ -n "${BUNDLE_BASE:-}" ]; then
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$BUNDLE_BASE"
  (cd "$wt" && CARGO_TARGET_DIR="${BASE_TARGET:-$OLDPWD/target/base}" python3 -m maturin build --locked --release \
    -m crates/lowcon-py/Cargo.toml -o "$OLDPWD/bundle/wheels-base")
  git worktree remove --force "$wt"
  git rev-parse --short "$BUNDLE_BASE" > bundle/wheels-base/COMMIT
fi
# The run script and its helper find the binaries beside themselves (see gpu-run.sh).
cp scripts/gpu-run.sh bundle/run.sh
cp scripts/gpu-dead-peer.sh bundle/gpu-dead-peer.sh
cp scripts/gpu-small-messages.sh bundle/gpu-small-messages.sh
cp scripts/gpu-faults.sh bundle/gpu-faults.sh
cp scripts/gpu-fsdp2.sh bundle/gpu-fsdp2.sh
cp scripts/gpu-steps.sh bundle/gpu-steps.sh
cp scripts/gpu-shared.sh bundle/gpu-shared.sh
cp scripts/gpu-planner.sh bundle/gpu-planner.sh
cp scripts/gpu-arrival.sh bundle/gpu-arrival.sh
cp scripts/gpu-stall.sh bundle/gpu-stall.sh
cp scripts/gpu-builds.sh bundle/gpu-builds.sh
cp scripts/gpu-copy-in.sh bundle/gpu-copy-in.sh
chmod +x bundle/run.sh bundle/gpu-dead-peer.sh bundle/gpu-fsdp2.sh bundle/gpu-shared.sh
du -sh bundle
# --pack: the bundle as one xz tarball, bundle/bundle.txz (about 12 MiB against 36), for a
# device tool that limits what it carries; unpack it there with `tar -xJf bundle/bundle.txz`
# from the repository root.
if [ "${1:-}" = --pack ]; then
  tar -cf - bundle | xz -T0 -6 > bundle.txz.tmp
  rm -rf bundle && mkdir bundle && mv bundle.txz.tmp bundle/bundle.txz
  du -sh bundle/bundle.txz
fi
# What a device call carries: the tracked tree and the bundle. The workplace's device tool
# takes 64 MiB; say so here rather than there (docs/runs stays under 8 MB: layout test).
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
carried=$(( tree + $(du -sb bundle | cut -f1) ))
echo "gpu-bundle: the tree and the bundle carry $(( carried >> 20 )) MiB"
if [ "$carried" -gt $(( 64 << 20 )) ]; then
  echo "gpu-bundle: past 64 MiB: pack it (--pack), or leave the transformers wheels out (BUNDLE_HF=0)" >&2
fi
