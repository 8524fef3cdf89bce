#!/usr/bin/env bash
# The simulated lab of `make demo`: one container per host of inventories/sim, systemd as PID 1, on one network.
#   demo.sh up     create (or restart) the lab, run site.yml against it, print the per-host role summary
#   demo.sh down   remove the lab
set -euo pipefail
cd "$(dirname "$0")/../.."
PATH="$PWD/.venv/bin:$PATH"
inventory=inventories/sim
network=dlinfra-sim

# host and image, one pair a line, read from the inventory (demo_image)
hosts_and_images() {
  ansible-inventory -i "$inventory" --list | python3 -c '
import json, sys
inv = json.load(sys.stdin)
for host, hostvars in sorted(inv["_meta"]["hostvars"].items()):
    print(host, hostvars["demo_image"])'
}

up() {
  docker network inspect "$network" >/dev/null 2>&1 || docker network create "$network" >/dev/null
  while read -r host image; do
    state=$(docker inspect -f '{{.State.Running}}' "$host" 2>/dev/null || echo missing)
    case $state in
      true) ;;
      false) docker start "$host" >/dev/null ;;
      *)
        echo "demo: starting $host ($image)"
        docker run -d --name "$host" --hostname "$host" --network "$network" \
          --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
          -v /sys/fs/cgroup:/sys/fs/cgroup:ro --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
          --label org.dlinfra.demo=1 "$image" /lib/systemd/systemd >/dev/null
        ;;
    esac
  done < <(hosts_and_images)
  while read -r host _; do
    docker exec "$host" systemctl is-system-running --wait >/dev/null 2>&1 || true
  done < <(hosts_and_images)

  # The lab's dataset server and the stand-ins of vendor repositories (test fixtures, not part of site.yml).
  ansible-playbook -i "$inventory" tests/fixtures/dataset_server.yml tests/fixtures/vendor_mirror.yml >"${TMPDIR:-/tmp}/dlinfra-demo-store.log" 2>&1 || {
    tail -n 40 "${TMPDIR:-/tmp}/dlinfra-demo-store.log" >&2
    exit 1
  }
  ANSIBLE_CALLBACKS_ENABLED=dlinfra.gpu_cluster.role_summary ansible-playbook site.yml -i "$inventory"
  echo
  echo "demo: the lab is up. Try: docker exec -it sim-head bash   |   make demo-down removes it."
}

down() {
  docker ps -aq --filter label=org.dlinfra.demo=1 | xargs -r docker rm -f >/dev/null
  docker network rm "$network" >/dev/null 2>&1 || true
  echo "demo: lab removed"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
