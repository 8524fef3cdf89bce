# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A data-placed multi-node training job on Kubernetes, from the worlds of a staged dataset (issue 49, item 2).

Private to the collection: its public face is ``kubetpl job --dataset NAME`` (module_utils/kubetpl.py). Stdlib only,
Python 3.9 and later, no Ansible: the heads run it.

Each node that holds the dataset gets one Job, pinned to it (nodeSelector kubernetes.io/hostname), whose one pod runs
``torchrun`` with the node's rank and ranks from the plan, and one headless Service gives node 0's pod the DNS name
that every node's torchrun meets at. One Job per node, not one Indexed Job: an Indexed Job has one pod template, and
the nodes differ in what a template fixes (the node it runs on, its GPU count, the dataset's directory there).

The rendezvous is torchrun's static one (--master-addr, --node-rank): the plan's node ranks stay the torchrun node
ranks, so a rank's RANK is the global rank its node's world.json gives its list. c10d's rendezvous would number the
nodes in the order they arrive.
"""

import posixpath

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import HANDOFF_WORLD, RANK_LIST_PATTERN
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_jobs import (
    DNS1123_LABEL, LABEL_NAME, NAME_FIX, ManifestError, _argv, _env, _quantities)

DEFAULT_PORT = 29500
DEFAULT_BACKOFF_LIMIT = 6
NCCL_CONF = "/etc/nccl.conf"
TORCHRUN = "torchrun"
# A Service's name is a DNS-1035 label: it starts with a letter.
DNS1035_LABEL_START = "abcdefghijklmnopqrstuvwxyz"
WORLD_KEYS = ("dataset", "node", "node_rank", "nodes", "world_size", "rendezvous", "ranks", "plan_digest")
RESTAGE = "re-run shard_staging (playbooks/shard_staging.yml), which writes every node's world"


def handoff_env(dest, world):
    """The environment each rank of a node gets besides torchrun's own (RANK, LOCAL_RANK, WORLD_SIZE, ...): where the
    node's hand-off is, its rank lists (DLINFRA_RANK_LIST with LOCAL_RANK for %04d), its world.json, and the plan's
    digest, by which a rank can see that the hand-off it reads is the one the job was made from."""
    return {
        "DLINFRA_DATASET": world["dataset"],
        "DLINFRA_HANDOFF": dest,
        "DLINFRA_RANK_LIST": posixpath.join(dest, RANK_LIST_PATTERN),
        "DLINFRA_WORLD": posixpath.join(dest, HANDOFF_WORLD),
        "DLINFRA_PLAN_DIGEST": world["plan_digest"],
        "DLINFRA_NODE_RANK": str(world["node_rank"]),
        "DLINFRA_FIRST_RANK": str(world["ranks"][0]["global_rank"]),
    }


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _node_problem(dataset, index, node, on_gpus=True):
    """A problem of one node's entry ({"world", "dest", "hostname", "gpus"}) or None; names the host and the fix."""
    if not isinstance(node, dict) or not isinstance(node.get("world"), dict):
        return ("dataset %s: entry %d is not a node's {'world': ..., 'dest': ...}; fix: %s" % (dataset, index, RESTAGE))
    world = node["world"]
    host = world.get("node") if isinstance(world.get("node"), str) and world.get("node") else "entry %d" % index
    missing = [key for key in WORLD_KEYS if key not in world]
    if missing:
        return "%s: its world of dataset %s lacks %s; fix: %s" % (host, dataset, ", ".join(missing), RESTAGE)
    if not all(isinstance(world[key], str) and world[key] for key in ("node", "rendezvous", "plan_digest")):
        return "%s: its world of dataset %s names no node, rendezvous or plan_digest; fix: %s" % (host, dataset, RESTAGE)
    if world["dataset"] != dataset:
        return "%s: its world is of dataset %r, not %s; fix: give the worlds of %s only" % (
            host, world["dataset"], dataset, dataset)
    ranks = world["ranks"]
    if not isinstance(ranks, list) or not ranks or any(
            not isinstance(rank, dict) or rank.get("local_rank") != local or not _whole(rank.get("global_rank"))
            for local, rank in enumerate(ranks)):
        return "%s: its world of dataset %s has no ranks numbered 0, 1, ...; fix: %s" % (host, dataset, RESTAGE)
    if not all(_whole(world[key]) and world[key] >= 0 for key in ("node_rank", "nodes", "world_size")):
        return "%s: its world of dataset %s has no whole node_rank, nodes and world_size; fix: %s" % (host, dataset, RESTAGE)
    dest = node.get("dest")
    if not isinstance(dest, str) or not dest.startswith("/"):
        return ("%s: dest=%r of dataset %s is not an absolute path; fix: give the directory the dataset is staged in "
                "on the node (its hand-off's)" % (host, dest, dataset))
    hostname = node.get("hostname", world["node"])
    if not isinstance(hostname, str) or not LABEL_NAME.match(hostname):
        return ("%s: hostname=%r is not a node's kubernetes.io/hostname label; fix: give the name Kubernetes knows the "
                "node by (microk8s kubectl get nodes)" % (host, hostname))
    gpus = node.get("gpus")
    if gpus is not None and (not _whole(gpus) or gpus < 0):
        return "%s: gpus=%r is not a whole number; fix: give the node's GPU count, or leave it out" % (host, gpus)
    if on_gpus and gpus is not None and len(ranks) > gpus:
        return ("%s: dataset %s has %d ranks on it but the node has %d GPUs; fix: set shard_staging_ranks_per_node to at "
                "most %d for it (or leave it unset: its GPU count) and re-run shard_staging"
                % (host, dataset, len(ranks), gpus, gpus))
    return None


def _world_problems(dataset, worlds):
    """Problems of the worlds taken together: one plan, every node of it, numbered 0..N-1, the ranks adding up."""
    digests = {}
    for world in worlds:
        digests.setdefault(world["plan_digest"], []).append(world["node"])
    if len(digests) > 1:
        held = "; ".join("%s %s %s" % (", ".join(hosts), "holds" if len(hosts) == 1 else "hold", digest)
                         for hosts, digest in sorted((sorted(hosts), digest) for digest, hosts in digests.items()))
        return ["dataset %s: its nodes hold different plans (%s); fix: %s, so that every node holds the cluster's "
                "current plan, and remove the world of a node that left the cluster" % (dataset, held, RESTAGE)]
    problems = []
    hosts = sorted(world["node"] for world in worlds)
    twice = sorted(set(host for host in hosts if hosts.count(host) > 1))
    if twice:
        problems.append("dataset %s: the world of %s is given more than once; fix: give each node's world once"
                        % (dataset, ", ".join(twice)))
    planned = worlds[0]["nodes"]
    node_ranks = sorted(world["node_rank"] for world in worlds)
    if node_ranks != list(range(planned)):
        missing = sorted(set(range(planned)) - set(node_ranks))
        problems.append("dataset %s: its plan has %d nodes but the worlds given are of node ranks %s (%s)%s; fix: stage it "
                        "on every node of its cluster and give every node's world (the rendezvous node is %s)"
                        % (dataset, planned, ", ".join(map(str, node_ranks)), ", ".join(hosts),
                           "; node rank %s missing" % ", ".join(map(str, missing)) if missing else "",
                           worlds[0]["rendezvous"]))
    size = sum(len(world["ranks"]) for world in worlds)
    if not problems and size != worlds[0]["world_size"]:
        problems.append("dataset %s: its plan's world has %d ranks but the nodes given (%s) hold %d; fix: %s"
                        % (dataset, worlds[0]["world_size"], ", ".join(hosts), size, RESTAGE))
    return problems


def _name_problem(name, nodes):
    """The Service's name, and <name>-<node rank> the Jobs' and the pods' host names: DNS labels of 63 at most."""
    room = 63 - len("-%d" % max(nodes - 1, 0))
    if not isinstance(name, str) or not name or name[0] not in DNS1035_LABEL_START or not DNS1123_LABEL.match(name) \
            or len(name) > room:
        return ("name=%r is not a Service name that leaves room for the nodes' Jobs (<name>-<node rank>); fix: start "
                "with a letter and %s, at most %d characters" % (name, NAME_FIX.replace("at most 63 ", ""), room))
    return None


def training_job(name, image, command, dataset, nodes, namespace=None, env=None, port=DEFAULT_PORT,
                 backoff_limit=DEFAULT_BACKOFF_LIMIT, host_network=True, nccl_conf=NCCL_CONF, cpu=None, memory=None,
                 gpus=True):
    """The manifests of a multi-node torchrun job over the nodes that hold ``dataset``: a headless Service, then one
    Job per node in node rank order. Raises ManifestError, every problem at once, before anything is made.

    ``nodes``: one entry per node of the dataset's cluster, {"world": the node's world.json (shard_world.node_world),
    "dest": the dataset's directory on the node, "hostname": its kubernetes.io/hostname (default: the world's node),
    "gpus": its GPU count (optional; more ranks than GPUs is refused)}. ``command``: the script and arguments torchrun
    runs on every rank. ``host_network``: the pods use the node's network, so NCCL finds the interfaces that the nccl
    role's /etc/nccl.conf (``nccl_conf``, mounted read-only; None mounts none) names. ``env``: more variables (NCCL_*
    overrides, for one), which win over the hand-off's. ``gpus`` False: the ranks run on the CPU (gloo), no GPU is
    requested and the nodes' GPU counts do not matter."""
    problems = []
    if not isinstance(dataset, str) or not dataset:
        raise ManifestError(["dataset=%r is not a dataset's name; fix: name a dataset of shard_staging_datasets" % (dataset,)])
    if not isinstance(nodes, list) or not nodes:
        raise ManifestError(["dataset %s: no node's world is given; fix: stage it (shard_staging) on the cluster, whose "
                             "worlds the play writes on the heads" % dataset])
    node_problems = [_node_problem(dataset, index, node, gpus) for index, node in enumerate(nodes)]
    problems.extend(problem for problem in node_problems if problem)
    if not problems:
        problems.extend(_world_problems(dataset, [node["world"] for node in nodes]))
    problem = _name_problem(name, len(nodes))
    if problem:
        problems.append(problem)
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        problems.append("image=%r is not an image reference; fix: pass the training image, e.g. "
                        "image='nvcr.io/nvidia/pytorch:24.10-py3'" % (image,))
    if command is None or command == "" or command == []:
        argv = None
        problems.append("dataset %s: the command is empty; fix: name the script and its arguments that torchrun runs on "
                        "every rank, e.g. command='train.py --epochs 3'" % dataset)
    else:
        argv, problem = _argv(command)
        if problem:
            problems.append(problem)
    if namespace is not None and (not isinstance(namespace, str) or not DNS1123_LABEL.match(namespace)):
        problems.append("namespace=%r is not a DNS-1123 label; fix: %s (or leave it out for the default namespace)"
                        % (namespace, NAME_FIX))
    if not _whole(port) or not 1 <= port <= 65535:
        problems.append("port=%r is not a port; fix: pass a free TCP port of node 0, e.g. port=%d" % (port, DEFAULT_PORT))
    if not _whole(backoff_limit) or backoff_limit < 0:
        problems.append("backoff_limit=%r is not a whole number >= 0; fix: pass how often a node's pod may fail before "
                        "its Job does, e.g. backoff_limit=%d" % (backoff_limit, DEFAULT_BACKOFF_LIMIT))
    if nccl_conf is not None and (not isinstance(nccl_conf, str) or not nccl_conf.startswith("/")):
        problems.append("nccl_conf=%r is not an absolute path; fix: pass the nodes' NCCL config file (%s) or None"
                        % (nccl_conf, NCCL_CONF))
    extra_env = _env(env, problems) if env is not None else []
    quantities = _quantities(cpu, memory, problems)
    if problems:
        raise ManifestError(problems)

    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "training"}
    metadata = {"name": name, "labels": labels}
    if namespace:
        metadata["namespace"] = namespace
    service = {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": {
        "clusterIP": "None",
        # torchrun's store on node 0 is reached before its pod is Ready: DNS answers for it as soon as it has an address.
        "publishNotReadyAddresses": True,
        "selector": dict(labels),
        "ports": [{"name": "rendezvous", "port": port, "protocol": "TCP"}],
    }}
    rendezvous = "%s-0.%s" % (name, name)
    manifests = [service]
    for node in sorted(nodes, key=lambda node: node["world"]["node_rank"]):
        manifests.append(_node_job(name, image, argv, node, rendezvous, port, backoff_limit, host_network, nccl_conf,
                                   extra_env, quantities, labels, namespace, gpus))
    return manifests


def _node_job(name, image, argv, node, rendezvous, port, backoff_limit, host_network, nccl_conf, extra_env, quantities,
              labels, namespace, gpus=True):
    world, dest = node["world"], node["dest"]
    ranks = len(world["ranks"])
    job_name = "%s-%d" % (name, world["node_rank"])
    launch = [TORCHRUN, "--nnodes=%d" % world["nodes"], "--nproc-per-node=%d" % ranks,
              "--node-rank=%d" % world["node_rank"], "--rdzv-backend=static", "--master-addr=%s" % rendezvous,
              "--master-port=%d" % port]
    env = dict(handoff_env(dest, world))
    if not gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"  # CUDA images would otherwise see every GPU of the node
    env.update((var["name"], var["value"]) for var in extra_env)
    limits = dict(quantities, **({"nvidia.com/gpu": str(ranks)} if gpus else {}))
    container = {
        "name": "train",
        "image": image,
        "command": launch + argv,
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "resources": {"limits": limits} if limits else {},
        # Mounted where it is on the node: the rank lists name the shards by their paths there.
        "volumeMounts": [{"name": "dataset", "mountPath": dest, "readOnly": True},
                         {"name": "shm", "mountPath": "/dev/shm"}],
    }
    if quantities:
        container["resources"]["requests"] = dict(quantities)
    if world["node_rank"] == 0:
        # torchrun's store listens here; on the node's network this is also a host port, which the scheduler keeps
        # from a second job's node 0 on the same node (it waits, Pending, instead of failing to bind).
        container["ports"] = [{"name": "rendezvous", "containerPort": port, "protocol": "TCP"}]
    volumes = [{"name": "dataset", "hostPath": {"path": dest, "type": "Directory"}},
               # NCCL and DataLoader workers share memory through /dev/shm; a container's own holds 64 MiB.
               {"name": "shm", "emptyDir": {"medium": "Memory"}}]
    if nccl_conf:
        container["volumeMounts"].append({"name": "nccl-conf", "mountPath": NCCL_CONF, "readOnly": True})
        volumes.append({"name": "nccl-conf", "hostPath": {"path": nccl_conf, "type": "File"}})
    pod_spec = {
        # A failed rank's container restarts in the same pod, on the same node at the same address, up to
        # backoffLimit times; the other nodes' torchrun fail with it and restart too, and meet again at node 0.
        "restartPolicy": "OnFailure",
        "nodeSelector": {"kubernetes.io/hostname": node.get("hostname", world["node"])},
        # <name>-<node rank>.<name>: node 0's is the rendezvous address.
        "hostname": job_name,
        "subdomain": name,
        "containers": [container],
        "volumes": volumes,
    }
    if host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # the Service's names resolve from the node's network too
    pod_labels = dict(labels, **{"app.kubernetes.io/instance": job_name})
    metadata = {"name": job_name, "labels": dict(pod_labels)}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {
        "backoffLimit": backoff_limit,
        "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
    }}
