#!/usr/bin/env bash
# The simulated lab of `make demo`: one container per host of inventories/sim, systemd as PID 1, on one network.
#   demo.sh lab      create (or restart) the containers, the network and the fixtures: the store's datasets and its
#                    stand-ins of the vendor sites, the nodes' apt source of the test doubles and their fake GPUs.
#                    site.yml is not run: `ansible-playbook site.yml -i inventories/sim` (or the installed
#                    collection's dlinfra.gpu_cluster.site) configures the lab from there.
#   demo.sh up       lab, then site.yml with the per-host role summary, then the report, then validate.yml (the
#                    acceptance report under .cache/demo/validate/)
#   demo.sh report   what the lab holds: Kubernetes nodes, staged datasets, conda environments, a GPU job dry run
#   demo.sh down     remove the lab (containers, network, the MicroK8s test double's shared state)
# The fixtures leave what the controller reads under .cache/demo/ (inventories/sim: demo_cache_dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
PATH="$PWD/.venv/bin:$PATH"
inventory=inventories/sim
network=dlinfra-sim
# The MicroK8s test double keeps the cluster's state on a directory every node mounts, as molecule/microk8s does.
double_state=dlinfra-sim-microk8s-test-double
cache=.cache/demo
mkdir -p "$cache/logs"

# host and image, one pair a line, read from the inventory (demo_image)
hosts_and_images() {
  ansible-inventory -i "$inventory" --list | python3 -c '
import json, sys
inv = json.load(sys.stdin)
for host, hostvars in sorted(inv["_meta"]["hostvars"].items()):
    print(host, hostvars["demo_image"])'
}

# Run a playbook with its output in a log; on failure show the log's end.
quietly() {
  local log=$1
  shift
  ansible-playbook -i "$inventory" "$@" >"$log" 2>&1 || {
    tail -n 40 "$log" >&2
    echo "demo: failed; the whole log is $log" >&2
    exit 1
  }
}

lab() {
  local pairs missing present
  pairs=$(hosts_and_images)
  missing=$(while read -r host _; do docker inspect "$host" >/dev/null 2>&1 || echo "$host"; done <<<"$pairs")
  present=$(while read -r host _; do docker inspect "$host" >/dev/null 2>&1 && echo "$host"; done <<<"$pairs" || true)
  # A lab missing some of its containers starts over: the test double's cluster state would name the lost ones.
  if [ -n "$missing" ] && [ -n "$present" ]; then
    echo "demo: the lab is incomplete (missing: $(echo $missing)); recreating it"
    down
  fi
  docker network inspect "$network" >/dev/null 2>&1 || docker network create "$network" >/dev/null
  docker volume inspect "$double_state" >/dev/null 2>&1 || docker volume create "$double_state" >/dev/null
  while read -r host image; do
    state=$(docker inspect -f '{{.State.Running}}' "$host" 2>/dev/null || echo missing)
    case $state in
      true) ;;
      false) docker start "$host" >/dev/null ;;
      *)
        echo "demo: starting $host ($image)"
        # --restart: a reboot inside (systemctl reboot ends systemd, PID 1) brings the container back, as a machine
        # comes back; upgrade.yml's reboot of a node is tested with it (tests/harness/rolling_lab.py).
        docker run -d --name "$host" --hostname "$host" --network "$network" --restart unless-stopped \
          --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
          -v /sys/fs/cgroup:/sys/fs/cgroup:ro --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
          -v "$double_state:/srv/microk8s-test-double" \
          --label org.dlinfra.demo=1 "$image" /lib/systemd/systemd >/dev/null
        ;;
    esac
  done <<<"$pairs"
  while read -r host _; do
    docker exec "$host" systemctl is-system-running --wait >/dev/null 2>&1 || true
  done <<<"$pairs"

  # The lab's dataset server and the stand-ins of vendor sites on the store, then what the nodes' site image holds
  # (test fixtures, not part of site.yml).
  echo "demo: serving the fixtures (datasets, vendor stand-ins) from the store; log in $cache/logs/lab.log"
  quietly "$cache/logs/lab.log" tests/fixtures/dataset_server.yml tests/fixtures/vendor_mirror.yml tests/fixtures/lab_nodes.yml
}

site() {
  ANSIBLE_CALLBACKS_ENABLED=dlinfra.gpu_cluster.role_summary ansible-playbook site.yml -i "$inventory"
}

report() {
  quietly "$cache/logs/report.log" tests/harness/demo_report.yml
  echo
  python3 tests/harness/demo_report.py "$cache/report.json"
}

validate() {
  echo
  echo "demo: validate.yml, the acceptance run (GPU checks skip with their reason: the lab has no GPU)"
  quietly "$cache/logs/validate.log" playbooks/validate.yml -e "validate_report_dir=$PWD/$cache/validate"
  grep -oE "validate: (PASS|FAIL), [^;]*" "$cache/logs/validate.log" | tail -n 1
  echo "demo: open $PWD/$cache/validate/report.html (also report.json, junit.xml there)"
}

up() {
  lab
  site
  report
  validate
  echo
  echo "demo: the lab is up. Try: docker exec -it sim-head /snap/bin/microk8s kubectl get nodes -o json   |   make demo-down removes it."
}

down() {
  docker ps -aq --filter label=org.dlinfra.demo=1 | xargs -r docker rm -f >/dev/null
  docker network rm "$network" >/dev/null 2>&1 || true
  docker volume rm "$double_state" >/dev/null 2>&1 || true
  echo "demo: lab removed"
}

case ${1:-} in
  lab) lab ;;
  up) up ;;
  report) report ;;
  validate) validate ;;
  down) down ;;
  *) echo "usage: $0 lab|up|report|validate|down" >&2; exit 2 ;;
esac
