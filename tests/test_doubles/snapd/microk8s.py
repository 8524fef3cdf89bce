# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE of the `microk8s` command, for the microk8s molecule scenario only.

The snap test double installs this file as /snap/bin/microk8s when the role installs the microk8s snap. It runs no
Kubernetes: it keeps each cluster's state (nodes, join tokens, addons, applied objects) in one JSON file on a
Docker volume mounted by every container of the scenario (/srv/microk8s-test-double), under an exclusive file
lock, so that `add-node` on one container and `join` on another really meet. It honours MicroK8s' CLI contract and
output formats (taken from MicroK8s' wrappers: status.py, add_token.py, join.py):

  status [--format yaml|short|pretty] [--wait-ready] [--timeout N]
  add-node [--token T (>= 32 chars)] [--token-ttl SECONDS] [--format pretty|short|token|token-check|json|yaml]
  join IP:PORT/TOKEN[/CHECK] [--worker] | leave | remove-node NAME [--force]
  enable ADDON [ARGS...] | disable ADDON | config
  kubectl get nodes|node [NAME] -o json | kubectl get KIND NAME -n NS -o json
  kubectl label node NAME KEY=VALUE... [--overwrite] | kubectl apply -f FILE|- [--dry-run=server|client|none]
  kubectl get pods -A -o json | kubectl cordon NAME | kubectl uncordon NAME
  kubectl drain NAME [--ignore-daemonsets] [--delete-emptydir-data] [--timeout T]

`kubectl apply --dry-run=server` checks each object as the API server would before storing it (known kind and
apiVersion, a DNS-1123 name, a pod template with named containers that have images, a Job's restartPolicy, whole
nvidia.com/gpu limits, volume mounts naming a volume), answers "<resource> created (server dry run)" or kubectl's
"The Job "x" is invalid: <field>: <reason>" (exit 1), and stores nothing. It does not know every field's schema:
the collection's unit tests validate the manifests against the Kubernetes schemas (kubernetes-validate).

Nodes carry `status.capacity` / `status.allocatable`: the node's CPUs and memory, and `nvidia.com/gpu` (the NVIDIA
GPUs on its PCI bus: under /srv/fake-sysfs, the tests' fake sysfs, when that exists, else /sys) once a GPU
mechanism serves the node: the nvidia addon enabled, or the device plugin DaemonSet whose nodeSelector the node's
labels match, as the real device plugin advertises GPUs only where it runs. Where the DaemonSet mounts a ConfigMap
of configs, the node's label nvidia.com/device-plugin.config names its own (else the DEFAULT_CONFIG of the plugin's
config-manager): a time-slicing config advertises each GPU as many times as its replicas, as the plugin does. A MIG
config (flags.migStrategy single or mixed) advertises the node's MIG devices as the nvidia-smi test double left them in
GPUS_DIR/<node>.json (tests/test_doubles/nvidia_smi): single, every MIG device as nvidia.com/gpu; mixed, each profile
as nvidia.com/mig-<profile> and the GPUs without MIG as nvidia.com/gpu. As the real plugin, it reads the MIG devices
when it starts: when its config-manager restarts it for a new config (the node's label changed), and when its pod on
the node is deleted (`kubectl delete pod -n NS -l SELECTOR --field-selector spec.nodeName=NODE`, answered as kubectl
does); until then the node advertises the devices it had.

`kubectl get pods` lists the device plugin's pods: one per node it serves (nvidia addon: namespace
gpu-operator-resources; the DaemonSet: its namespace), Running while the node is Ready, as a DaemonSet's pods are.
A node's `ready` in the state file is what a test flips to make it NotReady. `cordon` sets spec.unschedulable;
`drain` cordons and evicts (the only pods here are the device plugin's, which a DaemonSet owns: kubectl's
--ignore-daemonsets is needed, as on a real cluster). The pods named in a node's `undisruptable` list in the state file
stand for pods a PodDisruptionBudget protects: `drain` reports their evictions refused and fails as kubectl does at
its --timeout, the node left cordoned. Every kubectl call is appended to calls.log in the shared
directory (a JSON line: time, node, arguments), the record the rolling-upgrade test reads.

A worker (joined with --worker, marked by /var/snap/microk8s/current/var/lock/clustered.lock as in MicroK8s)
refuses the cluster-wide commands, as the real one does. Every join token ever issued is kept in the state's
`token_history` so the scenario's verify can prove none reached Ansible's output.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import sys
import time

SHARED = "/srv/microk8s-test-double"
# The tests' fake sysfs (molecule/microk8s and the simulated lab make one on GPU nodes), else the host's own.
SYSFS_ROOTS = ("/srv/fake-sysfs", "/sys")
DEVICE_PLUGIN = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPUS_DIR = SHARED + "/gpus"  # a node's GPUs as the nvidia-smi test double publishes them (MIG devices)
STATE = SHARED + "/cluster.json"
LOCAL = "/var/snap/microk8s/current"
WORKER_LOCK = LOCAL + "/var/lock/clustered.lock"
CLUSTER_ID = LOCAL + "/var/test-double-cluster-id"
PORT = 25000
# The core repository's addons this double knows: name -> description. Enabled on a fresh node as in 1.28+.
ADDONS = {
    "cert-manager": "Cloud native certificate management",
    "dashboard": "The Kubernetes dashboard",
    "dns": "CoreDNS",
    "ha-cluster": "Configure high availability on the current node",
    "helm": "Helm - the package manager for Kubernetes",
    "helm3": "Helm 3 - the package manager for Kubernetes",
    "hostpath-storage": "Storage class; allocates storage from host directory",
    "ingress": "Ingress controller for external access",
    "metallb": "Loadbalancer for your Kubernetes cluster",
    "metrics-server": "K8s Metrics Server for API access to service metrics",
    "nvidia": "NVIDIA hardware (GPU and network) support",
    "observability": "A lightweight observability stack for logs, traces and metrics",
    "rbac": "Role-Based Access Control for authorisation",
    "registry": "Private image registry exposed on localhost:32000",
}
DEFAULT_ENABLED = ("dns", "ha-cluster", "helm", "helm3")
NVIDIA_DRIVER_CHOICES = ("auto", "operator", "host")
NOT_ON_WORKER = ("This MicroK8s deployment is acting as a node in a cluster. "
                 "Please use the microk8s %s on the master.")


def out(text=""):
    sys.stdout.write(text + "\n")


def die(message, code=1):
    sys.stdout.write(message + "\n")
    sys.exit(code)


@contextlib.contextmanager
def cluster_state():
    """The shared state, locked for the whole command and written back at the end."""
    os.makedirs(SHARED, exist_ok=True)
    with open(SHARED + "/.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(STATE) as handle:
                state = json.load(handle)
        except FileNotFoundError:
            state = {"clusters": {}}
        yield state
        with open(STATE + ".tmp", "w") as handle:
            json.dump(state, handle, indent=1, sort_keys=True)
        os.replace(STATE + ".tmp", STATE)


def node_name():
    return socket.gethostname().lower()


def node_address():
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the default route's source
        return probe.getsockname()[0]
    finally:
        probe.close()


def snap_version():
    with open("/snap/microk8s/current/meta/snap.yaml") as handle:
        return re.search(r"^version: *(\S+)", handle.read(), re.MULTILINE).group(1)


def read_first_line(path):
    try:
        with open(path) as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def local_gpus():
    """NVIDIA GPUs on this node's PCI bus: vendor 0x10de, class 0x03xxxx (display controllers)."""
    root = next((r for r in SYSFS_ROOTS if os.path.isdir(r + "/bus/pci/devices")), None)
    if root is None:
        return 0
    devices = root + "/bus/pci/devices"
    return sum(1 for entry in os.listdir(devices)
               if read_first_line(os.path.join(devices, entry, "vendor")) == "0x10de"
               and read_first_line(os.path.join(devices, entry, "class")).startswith("0x03"))


def os_image():
    with open("/etc/os-release") as handle:
        fields = dict(line.rstrip("\n").split("=", 1) for line in handle if "=" in line)
    return fields.get("PRETTY_NAME", "Linux").strip('"')


def local_memory_kib():
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return 0


def new_node(role):
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node_name(), "kubernetes.io/os": "linux", "microk8s.io/cluster": "true",
        "node.kubernetes.io/microk8s-%s" % role: "microk8s-%s" % role,
    }
    return {"address": node_address(), "role": role, "labels": labels, "ready": True, "version": snap_version(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count() or 1, "memory_kib": local_memory_kib(), "gpus": local_gpus(),
            "machine_id": read_first_line("/etc/machine-id"), "kernel": os.uname().release, "os_image": os_image()}


def local_cluster(state):
    """This node's cluster; a fresh install is a one-node cluster of its own, as MicroK8s is."""
    cluster_id = None
    if os.path.exists(CLUSTER_ID):
        with open(CLUSTER_ID) as handle:
            cluster_id = handle.read().strip()
    if cluster_id not in state["clusters"]:
        cluster_id = start_standalone(state)
    return cluster_id, state["clusters"][cluster_id]


def start_standalone(state):
    cluster_id = hashlib.sha256(("%s-%s" % (node_name(), time.time())).encode()).hexdigest()[:16]
    state["clusters"][cluster_id] = {
        "ca_check": hashlib.sha256(cluster_id.encode()).hexdigest()[:12],
        "nodes": {node_name(): new_node("controlplane")}, "voters": [node_name()],
        "tokens": {}, "token_history": [],
        "addons": {name: {"status": "enabled", "args": []} for name in DEFAULT_ENABLED},
        "objects": {},
    }
    os.makedirs(os.path.dirname(CLUSTER_ID), exist_ok=True)
    with open(CLUSTER_ID, "w") as handle:
        handle.write(cluster_id)
    return cluster_id


def refuse_on_worker(command):
    if os.path.exists(WORKER_LOCK):
        die(NOT_ON_WORKER % command)


def take(args, *names, default=None):
    for name in names:
        for index, arg in enumerate(args):
            if arg == name:
                value = args[index + 1]
                del args[index:index + 2]
                return value
            if arg.startswith(name + "="):
                del args[index]
                return arg.split("=", 1)[1]
    return default


def flag(args, *names):
    found = False
    for name in names:
        while name in args:
            args.remove(name)
            found = True
    return found


# ---- status ------------------------------------------------------------------------------------------------

def ha_nodes(cluster):
    """(address, role) per control-plane node, as dqlite reports them: three voters, the rest standby."""
    rows = []
    for name in cluster["voters"]:
        node = cluster["nodes"].get(name)
        if node:
            role = "voter" if len(rows) < 3 else "standby"
            rows.append(("%s:19001" % node["address"], role))
    return rows


def cmd_status(args):
    refuse_on_worker("status")
    fmt = take(args, "--format", default="pretty")
    flag(args, "--wait-ready", "-w", "--yaml")
    take(args, "--timeout", "-t")
    with cluster_state() as state:
        cluster = local_cluster(state)[1]
    rows = ha_nodes(cluster)
    ha = sum(1 for row in rows if row[1] == "voter") >= 3
    addons = sorted(ADDONS)
    enabled = [name for name in addons if cluster["addons"].get(name, {}).get("status") == "enabled"]
    if fmt == "yaml":
        out("microk8s:\n  running: True\nhigh-availability:\n  enabled: %s\n  nodes:" % ha)
        for address, role in rows:
            out("    - address: %s\n      role: %s" % (address, role))
        out("addons:")
        for name in addons:
            out("  - name: %s\n    repository: core\n    description: %s\n    version: %s\n    status: %s"
                % (name, ADDONS[name], "", "enabled" if name in enabled else "disabled"))
    elif fmt == "short":
        out("microk8s is running\naddons:")
        for name in addons:
            out("core/%s: %s" % (name, "enabled" if name in enabled else "disabled"))
    else:
        out("microk8s is running\nhigh-availability: %s" % ("yes" if ha else "no"))
        out("  datastore master nodes: %s" % " ".join(a for a, r in rows if r == "voter"))
        out("  datastore standby nodes: %s" % (" ".join(a for a, r in rows if r != "voter") or "none"))
        out("addons:\n  enabled:")
        for name in enabled:
            out("    %-20s # (core) %s" % (name, ADDONS[name]))
        out("  disabled:")
        for name in addons:
            if name not in enabled:
                out("    %-20s # (core) %s" % (name, ADDONS[name]))


# ---- addons ------------------------------------------------------------------------------------------------

def split_addons(args):
    """`enable a b:x c --flag v` -> [(a, []), (b, ['x']), (c, ['--flag', 'v'])]: arguments follow their addon."""
    result = []
    for arg in args:
        if arg.startswith("-") and result:
            result[-1][1].append(arg)
        elif result and result[-1][1] and result[-1][1][-1].startswith("--") and "=" not in result[-1][1][-1] \
                and arg not in ADDONS:
            result[-1][1].append(arg)
        else:
            name, colon_args = (arg.split(":", 1) + [""])[:2]
            result.append((name, [colon_args] if colon_args else []))
    return result


def check_addon_args(name, addon_args):
    if name == "nvidia":
        rest = list(addon_args)
        driver = take(rest, "--gpu-operator-driver", default="auto")
        take(rest, "--gpu-operator-version")
        flag(rest, "--gpu-operator", "--no-network-operator", "--network-operator")
        if driver not in NVIDIA_DRIVER_CHOICES:
            die("Error: Invalid value for '--gpu-operator-driver': '%s' is not one of %s."
                % (driver, ", ".join("'%s'" % c for c in NVIDIA_DRIVER_CHOICES)), 2)
        if rest:
            die("Error: No such option: %s" % rest[0], 2)
    elif name == "hostpath-storage" and addon_args:
        die("Error: hostpath-storage takes no arguments here: %s" % " ".join(addon_args), 2)


def cmd_enable(args, enable=True):
    refuse_on_worker("enable" if enable else "disable")
    requested = split_addons(args)
    if not requested:
        die("Usage: microk8s %s [OPTIONS] ADDONS..." % ("enable" if enable else "disable"), 2)
    with cluster_state() as state:
        cluster = local_cluster(state)[1]
        for name, addon_args in requested:
            if name not in ADDONS:
                die("Addon %s was not found in any repository" % name)
            if enable:
                check_addon_args(name, addon_args)
            current = cluster["addons"].get(name, {}).get("status", "disabled")
            wanted = "enabled" if enable else "disabled"
            out("Infer repository core for addon %s" % name)
            if current == wanted:
                out("Addon core/%s is already %s" % (name, wanted))
                continue
            cluster["addons"][name] = {"status": wanted, "args": addon_args if enable else []}
            out("Addon core/%s is %s" % (name, wanted) if not enable else "Addon core/%s is enabled" % name)


# ---- clustering --------------------------------------------------------------------------------------------

def cmd_add_node(args):
    refuse_on_worker("add-node")
    token = take(args, "--token", "-t")
    ttl = int(take(args, "--token-ttl", "-l", default="-1"))
    fmt = take(args, "--format", default="pretty")
    if fmt not in ("pretty", "short", "token", "token-check", "json", "yaml"):
        die("microk8s add-node: error: argument --format: invalid choice: '%s'" % fmt, 2)
    if token is None:
        token = hashlib.sha256(str(time.time()).encode()).hexdigest()[:32]
    if len(token) < 32:
        die("Invalid token size.  It must be 32 characters long.")
    with cluster_state() as state:
        cluster = local_cluster(state)[1]
        cluster["tokens"][token] = -1 if ttl == -1 else int(time.time()) + ttl
        if token not in cluster["token_history"]:
            cluster["token_history"].append(token)
        check = cluster["ca_check"]
    ip = node_address()
    url = "%s:%d/%s/%s" % (ip, PORT, token, check)
    if fmt == "json":
        out(json.dumps({"token": "%s/%s" % (token, check), "urls": [url]}, indent=2))
    elif fmt == "yaml":
        out("token: %s/%s\nurls:\n- %s" % (token, check, url))
    elif fmt == "short":
        out("microk8s join %s" % url)
    elif fmt == "token-check":
        out("%s/%s" % (token, check))
    elif fmt == "token":
        out(token)
    else:
        out("From the node you wish to join to this cluster, run the following:\nmicrok8s join %s\n" % url)
        out("Use the '--worker' flag to join a node as a worker not running the control plane, eg:")
        out("microk8s join %s --worker\n" % url)


def cmd_join(args):
    worker = flag(args, "--worker")
    flag(args, "--skip-verify", "--controlplane")
    if len(args) != 1:
        die("Usage: microk8s join [OPTIONS] CONNECTION", 2)
    match = re.match(r"^([0-9.]+):(\d+)/([^/]+)(?:/([0-9a-f]+))?$", args[0])
    if not match:
        die("Invalid connection string %s" % args[0], 2)
    ip, token, check = match.group(1), match.group(3), match.group(4)
    if os.path.exists(WORKER_LOCK):
        die("The node is already a worker of a cluster; run 'microk8s leave' first.")
    with cluster_state() as state:
        own_id, own = local_cluster(state)
        target_id = next((cid for cid, c in state["clusters"].items()
                          if cid != own_id and any(n["address"] == ip and n["role"] == "controlplane" and n["ready"]
                                                   for n in c["nodes"].values())), None)
        out("Contacting cluster at %s" % ip)
        if target_id is None:
            if any(n["address"] == ip for n in own["nodes"].values()):
                die("Error: this node is already part of the cluster at %s" % ip)
            die("Connection failed. The joining node (%s) cannot reach %s:%s." % (node_address(), ip, PORT))
        target = state["clusters"][target_id]
        expiry = target["tokens"].get(token)
        if expiry is None or (expiry != -1 and expiry < time.time()):
            die("Connection failed. Invalid token (500).")
        if check and check != target["ca_check"]:
            die("Connection failed. The hostname (%s) of the joining node does not match the cluster certificate "
                "check %s." % (node_name(), check))
        if len(own["nodes"]) > 1:
            die("Error: this node is a member of another cluster with %d nodes; leave it first." % len(own["nodes"]))
        if expiry == -1:
            del target["tokens"][token]
        del state["clusters"][own_id]
        role = "worker" if worker else "controlplane"
        target["nodes"][node_name()] = new_node(role)
        if not worker and node_name() not in target["voters"]:
            target["voters"].append(node_name())
        with open(CLUSTER_ID, "w") as handle:
            handle.write(target_id)
    if worker:
        os.makedirs(os.path.dirname(WORKER_LOCK), exist_ok=True)
        with open(WORKER_LOCK, "w"):
            pass
        out("The node has joined the cluster and will appear in the nodes list in a few seconds.")
    else:
        out("Waiting for this node to finish joining the cluster. .. .. ..\nSuccessfully joined the cluster.")


def cmd_leave(args):
    with cluster_state() as state:
        own_id, own = local_cluster(state)
        if len(own["nodes"]) <= 1 and node_name() in own["nodes"]:
            die("This node is not part of a cluster.")
        if node_name() in own["nodes"]:
            own["nodes"][node_name()]["ready"] = False  # listed NotReady until remove-node on a control plane
        if node_name() in own["voters"]:
            own["voters"].remove(node_name())
        if os.path.exists(WORKER_LOCK):
            os.unlink(WORKER_LOCK)
        os.unlink(CLUSTER_ID)
        start_standalone(state)
    out("Generating new cluster certificates.\nWaiting for node to start.")


def cmd_remove_node(args):
    refuse_on_worker("remove-node")
    force = flag(args, "--force")
    name = args[0]
    with cluster_state() as state:
        cluster = local_cluster(state)[1]
        node = cluster["nodes"].get(name)
        if node is None:
            die("Node %s does not exist in Kubernetes." % name)
        if node["role"] == "controlplane" and node["ready"] and not force:
            die("Removal failed. Node %s is registered with dqlite. Please, run first 'microk8s leave' on the "
                "departing node.\nIf the node is not available anymore and will never attempt to join the "
                "cluster in the future use the '--force' flag." % name)
        del cluster["nodes"][name]
        if name in cluster["voters"]:
            cluster["voters"].remove(name)


def cmd_config(args):
    refuse_on_worker("config")
    with cluster_state() as state:
        cluster_id, cluster = local_cluster(state)
    first = cluster["nodes"][cluster["voters"][0]]["address"] if cluster["voters"] else node_address()
    ca = hashlib.sha512(cluster_id.encode()).hexdigest()
    out("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: %s\n    server: https://%s:16443\n"
        "  name: microk8s-cluster\ncontexts:\n- context:\n    cluster: microk8s-cluster\n    user: admin\n"
        "  name: microk8s\ncurrent-context: microk8s\nkind: Config\npreferences: {}\nusers:\n- name: admin\n"
        "  user:\n    client-certificate-data: %s\n    client-key-data: %s"
        % (ca, first, hashlib.sha512((ca + "cert").encode()).hexdigest(),
           hashlib.sha512((ca + "key").encode()).hexdigest()))


# ---- kubectl -----------------------------------------------------------------------------------------------

def gpus_served(node, cluster):
    """nvidia.com/gpu the node advertises: its GPUs, where the nvidia addon or the device plugin serves it."""
    if not node.get("gpus"):
        return 0
    if cluster["addons"].get("nvidia", {}).get("status") == "enabled":
        return node["gpus"]
    plugin = cluster["objects"].get(DEVICE_PLUGIN)
    if plugin is not None:
        selector = plugin["spec"]["template"]["spec"].get("nodeSelector") or {}
        if all(node["labels"].get(key) == value for key, value in selector.items()):
            return node["gpus"] * plugin_replicas(node, plugin, cluster)
    return 0


def plugin_config(node, plugin, cluster):
    """The config the node's label (or the config-manager's default) names in the plugin's ConfigMap; {} without one."""
    sys.path.insert(0, "/usr/local/lib/test-double/pyyaml.zip")
    import yaml  # pylint: disable=import-outside-toplevel
    spec = plugin["spec"]["template"]["spec"]
    maps = [volume["configMap"]["name"] for volume in spec.get("volumes") or [] if volume.get("configMap")]
    if not maps:
        return {}
    configs = (cluster["objects"].get("ConfigMap/%s/%s" % (plugin["metadata"].get("namespace", "default"), maps[0]))
               or {}).get("data") or {}
    env = {item["name"]: item.get("value") for container in spec.get("initContainers") or []
           for item in container.get("env") or []}
    name = node["labels"].get(env.get("NODE_LABEL") or "nvidia.com/device-plugin.config") or env.get("DEFAULT_CONFIG")
    return yaml.safe_load(configs.get(name) or "") or {}


def plugin_replicas(node, plugin, cluster):
    """How many times the plugin advertises each GPU of the node: the time-slicing replicas of nvidia.com/gpu in its
    config; 1 without one."""
    config = plugin_config(node, plugin, cluster)
    resources = ((config.get("sharing") or {}).get("timeSlicing") or {}).get("resources") or []
    return next((int(r["replicas"]) for r in resources if r.get("name") == "nvidia.com/gpu"), 1)


def published_gpus(name):
    """The node's GPUs as the nvidia-smi test double last published them; None where it publishes none."""
    try:
        with open(os.path.join(GPUS_DIR, name + ".json")) as handle:
            return json.load(handle)["gpus"]
    except (OSError, ValueError, KeyError):
        return None


def plugin_started(name, node):
    """The device plugin (re)started on the node: it has read the GPUs as they are now."""
    node["plugin_gpus"] = published_gpus(name)


def mig_served(name, node, cluster):
    """{resource: count} of a node whose plugin config has a MIG strategy, from its published GPUs; None otherwise
    (no plugin there, no MIG strategy, nothing published)."""
    plugin = cluster["objects"].get(DEVICE_PLUGIN)
    if plugin is None or not gpus_served(node, cluster):
        return None
    strategy = (plugin_config(node, plugin, cluster).get("flags") or {}).get("migStrategy", "none")
    gpus = node["plugin_gpus"] if "plugin_gpus" in node else published_gpus(name)
    if gpus is None or strategy not in ("single", "mixed"):
        return None
    counts = {}
    for gpu in gpus:
        if not gpu["mig"]:
            if strategy == "mixed":
                counts["nvidia.com/gpu"] = counts.get("nvidia.com/gpu", 0) + 1
            continue
        for profile in gpu["mig_devices"]:
            resource = "nvidia.com/gpu" if strategy == "single" else "nvidia.com/mig-" + profile
            counts[resource] = counts.get(resource, 0) + 1
    return counts


def node_object(name, node, cluster):
    conditions = [{"type": "Ready", "status": "True" if node["ready"] else "Unknown",
                   "reason": "KubeletReady" if node["ready"] else "NodeStatusUnknown",
                   "lastHeartbeatTime": node["created"], "lastTransitionTime": node["created"]}]
    resources = {"cpu": str(node.get("cpus", 1)), "memory": "%dKi" % node.get("memory_kib", 0), "pods": "110"}
    mig = mig_served(name, node, cluster)
    if mig is not None:
        resources.update((resource, str(count)) for resource, count in mig.items() if count)
    elif gpus_served(node, cluster):
        resources["nvidia.com/gpu"] = str(gpus_served(node, cluster))
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": node["labels"], "creationTimestamp": node["created"],
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"unschedulable": True} if node.get("unschedulable") else {},
        "status": {
            "addresses": [{"type": "InternalIP", "address": node["address"]}, {"type": "Hostname", "address": name}],
            "conditions": conditions,
            "capacity": dict(resources), "allocatable": dict(resources),
            "nodeInfo": {"kubeletVersion": node["version"], "kubeProxyVersion": node["version"],
                         "containerRuntimeVersion": "containerd://1.7.27", "operatingSystem": "linux",
                         "architecture": "amd64", "machineID": node.get("machine_id", ""),
                         "systemUUID": node.get("machine_id", ""), "bootID": node.get("machine_id", ""),
                         "kernelVersion": node.get("kernel", ""), "osImage": node.get("os_image", "")},
        },
    }


def object_key(obj):
    cluster_scoped = ("Namespace", "Node", "ClusterRole", "ClusterRoleBinding")
    namespace = obj["metadata"].get("namespace", "default") if obj["kind"] not in cluster_scoped else ""
    return "%s/%s/%s" % (obj["kind"], namespace, obj["metadata"]["name"])


def resource_name(obj):
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    return "%s%s/%s" % (obj["kind"].lower(), "." + group if group else "", obj["metadata"]["name"])


def device_plugin_pods(cluster):
    """The pods a device plugin DaemonSet would run: one per node it serves GPUs on."""
    if cluster["addons"].get("nvidia", {}).get("status") == "enabled":
        namespace, prefix = "gpu-operator-resources", "nvidia-device-plugin-daemonset"
        labels = {"app": prefix}
    elif DEVICE_PLUGIN in cluster["objects"]:
        namespace, prefix = DEVICE_PLUGIN.split("/")[1], DEVICE_PLUGIN.split("/")[2]
        labels = ((cluster["objects"][DEVICE_PLUGIN]["spec"]["template"].get("metadata") or {}).get("labels")
                  or {"app": prefix})
    else:
        return []
    pods = []
    for name in sorted(cluster["nodes"]):
        node = cluster["nodes"][name]
        if not gpus_served(node, cluster):
            continue
        suffix = hashlib.sha256(name.encode()).hexdigest()[:5]
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "%s-%s" % (prefix, suffix), "namespace": namespace,
                                  "labels": dict(labels)},
                     "spec": {"nodeName": name},
                     "status": {"phase": "Running" if node["ready"] else "Unknown"}})
    return pods


def kubectl_get(args, cluster):
    fmt = take(args, "-o", "--output", default="")
    namespace = take(args, "-n", "--namespace", default="default")
    every_namespace = flag(args, "-A", "--all-namespaces")
    if fmt != "json":
        die("error: this test double prints only -o json", 1)
    kind = args[0]
    names = args[1:]
    if kind in ("pods", "pod", "po"):
        items = [pod for pod in device_plugin_pods(cluster)
                 if every_namespace or pod["metadata"]["namespace"] == namespace]
    elif kind in ("nodes", "node", "no"):
        items = [node_object(n, cluster["nodes"][n], cluster) for n in sorted(cluster["nodes"]) if not names or n in names]
        missing = [n for n in names if n not in cluster["nodes"]]
        if missing:
            die('Error from server (NotFound): nodes "%s" not found' % missing[0])
    else:
        singular = {"daemonsets": "DaemonSet", "daemonset": "DaemonSet", "ds": "DaemonSet"}.get(kind, kind)
        items = [obj for key, obj in sorted(cluster["objects"].items())
                 if key.split("/")[0].lower() == singular.lower() and key.split("/")[1] == namespace
                 and (not names or key.split("/")[2] in names)]
        if names and not items:
            die('Error from server (NotFound): %s "%s" not found' % (kind, names[0]))
    if len(names) == 1:
        out(json.dumps(items[0], indent=4))
    else:
        out(json.dumps({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}},
                       indent=4))


def kubectl_label(args, cluster):
    overwrite = flag(args, "--overwrite")
    if args[0] not in ("node", "nodes", "no"):
        die("error: this test double labels nodes only")
    name, changes = args[1], args[2:]
    node = cluster["nodes"].get(name)
    if node is None:
        die('Error from server (NotFound): nodes "%s" not found' % name)
    before = dict(node["labels"])
    for change in changes:
        if change.endswith("-"):
            node["labels"].pop(change[:-1], None)
            continue
        key, value = (change.split("=", 1) + [""])[:2]
        if key in node["labels"] and node["labels"][key] != value and not overwrite:
            node["labels"] = before
            die("error: '%s' already has a value (%s), and --overwrite is false" % (key, before[key]))
        node["labels"][key] = value
    if node["labels"].get(CONFIG_LABEL) != before.get(CONFIG_LABEL):
        plugin_started(name, node)  # the config-manager restarts the plugin with the node's new config
    out("node/%s %s" % (name, "labeled" if node["labels"] != before else "not labeled"))


def kubectl_delete(args, cluster):
    """kubectl delete pod -n NAMESPACE -l KEY=VALUE --field-selector spec.nodeName=NODE: the device plugin's pods only
    (the DaemonSet starts each again at once, and it reads the node's GPUs)."""
    namespace = take(args, "-n", "--namespace", default="default")
    selector = take(args, "-l", "--selector", default="")
    field = take(args, "--field-selector", default="")
    if args[:1] != ["pod"] or not selector or not field.startswith("spec.nodeName="):
        die("error: this test double deletes device plugin pods by label and node only")
    wanted = dict(item.split("=", 1) for item in selector.split(","))
    pods = [pod for pod in device_plugin_pods(cluster)
            if pod["metadata"]["namespace"] == namespace and pod["spec"]["nodeName"] == field.split("=", 1)[1]
            and all(pod["metadata"]["labels"].get(key) == value for key, value in wanted.items())]
    if not pods:
        out("No resources found")
    for pod in pods:
        plugin_started(pod["spec"]["nodeName"], cluster["nodes"][pod["spec"]["nodeName"]])
        out('pod "%s" deleted' % pod["metadata"]["name"])
    return 0


def kubectl_cordon(args, cluster, unschedulable=True):
    name = args[0]
    node = cluster["nodes"].get(name)
    if node is None:
        die('Error from server (NotFound): nodes "%s" not found' % name)
    if bool(node.get("unschedulable")) == unschedulable:
        out("node/%s already %s" % (name, "cordoned" if unschedulable else "uncordoned"))
        return
    node["unschedulable"] = unschedulable
    out("node/%s %s" % (name, "cordoned" if unschedulable else "uncordoned"))


# The kinds this double's API server serves: apiVersion -> kinds, and where each keeps its pod template.
KINDS = {
    "v1": ("Pod", "Namespace", "ConfigMap", "Service", "ServiceAccount"),
    "batch/v1": ("Job",),
    "apps/v1": ("DaemonSet", "Deployment"),
    "rbac.authorization.k8s.io/v1": ("ClusterRole", "ClusterRoleBinding"),
}
POD_SPEC_PATH = {"Pod": ("spec",), "Job": ("spec", "template", "spec"), "DaemonSet": ("spec", "template", "spec"),
                 "Deployment": ("spec", "template", "spec")}
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def invalid_fields(obj):
    """(field, reason) pairs the API server would reject the object for (a subset of its validation)."""
    problems = []
    name = obj["metadata"].get("name", "")
    if not name:
        problems.append(("metadata.name", "Required value"))
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        problems.append(("metadata.name", 'Invalid value: "%s": a lowercase RFC 1123 subdomain must consist of lower '
                         "case alphanumeric characters, '-' or '.'" % name))
    path = POD_SPEC_PATH.get(obj["kind"])
    if path is None:
        return problems
    spec = obj
    for step in path:
        spec = spec.get(step) if isinstance(spec, dict) else None
    prefix = ".".join(path)
    if not isinstance(spec, dict):
        return problems + [(prefix, "Required value")]
    containers = spec.get("containers") or []
    if not containers:
        problems.append((prefix + ".containers", "Required value"))
    volumes = {volume.get("name") for volume in spec.get("volumes") or []}
    for index, container in enumerate(containers):
        field = "%s.containers[%d]" % (prefix, index)
        if not DNS1123_LABEL.match(str(container.get("name", ""))):
            problems.append((field + ".name", "Required value" if not container.get("name") else "Invalid value"))
        if not container.get("image"):
            problems.append((field + ".image", "Required value"))
        resources = container.get("resources") or {}
        limit = (resources.get("limits") or {}).get("nvidia.com/gpu")
        request = (resources.get("requests") or {}).get("nvidia.com/gpu")
        if limit is not None and not str(limit).isdigit():
            problems.append((field + '.resources.limits[nvidia.com/gpu]', 'Invalid value: "%s": must be an integer' % limit))
        if request is not None and request != limit:
            problems.append((field + '.resources.requests[nvidia.com/gpu]',
                             'Invalid value: "%s": must be equal to nvidia.com/gpu limit' % request))
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                problems.append((field + ".volumeMounts.name", 'Not found: "%s"' % mount.get("name")))
    if obj["kind"] == "Job" and spec.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append((prefix + ".restartPolicy", 'Unsupported value: "%s": supported values: "OnFailure", "Never"'
                         % spec.get("restartPolicy")))
    return problems


def kubectl_apply(args, cluster):
    # PyYAML: from the Debian package python3-yaml (the fixture package snapd-test-double depends on it), or from the
    # controller, zipped by the microk8s scenario's prepare (pure Python through zipimport).
    sys.path.insert(0, "/usr/local/lib/test-double/pyyaml.zip")
    import yaml  # pylint: disable=import-outside-toplevel

    dry_run = take(args, "--dry-run", default="none")
    if dry_run not in ("none", "server", "client"):
        die('error: Invalid dry-run value (%s). Must be "none", "server", or "client".' % dry_run)
    path = take(args, "-f", "--filename")
    if path == "-":
        documents = [d for d in yaml.safe_load_all(sys.stdin) if d]
    else:
        with open(path) as handle:
            documents = [d for d in yaml.safe_load_all(handle) if d]
    # A v1 List (what `kubectl get -o json` and kubetpl print) is applied item by item, as kubectl does.
    documents = [item for d in documents
                 for item in (d.get("items") or [] if d.get("kind") == "List" and d.get("apiVersion") == "v1" else [d])]
    for obj in documents:
        for field in ("apiVersion", "kind", "metadata"):
            if field not in obj:
                die("error: error validating \"%s\": error validating data: %s not set" % (path, field))
        if obj["kind"] not in KINDS.get(obj["apiVersion"], ()):
            die('error: resource mapping not found for name: "%s" namespace: "" from "%s": no matches for kind "%s" in '
                'version "%s"\nensure CRDs are installed first' % (obj["metadata"].get("name", ""), path, obj["kind"],
                                                                   obj["apiVersion"]))
        problems = invalid_fields(obj) if dry_run != "client" else []
        if problems:
            die('The %s "%s" is invalid: %s'
                % (obj["kind"], obj["metadata"].get("name", ""), ", ".join("%s: %s" % problem for problem in problems)))
        key = object_key(obj)
        previous = cluster["objects"].get(key)
        verb = "created" if previous is None else ("unchanged" if previous == obj else "configured")
        if dry_run == "none":
            cluster["objects"][key] = obj
        out("%s %s%s" % (resource_name(obj), verb, {"none": "", "server": " (server dry run)",
                                                    "client": " (dry run)"}[dry_run]))


def kubectl_drain(args, cluster):
    """Cordon, then evict the node's pods; DaemonSet pods stop it unless --ignore-daemonsets, as in kubectl."""
    ignore_daemonsets = flag(args, "--ignore-daemonsets")
    flag(args, "--delete-emptydir-data", "--force", "--disable-eviction")
    timeout = take(args, "--timeout", default="0s")
    take(args, "--grace-period", "--pod-selector")
    name = args[0]
    kubectl_cordon([name], cluster)
    daemonset_pods = ["%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
                      for pod in device_plugin_pods(cluster) if pod["spec"]["nodeName"] == name]
    if daemonset_pods and not ignore_daemonsets:
        die('error: unable to drain node "%s" due to error: cannot delete DaemonSet-managed Pods (use '
            "--ignore-daemonsets to ignore): %s, continuing command...\nThere are pending nodes to be drained:\n %s"
            % (name, ", ".join(daemonset_pods), name))
    if daemonset_pods:
        out("Warning: ignoring DaemonSet-managed Pods: %s" % ", ".join(daemonset_pods))
    # Pods a PodDisruptionBudget protects (a test puts "NAMESPACE/NAME" in the node's "undisruptable" list): their
    # evictions are refused until --timeout, as kubectl reports it (without waiting it out); the node stays cordoned.
    held = cluster["nodes"][name].get("undisruptable", [])
    if held:
        pods = [pod.split("/")[::-1] for pod in held]  # [name, namespace]
        errors = ['error when evicting pods/"%s" -n "%s": global timeout reached: %s' % (pod, space, timeout)
                  for pod, space in pods]
        for pod, space in pods:
            out("evicting pod %s/%s" % (space, pod))
            out('error when evicting pods/"%s" -n "%s" (will retry after 5s): Cannot evict pod as it would violate the pod\'s '
                "disruption budget." % (pod, space))
        out('There are pending pods in node "%s" when an error occurred: [%s]' % (name, ", ".join(errors)))
        out('error: unable to drain node "%s" due to error: [%s], continuing command...' % (name, ", ".join(errors)))
        out("There are pending nodes to be drained:\n %s" % name)
        return 1
    out("node/%s drained" % name)
    return 0


def record_call(argv):
    """The calls log: one JSON line per kubectl command (time, the node it ran on, its arguments), which the tests
    read to check the order of cordon, drain, verification and uncordon."""
    with open(SHARED + "/calls.log", "a") as log:
        log.write(json.dumps({"time": time.time(), "on": node_name(), "argv": argv}) + "\n")


def cmd_kubectl(args):
    refuse_on_worker("kubectl")
    verb, rest = args[0], list(args[1:])
    handlers = {"get": kubectl_get, "label": kubectl_label, "apply": kubectl_apply, "cordon": kubectl_cordon,
                "uncordon": lambda a, c: kubectl_cordon(a, c, unschedulable=False), "drain": kubectl_drain,
                "delete": kubectl_delete}
    if verb not in handlers:
        die("error: this test double knows kubectl %s" % ", ".join(sorted(handlers)))
    with cluster_state() as state:
        record_call(["kubectl"] + list(args))
        cluster = local_cluster(state)[1]
        code = handlers[verb](rest, cluster)
    if code:
        sys.exit(code)  # after the state is saved: a drain that fails leaves the node cordoned, as kubectl does


COMMANDS = {"status": cmd_status, "enable": cmd_enable, "disable": lambda a: cmd_enable(a, enable=False),
            "add-node": cmd_add_node, "join": cmd_join, "leave": cmd_leave, "remove-node": cmd_remove_node,
            "config": cmd_config, "kubectl": cmd_kubectl}


def main(argv):
    if os.geteuid() != 0:
        die("Insufficient permissions to access MicroK8s.\nYou can either try again with sudo or add the user "
            "to the 'microk8s' group.")
    if not argv or argv[0] not in COMMANDS:
        die("Available subcommands are: %s" % ", ".join(sorted(COMMANDS)), 1)
    COMMANDS[argv[0]](list(argv[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])
