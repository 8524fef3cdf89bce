# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The labels of a GPU node, from its GPU facts and its resolved sharing. Pure Python.

Where NVIDIA's GPU feature discovery (GFD) has a label, it has GFD's name and value form, so that a job written for
GFD selects our nodes: ``nvidia.com/gpu.product`` (spaces to '-', ``-SHARED`` when time-sliced, ``-MIG-<profile>``
under the single MIG strategy), ``gpu.memory`` (MiB), ``gpu.family`` (architecture, lower case), ``gpu.compute.major``
and ``.minor``, ``gpu.count``, ``gpu.replicas``, ``gpu.sharing-strategy`` (none or time-slicing), ``mig.capable``,
``mig.strategy``, ``mig-<profile>.count``, and the driver's and CUDA's versions (``cuda.driver-version.*``,
``cuda.runtime-version.*``, and GFD's older ``cuda.driver.*``/``cuda.runtime.*``). Unlike GFD under the single
strategy, ``gpu.count`` and ``gpu.memory`` stay the physical GPUs'.

GFD has no label saying "MIG or not": ``dlinfra.io/gpu.sharing`` is none, mig or time-sliced, so a job can select
whole GPUs only, and ``dlinfra.io/gpu.mig-layout`` lists the node's instances ('1x3g.40gb_1x4g.40gb').
A node's product, memory and architecture are its first GPU's.
"""

import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import describe
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.device_plugin import (
    CONFIG_LABEL, config_name, device_plugin_config, mig_strategy)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.profiles import mig_profiles

GFD = "nvidia.com/"
OURS = "dlinfra.io/gpu."
PRESENT = GFD + "gpu.present"
# GFD's family names: the architecture in lower case, Ada as ada-lovelace.
_FAMILIES = {"Ada": "ada-lovelace"}
# The labels node_labels may write: a node's label of these names that a run no longer wants is removed, others are
# left to whoever wrote them.
_OWN = re.compile(r"^(dlinfra\.io/gpu\..+|nvidia\.com/(gpu\.(product|count|replicas|sharing-strategy|memory|family"
                  r"|compute\.major|compute\.minor)|mig\.capable|mig\.strategy|mig-.+\.count"
                  r"|cuda\.(driver|runtime)(-version)?\..+|device-plugin\.config))$")


def label_value(text):
    """``text`` as a valid Kubernetes label value: characters other than [A-Za-z0-9._-] become '-', at most 63,
    alphanumeric at both ends ('' where nothing is left)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", str(text).strip())[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def sharing_kind(gpus):
    """dlinfra.io/gpu.sharing's value for a node's resolved GPU settings: none, mig or time-sliced."""
    modes = {gpu["mode"] for gpu in gpus}
    return "time-sliced" if "time_slicing" in modes else "mig" if "mig" in modes else "none"


def _versions(prefix, version, names):
    parts = str(version or "").split(".")
    return {prefix + name: label_value(part) for name, part in zip(names, parts) if part}


def node_labels(gpus, facts):
    """{label: value} for a node: ``gpus`` its resolved GPU settings (resolve's), ``facts`` what nvidia_gpu_facts
    returned (driver_version, cuda_version, pci_gpus). Empty for a node without GPUs."""
    if not gpus:
        return {}
    first = gpus[0]
    strategy = mig_strategy(gpus)
    sharing = sharing_kind(gpus)
    product = label_value(first["name"])
    if sharing == "time-sliced":
        product += "-SHARED"
    elif strategy == "single":
        product += "-MIG-" + next(iter(first["layout"]))
    labels = {
        GFD + "gpu.product": label_value(product),
        GFD + "gpu.count": str(len(gpus)),
        GFD + "gpu.replicas": str(first.get("replicas", 1)),
        GFD + "gpu.sharing-strategy": "time-slicing" if sharing == "time-sliced" else "none",
        GFD + "mig.capable": "true" if mig_profiles(first["name"]) else "false",
        GFD + "mig.strategy": strategy,
        OURS + "sharing": sharing,
    }
    if first.get("memory_total_mib"):
        labels[GFD + "gpu.memory"] = str(first["memory_total_mib"])
    pci_gpus = (facts or {}).get("pci_gpus") or []
    known = describe(pci_gpus[0]["device_id"]) if pci_gpus and pci_gpus[0].get("device_id") else {"unknown": True}
    if not known["unknown"]:
        major, minor = known["compute_capability"].split(".")
        labels.update({GFD + "gpu.compute.major": major, GFD + "gpu.compute.minor": minor,
                       GFD + "gpu.family": _FAMILIES.get(known["architecture"], known["architecture"].lower())})
    driver = (facts or {}).get("driver_version")
    cuda = (facts or {}).get("cuda_version")
    labels.update(_versions(GFD + "cuda.driver-version.", driver, ("major", "minor", "revision")))
    labels.update(_versions(GFD + "cuda.driver.", driver, ("major", "minor", "rev")))
    labels.update(_versions(GFD + "cuda.runtime-version.", cuda, ("major", "minor")))
    labels.update(_versions(GFD + "cuda.runtime.", cuda, ("major", "minor")))
    if driver:
        labels[GFD + "cuda.driver-version.full"] = label_value(driver)
    if cuda:
        labels[GFD + "cuda.runtime-version.full"] = label_value(cuda)
    counts = {}
    for gpu in gpus:
        for profile, count in (gpu.get("layout") or {}).items():
            counts[profile] = counts.get(profile, 0) + count
    for profile, count in sorted(counts.items()):
        labels[GFD + "mig-%s.count" % label_value(profile.replace("+", "."))] = str(count)
    if counts:
        labels[OURS + "mig-layout"] = label_value("_".join("%dx%s" % (count, profile.replace("+", "."))
                                                           for profile, count in sorted(counts.items())))
    return dict(sorted(labels.items()))


def gpu_node_labels(gpus, facts, device_plugin=True):
    """The labels the microk8s role keeps on a node: none without GPUs; gpu.present alone where another labeller
    runs (the nvidia addon's GPU feature discovery, device_plugin false); else gpu.present, the device plugin's config
    name and node_labels'."""
    if not gpus:
        return {}
    if not device_plugin:
        return {PRESENT: "true"}
    labels = node_labels(gpus, facts)
    labels.update({PRESENT: "true", CONFIG_LABEL: config_name(device_plugin_config(gpus))})
    return dict(sorted(labels.items()))


def own_label(key):
    """Whether a label's name is one the microk8s role writes on GPU nodes (gpu.present included)."""
    return key == PRESENT or bool(_OWN.match(key))


def label_changes(current, wanted):
    """kubectl label's arguments that take a node from its ``current`` labels to ``wanted``: KEY=VALUE for each that
    differs, KEY- for each of our own (own_label) that is no longer wanted; [] where nothing differs."""
    current = current or {}
    changes = ["%s=%s" % (key, value) for key, value in sorted(wanted.items()) if current.get(key) != value]
    return changes + ["%s-" % key for key in sorted(current) if own_label(key) and key not in wanted]
