# gpu-agent %post ($1: 1 on install, 2 or more on upgrade). Enable and start
# the unit where systemd runs. An upgrade does not restart a running daemon,
# since a restart ends every running task: it reloads it (new plugins become
# selectable, the configuration is read again), and the new gpu-agentd takes
# over at the next `systemctl restart gpu-agent`.
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -eq 1 ]; then
    # Works without a running systemd too (it only makes the symlinks).
    systemctl enable gpu-agent.service >/dev/null 2>&1 || :
    if [ -d /run/systemd/system ]; then
        systemctl start gpu-agent.service || :
    fi
elif [ -d /run/systemd/system ] && systemctl --quiet is-active gpu-agent.service; then
    if systemctl reload gpu-agent.service; then
        echo "gpu-agent: the running daemon reloaded its configuration and plugins;" \
             "'systemctl restart gpu-agent' runs the new version (it ends running tasks)."
    else
        echo "gpu-agent: the running daemon refused to reload; see 'journalctl -u gpu-agent'." >&2
    fi
fi
