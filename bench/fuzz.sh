#!/usr/bin/env bash
# Fuzzes the readers of user input for as long as asked: N inputs per target
# (default 1,000,000) through the proptest harness in tests/fuzz (the Submit
# dictionary, trace CSV, host TOML, agent.toml, DVFS apps files), in a
# release build. Prints one line per target: inputs, crashes (a crash fails
# the run with the input that caused it), accepted and refused inputs.
#
# Usage: bench/fuzz.sh [N] [FILTER]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"
filter="${2:-fuzz_}"
export GPU_AGENT_FUZZ_CASES="$n"
cargo test --release -q -p gpu-agent-tests --test fuzz --no-run
start=$(date +%s)
cargo test --release -q -p gpu-agent-tests --test fuzz -- --nocapture --test-threads=1 "$filter" 2>&1 |
    grep -oE 'fuzz [^:]+: [0-9]+ inputs.*|panicked.*|FAILED.*|test result.*|minimal failing.*'
echo "fuzz.sh: $n inputs per target in $(( $(date +%s) - start )) s"
