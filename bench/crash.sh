#!/usr/bin/env bash
# Crash cycles: N times, kill -9 gpu-agentd in the middle of a workload of
# command tasks (mock GPUs, a private bus) and start it again, while client
# loops submit through gpuctl (which retries a lost reply with its client
# token). A client-side ledger keeps every id gpuctl printed; each task
# appends its GPU_AGENT_TASK_ID to a run log when it starts. At the end:
#
#   acknowledged  ids gpuctl printed (distinct)
#   present       of those, tasks the daemon still has
#   lost          acknowledged but missing (must be 0)
#   ran twice     ids in the run log more than once (must be 0)
#   counts agree  the daemon's counts by state (`gpuctl status`: the stored
#                 sums of the ended tasks, kept across every kill, and the
#                 live ones) against the tasks it lists (must be yes)
#
# and, for reading them, how many tasks ended `lost` (running at a kill,
# without `requeue`: marked, never run again).
#
# Usage: bench/crash.sh [N] (default 20 cycles)
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-20}"
clients=4
cargo build --release -q -p gpu-agent-daemon -p gpu-agent-cli -p gpu-agent-policy-fifo
bin="$PWD/target/release"
work="$(mktemp -d)"
cleanup() {
    { kill $(jobs -p) || true; [ -n "${dpid:-}" ] && kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
    [ -n "${bpid:-}" ] && kill "$bpid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

dbus-daemon --session --fork --nopidfile --print-address=3 --print-pid=4 3>"$work/address" 4>"$work/bus.pid"
bpid="$(cat "$work/bus.pid")"
export DBUS_SESSION_BUS_ADDRESS="$(head -1 "$work/address")"
gpuctl() { "$bin/gpuctl" "$@"; }

start_daemon() {
    "$bin/gpu-agentd" --mock examples/host.toml --session --time-scale 100 \
        --state-dir "$work/state" --plugin-dir "$bin" 2>>"$work/daemon.log" &
    dpid=$!
    for _ in $(seq 1 500); do
        gpuctl status --session >/dev/null 2>&1 && return
        sleep 0.02
    done
    echo "crash.sh: gpu-agentd did not start; see its log:" >&2
    tail -20 "$work/daemon.log" >&2
    exit 1
}

client() {
    local c=$1 i=0
    while [ ! -e "$work/stop" ]; do
        i=$((i + 1))
        if id=$(gpuctl submit --session --retry-for 20 --workload 1 --mem 1 --deadline 60 \
            --weight 1 --name "c$c-$i" -- /bin/sh -c "echo \$GPU_AGENT_TASK_ID >> $work/runs; sleep 0.05" 2>/dev/null); then
            echo "$id" >>"$work/ledger"
        fi
    done
}

start_daemon
for c in $(seq 1 $clients); do client "$c" & done
for cycle in $(seq 1 "$cycles"); do
    sleep "0.$((RANDOM % 9 + 1))"
    { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
    start_daemon
    printf '\rcrash.sh: cycle %d/%d, %d acknowledged' "$cycle" "$cycles" "$(sort -u "$work/ledger" 2>/dev/null | wc -l)" >&2
done
echo >&2
touch "$work/stop"
wait $(jobs -p | grep -v "^$dpid$") 2>/dev/null || true
# Let every task end.
for _ in $(seq 1 3000); do
    left=$(gpuctl tasks --session --json | python3 -c 'import json,sys; print(sum(t["state"] in ("queued","assigned","running") for t in json.load(sys.stdin)))')
    [ "$left" = 0 ] && break
    sleep 0.1
done
gpuctl tasks --session --json >"$work/tasks.json"
gpuctl status --session --json >"$work/status.json"
python3 - "$work" "$cycles" <<'PY'
import json, sys, collections
work, cycles = sys.argv[1], int(sys.argv[2])
acked = set(open(f"{work}/ledger").read().split()) if __import__("os").path.exists(f"{work}/ledger") else set()
tasks = {t["id"]: t for t in json.load(open(f"{work}/tasks.json"))}
runs = collections.Counter(open(f"{work}/runs").read().split()) if __import__("os").path.exists(f"{work}/runs") else collections.Counter()
present = acked & tasks.keys()
states = collections.Counter(t["state"] for t in tasks.values())
print(f"cycles        {cycles}")
print(f"acknowledged  {len(acked)}")
print(f"present       {len(present)}")
print(f"lost          {len(acked - present)}")
print(f"ran twice     {sum(1 for n in runs.values() if n > 1)}")
print(f"tasks         {len(tasks)} ({', '.join(f'{s} {n}' for s, n in sorted(states.items()))})")
counted = {s: n for s, n in json.load(open(f"{work}/status.json"))["tasks"].items() if n}
agree = counted == dict(states)
print(f"counts agree  {'yes' if agree else f'no: status says {counted}'}")
sys.exit(1 if acked - present or any(n > 1 for n in runs.values()) or not agree else 0)
PY
