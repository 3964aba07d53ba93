#!/usr/bin/env bash
# Benchmark of gpu-agentd through a real bus: Submit latency (p50, p99) against
# a Peer.Ping baseline, sustained submissions/s, idle CPU and RSS. Prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p gpu-agent-cli -p gpu-agent-daemon -p gpu-agent-policy-fifo
cargo bench --quiet -p gpu-agent-tests --bench daemon
