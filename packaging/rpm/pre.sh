# gpu-agent %pre: the groups exist before the D-Bus policy naming them does.
for group in gpu-agent gpu-agent-admin; do
    getent group "$group" >/dev/null || groupadd --system "$group"
done
