# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which driver a node's GPUs allow, and one branch for a cluster: the controller's side of module_utils/nvidia_generations.

``node_choice`` turns a node's GPUs (nvidia_gpu_facts' ``pci_gpus``) and the flavour and branch asked for into the
flavour it gets and the branches that drive every one of its GPUs, or an error naming the host, the GPUs and the fix.
``cluster_branches`` intersects the nodes' branches, or names the two groups of nodes that share none.
"""

import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import (
    OPEN_DEFAULT_BRANCH, OPEN_FIRST_BRANCH, describe)

FLAVORS = ("auto", "open", "proprietary")


class DriverChoiceError(Exception):
    """No driver fits: the message names the host, the GPUs and what to set."""


def _shown(gpu):
    return "%s (%s, %s)" % (gpu["name"], gpu["architecture"], gpu["device_id"])


def _listed(gpus):
    """Each kind of GPU once, with its count where there are several: '8x NVIDIA H200 (Hopper, 10de:2335)'."""
    kinds = {}
    for gpu in gpus:
        kinds.setdefault(gpu["device_id"], [gpu, 0])[1] += 1
    return ", ".join(("%dx %s" % (count, _shown(gpu))) if count > 1 else _shown(gpu) for gpu, count in kinds.values())


def _range(low, high):
    return "%d and later" % low if high is None else ("%d to %d" % (low, high) if low <= high else "none")


def node_flavor(host, pci_gpus, flavor, branches):
    """The kernel module flavour ``host``'s GPUs get for ``flavor`` (auto, open or proprietary) on the first set branch of
    ``branches`` (a pin, a driver version or a branch; its leading number counts), as the nvidia_driver role plans it.
    Raises DriverChoiceError as node_choice does."""
    numbers = [re.match(r"[0-9]+", str(branch)) for branch in branches if branch]
    branch = next((number.group(0) for number in numbers if number), None)
    return node_choice(host, pci_gpus or [], flavor or "auto", branch)["flavor"]


def node_choice(host, pci_gpus, flavor="auto", branch=None):
    """{"flavor", "min_branch", "max_branch", "architectures", "gpus"} for one node; ``branch`` (int, str or None) the
    branch asked for. Raises DriverChoiceError where its GPUs are unknown (and not pinned by hand), need flavours or
    branches that exclude each other, or exclude the flavour or branch asked for."""
    if flavor not in FLAVORS:
        raise DriverChoiceError("%s: nvidia_driver_flavor is %r; choose one of %s" % (host, flavor, ", ".join(FLAVORS)))
    branch = int(branch) if branch not in (None, "") else None
    gpus = [describe(gpu["device_id"]) for gpu in pci_gpus if gpu.get("device_id")]
    unknown = [gpu["device_id"] for gpu in gpus if gpu["unknown"]]
    known = [gpu for gpu in gpus if not gpu["unknown"]]
    if unknown and (flavor == "auto" or branch is None):
        raise DriverChoiceError("%s: unknown NVIDIA device %s: its driver cannot be chosen for it; set nvidia_driver_flavor "
                                "(open or proprietary) and nvidia_driver_branch for this host by hand"
                                % (host, ", ".join(sorted(set(unknown)))))
    low = max([gpu["min_branch"] for gpu in known] or [OPEN_FIRST_BRANCH])
    highs = [gpu["max_branch"] for gpu in known if gpu["max_branch"] is not None]
    high = min(highs) if highs else None
    needs_open = [gpu for gpu in known if gpu["open_module"] == "required"]
    no_open = [gpu for gpu in known if gpu["open_module"] == "unsupported"]
    if needs_open and no_open:
        raise DriverChoiceError("%s: no driver drives all its GPUs: %s need(s) the open kernel modules and %s cannot run "
                                "them; put these GPUs in different nodes" % (host, _listed(needs_open),
                                                                             _listed(no_open)))
    if high is not None and low > high:
        oldest = min(known, key=lambda gpu: gpu["max_branch"] or 10 ** 6)
        newest = max(known, key=lambda gpu: gpu["min_branch"])
        raise DriverChoiceError("%s: no driver branch drives all its GPUs: %s ends with branch %d, %s starts at %d; put "
                                "these GPUs in different nodes" % (host, _shown(oldest), high, _shown(newest), low))
    if flavor == "proprietary" and needs_open:
        raise DriverChoiceError("%s: nvidia_driver_flavor is proprietary but %s run(s) only with the open kernel modules: "
                                "set nvidia_driver_flavor to open or auto" % (host, _listed(needs_open)))
    if flavor == "open" and no_open:
        raise DriverChoiceError("%s: nvidia_driver_flavor is open but %s cannot run the open kernel modules (Turing and later "
                                "only): set nvidia_driver_flavor to proprietary or auto" % (host, _listed(no_open)))
    if branch is not None and known and not (low <= branch and (high is None or branch <= high)):
        limiting = [gpu for gpu in known if branch < gpu["min_branch"] or (gpu["max_branch"] is not None and branch > gpu["max_branch"])]
        raise DriverChoiceError("%s: nvidia_driver_branch %d cannot drive %s; branches that drive all its GPUs: %s"
                                % (host, branch, _listed(limiting), _range(low, high)))
    chosen = flavor
    if flavor == "auto":
        if needs_open:
            chosen = "open"
        elif no_open or not known:
            chosen = "proprietary"
        else:
            chosen = "open" if branch is None or branch >= OPEN_DEFAULT_BRANCH else "proprietary"
    if chosen == "open" and branch is not None and branch < OPEN_FIRST_BRANCH:
        raise DriverChoiceError("%s: the open kernel modules start with branch %d, nvidia_driver_branch is %d: set a later "
                                "branch or nvidia_driver_flavor: proprietary" % (host, OPEN_FIRST_BRANCH, branch))
    return {"flavor": chosen, "min_branch": low, "max_branch": high,
            "architectures": sorted({gpu["architecture"] for gpu in known}), "gpus": [gpu["device_id"] for gpu in gpus]}


def cluster_branches(choices):
    """(min, max) of the branches that drive every node of ``choices`` ({host: node_choice result}), or
    DriverChoiceError naming the nodes that end too early and those that start too late."""
    low = max(choice["min_branch"] for choice in choices.values())
    highs = [choice["max_branch"] for choice in choices.values() if choice["max_branch"] is not None]
    high = min(highs) if highs else None
    if high is None or low <= high:
        return low, high
    old = sorted(host for host, choice in choices.items() if choice["max_branch"] is not None and choice["max_branch"] < low)
    new = sorted(host for host, choice in choices.items() if choice["min_branch"] > high)
    raise DriverChoiceError("no driver branch drives the whole cluster: %s end(s) with branch %d, %s start(s) at %d; set "
                            "nvidia_driver_cluster_consistency: none to let each node have its own branch, or split the "
                            "cluster" % (", ".join(old), high, ", ".join(new), low))


def _clamp(branch, low, high):
    if low is not None and branch < low:
        return low
    if high is not None and branch > high:
        return high
    return branch


def driver_plans(nodes, consistency="branch"):
    """Each node's driver: {host: {"flavor", "branch", "min_branch", "max_branch", "architectures", "gpus", "problems"}}.

    ``nodes``: {host: {"cluster" (its cluster group, "" for none), "pci_gpus", "flavor" and "branch" (asked; "" for
    none), "platform" ("Debian 13"), "platform_branch" (the platform's default), "fixed_branch" (true where the source
    carries a fixed set of branches, as Debian's archive does), "offered_branches" (that set, the platform's branch
    first; Debian 12 also carries 470 as its nvidia-tesla-470 family)}}. A node whose GPUs allow the platform's branch
    gets it; one whose GPUs do not gets the nearest branch they allow, and from a fixed source the nearest it offers.
    With ``consistency`` "branch", the nodes of a cluster that have GPUs get one branch: the one they pin, else the
    highest of their platforms' branches that every node allows. Every problem is a line naming the host and the fix; a node with problems must not be changed.
    """
    plans = {}
    for host, node in nodes.items():
        try:
            plans[host] = node_choice(host, node["pci_gpus"], node["flavor"] or "auto", node["branch"] or None)
            plans[host]["problems"] = []
        except DriverChoiceError as error:
            plans[host] = {"flavor": None, "min_branch": None, "max_branch": None, "architectures": [], "gpus": [],
                           "problems": [str(error)]}
    targets = {}
    if consistency == "branch":
        clusters = {}
        for host, plan in plans.items():
            if plan["gpus"] and not plan["problems"]:
                clusters.setdefault(nodes[host]["cluster"], []).append(host)
        for cluster, hosts in sorted(clusters.items()):
            targets.update(_cluster_targets(cluster or "the hosts in no cluster group", hosts, nodes, plans))
    for host, node in nodes.items():
        plan = plans[host]
        if plan["problems"]:
            plan["branch"] = node["branch"] or node["platform_branch"]
            continue
        branch = targets.get(host) or node["branch"]
        if not branch and not node["platform_branch"]:
            plan["branch"] = ""  # an unsupported release: the role names it
            continue
        offered = _offered(node)
        branch = branch or _nearest_offered(
            _clamp(int(node["platform_branch"]), plan["min_branch"] if plan["gpus"] else None, plan["max_branch"]),
            offered, plan["min_branch"] if plan["gpus"] else None, plan["max_branch"])
        plan["branch"] = branch
        if branch != (node["branch"] or branch):
            plan["problems"].append("%s: nvidia_driver_branch is %s but its cluster's nodes get branch %s "
                                    "(nvidia_driver_cluster_consistency: branch): pin the same branch on every node of the "
                                    "cluster, or set nvidia_driver_cluster_consistency: none" % (host, node["branch"], branch))
            continue
        try:
            plan["flavor"] = node_choice(host, node["pci_gpus"], node["flavor"] or "auto", branch)["flavor"]
        except DriverChoiceError as error:
            plan["problems"].append(str(error))
            continue
        if offered and branch not in offered:
            plan["problems"].append(
                "%s: its GPUs (%s) need driver branch %s, but %s's own packages carry branch %s only: set "
                "nvidia_driver_source: cuda (NVIDIA's repository, where it has that branch for %s), or "
                "nvidia_driver_cluster_consistency: none where another node of the cluster set the branch"
                % (host, ", ".join(plan["architectures"]) or "none", branch, node["platform"], " or ".join(offered),
                   node["platform"]))
    return plans


def _offered(node):
    """The branches a fixed source carries for the node's platform (strings), [] where any branch can be had."""
    if not node["fixed_branch"] or not node["platform_branch"]:
        return []
    return [node["platform_branch"]] + [str(b) for b in node.get("offered_branches") or [] if str(b) != node["platform_branch"]]


def _nearest_offered(branch, offered, low, high):
    """``branch`` (an int) as a string, or where a fixed source does not carry it, the nearest offered branch within
    [low, high] (the newer of two as near); unchanged where none is, for the caller to name."""
    fitting = [int(b) for b in offered if (low is None or int(b) >= low) and (high is None or int(b) <= high)]
    if not offered or branch in fitting or not fitting:
        return str(branch)
    return str(min(fitting, key=lambda b: (abs(b - branch), -b)))


def _cluster_targets(cluster, hosts, nodes, plans):
    """{host: the branch} for the GPU nodes of one cluster; problems go to every node of it."""
    pins = {host: nodes[host]["branch"] for host in hosts if nodes[host]["branch"]}
    if len(set(pins.values())) > 1:
        shown = "; ".join("%s: %s" % (host, branch) for host, branch in sorted(pins.items()))
        problem = ("%s pin different driver branches (%s) while nvidia_driver_cluster_consistency is branch: pin one "
                   "branch for the cluster, or set nvidia_driver_cluster_consistency: none" % (cluster, shown))
        for host in hosts:
            plans[host]["problems"].append("%s: %s" % (host, problem))
        return {}
    try:
        low, high = cluster_branches({host: plans[host] for host in hosts})
    except DriverChoiceError as error:
        for host in hosts:
            plans[host]["problems"].append("%s: in %s, %s" % (host, cluster, error))
        return {}
    if pins:
        branch = next(iter(pins.values()))
    else:
        platforms = [host for host in hosts if nodes[host]["platform_branch"]]
        if not platforms:
            return {}
        branch = str(max(int(_nearest_offered(_clamp(int(nodes[host]["platform_branch"]), low, high), _offered(nodes[host]),
                                              low, high)) for host in platforms))
    return dict.fromkeys(hosts, branch)


# The oldest driver branch that runs each CUDA major release's builds (CUDA's minor version compatibility: every
# 12.x build runs on 525 and later, every 13.x build on 580 and later). NVIDIA's CUDA Compatibility guide, table 1.
CUDA_MIN_BRANCH = {11: 450, 12: 525, 13: 580}


def cuda_driver_problem(host, what, cuda_version, branch):
    """'' where driver ``branch`` runs builds for ``cuda_version`` ('12.4'), else a line naming the host, what was built
    for that CUDA (``what``: 'nccl_cuda_version 13.0'), the branches that would run it and the fix. '' where either is
    unknown: a CUDA major past the table is not refused."""
    try:
        major, branch = int(str(cuda_version).split(".", 1)[0]), int(str(branch).split(".", 1)[0])
    except ValueError:
        return ""
    needed = CUDA_MIN_BRANCH.get(major)
    if needed is None or branch >= needed:
        return ""
    runs = " and ".join("CUDA %d.x" % cuda for cuda, low in sorted(CUDA_MIN_BRANCH.items()) if low <= branch)
    return ("%s: %s needs driver branch %d or later (CUDA %d.x), but its driver is branch %d, which runs %s builds: use "
            "a build for one of those, or raise nvidia_driver_branch to %d or later where the node's GPUs allow it"
            % (host, what, needed, major, branch, runs or "no CUDA", needed))
