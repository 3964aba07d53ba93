# Sourced by gpu-agent's Slurm prolog and epilog (/usr/share/doc/gpu-agent/slurm.md); not run
# on its own. POSIX sh: dash and bash both run it.
#
# Settings, each overridable in /etc/gpu-agent/slurm.env (or the file
# GPU_AGENT_SLURM_ENV names), a shell fragment sourced here:
#   DBUS_SYSTEM_BUS_ADDRESS  the bus gpu-agentd serves on (default: the system bus)
#   GPU_AGENT_GPUCTL         the gpuctl to run (default: gpuctl on PATH)
#   GPU_AGENT_TIMEOUT        seconds each call may take (default: 10)
#
# The variables it sets and reads are shared with the scripts that source it.
# shellcheck shell=sh disable=SC2034,SC2154

# slurmd gives its scripts an environment without PATH.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
GPU_AGENT_GPUCTL=gpuctl
GPU_AGENT_TIMEOUT=10
env_file=${GPU_AGENT_SLURM_ENV:-/etc/gpu-agent/slurm.env}
if [ -r "$env_file" ]; then
    # shellcheck source=/dev/null
    . "$env_file"
fi
if [ -n "${DBUS_SYSTEM_BUS_ADDRESS:-}" ]; then
    export DBUS_SYSTEM_BUS_ADDRESS
fi
job=${SLURM_JOB_ID:-}
started=$(date +%s%N)

# log MESSAGE: to stderr (slurmd's log) and to syslog/journald.
log() {
    message="slurm $script job $job: $*"
    printf 'gpu-agent: %s\n' "$message" >&2
    timeout 5 logger -t gpu-agent -- "$message" 2>/dev/null || true
}

# ms: milliseconds since the script started.
ms() {
    echo $((($(date +%s%N) - started) / 1000000))
}

# call COMMAND...: runs it under the timeout; stdout and stderr in $out
# (or that it did not answer in time).
call() {
    out=$(timeout "$GPU_AGENT_TIMEOUT" "$@" 2>&1)
    status=$?
    [ "$status" -ne 124 ] || out="no answer within $GPU_AGENT_TIMEOUT s"
    return "$status"
}
