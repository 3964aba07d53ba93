# gpu-agent %preun ($1: 0 on erase, 1 on upgrade): stop and disable on erase.
if [ "$1" -eq 0 ]; then
    if [ -d /run/systemd/system ]; then
        systemctl stop gpu-agent.service || :
    fi
    systemctl disable gpu-agent.service >/dev/null 2>&1 || :
fi
