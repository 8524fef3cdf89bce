#!/usr/bin/env bash
# The simulated lab of `make demo`: one container per host of inventories/sim, systemd as PID 1, on one network.
#   demo.sh lab      create (or restart) the containers, the network and the fixtures: the store's datasets, its
#                    stand-ins of the vendor sites and its apt proxy (tests/fixtures/store_proxy.yml, which the nodes'
#                    apt goes through), the nodes' apt source of the test doubles and their fake GPUs.
#                    site.yml is not run: `ansible-playbook site.yml -i inventories/sim` (or the installed
#                    collection's dlinfra.gpu_cluster.site) configures the lab from there.
#   demo.sh up       lab, then site.yml with the per-host role summary, then the report, then validate.yml (the
#                    acceptance report under .cache/demo/validate/), then train.yml on the lab's dataset, then the
#                    workspace: Jupyter Lab and a VNC desktop for a user of sim-gpu1 (demo.sh workspace alone)
#   demo.sh report   what the lab holds: Kubernetes nodes, staged datasets, conda environments, a GPU job dry run
#   demo.sh down     remove the lab (containers, networks, the MicroK8s test double's shared state)
#   demo.sh attempts (air-gapped lab) the nodes' outbound attempts the store recorded; exit 1 if there are any
# The fixtures leave what the controller reads under .cache/demo/ (inventories/sim: demo_cache_dir).
# AIRGAP=1 (as root): the air-gapped lab. The nodes sit on an internal network with no route out (dlinfra-sim-internal,
# docker network create --internal); the store is on it and on the outside network. The store's caching proxy is then
# the nodes' only way to the archive, and the store is the upstream of their DNS, logging every lookup the lab cannot
# answer (tests/fixtures/airgap_store.yml); each node records, and refuses at once, every packet it sends off the internal
# network (tests/fixtures/airgap-record.nft). The inventory gains tests/fixtures/airgap_hosts.yml: every node in the group
# airgap_lab, whose variables (inventories/sim/group_vars/airgap_lab.yml) point the roles at the store.
# `up` ends with the record, and fails if a node tried to reach anything but the store. Checked by
# tests/harness/lab/airgap_lab.py (make test stage airgap).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PATH="$PWD/.venv/bin:$PATH"
# DEMO_INVENTORY: another inventory of the lab's hosts (the airgap stage's leaves out a GPU node)
inventory=(-i "${DEMO_INVENTORY:-inventories/sim}")
network=dlinfra-sim
airgap=${AIRGAP:-0}
[ "$airgap" = 1 ] || airgap=0
internal=dlinfra-sim-internal
[ "$airgap" = 0 ] || inventory+=(-i tests/fixtures/airgap_hosts.yml)
# The MicroK8s test double keeps the cluster's state on a directory every node mounts, as molecule/microk8s does.
double_state=dlinfra-sim-microk8s-test-double
cache=.cache/demo
mkdir -p "$cache/logs"
workspace_hosts=tests/fixtures/workspace_hosts.yml

# host, image (demo_image) and kind (store: in the group dataset_store; node), one host a line, read from the inventory.
# The air-gapped lab lists the store first: the nodes start with its address as their DNS upstream.
hosts_and_images() {
  ansible-inventory "${inventory[@]}" --list | python3 -c '
import json, sys
inv = json.load(sys.stdin)
stores = set(inv.get("dataset_store", {}).get("hosts", []))
first = stores if sys.argv[1] == "1" else set()
for host, hostvars in sorted(inv["_meta"]["hostvars"].items(), key=lambda item: (item[0] not in first, item[0])):
    print(host, hostvars["demo_image"], "store" if host in stores else "node")' "$airgap"
}

# The store's address on the internal network (air-gapped lab)
store_address() {
  docker inspect -f "{{with index .NetworkSettings.Networks \"$internal\"}}{{.IPAddress}}{{end}}" "$1" 2>/dev/null || true
}

# Run a playbook with its output in a log; on failure show the log's end.
quietly() {
  local log=$1
  shift
  ansible-playbook "${inventory[@]}" "$@" >"$log" 2>&1 || {
    tail -n 40 "$log" >&2
    echo "demo: failed; the whole log is $log" >&2
    exit 1
  }
}

lab() {
  local pairs missing present store mode store_ip=""
  if [ "$airgap" = 1 ] && [ "$(id -u)" -eq 0 ] && ! command -v nft >/dev/null; then
    echo "demo: installing nftables (the nodes' record of outbound attempts is an nftables table)"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q nftables >/dev/null
  fi
  if [ "$airgap" = 1 ] && { [ "$(id -u)" -ne 0 ] || ! command -v nft >/dev/null || ! command -v nsenter >/dev/null; }; then
    echo "demo: AIRGAP=1 records the nodes' outbound attempts in their network namespaces: run it as root, with nft" \
      "(apt-get install nftables) and nsenter (util-linux)" >&2
    exit 1
  fi
  pairs=$(hosts_and_images)
  store=$(awk '$3 == "store" {print $1; exit}' <<<"$pairs")
  missing=$(while read -r host _; do docker inspect "$host" >/dev/null 2>&1 || echo "$host"; done <<<"$pairs")
  present=$(while read -r host _; do docker inspect "$host" >/dev/null 2>&1 && echo "$host"; done <<<"$pairs" || true)
  # A lab missing some of its containers starts over: the test double's cluster state would name the lost ones.
  if [ -n "$missing" ] && [ -n "$present" ]; then
    echo "demo: the lab is incomplete (missing: $(echo $missing)); recreating it"
    down
    present=""
  fi
  # So does a lab made in the other mode (air-gapped or not): the networks of its containers are fixed at their start.
  if [ -n "$present" ]; then
    mode=$(docker inspect -f '{{index .Config.Labels "org.dlinfra.demo.airgap"}}' $present | sort -u)
    [ "$mode" = 1 ] || mode=0
    if [ "$mode" != "$airgap" ]; then
      echo "demo: the lab was made $([ "$mode" = 1 ] && echo air-gapped || echo with a route out); recreating it $([ "$airgap" = 1 ] && echo air-gapped || echo with a route out)"
      down
      present=""
    fi
  fi
  # And a lab whose nodes lack NET_ADMIN, which the host_firewall role needs for its nftables table (the workspace
  # stage turns it on): a container's capabilities are fixed at its start.
  if [ -n "$present" ] && docker inspect -f '{{index .Config.Labels "org.dlinfra.demo.caps"}}' $present | grep -qvx net_admin; then
    echo "demo: the lab's nodes were made without NET_ADMIN; recreating it"
    down
  fi
  docker network inspect "$network" >/dev/null 2>&1 || docker network create "$network" >/dev/null
  if [ "$airgap" = 1 ]; then
    docker network inspect "$internal" >/dev/null 2>&1 || docker network create --internal "$internal" >/dev/null
  fi
  docker volume inspect "$double_state" >/dev/null 2>&1 || docker volume create "$double_state" >/dev/null
  while read -r host image _; do
    state=$(docker inspect -f '{{.State.Running}}' "$host" 2>/dev/null || echo missing)
    case $state in
      true) ;;
      false) docker start "$host" >/dev/null ;;
      *)
        echo "demo: starting $host ($image)"
        # Air-gapped: the store on the outside network (then the internal one too); the nodes on the internal network
        # only, with the store as the upstream of Docker's DNS. Every host has NET_ADMIN: the host_firewall role loads
        # nftables rules, and an air-gapped node's default route goes via the store.
        local net=(--network "$network")
        if [ "$airgap" = 1 ] && [ "$host" = "$store" ]; then
          net=(--network "$network" --label org.dlinfra.demo.airgap=1)
        elif [ "$airgap" = 1 ]; then
          net=(--network "$internal" --dns "$store_ip" --label org.dlinfra.demo.airgap=1)
        fi
        # --restart: a reboot inside (systemctl reboot ends systemd, PID 1) brings the container back, as a machine
        # comes back; upgrade.yml's reboot of a node is tested with it (tests/harness/lab/rolling_lab.py).
        # systempaths=unconfined: Docker's masks over /proc keep rootless podman (the workspace's run command) from
        # mounting a /proc of its own.
        docker run -d --name "$host" --hostname "$host" "${net[@]}" --restart unless-stopped \
          --cap-add SYS_ADMIN --cap-add NET_ADMIN --label org.dlinfra.demo.caps=net_admin --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
          --security-opt systempaths=unconfined \
          -v /sys/fs/cgroup:/sys/fs/cgroup:ro --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
          -v "$double_state:/srv/microk8s-test-double" \
          --label org.dlinfra.demo=1 "$image" /lib/systemd/systemd >/dev/null
        if [ "$airgap" = 1 ] && [ "$host" = "$store" ]; then
          docker network connect "$internal" "$host"
        fi
        ;;
    esac
    if [ "$airgap" = 1 ] && [ "$host" = "$store" ]; then
      store_ip=$(store_address "$host")
      [ -n "$store_ip" ] || { echo "demo: $host has no address on $internal" >&2; exit 1; }
    fi
  done <<<"$pairs"
  while read -r host _; do
    docker exec "$host" systemctl is-system-running --wait >/dev/null 2>&1 || true
  done <<<"$pairs"
  if [ "$airgap" = 1 ]; then
    # Each node's default route goes to the store (Docker gives a node of an internal network one to the host, where
    # its rules drop what leaves the network, or none; a route is lost when a container restarts: set it each time),
    # and its network namespace gets the record of outbound attempts (tests/fixtures/airgap-record.nft), entered from
    # here so that nothing is installed on the node; a record already there is kept. A node started when the store had
    # another address would resolve nothing.
    local subnet pid
    subnet=$(docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' "$internal")
    while read -r host _; do
      [ "$host" = "$store" ] && continue
      case " $(docker inspect -f '{{range .HostConfig.Dns}}{{.}} {{end}}' "$host") " in
        *" $store_ip "*) ;;
        *) echo "demo: $host uses another DNS upstream than the store ($store_ip): remove the lab (demo.sh down) and retry" >&2; exit 1 ;;
      esac
      docker exec "$host" ip route replace default via "$store_ip"
      pid=$(docker inspect -f '{{.State.Pid}}' "$host")
      nsenter -t "$pid" -n nft list table inet dlinfra_airgap >/dev/null 2>&1 \
        || nsenter -t "$pid" -n nft -D "internal=$subnet" -f tests/fixtures/airgap-record.nft
    done <<<"$pairs"
  fi

  # The lab's dataset server, the stand-ins of vendor sites and the apt proxy on the store, then what the nodes' site
  # image holds (test fixtures, not part of site.yml). Air-gapped: first the nodes' DNS upstream and their snap files.
  tests/harness/setup/ensure_ssh_key.sh  # the key the inventory's SSH connection to the containers uses
  local fixtures=(tests/fixtures/dataset_server.yml tests/fixtures/vendor_mirror.yml tests/fixtures/store_proxy.yml)
  [ "$airgap" = 0 ] || fixtures+=(tests/fixtures/airgap_store.yml)
  fixtures+=(tests/fixtures/lab_nodes.yml)
  echo "demo: serving the fixtures (datasets, vendor stand-ins, the apt proxy$([ "$airgap" = 1 ] && echo ", the nodes' DNS upstream")) from the store; log in $cache/logs/lab.log"
  quietly "$cache/logs/lab.log" "${fixtures[@]}"
}

# A lab whose workspace step ran (sim-gpu1 has its user) keeps the workspace's inventory: a second make demo then
# runs with the configuration the first one ended with, and changes nothing.
site() {
  local workspace=()
  docker exec sim-gpu1 id -u "$(workspace_user)" >/dev/null 2>&1 && workspace=(-i "$workspace_hosts")
  ANSIBLE_CALLBACKS_ENABLED=dlinfra.gpu_cluster.role_summary ansible-playbook site.yml "${inventory[@]}" "${workspace[@]}"
}

workspace_user() {
  python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["all"]["hosts"]["sim-gpu1"]["workspace_user"])' \
    "$workspace_hosts"
}

attempts() {
  python3 tests/harness/lab/airgap_lab.py --attempts
}

report() {
  quietly "$cache/logs/report.log" tests/harness/lab/demo_report.yml
  echo
  python3 tests/harness/lab/demo_report.py "$cache/report.json"
}

validate() {
  echo
  echo "demo: validate.yml, the acceptance run (GPU checks skip with their reason: the lab has no GPU)"
  quietly "$cache/logs/validate.log" playbooks/validate.yml -e "validate_report_dir=$PWD/$cache/validate"
  grep -oE "validate: (PASS|FAIL), [^;]*" "$cache/logs/validate.log" | tail -n 1
  echo "demo: open $PWD/$cache/validate/report.html (also report.json, junit.xml there)"
}

# The lab's dataset trained on: one rank per rank list on each GPU node, real PyTorch (Debian's, gloo on the CPU).
train() {
  echo
  echo "demo: train.yml on yt8m-mini, each GPU node's ranks reading its own shards (Debian 13's PyTorch, gloo)"
  quietly "$cache/logs/train.log" playbooks/train.yml --limit gpu_nodes -e train_dataset=yt8m-mini
  grep -oE "rank [0-9]+ on [a-z0-9-]+: [^']*" "$cache/logs/train.log" | sed 's/^/  /'
  echo "demo: each rank's journal: docker exec sim-gpu1 journalctl -u 'dlinfra-train-yt8m-mini-rank-*'"
}

# Where people work: Jupyter Lab and a VNC desktop for a user of sim-gpu1 (tests/fixtures/workspace_hosts.yml, an
# inventory source with its variables), on its loopback only, and the run command; workspace_node.sh does what the
# site's admin would do first (the user, the wheels' index on the store, the container engine).
workspace() {
  local user
  user=$(workspace_user)
  echo
  echo "demo: Jupyter Lab, a VNC desktop and the run command for $user on sim-gpu1, listening on its loopback only"
  tests/harness/lab/workspace_node.sh "$user" "$cache/pypi"
  quietly "$cache/logs/workspace.log" site.yml --limit cluster_sim -i "$workspace_hosts"
  echo "demo: on a real cluster: ssh -L 8888:localhost:8888 -L 5901:localhost:5901 $user@NODE, then open"
  echo "  http://localhost:8888/lab?token=TOKEN and a VNC viewer on localhost:5901 (token, password: $workspace_hosts)"
  echo "demo: in the lab: docker exec sim-gpu1 curl -s -H 'Authorization: token TOKEN' http://127.0.0.1:8888/api/kernelspecs"
  echo "demo: and: docker exec -it sim-gpu1 su - $user -c 'run sh'   (a shell in the run command's container)"
}

up() {
  lab
  site
  report
  validate
  train
  workspace
  if [ "$airgap" = 1 ]; then
    echo
    attempts
  fi
  echo
  echo "demo: the lab is up. Try: docker exec -it sim-head /snap/bin/microk8s kubectl get nodes -o json   |   make demo-down removes it."
}

down() {
  docker ps -aq --filter label=org.dlinfra.demo=1 | xargs -r docker rm -f >/dev/null
  docker network rm "$network" >/dev/null 2>&1 || true
  docker network rm "$internal" >/dev/null 2>&1 || true
  docker volume rm "$double_state" >/dev/null 2>&1 || true
  echo "demo: lab removed"
}

case ${1:-} in
  lab) lab ;;
  up) up ;;
  report) report ;;
  validate) validate ;;
  train) train ;;
  workspace) workspace ;;
  down) down ;;
  attempts) attempts ;;
  *) echo "usage: [AIRGAP=1] $0 lab|up|report|validate|train|workspace|down|attempts" >&2; exit 2 ;;
esac
