#!/usr/bin/env bash
# Runs the browser API tests (tests/wasm_api.rs) in headless Chromium, through
# wasm-bindgen-test-runner (the runner set in .cargo/config.toml) and Debian's
# chromedriver; webdriver.json beside Cargo.toml holds Chromium's flags.
set -euo pipefail
cd "$(dirname "$0")/.."
export CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"
# The default (20 s) is tight for a debug-built engine on a slow CI machine.
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-120}"
cargo test --target wasm32-unknown-unknown --test wasm_api "$@"
