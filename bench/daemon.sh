#!/usr/bin/env bash
# Benchmark of gpu-agentd through a real bus: Submit latency (p50, p99) against
# a Peer.Ping baseline, from one client and from 8 under a 50,000-task backlog;
# CPU per call of the daemon, the bus and the clients; the disk's fdatasync latency;
# idle CPU; RSS fresh, after 50,000 and 500,000 finished tasks and after listing
# them (DAEMON_BENCH_LONG=0 skips the 500,000; DAEMON_BENCH_RUNS=N makes N runs, 3 by
# default; DAEMON_BENCH_BIN_DIR=DIR runs the
# gpu-agentd and fifo plugin in DIR, e.g. a baseline build). Prints a table. About 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p gpu-agent-cli -p gpu-agent-daemon -p gpu-agent-policy-fifo
cargo bench --quiet -p gpu-agent-tests --bench daemon
