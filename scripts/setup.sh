#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test lowcon:
#   - the nightly toolchain's rust-src and llvm-tools (the GPU kernels are built with
#     -Zbuild-std=core and linked with llvm-link/opt/llc; see docs/design.md),
#   - rustfmt and clippy for the stable toolchain,
#   - ptxas 13.0 from the PyPI wheel nvidia-cuda-nvcc, into .tools/ (to check the PTX).
# Safe to re-run: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLCHAIN=${LOWCON_KERNEL_TOOLCHAIN:-nightly}
NVCC_VERSION=13.0.88   # matches the GPU machines' driver (CUDA 13.0)

if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  echo "setup: installing the $TOOLCHAIN toolchain"
  rustup toolchain install "$TOOLCHAIN" --profile minimal
fi
rustup component add rust-src llvm-tools --toolchain "$TOOLCHAIN"
rustup component add rustfmt clippy

dest=.tools/cuda-nvcc
if [ "$(cat "$dest/.lowcon-version" 2>/dev/null)" != "$NVCC_VERSION" ] || [ ! -x "$dest/nvidia/cu13/bin/ptxas" ]; then
  echo "setup: installing ptxas from nvidia-cuda-nvcc==$NVCC_VERSION into $dest"
  rm -rf "$dest"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" "nvidia-cuda-nvcc==$NVCC_VERSION"
  echo "$NVCC_VERSION" > "$dest/.lowcon-version"
fi
"$dest/nvidia/cu13/bin/ptxas" --version | tail -n 2
echo "setup: done"
