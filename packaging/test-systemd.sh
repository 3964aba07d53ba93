#!/usr/bin/env bash
# Tests the .deb packaging/build.sh made under a booted systemd, as root:
# a minimal Debian bookworm root (debootstrap) booted with systemd-nspawn,
# the package installed with apt, the daemon on the example host's mock GPUs
# (agent.toml's `mock`), and every check made with systemd's own tools
# (systemctl, journalctl, busctl) and the installed gpuctl:
#
#   install      apt installs the .deb: groups, enabled unit; without GPUs
#                (no NVML, no mock) the unit fails, saying why;
#   start        systemctl start reaches active (running) through READY=1,
#                with the watchdog armed;
#   reload       systemctl reload succeeds; on a bad agent.toml it fails,
#                naming the line and the key, and the daemon runs on;
#   user task    a member of gpu-agent submits through the system bus: the
#                command runs as that user in the submit directory, writes
#                in its home and /scratch, cannot write /usr, and its output
#                is in journalctl TASK_ID=t1;
#   access       a user outside the groups reads (gpuctl status, tasks, task)
#                and is refused Submit and Reload by the bus policy
#                (org.freedesktop.DBus.Error.AccessDenied); a member cancelling
#                another user's task is refused by the daemon
#                (org.gpuagent.Agent1.Error.AccessDenied);
#   stop         systemctl stop ends a running task that ignores SIGTERM and
#                restores the GPU clocks it locked, within TimeoutStopSec,
#                and the daemon exits 0 (the next start restores nothing);
#   watchdog     a SIGSTOPped gpu-agentd is killed by the watchdog and
#                restarted; every acknowledged task is there after it and the
#                clocks it had locked are restored;
#   upgrade      apt install of a newer build (this .deb, repacked with a
#                higher version) over the running daemon with queued tasks
#                reloads it without a restart, and every task stays as it
#                was, also across the restart that runs the new version;
#   purge        apt purge stops the daemon and removes its state, its
#                configuration and its unit.
#
# Each check prints "test-systemd: ok: ..." or fails with
# "test-systemd: FAILED: <check>: <why>" and the unit's journal.
#
# The root is built on each run (debootstrap from GPU_AGENT_DEBIAN_MIRROR,
# default http://deb.debian.org/debian, about 45 s); GPU_AGENT_SYSTEMD_ROOT
# names a pristine root to copy instead (for repeated runs by hand: it is
# never modified). Needs debootstrap and systemd-nspawn (systemd-container),
# installed when missing. Leaves nothing running or installed on the host.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
check=setup
step() {
    check=$1
    shift
    printf '== %s: %s\n' "$check" "$*"
}
ok() { printf 'test-systemd: ok: %s: %s\n' "$check" "$*"; }

leader=
nspawn_pid=
fail() {
    printf 'test-systemd: FAILED: %s: %s\n' "$check" "$*" >&2
    if [ -n "$leader" ] && kill -0 "$leader" 2>/dev/null; then
        echo "--- the unit's journal (last 60 lines)" >&2
        ct journalctl -u gpu-agent -n 60 --no-pager >&2 || true
    fi
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run as root (it boots a container)"

target=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
deb=$(ls -t "$target"/debian/gpu-agent_*.deb 2>/dev/null | head -n 1 || true)
[ -n "$deb" ] || fail "no .deb: run packaging/build.sh first"

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
if [ ${#missing[@]} -gt 0 ]; then
    step setup "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# systemd-nspawn needs a cgroup hierarchy at /sys/fs/cgroup (without one:
# "Failed to determine whether the unified cgroups hierarchy is used"). A
# machine whose init mounted none gets the unified one, as systemd would
# mount it; one that has a hierarchy keeps it.
if ! mountpoint -q /sys/fs/cgroup; then
    step setup "mounting cgroup2 at /sys/fs/cgroup (no cgroup hierarchy is mounted)"
    mount -t cgroup2 cgroup2 /sys/fs/cgroup
fi

work=$(mktemp -d /var/tmp/gpu-agent-systemd.XXXXXX)
# In memory (about 400 MB): a root on the disk took up to 30 s to delete.
mount -t tmpfs -o size=2G,mode=0755 gpu-agent-systemd "$work"
root=$work/root
cleanup() {
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        # The container is thrown away: its init killed (which ends every
        # process in it; an orderly poweroff took up to 30 s), then nspawn
        # exits.
        pkill -KILL -P "$nspawn_pid" -x systemd || true
        (sleep 10 && kill -KILL "$nspawn_pid" 2>/dev/null) &
        local killer=$!
        wait "$nspawn_pid" 2>/dev/null || true
        kill "$killer" 2>/dev/null || true
    fi
    umount "$work" && rmdir "$work"
}
trap cleanup EXIT

# Runs a command in the container, as root, in a clean environment.
ct() {
    timeout 120 nsenter -t "$leader" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}
# Runs a command in the container as user $1, in directory $2.
as() {
    local who=$1 dir=$2
    shift 2
    ct setpriv --reuid="$who" --regid="$who" --init-groups \
        env HOME="/home/$who" USER="$who" LOGNAME="$who" sh -c 'cd "$0" && exec "$@"' "$dir" "$@"
}
# Waits up to $2 seconds for the command after it to succeed; fails naming $1.
wait_for() {
    local what=$1 limit=$2
    shift 2
    local until=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$until" ] || fail "$what: not within ${limit}s"
        sleep 0.5
    done
}
prop() { ct systemctl show -p "$1" --value gpu-agent.service; }
# The unit's journal after the cursor that `mark` took.
mark() { cursor=$(ct journalctl -n 1 -o export --no-pager | sed -n 's/^__CURSOR=//p'); }
journal_since() { ct journalctl --after-cursor="$cursor" -u gpu-agent.service -o cat --no-pager; }
journal_has() { journal_since | grep -qF -- "$1"; }
# gpu-agentd's own refusal of a reload (busctl's says "Call failed: cannot reload: ...").
refused_in_log() { journal_since | grep -q '^cannot reload: '; }
task_state() { ct gpuctl task "$1" --json | sed -n 's/^ *"state": "\([a-z]*\)".*/\1/p' | head -n 1; }
state_is() { [ "$(task_state "$1")" = "$2" ]; }
ended() { case "$(task_state "$1")" in succeeded | failed | cancelled | lost | rejected) return 0 ;; esac; return 1; }
core_clock() {
    ct gpuctl devices --json | sed -n 's/^ *"core_clock_mhz": \([0-9]*\).*/\1/p' | sed -n "$(($1 + 1))p"
}
clock_is() { [ "$(core_clock "$1")" = "$2" ]; }
inactive() { ! ct systemctl is-active --quiet gpu-agent.service; }
running_at_least() { [ "$(all_tasks | grep -c running)" -ge "$1" ]; }
restarted_since() { [ "$(prop NRestarts)" -gt "$1" ] && ct systemctl is-active --quiet gpu-agent.service; }
# Every task as "id state", sorted.
all_tasks() { ct gpuctl tasks --json | sed -n 's/^ *"\(id\|state\)": "\([^"]*\)".*/\2/p' | paste - - | sort; }

# --- the root and the container ------------------------------------------------
step root "a Debian bookworm root in $root"
t0=$SECONDS
if [ -n "${GPU_AGENT_SYSTEMD_ROOT:-}" ]; then
    cp -a "$GPU_AGENT_SYSTEMD_ROOT" "$root"
else
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,procps bookworm "$root" \
        "${GPU_AGENT_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
        fail "debootstrap failed: $(tail -n 20 "$work/debootstrap.log")"
fi
ok "root ready in $((SECONDS - t0)) s"

version=$(dpkg-deb -f "$deb" Version)
newer=${version}+rebuild1
cp "$deb" "$root/root/gpu-agent.deb"
# The upgrade: the same build, repacked with a higher version.
dpkg-deb -R "$deb" "$work/repack"
sed -i "s/^Version: .*/Version: $newer/" "$work/repack/DEBIAN/control"
dpkg-deb --root-owner-group -b "$work/repack" "$root/root/gpu-agent-newer.deb" >/dev/null
rm -rf "$work/repack"

step boot "systemd-nspawn -b"
t0=$SECONDS
systemd-nspawn -q -D "$root" --register=no --keep-unit -b --console=passive \
    --machine=gpu-agent-test >"$work/nspawn.log" 2>&1 &
nspawn_pid=$!
until leader=$(pgrep -P "$nspawn_pid" -x systemd); do
    kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited: $(cat "$work/nspawn.log")"
    [ $((SECONDS - t0)) -lt 30 ] || fail "no systemd in the container within 30 s"
    sleep 0.2
done
# Until systemd answers (is-system-running --wait waits for the boot's end).
booted=
while :; do
    booted=$(ct systemctl is-system-running --wait 2>/dev/null || true)
    case "$booted" in
        running | degraded) break ;;
    esac
    [ $((SECONDS - t0)) -lt 60 ] || fail "the container's systemd says '$booted' after 60 s: $(ct systemctl --failed --no-pager)"
    sleep 0.2
done
ok "systemd $(ct systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p') $booted in $((SECONDS - t0)) s"

# --- install -----------------------------------------------------------------------
step install "apt install gpu-agent $version"
ct env DEBIAN_FRONTEND=noninteractive apt-get install -y -q /root/gpu-agent.deb >"$work/apt.log" 2>&1 ||
    fail "apt install failed: $(tail -n 20 "$work/apt.log")"
[ "$(ct dpkg-query -W -f '${Status}' gpu-agent)" = "install ok installed" ] || fail "gpu-agent is not installed"
[ "$(ct systemctl is-enabled gpu-agent.service)" = enabled ] || fail "the unit is not enabled"
ct getent group gpu-agent >/dev/null && ct getent group gpu-agent-admin >/dev/null || fail "the groups are missing"
ok "installed, unit enabled, groups gpu-agent and gpu-agent-admin"
# This container has no NVIDIA driver: the daemon the package started fails
# and says why (systemd would try 4 more times; stopped here).
wait_for "the unit's failure without GPUs" 60 inactive
ct systemctl stop gpu-agent.service
ct journalctl -u gpu-agent.service -o cat --no-pager | grep -i nvml >/dev/null ||
    fail "the failed start does not name NVML: $(ct journalctl -u gpu-agent.service -o cat --no-pager | tail -n 5)"
ok "without GPUs: $(ct journalctl -u gpu-agent.service -o cat --no-pager | grep -i nvml | tail -n 1)"

# --- start ---------------------------------------------------------------------------
step start "the mock in agent.toml, systemctl start"
# Tasks may write here (the unit's ReadWritePaths=); made before the start.
ct install -d -m 1777 /scratch
ct sh -c 'echo "mock = \"/usr/share/doc/gpu-agent/examples/host.toml\"" >>/etc/gpu-agent/agent.toml'
ct systemctl reset-failed gpu-agent.service
mark
# Type=notify: systemctl start returns once READY=1 came (or the start failed).
ct systemctl start gpu-agent.service || fail "systemctl start failed"
ct systemctl status gpu-agent.service --no-pager | grep -q 'Active: active (running)' ||
    fail "not active (running): $(ct systemctl status gpu-agent.service --no-pager)"
[ "$(prop Type)" = notify ] || fail "Type=$(prop Type)"
journal_has "pinging the systemd watchdog every 15s" || fail "the daemon does not ping the watchdog"
# READY=1 only once the bus name is owned: gpuctl answers at once, unwaited.
ct gpuctl status | grep -q '^backend  mock:/usr/share/doc/gpu-agent/examples/host.toml$' ||
    fail "gpuctl status: $(ct gpuctl status)"
ok "$(ct systemctl status gpu-agent.service --no-pager | grep 'Active:' | sed 's/^ *//'); watchdog pinged every 15s"

# --- reload --------------------------------------------------------------------------
step reload "systemctl reload"
mark
pid=$(prop MainPID)
ct systemctl reload gpu-agent.service || fail "systemctl reload failed: $(journal_since)"
[ "$(prop MainPID)" = "$pid" ] || fail "the reload restarted the daemon"
ok "$(journal_since | grep '^reloaded ' | tail -n 1)"
ct cp /etc/gpu-agent/agent.toml /root/agent.toml.good
ct sh -c 'echo "cancel_grace_s = \"ten\"" >>/etc/gpu-agent/agent.toml'
bad_line=$(ct grep -c '' /etc/gpu-agent/agent.toml)
mark
if out=$(ct systemctl reload gpu-agent.service 2>&1); then
    fail "a reload of a bad agent.toml succeeded"
fi
wait_for "the refusal in gpu-agentd's log" 10 refused_in_log
refusal=$(journal_since | grep '^cannot reload: ' | tail -n 1)
grep -qF "/etc/gpu-agent/agent.toml:$bad_line: cancel_grace_s: " <<<"$refusal" ||
    fail "the refusal does not name line $bad_line and the key: $refusal"
ct systemctl is-active --quiet gpu-agent.service || fail "the daemon stopped after a refused reload"
[ "$(prop MainPID)" = "$pid" ] || fail "the refused reload restarted the daemon"
ct cp /root/agent.toml.good /etc/gpu-agent/agent.toml
ct systemctl reload gpu-agent.service || fail "the reload of the mended agent.toml failed"
ok "bad agent.toml refused: $(head -n 1 <<<"$out") gpu-agentd: $refusal"

# --- a user's task through the system bus ------------------------------------------------
step "user task" "a member of gpu-agent submits a command"
ct useradd --create-home --shell /bin/sh --groups gpu-agent alice
ct useradd --create-home --shell /bin/sh bob
as alice /home/alice mkdir work
id=$(as alice /home/alice/work gpuctl submit --time 10 --name t1-probe -- sh -c '
    echo "user $(id -un) in $(pwd)"
    echo home >"$HOME/written" && echo "home written"
    echo scratch >/scratch/alice && echo "scratch written"
    touch /usr/alice 2>&1 || echo "/usr refused"') || fail "alice cannot submit"
[ "$id" = t1 ] || fail "the first task is $id, not t1"
wait_for "$id's end" 60 ended "$id"
state_is "$id" succeeded || fail "$id ended $(task_state "$id"): $(ct gpuctl task "$id")"
out=$(ct journalctl TASK_ID=t1 -o cat --no-pager)
for line in "user alice in /home/alice/work" "home written" "scratch written" "Read-only file system" "/usr refused"; do
    grep -qF "$line" <<<"$out" || fail "journalctl TASK_ID=t1 lacks '$line': $out"
done
[ "$(ct stat -c %U /home/alice/written /scratch/alice | sort -u)" = alice ] || fail "the files are not alice's"
ct test ! -e /usr/alice || fail "the task wrote /usr"
ct test -f /home/alice/work/gpu-agent-t1.out || fail "no gpu-agent-t1.out in the submit directory"
ok "journalctl TASK_ID=t1: $(tr '\n' '|' <<<"$out")"

# --- access ------------------------------------------------------------------------
step access "a user outside the groups, and the daemon's own check"
for read in status devices tasks "task t1" "policy list"; do
    # shellcheck disable=SC2086
    as bob /home/bob gpuctl $read >/dev/null || fail "bob cannot run gpuctl $read"
done
if out=$(as bob /home/bob gpuctl submit --time 10 -- true 2>&1); then
    fail "bob (in no group) could submit"
fi
grep -qF org.freedesktop.DBus.Error.AccessDenied <<<"$out" || fail "bob's Submit: $out"
ok "bob's submit: $(head -n 1 <<<"$out")"
if out=$(as bob /home/bob gpuctl reload 2>&1); then
    fail "bob could reload"
fi
grep -qF org.freedesktop.DBus.Error.AccessDenied <<<"$out" || fail "bob's Reload: $out"
root_task=$(ct gpuctl submit --time 1h --chdir /root -- sleep 600)
if out=$(as alice /home/alice gpuctl cancel "$root_task" 2>&1); then
    fail "alice could cancel root's task"
fi
grep -qF org.gpuagent.Agent1.Error.AccessDenied <<<"$out" || fail "alice's Cancel of $root_task: $out"
ct gpuctl cancel "$root_task" >/dev/null
ok "alice's cancel of root's task: $(head -n 1 <<<"$out")"

# --- stop ------------------------------------------------------------------------------
step stop "systemctl stop with running tasks"
ct gpuctl policy use edl >/dev/null || fail "gpuctl policy use edl"
idle=$(core_clock 0)
# Modelled for days, so it runs through the stop, at the clocks edl locks.
sim=$(ct gpuctl submit --workload 1e6 --mem 1 --deadline 1000h --weight 1)
wait_for "$sim running" 30 state_is "$sim" running
locked=$(ct gpuctl task "$sim" --json | sed -n 's/^ *"core_mhz": \([0-9]*\).*/\1/p' | head -n 1)
[ -n "$locked" ] && [ "$locked" != "$idle" ] || fail "$sim runs at no locked clock: $(ct gpuctl task "$sim")"
wait_for "GPU 0 at $locked MHz" 15 clock_is 0 "$locked"
# Ignores SIGTERM (as its sleep does): only the SIGKILL after cancel_grace_s ends it.
cmd=$(ct gpuctl submit --time 1h --chdir /root -- sh -c 'trap "" TERM; echo started; exec sleep 1000')
wait_for "$cmd running" 30 state_is "$cmd" running
mark
t0=$(date +%s%N)
ct systemctl stop gpu-agent.service || fail "systemctl stop failed"
took=$((($(date +%s%N) - t0) / 1000000))
limit=$(prop TimeoutStopUSec)
[ "$(prop Result)" = success ] || fail "Result=$(prop Result) (the stop timed out or the daemon failed)"
[ "$(prop ExecMainStatus)" = 0 ] || fail "gpu-agentd exited $(prop ExecMainStatus)"
if ct pgrep -f 'sleep 1000' >/dev/null; then
    fail "$cmd's process outlived the stop"
fi
journal_has "stopping: no new tasks; ending the running ones and restoring GPU controls" || fail "no stop in the journal"
if journal_has "left-over process"; then
    fail "systemd had to kill processes left over: $(journal_since | grep -F 'left-over')"
fi
ok "stopped in $took ms (TimeoutStopSec=$limit), exit 0, $cmd's process gone"
mark
ct systemctl start gpu-agent.service || fail "systemctl start after the stop failed"
if journal_has "restoring GPU"; then
    fail "the stop left clocks to restore: $(journal_since | grep -F 'restoring GPU')"
fi
[ "$(core_clock 0)" = "$idle" ] || fail "GPU 0 at $(core_clock 0) MHz after the restart, not $idle"
for task in "$sim" "$cmd"; do
    state_is "$task" failed || fail "$task is $(task_state "$task") after the stop"
done
ok "next start restores nothing (the stop did); $sim and $cmd failed: $(ct gpuctl task "$cmd" --json | sed -n 's/^ *"reason": "\(.*\)".*/\1/p')"

# --- watchdog --------------------------------------------------------------------------
step watchdog "a SIGSTOPped gpu-agentd"
# Four GPUs: four tasks run with their clocks locked, the rest wait.
for _ in 1 2 3 4 5 6 7; do
    ct gpuctl submit --workload 1e6 --mem 1 --deadline 1000h --weight 1 >/dev/null
done
requeued=$(ct gpuctl submit --workload 1e6 --mem 1 --deadline 1000h --weight 1 --requeue)
wait_for "four tasks running" 30 running_at_least 4
before=$(all_tasks)
restarts=$(prop NRestarts)
pid=$(prop MainPID)
mark
ct kill -STOP "$pid"
t0=$SECONDS
wait_for "a restart by the watchdog" 120 restarted_since "$restarts"
took=$((SECONDS - t0))
journal_has "Watchdog timeout" || fail "no watchdog timeout in the journal: $(journal_since | tail -n 20)"
[ "$(prop MainPID)" != "$pid" ] || fail "the same gpu-agentd runs"
wait_for "the clocks' restore" 30 journal_has "restoring GPU"
after=$(all_tasks)
while read -r task state; do
    now=$(awk -v t="$task" '$1 == t { print $2 }' <<<"$after")
    [ -n "$now" ] || fail "$task ($state) is gone after the restart"
    case "$state" in
        # Waiting: waits or runs now.
        pending | queued | assigned) expected='pending|queued|assigned|running' ;;
        # Running when the daemon died: lost, or again in line with --requeue.
        running) if [ "$task" = "$requeued" ]; then expected='pending|queued|assigned|running'; else expected=lost; fi ;;
        *) expected=$state ;;
    esac
    grep -qxE "$expected" <<<"$now" || fail "$task was $state, is $now after the restart (expected $expected)"
done <<<"$before"
ok "restarted after $took s: $(journal_since | grep -F 'Watchdog timeout' | head -n 1); every one of $(wc -l <<<"$before") tasks kept; $(journal_since | grep -F 'restoring GPU' | head -n 1)"

# --- upgrade ---------------------------------------------------------------------------
step upgrade "apt install gpu-agent $newer over the running daemon"
# Four tasks run (those queued before the restart); two more wait.
for _ in 1 2; do
    ct gpuctl submit --workload 1e6 --mem 1 --deadline 1000h --weight 1 >/dev/null
done
queued=$(all_tasks | grep -c -E '\s(pending|queued|assigned)$' || true)
[ "$queued" -eq 2 ] || fail "not two queued tasks to keep: $(all_tasks)"
before=$(all_tasks)
pid=$(prop MainPID)
ct env DEBIAN_FRONTEND=noninteractive apt-get install -y -q /root/gpu-agent-newer.deb >"$work/apt.log" 2>&1 ||
    fail "the upgrade failed: $(tail -n 20 "$work/apt.log")"
[ "$(ct dpkg-query -W -f '${Version}' gpu-agent)" = "$newer" ] || fail "not upgraded"
grep -q "the running daemon reloaded" "$work/apt.log" || fail "postinst did not reload: $(cat "$work/apt.log")"
[ "$(prop MainPID)" = "$pid" ] || fail "the upgrade restarted the daemon"
[ "$(all_tasks)" = "$before" ] || fail "tasks changed in the upgrade: $(diff <(echo "$before") <(all_tasks))"
ok "upgraded to $newer, daemon reloaded (pid $pid kept), $(wc -l <<<"$before") tasks ($queued waiting) as they were"
ct systemctl restart gpu-agent.service || fail "systemctl restart after the upgrade failed"
after=$(all_tasks)
[ "$(cut -f1 <<<"$after")" = "$(cut -f1 <<<"$before")" ] || fail "tasks lost in the restart: $(diff <(echo "$before") <(echo "$after"))"
ok "every task after the restart"

# --- purge -----------------------------------------------------------------------------
step purge "apt purge gpu-agent"
ct env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q gpu-agent >"$work/apt.log" 2>&1 ||
    fail "apt purge failed: $(tail -n 20 "$work/apt.log")"
if ct pgrep -x gpu-agentd >/dev/null; then
    fail "gpu-agentd runs after the purge"
fi
for path in /var/lib/gpu-agent /etc/gpu-agent /usr/lib/systemd/system/gpu-agent.service \
    /etc/systemd/system/multi-user.target.wants/gpu-agent.service; do
    if ct test -e "$path" || ct test -L "$path"; then
        fail "purge left $path"
    fi
done
[ "$(ct systemctl show -p LoadState --value gpu-agent.service)" = not-found ] || fail "systemd still knows the unit"
ok "daemon stopped; state, configuration and unit gone"

check=all
ok "$((SECONDS - started)) s in all"
