# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubetpl: Kubernetes manifests for GPU work from a few options, printed for ``microk8s kubectl apply -f -``.

    kubetpl job -G 1 -c nvidia-smi                         a Job on one GPU
    kubetpl pod -l tmbdev/redis-server -c redis-server     a Pod, no GPU
    kubetpl job --dataset yt8m-mini -l IMAGE -c 'train.py --epochs 3'
                                                           torchrun on every node that holds the staged dataset

Private to the collection; the command is its public face. The microk8s role copies this file, k8s_jobs.py and
k8s_training_jobs.py (with the hand-off's names) to the heads and installs a ``kubetpl`` that runs main(). Stdlib only,
Python 3.9 and later: the output is JSON, which kubectl reads as it reads YAML; ``-o yaml`` needs PyYAML
(python3-yaml). A dataset's worlds are read from WORLDS_DIR/<dataset>/*.json, one file per node that the shard_staging
role writes on the cluster's heads: {"world": the node's world.json, "dest", "hostname", "gpus"}.
"""

import argparse
import glob
import json
import os
import re
import sys

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_jobs import ManifestError, gpu_job
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_training_jobs import (
    DEFAULT_BACKOFF_LIMIT, DEFAULT_PORT, NCCL_CONF, training_job)

DEFAULT_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
# Where the shard_staging role writes each dataset's worlds on the heads (shard_staging_worlds_dir).
DEFAULT_WORLDS_DIR = "/var/lib/dlinfra/worlds"


class KubetplError(Exception):
    pass


def _pairs(option, values):
    """NAME=VALUE options as a dict, in order."""
    pairs = {}
    for value in values or ():
        name, equals, text = value.partition("=")
        if not equals or not name:
            raise KubetplError("%s %r is not NAME=VALUE; fix: e.g. %s NCCL_DEBUG=INFO" % (option, value, option))
        pairs[name] = text
    return pairs


def default_name(words, fallback):
    """A DNS label from the first word (a program, a script or an image): nvidia-smi, train-py, redis-server."""
    base = os.path.basename(words[0].split("@")[0]) if words else ""
    base = re.sub(r"[^a-z0-9]+", "-", base.split(":")[0].lower()).strip("-")
    return (base or fallback)[:50].rstrip("-") or fallback


def read_worlds(worlds_dir, dataset):
    """The node entries of ``dataset`` on this head, one per file, in the files' order."""
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", dataset):
        raise KubetplError("--dataset %r is not a dataset's name; fix: name one of shard_staging_datasets" % dataset)
    directory = os.path.join(worlds_dir, dataset)
    paths = sorted(glob.glob(os.path.join(glob.escape(directory), "*.json")))
    if not paths:
        known = sorted(os.path.basename(path) for path in glob.glob(os.path.join(glob.escape(worlds_dir), "*"))
                       if os.path.isdir(path))
        raise KubetplError("dataset %s: no node's world in %s (datasets here: %s); fix: stage it with the shard_staging "
                           "role, which writes the worlds on the cluster's heads, or give --worlds-dir"
                           % (dataset, directory, ", ".join(known) or "none"))
    nodes = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                nodes.append(json.load(handle))
        except (OSError, ValueError) as exc:
            raise KubetplError("dataset %s: cannot read %s (%s); fix: re-run shard_staging, which rewrites it, or "
                               "remove it" % (dataset, path, exc))
    return nodes


def manifests(options, worlds_dir):
    """The manifests the options ask for."""
    env = _pairs("-e", options.env)
    command = options.command
    if options.kind == "job" and options.dataset is not None:
        name = options.name or default_name(["train-" + options.dataset], "train")
        return training_job(name, options.image, command, options.dataset, read_worlds(worlds_dir, options.dataset),
                            namespace=options.namespace, env=env or None, port=options.port,
                            backoff_limit=DEFAULT_BACKOFF_LIMIT if options.backoff_limit is None else options.backoff_limit,
                            host_network=not options.pod_network, nccl_conf=options.nccl_conf or None,
                            cpu=options.cpu, memory=options.memory, gpus=not options.no_gpus)
    name = options.name or default_name((command or "").split() or [options.image], options.kind)
    return [gpu_job(name, options.image, command=command, gpus=options.gpus or 0,
                    node_selector=_pairs("--node-selector", options.node_selector) or None,
                    kind=options.kind.capitalize(), namespace=options.namespace, env=env or None,
                    backoff_limit=options.backoff_limit if options.kind == "job" else None,
                    restart_policy=options.restart_policy or "Never", cpu=options.cpu, memory=options.memory,
                    mig_profile=options.mig_profile, whole_gpus=options.whole_gpus)]


def misplaced(options):
    """The options given that do not apply to the kind of job asked for, and why."""
    if options.kind != "job":
        return []
    if options.dataset is None:
        return [(option, "applies to a job with --dataset only") for option, given in (
            ("--port", options.port != DEFAULT_PORT), ("--nccl-conf", options.nccl_conf != NCCL_CONF),
            ("--pod-network", options.pod_network), ("--no-gpus", options.no_gpus)) if given]
    return [(option, "does not apply with --dataset: %s" % why) for option, given, why in (
        ("-G", options.gpus is not None, "each node gets its ranks' GPUs, as the plan counted them"),
        ("--node-selector", options.node_selector, "each node's pod is pinned to it"),
        ("--restart-policy", options.restart_policy, "a failed rank restarts in its pod (OnFailure)"),
        ("--mig-profile", options.mig_profile, "each node's ranks ask for whole GPUs"),
        ("--whole-gpus", options.whole_gpus, "each node's pod is pinned to it")) if given]


def render(items, output):
    if output == "yaml":
        try:
            import yaml  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise KubetplError("-o yaml needs PyYAML, which this Python lacks; fix: install it (apt install python3-yaml) "
                               "or leave -o out: kubectl reads the JSON kubetpl prints by default")
        return yaml.safe_dump_all(items, sort_keys=False, default_flow_style=False)
    document = items[0] if len(items) == 1 else {"apiVersion": "v1", "kind": "List", "items": items}
    return json.dumps(document, indent=2) + "\n"


def parser(worlds_dir):
    main_parser = argparse.ArgumentParser(
        prog="kubetpl", description="Print a Kubernetes Job or Pod for GPU work, for `microk8s kubectl apply -f -`.")
    kinds = main_parser.add_subparsers(dest="kind", metavar="{job,pod}")
    kinds.required = True
    for kind in ("job", "pod"):
        sub = kinds.add_parser(kind, help="a %s" % ("Job (runs to completion)" if kind == "job" else "bare Pod"))
        sub.add_argument("-c", "--command", help="the program and its arguments, split like a shell would and not run "
                                                 "in one (default: the image's entrypoint)")
        sub.add_argument("-l", "--image", default=os.environ.get("KUBETPL_IMAGE") or DEFAULT_IMAGE,
                         help="the image (default: $KUBETPL_IMAGE, else %s)" % DEFAULT_IMAGE)
        sub.add_argument("-G", "--gpus", type=int, help="GPUs (nvidia.com/gpu) to request (default: 0)")
        sub.add_argument("--mig-profile", metavar="PROFILE",
                         help="request --gpus instances of a MIG profile (nvidia.com/mig-PROFILE) instead, e.g. 3g.40gb")
        sub.add_argument("--whole-gpus", action="store_true",
                         help="run only on nodes whose GPUs are not shared (dlinfra.io/gpu.sharing=none)")
        sub.add_argument("-n", "--name", help="the %s's name (default: from the command or the image)" % kind)
        sub.add_argument("--namespace", help="its namespace (default: kubectl's)")
        sub.add_argument("-e", "--env", action="append", metavar="NAME=VALUE", help="an environment variable (repeat)")
        sub.add_argument("--node-selector", action="append", metavar="LABEL=VALUE", help="a node label to run on (repeat)")
        sub.add_argument("--cpu", help="CPU request and limit, e.g. 4 or 500m")
        sub.add_argument("--memory", help="memory request and limit, e.g. 32Gi")
        sub.add_argument("--restart-policy", help="Never (default), OnFailure, or Always for a pod")
        sub.add_argument("-o", "--output", choices=("json", "yaml"), default="json",
                         help="json (default; kubectl reads it) or yaml (needs PyYAML)")
        if kind == "job":
            sub.add_argument("--backoff-limit", type=int, help="retries before the Job fails (default: Kubernetes' 6)")
            data = sub.add_argument_group("a data-placed multi-node job (torchrun on every node that holds a dataset)")
            data.add_argument("--dataset", help="a dataset shard_staging staged on this cluster")
            data.add_argument("--worlds-dir", default=worlds_dir, help="where its worlds are (default: %(default)s)")
            data.add_argument("--port", type=int, default=DEFAULT_PORT,
                              help="node 0's rendezvous port (default: %(default)s)")
            data.add_argument("--nccl-conf", default=NCCL_CONF,
                              help="the nodes' NCCL config, mounted read-only; '' mounts none (default: %(default)s)")
            data.add_argument("--no-gpus", action="store_true",
                              help="the ranks run on the CPU (gloo): no GPU requested, the nodes' GPU counts ignored")
            data.add_argument("--pod-network", action="store_true",
                              help="use the pod network instead of the node's (then NCCL cannot use the interfaces "
                                   "nccl.conf names)")
    return main_parser


def main(argv=None, worlds_dir=DEFAULT_WORLDS_DIR):
    options = parser(worlds_dir).parse_args(argv)
    wrong = misplaced(options)
    if wrong:
        sys.stderr.write("".join("kubetpl: %s %s; fix: leave it out\n" % pair for pair in wrong))
        return 2
    try:
        text = render(manifests(options, options.worlds_dir if options.kind == "job" else worlds_dir), options.output)
    except (KubetplError, ManifestError) as exc:
        sys.stderr.write("kubetpl: %s\n" % exc)
        return 2
    sys.stdout.write(text)
    return 0
