# gpu-agent %postun. RPM has no purge: an erase keeps the state in
# /var/lib/gpu-agent and an edited /etc/gpu-agent/agent.toml (as .rpmsave);
# `rm -rf /var/lib/gpu-agent /etc/gpu-agent` removes them. The groups stay.
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
