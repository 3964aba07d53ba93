#!/usr/bin/env bash
# Fuzzes the readers of user input for as long as asked: N inputs per target
# (default 1,000,000) through the proptest harness in tests/fuzz (the Submit
# dictionary, trace CSV, host TOML, agent.toml, DVFS apps files), in a
# release build. Prints one line per target: inputs, crashes (a crash fails
# the run with the input that caused it), accepted and refused inputs.
#
# Then CALLS random D-Bus calls (default 20,000) of every method of a running
# gpu-agentd on mock GPUs (tests/e2e/daemon_fuzz.rs: Agent1, Device1, Mock1
# and the standard interfaces, MIG, policy parameters, adoptions and device
# health included): each must be answered, with success or a documented
# error name; prints the counts by error name, and the daemon must then
# stop on SIGTERM and keep every acknowledged task across a kill -9.
#
# Usage: bench/fuzz.sh [N] [FILTER] [CALLS]
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

export GPU_AGENT_FUZZ_CALLS="${3:-20000}"
cargo test --release -q -p gpu-agent-tests --test e2e --no-run
start=$(date +%s)
cargo test --release -q -p gpu-agent-tests --test e2e -- --nocapture daemon_fuzz 2>&1 |
    grep -E '^fuzz bus|panicked|FAILED|test result|errors the API|^call [0-9]+'
echo "fuzz.sh: $GPU_AGENT_FUZZ_CALLS D-Bus calls in $(( $(date +%s) - start )) s"
