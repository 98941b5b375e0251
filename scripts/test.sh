#!/usr/bin/env bash
# lowcon's test command (the README's, and what .ci/run calls after scripts/setup.sh):
# ShellCheck on every shell script, formatting, clippy on host and device code, rustdoc,
# and the whole workspace's tests. ptxas and shellcheck must be present (scripts/setup.sh installs
# them): every generated PTX is checked with `ptxas -arch=sm_90`. GPU tests skip, saying
# why, when no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLCHAIN=${LOWCON_KERNEL_TOOLCHAIN:-nightly}
export LOWCON_REQUIRE_PTXAS=1
# Each step prints the seconds since the start, so a slow step shows in CI's log.
step() { echo "== [${SECONDS}s] $*"; }

step "shellcheck"
scripts/shellcheck.sh

step "files past 800 lines (a question, not a rule; the layout test fails past 1,000)"
scripts/long-files.sh 800

step "rustfmt"
cargo fmt --all --check
rustfmt --edition 2024 --check gpu-kernels/kernels/src/lib.rs

step "clippy (host)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "rustdoc (broken intra-doc links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked -q

step "clippy (device, nvptx64)"
(cd gpu-kernels/kernels && env -u RUSTUP_TOOLCHAIN rustup run "$TOOLCHAIN" cargo clippy --locked --release \
  --target nvptx64-nvidia-cuda -Zbuild-std=core --target-dir ../../target/clippy-nvptx -- -D warnings)

step "tests"
cargo test --workspace --locked

step "C API: the example program from C11 and C++17, 2 and 3 host-backend ranks, dead peer"
# The C library and the CLI as the tests built them: `-p lowcon-capi -p lowcon-cli` alone
# resolves other features of their dependencies (no dev-dependencies) and rebuilt about
# 140 crates (53 s on 2 cores); all targets resolve as `cargo test` does, so nothing is rebuilt.
cargo build --locked --workspace --all-targets
scripts/capi-check.sh host target/debug/lowcon target/debug crates/lowcon-capi/include \
  crates/lowcon-capi/examples/lowcon_check.c target/capi-check

step "Python package: the wheel, then its tests on the host backend (2 and 3 ranks)"
scripts/build-python.sh
python3 -m pytest -q -n 3 --dist worksteal --durations=10 crates/lowcon-py/tests crates/lowcon-py/bench/test_fsdp2_stats.py \
  scripts/probes/test_small_table.py scripts/probes/test_paired_order.py scripts/probes/test_slow_batches.py
step "done"
