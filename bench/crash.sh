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
# Beside the submitters, an admin loop keeps changing what an admin can
# change, one call at a time, noting each call before it is sent and once
# it is answered: the policy's parameters (`policy use sos --param
# alpha=...`), GPU 2 offline and online, MIG layouts of GPU 1 (split into
# two 3g.20gb and whole again), and an adopted job on GPU 3 (adopt, then
# release). Every fourth cycle (5 of the default 20) the daemon is not
# killed from outside but kills itself in the middle of a MIG apply (the
# test hook GPU_AGENT_TEST_KILL_IN_MIG_APPLY: the new instances exist, the
# change is not yet stored as made). At the end, each of those settings must
# be what the last answered call made it, or what a later call that was
# sent but not answered would have made it:
#
#   policy        alpha in force
#   device        GPU 2 online or drained
#   mig           GPU 1 whole or split, and `gpuctl mig assert` agrees
#   adoptions     every acknowledged adoption present, none still holding GPU 3
#
# Usage: bench/crash.sh [N] (default 20 cycles)
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-20}"
clients=4
# The MIG kills need the test hooks, which only a test build obeys.
cargo build --release -q -p gpu-agent-daemon --features gpu-agent-daemon/test-hooks \
    -p gpu-agent-cli -p gpu-agent-policy-fifo -p gpu-agent-policy-sos
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
cat >"$work/mig.yaml" <<'YAML'
version: v1
mig-configs:
  split:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
    - devices: [0, 2, 3]
      mig-enabled: false
  whole:
    - devices: all
      mig-enabled: false
YAML

# start_daemon [hook]: with a hook, the daemon kills itself in its next MIG apply.
start_daemon() {
    env ${1:+GPU_AGENT_TEST_KILL_IN_MIG_APPLY="$1"} "$bin/gpu-agentd" --mock examples/host.toml --session --time-scale 100 \
        --state-dir "$work/state" --plugin-dir "$bin" 2>>"$work/daemon.log" &
    dpid=$!
    # Up to 60 s: the machine may be busy.
    for _ in $(seq 1 3000); do
        gpuctl status --session >/dev/null 2>&1 && return
        kill -0 "$dpid" 2>/dev/null || break
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
            --weight 1 --name "c$c-$i" --chdir "$work" -- /bin/sh -c "echo \$GPU_AGENT_TASK_ID >> $work/runs; sleep 0.05" 2>/dev/null); then
            echo "$id" >>"$work/ledger"
        fi
    done
}

# note KIND VALUE: the admin ledger, "sent" before a call, "ack" once answered.
note() { echo "$1 $2 $3" >>"$work/admin"; }

# admin_call KIND VALUE COMMAND...: one admin change, noted.
admin_call() {
    local kind=$1 value=$2
    shift 2
    note sent "$kind" "$value"
    if "$@" >/dev/null 2>&1; then note ack "$kind" "$value"; fi
}

# released ID: whether adoption ID no longer holds its GPU (released now,
# or by a call whose answer a kill lost).
released() {
    gpuctl release "$1" --session >/dev/null 2>&1 && return 0
    local state
    state=$(gpuctl task "$1" --session --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null) || return 1
    [ "$state" != running ]
}

admin() {
    local i=0 layout=split adopted=""
    while [ ! -e "$work/stop" ]; do
        i=$((i + 1))
        admin_call policy "0.$((i % 9 + 1))" gpuctl policy use sos --session --param "alpha=0.$((i % 9 + 1))"
        if [ $((i % 2)) = 0 ]; then
            admin_call device online gpuctl devices online 2 --session
        else
            admin_call device drained gpuctl devices offline 2 --session
        fi
        # The apply is answered once stored; gpuctl then follows the drain.
        note sent mig "$layout"
        if gpuctl mig apply --session -f "$work/mig.yaml" -c "$layout" --json 2>/dev/null | grep -q .; then
            note ack mig "$layout"
        fi
        if [ "$layout" = split ]; then layout=whole; else layout=split; fi
        if [ -z "$adopted" ]; then
            adopted=$(gpuctl adopt --session --devices 3 --external-id "slurm:$i" --owner-uid 0 \
                --deadline $(( $(date +%s) + 600 )) 2>/dev/null) && echo "$adopted" >>"$work/adopted" || adopted=""
        elif released "$adopted"; then
            adopted=""
        fi
        sleep 0.05
    done
    # Nothing left adopted.
    for _ in $(seq 1 300); do
        { [ -z "$adopted" ] || released "$adopted"; } && break
        sleep 0.1
    done
}

start_daemon
for c in $(seq 1 $clients); do client "$c" & done
admin &
mig_kills=0
for cycle in $(seq 1 "$cycles"); do
    if [ $((cycle % 4)) = 0 ]; then
        # This one ends in the middle of a MIG apply, by the daemon's own hand.
        { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
        start_daemon "$work/mig-kill-$cycle"
        for _ in $(seq 1 600); do
            [ -e "$work/mig-kill-$cycle" ] && break
            sleep 0.05
        done
        if [ -e "$work/mig-kill-$cycle" ]; then
            wait "$dpid" 2>/dev/null || true
            mig_kills=$((mig_kills + 1))
        else
            { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
        fi
        start_daemon
        continue
    fi
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
gpuctl devices --session --json >"$work/devices.json"
busctl --address="$DBUS_SESSION_BUS_ADDRESS" --json=short get-property org.gpuagent.Agent1 \
    /org/gpuagent/Agent1 org.gpuagent.Agent1 PolicyParameters >"$work/params.json"
# Let a MIG change under way end (stable, failed or reset-required).
for _ in $(seq 1 600); do
    gpuctl mig show --session --json | python3 -c 'import json,sys; sys.exit(any(l["state"] in ("draining", "applying") for l in json.load(sys.stdin)))' && break
    sleep 0.1
done
gpuctl mig show --session >"$work/mig.txt"
for layout in split whole; do
    gpuctl mig assert --session -f "$work/mig.yaml" -c "$layout" >/dev/null 2>&1 && echo "$layout" >"$work/asserted"
done
python3 - "$work" "$cycles" "$mig_kills" <<'PY'
import json, os, sys, collections
work, cycles, mig_kills = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
acked = set(open(f"{work}/ledger").read().split()) if __import__("os").path.exists(f"{work}/ledger") else set()
tasks = {t["id"]: t for t in json.load(open(f"{work}/tasks.json"))}
runs = collections.Counter(open(f"{work}/runs").read().split()) if __import__("os").path.exists(f"{work}/runs") else collections.Counter()
present = acked & tasks.keys()
states = collections.Counter(t["state"] for t in tasks.values())
print(f"cycles        {cycles} ({mig_kills} of them in a MIG apply)")
print(f"acknowledged  {len(acked)}")
print(f"present       {len(present)}")
print(f"lost          {len(acked - present)}")
print(f"ran twice     {sum(1 for n in runs.values() if n > 1)}")
print(f"tasks         {len(tasks)} ({', '.join(f'{s} {n}' for s, n in sorted(states.items()))})")
counted = {s: n for s, n in json.load(open(f"{work}/status.json"))["tasks"].items() if n}
agree = counted == dict(states)
print(f"counts agree  {'yes' if agree else f'no: status says {counted}'}")

# Admin changes: the state must be the last answered call's, or a later sent one's.
def allowed(kind):
    ledger = [l.split() for l in open(f"{work}/admin")] if os.path.exists(f"{work}/admin") else []
    ledger = [(what, value) for what, k, value in ledger if k == kind]
    last_ack = max((i for i, (what, _) in enumerate(ledger) if what == "ack"), default=-1)
    ok = {value for i, (what, value) in enumerate(ledger) if i >= last_ack and what == "sent" or i == last_ack}
    acks = sum(1 for what, _ in ledger if what == "ack")
    return ok, acks
admin_ok = True
def check(kind, got):
    global admin_ok
    ok, acks = allowed(kind)
    good = acks == 0 or got in ok
    admin_ok &= good
    print(f"{kind:<13} {got} ({acks} answered changes; {'as answered' if good else f'expected one of {sorted(ok)}'})")
params = {k: v["data"] for k, v in json.load(open(f"{work}/params.json"))["data"].items()}
check("policy", f"{params['alpha']:g}" if "alpha" in params else "none")
devices = json.load(open(f"{work}/devices.json"))
gpu2 = next(d for d in devices if d["index"] == 2)
check("device", "online" if gpu2["online"] else gpu2["health"])
asserted = open(f"{work}/asserted").read().strip() if os.path.exists(f"{work}/asserted") else "neither"
check("mig", asserted)
if asserted == "neither":
    print(open(f"{work}/mig.txt").read(), end="")
adopted = set(open(f"{work}/adopted").read().split()) if os.path.exists(f"{work}/adopted") else set()
holding = [i for i in adopted if tasks.get(i, {}).get("state") == "running"]
adoptions_ok = adopted <= tasks.keys() and not holding
print(f"adoptions     {len(adopted)} acknowledged, {len(adopted & tasks.keys())} present, {len(holding)} still holding GPU 3")
sys.exit(1 if acked - present or any(n > 1 for n in runs.values()) or not agree or not admin_ok or not adoptions_ok else 0)
PY
