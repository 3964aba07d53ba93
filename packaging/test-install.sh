#!/usr/bin/env bash
# Tests the packages packaging/build.sh made, on this (Debian) machine, as root:
#
#  1. lintian on the .deb (no errors) and rpmlint on the .rpm (no errors,
#     settings in packaging/rpmlint.toml);
#  2. the .rpm's file list, modes, config file and scriptlets;
#  3. dpkg -i the .deb (twice: install, then the upgrade path); every file,
#     its mode and owner, against the expected list; the groups; the conffile;
#  4. the installed gpu-agentd --version, systemd-analyze verify of the
#     installed unit, every installed manual page through man --warnings;
#  5. the installed gpu-agentd --mock on a private bus that applies the
#     installed D-Bus policy (on top of the system bus's default rules), with
#     the installed agent.toml and plugin directory: gpuctl status, devices,
#     policy list (every plugin crate's policy loaded), a command task that
#     must succeed, the unit's own ExecReload line, and the policy's refusals
#     for a user outside the groups and its consent for a member;
#  6. dpkg -r keeps the configuration and the state; dpkg --purge removes
#     everything of the package (the groups stay, by design: see
#     packaging/debian/postrm), checked by file list and by a search.
#
# Installs what it needs (lintian, rpmlint, rpm, dbus, systemd, man-db) when
# missing. Leaves nothing installed or running (GPU_AGENT_KEEP_INSTALLED=1
# keeps the package installed after a failure, for a look).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '== %s\n' "$*"; }
fail() {
    printf 'test-install: FAILED: %s\n' "$*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run as root (it installs the package)"

target=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
deb=$(ls -t "$target"/debian/gpu-agent_*.deb 2>/dev/null | head -n 1 || true)
rpm=$(ls -t "$target"/generate-rpm/gpu-agent-*.rpm 2>/dev/null | head -n 1 || true)
[ -n "$deb" ] && [ -n "$rpm" ] || fail "no packages: run packaging/build.sh first"
# gpu-agent-python, where build.sh had python3-dev to build it.
python_deb=$(ls -t "$target"/debian/gpu-agent-python_*.deb 2>/dev/null | head -n 1 || true)

# --- tools -----------------------------------------------------------------
missing=()
for tool in lintian:lintian rpmlint:rpmlint rpm:rpm dbus-daemon:dbus busctl:systemd \
    systemd-analyze:systemd man:man-db setpriv:util-linux useradd:passwd; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    step "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- what the packages must hold -------------------------------------------
# Every plugin crate (cdylib) under plugins/ ships its library (build.sh
# derives the same list); plain libraries and test fixtures never do.
plugin_files=()
for manifest in plugins/*/Cargo.toml; do
    # A workspace of its own (plugins/python, which links libpython) is
    # not this workspace's to build or ship.
    grep -q '^\[workspace\]' "$manifest" && continue
    grep -q '"cdylib"' "$manifest" || continue
    lib=$(awk '
        /^\[/ { section = $0 }
        /^name *=/ {
            value = $0; sub(/^name *= *"/, "", value); sub(/".*/, "", value)
            if (section == "[package]") package = value
            if (section == "[lib]") lib = value
        }
        END { if (lib == "") { lib = package; gsub(/-/, "_", lib) }; print lib }
    ' "$manifest")
    plugin_files+=("lib$lib.so")
done
# Every gpuctl page the binary documents (gpuctl.1, gpuctl-COMMAND.1).
pages=$(mktemp -d)
packaging/build/bin/gpuctl manpages "$pages" >/dev/null
gpuctl_pages=$(cd "$pages" && ls)
rm -rf "$pages"

# "mode owner:group path" of every file both packages hold.
common_files() {
    echo "755 root:root /usr/bin/gpu-agentd"
    echo "755 root:root /usr/bin/gpuctl"
    echo "644 root:root /usr/lib/systemd/system/gpu-agent.service"
    echo "644 root:root /usr/share/dbus-1/system.d/org.gpuagent.Agent1.conf"
    echo "755 root:root /usr/lib/gpu-agent/slurm/prolog"
    echo "755 root:root /usr/lib/gpu-agent/slurm/epilog"
    echo "644 root:root /usr/lib/gpu-agent/slurm/common.sh"
    echo "644 root:root /etc/gpu-agent/agent.toml"
    echo "644 root:root /etc/gpu-agent/apps.toml"
    echo "644 root:root /usr/share/man/man8/gpu-agentd.8.gz"
    for page in $gpuctl_pages; do
        echo "644 root:root /usr/share/man/man1/$page.gz"
    done
    echo "644 root:root /usr/share/bash-completion/completions/gpuctl"
    echo "644 root:root /usr/share/fish/vendor_completions.d/gpuctl.fish"
    echo "644 root:root /usr/share/doc/gpu-agent/README.md"
    echo "644 root:root /usr/share/doc/gpu-agent/ARCHITECTURE.md"
    # Every document of docs/ (the installed files cite them there).
    for doc in docs/*.md; do
        echo "644 root:root /usr/share/doc/gpu-agent/${doc#docs/}"
    done
    echo "644 root:root /usr/share/doc/gpu-agent/examples/host.toml"
    # The fitted DVFS profiles apps.toml points to, and where they come from.
    for file in examples/dvfs/*-apps.toml examples/dvfs/PROVENANCE.md; do
        echo "644 root:root /usr/share/doc/gpu-agent/$file"
    done
}
# The .deb: Debian's paths and modes, and what Debian requires besides.
deb_files() {
    common_files
    for file in "${plugin_files[@]}"; do
        echo "644 root:root /usr/lib/gpu-agent/plugins/$file"
    done
    echo "644 root:root /usr/share/zsh/vendor-completions/_gpuctl"
    echo "644 root:root /usr/share/doc/gpu-agent/copyright"
    echo "644 root:root /usr/share/doc/gpu-agent/changelog.Debian.gz"
    echo "644 root:root /usr/share/lintian/overrides/gpu-agent"
}
# The .rpm: Fedora's zsh path, shared libraries executable as rpmbuild makes them.
rpm_files() {
    common_files
    for file in "${plugin_files[@]}"; do
        echo "755 root:root /usr/lib/gpu-agent/plugins/$file"
    done
    echo "644 root:root /usr/share/zsh/site-functions/_gpuctl"
}
expected_deb=$(deb_files | sort -k3)
expected_rpm=$(rpm_files | sort -k3)

# --- 1. lint -----------------------------------------------------------------
step "lintian $deb"
# Runs as root here (lintian warns about that, harmlessly).
lintian --fail-on error --info "$deb" || fail "lintian reports errors"
if [ -n "$python_deb" ]; then
    step "lintian $python_deb"
    lintian --fail-on error --info "$python_deb" || fail "lintian reports errors"
fi
step "rpmlint $rpm"
rpmlint -c packaging/rpmlint.toml "$rpm" | tee /tmp/gpu-agent-rpmlint.$$ ||
    fail "rpmlint reports errors"
grep -q ' 0 errors' /tmp/gpu-agent-rpmlint.$$ || fail "rpmlint reports errors"
rm -f /tmp/gpu-agent-rpmlint.$$

step "maintainer scripts"
control=$(mktemp -d)
dpkg-deb -e "$deb" "$control"
for script in preinst postinst prerm postrm; do
    [ -f "$control/$script" ] || fail "the deb has no $script"
    sh -n "$control/$script" || fail "$script: syntax error"
    # set -e before any command, so that no failure goes unnoticed.
    first=$(grep -v -e '^#' -e '^[[:space:]]*$' "$control/$script" | head -n 1)
    [ "$first" = "set -e" ] || fail "$script runs '$first' before set -e"
done
rm -rf "$control"

# --- 2. the rpm's contents ---------------------------------------------------
step "rpm contents"
got_rpm=$(rpm -qp --queryformat '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]' "$rpm" |
    awk '$1 !~ /^d/' |
    while read -r perms owner path; do
        # rwxr-xr-x -> 755
        mode=0
        for i in 1 4 7; do
            digit=0
            [ "${perms:$i:1}" = r ] && digit=$((digit + 4))
            [ "${perms:$((i + 1)):1}" = w ] && digit=$((digit + 2))
            [ "${perms:$((i + 2)):1}" = x ] && digit=$((digit + 1))
            mode=$((mode * 10 + digit))
        done
        echo "$mode $owner $path"
    done | sort -k3)
diff <(echo "$expected_rpm") <(echo "$got_rpm") || fail "the rpm's files differ from the expected list (< expected, > packaged)"
[ "$(rpm -qp --configfiles "$rpm" | sort | tr '\n' ' ')" = "/etc/gpu-agent/agent.toml /etc/gpu-agent/apps.toml " ] ||
    fail "agent.toml and apps.toml are not the rpm's config files: $(rpm -qp --configfiles "$rpm")"
for conf in agent.toml apps.toml; do
    rpm -qp --queryformat '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm" | grep -qx "cn /etc/gpu-agent/$conf" ||
        fail "$conf is not %config(noreplace)"
done
scripts=$(rpm -qp --scripts "$rpm")
for expected in "groupadd --system" "systemctl enable gpu-agent.service" \
    "systemctl reload gpu-agent.service" "systemctl disable gpu-agent.service"; do
    grep -qF "$expected" <<<"$scripts" || fail "rpm scriptlets lack: $expected"
done

# --- 3. install ----------------------------------------------------------------
user=gpuagent-pkgtest
bus_pid=
daemon_pid=
work=$(mktemp -d)
chmod 755 "$work"
cleanup() {
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
    [ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null && wait "$bus_pid" 2>/dev/null
    getent passwd "$user" >/dev/null && userdel "$user"
    rm -rf "$work"
    if [ "${GPU_AGENT_KEEP_INSTALLED:-0}" != 1 ] && dpkg-query -W gpu-agent >/dev/null 2>&1; then
        dpkg-query -W gpu-agent-python >/dev/null 2>&1 && dpkg --purge gpu-agent-python >/dev/null
        dpkg --purge gpu-agent >/dev/null
    fi
    # Not shipped by the package; made by this test.
    rm -rf /var/lib/gpu-agent
}
trap cleanup EXIT

if dpkg-query -W -f '${Status}' gpu-agent-python 2>/dev/null | grep -q installed; then
    step "purging an earlier gpu-agent-python"
    dpkg --purge gpu-agent-python
fi
if dpkg-query -W -f '${Status}' gpu-agent 2>/dev/null | grep -q installed; then
    step "purging an earlier gpu-agent"
    dpkg --purge gpu-agent
fi
[ ! -e /var/lib/gpu-agent ] && [ ! -e /etc/gpu-agent ] || fail "/var/lib/gpu-agent or /etc/gpu-agent exist before the install"

step "dpkg -i $deb"
dpkg -i "$deb"
step "dpkg -i again (the upgrade path)"
dpkg -i "$deb"

step "installed files"
got_deb=$(dpkg -L gpu-agent | sort -u | while read -r path; do
    [ -d "$path" ] && [ ! -L "$path" ] && continue
    echo "$(stat -c '%a %U:%G' "$path") $path"
done | sort -k3)
diff <(echo "$expected_deb") <(echo "$got_deb") || fail "installed files differ from the expected list (< expected, > installed)"
for dir in /usr/lib/gpu-agent /usr/lib/gpu-agent/plugins /usr/lib/gpu-agent/slurm /etc/gpu-agent /usr/share/doc/gpu-agent \
    /usr/share/doc/gpu-agent/examples; do
    [ "$(stat -c '%a %U:%G' "$dir")" = "755 root:root" ] || fail "$dir: $(stat -c '%a %U:%G' "$dir"), expected 755 root:root"
done
for conf in agent.toml apps.toml; do
    dpkg-query -W -f '${Conffiles}\n' gpu-agent | grep -q "^ /etc/gpu-agent/$conf " || fail "$conf is not a conffile"
    cmp -s "packaging/$conf" "/etc/gpu-agent/$conf" || fail "/etc/gpu-agent/$conf is not packaging/$conf"
done
# The shipped apps.toml holds no profile, and each fitted example it points
# to reads as a profile file (gpuctl dvfs show lists the known names).
known=$(gpuctl dvfs show nope --apps /etc/gpu-agent/apps.toml 2>&1 || true)
[[ $known == *'known: default' ]] || fail "/etc/gpu-agent/apps.toml: $known"
for apps in /usr/share/doc/gpu-agent/examples/dvfs/*-apps.toml; do
    gpuctl dvfs show BlackScholes --apps "$apps" >/dev/null || fail "$apps is not a profile file"
done
for group in gpu-agent gpu-agent-admin; do
    getent group "$group" >/dev/null || fail "group $group was not created"
done
# Enabled (deb-systemd-helper also works where systemd does not run).
[ -L /etc/systemd/system/multi-user.target.wants/gpu-agent.service ] || fail "the unit is not enabled"

# --- 4. the binaries, the unit, the pages ----------------------------------------
step "gpu-agentd --version"
version=$(dpkg-query -W -f '${Version}' gpu-agent)
[ "$(gpu-agentd --version)" = "gpu-agentd ${version%-*}" ] || fail "gpu-agentd --version says: $(gpu-agentd --version)"
[ "$(gpuctl --version)" = "gpuctl ${version%-*}" ] || fail "gpuctl --version says: $(gpuctl --version)"

step "systemd-analyze verify (installed unit)"
out=$(systemd-analyze verify /usr/lib/systemd/system/gpu-agent.service 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify complains: $out"

step "manual pages"
man -w gpu-agentd >/dev/null && man -w gpuctl >/dev/null || fail "man cannot find the pages"
for page in /usr/share/man/man8/gpu-agentd.8.gz $(for p in $gpuctl_pages; do echo "/usr/share/man/man1/$p.gz"; done); do
    warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$page" 2>&1 >/dev/null)
    [ -z "$warnings" ] || fail "$page: $warnings"
done

# --- 5. the installed daemon on a private bus ------------------------------------
step "private bus with the installed D-Bus policy"
# The system bus's default rules (as /usr/share/dbus-1/system.conf has them):
# nobody may own names or call methods unless a policy file allows it.
cat >"$work/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$work/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Peer"/>
  </policy>
  <include>/usr/share/dbus-1/system.d/org.gpuagent.Agent1.conf</include>
</busconfig>
EOF
dbus-daemon --config-file="$work/bus.conf" --nofork --nopidfile 2>"$work/bus.log" &
bus_pid=$!
for _ in $(seq 100); do [ -S "$work/bus" ] && break; sleep 0.1; done
[ -S "$work/bus" ] || fail "the private dbus-daemon did not start"
chmod 666 "$work/bus"
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/bus"

step "gpu-agentd --mock (installed config, plugins and host example)"
mkdir -m 700 "$work/state"
gpu-agentd --mock /usr/share/doc/gpu-agent/examples/host.toml --state-dir "$work/state" \
    2>"$work/daemon.log" &
daemon_pid=$!
owned() {
    busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        NameHasOwner s org.gpuagent.Agent1 2>/dev/null | grep -q 'b true'
}
for _ in $(seq 200); do
    owned && break
    kill -0 "$daemon_pid" 2>/dev/null || fail "gpu-agentd exited: $(cat "$work/daemon.log")"
    sleep 0.1
done
owned || fail "gpu-agentd did not own org.gpuagent.Agent1: $(cat "$work/daemon.log")"

gpuctl status
gpuctl status | grep -q '^backend  mock:/usr/share/doc/gpu-agent/examples/host.toml$' || fail "gpuctl status: wrong backend"
gpuctl devices
devices=$(gpuctl status --json | sed -n 's/^ *"devices": \([0-9]*\).*/\1/p')
[ "${devices:-0}" -gt 0 ] && [ "$(gpuctl devices --json | grep -c '"uuid"')" -eq "$devices" ] ||
    fail "gpuctl devices: expected the example host's $devices GPU(s)"
gpuctl policy list
[ "$(gpuctl policy list | wc -l)" -eq ${#plugin_files[@]} ] ||
    fail "gpuctl policy list: expected ${#plugin_files[@]} policies (one per plugin crate)"
if grep -q 'plugin skipped' "$work/daemon.log"; then
    fail "a plugin failed to load: $(grep 'plugin skipped' "$work/daemon.log")"
fi

step "a task through the installed gpuctl"
id=$(gpuctl submit --workload 1 --mem 1 --deadline 10m --weight 1 --name pkgtest --chdir "$work" \
    -- /bin/sh -c 'echo "hello from $GPU_AGENT_TASK_ID"')
state=
for _ in $(seq 300); do
    state=$(gpuctl task "$id" --json | sed -n 's/^ *"state": "\([a-z]*\)".*/\1/p')
    case "$state" in succeeded | failed | cancelled | lost | rejected) break ;; esac
    sleep 0.1
done
[ "$state" = succeeded ] || fail "task $id ended '$state': $(gpuctl task "$id")"
grep -qx "hello from $id" "$work/gpu-agent-$id.out" || fail "task $id's output: $(cat "$work/gpu-agent-$id.out")"
[ "$(gpuctl logs "$id")" = "hello from $id" ] || fail "gpuctl logs $id: $(gpuctl logs "$id" 2>&1)"
echo "task $id succeeded"

step "the installed Slurm prolog and epilog (docs/slurm.md)"
# No Slurm here: the job's end time from the environment (as Slurm 23.11
# and later give it), and a stand-in scontrol first on the scripts' PATH
# (slurm.env is sourced after common.sh sets it). `show job` answers as
# slurmctld does for a job without --gpu-freq (the prolog gives up without
# an answer); `update` fails as with no slurmctld, which is logged.
mkdir -p "$work/bin"
cat >"$work/bin/scontrol" <<'EOF'
#!/bin/sh
case "$1 $2" in
"show job") echo "JobId=$3 JobState=RUNNING Reason=None ExitCode=0:0 EndTime=Unknown" ;;
*) echo "scontrol: error: no slurmctld here (test-install.sh)" >&2; exit 1 ;;
esac
EOF
chmod 755 "$work/bin/scontrol"
cat >"$work/slurm.env" <<EOF
DBUS_SYSTEM_BUS_ADDRESS='$DBUS_SYSTEM_BUS_ADDRESS'
GPU_AGENT_TIMEOUT=5
PATH=$work/bin:\$PATH
EOF
slurm_job() {
    env -i SLURM_JOB_ID=4242 SLURM_JOB_GPUS=0 SLURM_JOB_UID=0 SLURM_JOB_END_TIME=$(($(date +%s) + 600)) \
        GPU_AGENT_SLURM_ENV="$work/slurm.env" "/usr/lib/gpu-agent/slurm/$1" 2>&1
}
out=$(slurm_job prolog) || fail "the prolog exited non-zero: $out"
grep -q 'GPUs 0 adopted as gpu-agent task' <<<"$out" || fail "the prolog did not adopt: $out"
gpuctl tasks --state running | grep -q 'slurm:4242' || fail "gpuctl tasks lacks slurm:4242: $(gpuctl tasks)"
out=$(slurm_job epilog) || fail "the epilog exited non-zero: $out"
grep -q 'released: gpu_energy_j=' <<<"$out" || fail "the epilog did not release: $out"
if gpuctl tasks --state running | grep -q 'slurm:4242'; then
    fail "slurm:4242 still runs after the epilog"
fi

step "the unit's ExecReload"
reload=$(sed -n 's/^ExecReload=//p' /usr/lib/systemd/system/gpu-agent.service)
[ -n "$reload" ] || fail "the unit has no ExecReload="
$reload || fail "ExecReload failed: $reload"

step "the D-Bus policy: an outsider reads, a member submits"
as() {
    local who=$1
    shift
    setpriv --reuid="$who" --regid="$(id -g "$who")" --init-groups \
        env -i PATH=/usr/bin:/bin DBUS_SYSTEM_BUS_ADDRESS="$DBUS_SYSTEM_BUS_ADDRESS" "$@"
}
as nobody gpuctl status >/dev/null || fail "nobody cannot read"
if out=$(as nobody gpuctl submit --workload 1 --mem 1 --deadline 60 --weight 1 2>&1); then
    fail "nobody could submit"
fi
grep -q 'org.freedesktop.DBus.Error.AccessDenied' <<<"$out" || fail "nobody's Submit: $out"
if out=$(as nobody gpuctl reload 2>&1); then
    fail "nobody could reload"
fi
useradd --system --no-create-home --shell /usr/sbin/nologin --groups gpu-agent "$user"
member_task=$(as "$user" gpuctl submit --workload 1 --mem 1 --deadline 60 --weight 1) ||
    fail "a member of gpu-agent cannot submit"
as "$user" gpuctl cancel "$member_task" || fail "a member cannot cancel its own task"
if out=$(as "$user" gpuctl policy use fifo 2>&1); then
    fail "a member could change the policy"
fi
grep -q 'org.freedesktop.DBus.Error.AccessDenied' <<<"$out" || fail "a member's SetPolicy: $out"
userdel "$user"

step "stopping gpu-agentd"
kill -TERM "$daemon_pid"
status=0
wait "$daemon_pid" || status=$?
daemon_pid=
[ "$status" -eq 0 ] || fail "gpu-agentd exited $status on SIGTERM: $(cat "$work/daemon.log")"
kill "$bus_pid"
wait "$bus_pid" 2>/dev/null || true
bus_pid=

# --- the python policy plugin's package -------------------------------------------
if [ -n "$python_deb" ]; then
    step "dpkg -i $python_deb"
    dpkg -i "$python_deb"
    python_plugin=/usr/lib/gpu-agent/plugins/libgpu_agent_policy_python.so
    [ -f "$python_plugin" ] || fail "gpu-agent-python did not install $python_plugin"
    step "the installed python policy: its examples/fifo.py schedules as fifo does"
    examples=/usr/share/doc/gpu-agent-python/examples
    for policy in fifo "python --param module=$examples/fifo.py"; do
        # shellcheck disable=SC2086 # the policy and its parameter, split
        gpuctl simulate --host /usr/share/doc/gpu-agent/examples/host.toml --trace examples/trace.csv \
            --policy $policy --schedule "$work/${policy%% *}.csv" >/dev/null 2>"$work/err" ||
            fail "gpuctl simulate --policy $policy: $(cat "$work/err")"
    done
    cmp -s "$work/fifo.csv" "$work/python.csv" || fail "the installed fifo.py's schedule is not fifo's"
    step "dpkg --purge gpu-agent-python"
    dpkg --purge gpu-agent-python
    [ ! -e "$python_plugin" ] && [ ! -e /usr/share/doc/gpu-agent-python ] ||
        fail "dpkg --purge gpu-agent-python left its files"
else
    step "no gpu-agent-python package (build.sh had no python3-dev): not tested"
fi

# --- 6. remove keeps, purge removes --------------------------------------------------
# The unit's StateDirectory= makes /var/lib/gpu-agent when it starts; stand in for it.
mkdir -p /var/lib/gpu-agent
touch /var/lib/gpu-agent/state.db
files=$(dpkg -L gpu-agent)
step "dpkg -r"
dpkg -r gpu-agent
[ -e /usr/bin/gpu-agentd ] && fail "dpkg -r left /usr/bin/gpu-agentd"
[ -f /etc/gpu-agent/agent.toml ] || fail "dpkg -r removed the configuration"
[ -f /var/lib/gpu-agent/state.db ] || fail "dpkg -r removed the state"
step "dpkg --purge"
dpkg --purge gpu-agent
while read -r path; do
    [ -e "$path" ] || [ -L "$path" ] || continue
    [ -d "$path" ] && [ -n "$(dpkg -S "$path" 2>/dev/null)" ] && continue # a directory other packages share
    fail "purge left $path"
done <<<"$files"
# /var/cache/man holds man-db's formatted copies (systemd-analyze verify ran
# man for the unit's Documentation=); man-db's own cleanup expires them.
left=$(find /etc /usr /var /run \( -path /var/tmp -o -path /var/cache/apt -o -path /var/cache/man \) -prune -o \
    \( -name '*gpu-agent*' -o -name '*gpuctl*' -o -name '*gpuagent*' \) -print 2>/dev/null)
[ -z "$left" ] || fail "purge left: $left"
for group in gpu-agent gpu-agent-admin; do
    getent group "$group" >/dev/null || fail "purge removed group $group (it should stay)"
done

step "test-install: OK"
