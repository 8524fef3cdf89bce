#!/bin/sh
# The tests' SSH connection to a container of the simulated lab or of a molecule scenario (ProxyCommand, %h being the
# container's name): ssh talks to a `sshd -i` started in the container through `docker exec`, so no port is opened and
# the host firewall the roles load never sees it. Measured against Docker's own connection (community.docker.docker),
# alternating, on 2 cores: a command task 0.40 s of CPU instead of 0.52 s, a copy or template task 0.60 s instead of
# 0.93 s (one `docker exec` per task and per file instead of a channel of an open connection; docs/testing.md).
# The one key it accepts is the controller's test key (ensure_ssh_key.sh), given to sshd on its command line: nothing
# is written on the node. PAM is off: a session would otherwise register with systemd-logind on every task.
set -eu
key=$(cat "$(dirname "$0")/../../../.cache/ssh/id_ed25519.pub")
exec docker exec -i "$1" sh -c 'mkdir -p -m 0755 /run/sshd && exec /usr/sbin/sshd -i -o UsePAM=no \
  -o AuthorizedKeysFile=none -o "AuthorizedKeysCommand=/bin/echo $0" -o AuthorizedKeysCommandUser=nobody \
  -o PermitRootLogin=prohibit-password' "$key"
