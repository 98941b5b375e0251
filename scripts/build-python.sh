#!/usr/bin/env bash
# Builds the Python package's wheel (crates/lowcon-py: lowcon._native, abi3, Python 3.9+)
# with maturin and installs it into this machine's python3. Called by setup.sh and
# test.sh; `--release` builds an optimised wheel (gpu-bundle.sh carries that one).
#
#     scripts/build-python.sh [--release] [OUT_DIR]      # wheels go to OUT_DIR (target/wheels)
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore
cd "$(dirname "$0")/.."
profile=()
if [ "${1:-}" = --release ]; then profile=(--release); shift; fi
out=${1:-target/wheels}
rm -f "$out"/lowcon-*.whl
python3 -m maturin build --locked "${profile[@]}" -m crates/lowcon-py/Cargo.toml -o "$out"
wheel=$(ls "$out"/lowcon-*.whl)
python3 -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "build-python: installed $wheel"
