# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVIDIA k8s-device-plugin's config file for a node, and the resources Kubernetes then shows. Pure Python.

The config is the plugin's file format (its README, "Configuration Option Details" and "Shared Access to GPUs"):
``version: v1``, ``flags.migStrategy`` (none, single or mixed) and, for time-slicing,
``sharing.timeSlicing.resources`` with one replica count per resource name. MIG strategies: ``single`` advertises
every MIG device as ``nvidia.com/gpu`` and needs every GPU of the node in MIG mode with instances of one profile;
``mixed`` advertises each profile as its own resource (``nvidia.com/mig-3g.40gb``) next to ``nvidia.com/gpu`` for the
whole GPUs.

``failRequestsGreaterThanOne`` is true: a pod that asks for two time-sliced GPUs fails to start instead of receiving
two slices of one GPU. ``renameByDefault`` stays false, so pods keep asking for ``nvidia.com/gpu``.

Nodes differ, so the plugin runs its own config-manager (as NVIDIA's Helm chart does): a ConfigMap holds the named
configs, and each GPU node's label ``nvidia.com/device-plugin.config`` names its own. A config is a function of the
MIG strategy and the replica count only, so its name says it all (``whole``, ``time-slicing-4``, ``mig-mixed``):
the ConfigMap is rebuilt from the names the nodes' labels use, whichever hosts a run touches.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_jobs import mig_resource

GPU_RESOURCE = "nvidia.com/gpu"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
DEFAULT_CONFIG = "whole"
_TIME_SLICING = "time-slicing-"


def mig_strategy(gpus):
    """none, single or mixed for a node's resolved GPU settings (resolve's ``gpus``)."""
    layouts = [gpu.get("layout") for gpu in gpus if gpu["mode"] == "mig"]
    if not layouts:
        return "none"
    if len(layouts) == len(gpus) and all(layout == layouts[0] for layout in layouts) and len(layouts[0]) == 1:
        return "single"
    return "mixed"


def device_plugin_config(gpus):
    """The plugin's config file (a dict to write as YAML) for a node's resolved GPU settings."""
    config = {"version": "v1", "flags": {"migStrategy": mig_strategy(gpus)}}
    replicas = [gpu["replicas"] for gpu in gpus if gpu["mode"] == "time_slicing"]
    if replicas:
        config["sharing"] = {"timeSlicing": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                                             "resources": [{"name": GPU_RESOURCE, "replicas": replicas[0]}]}}
    return config


def allocatable(gpus):
    """{resource: count} the node shows once the plugin runs with that config; resources with none are left out."""
    strategy = mig_strategy(gpus)
    counts = {}
    for gpu in gpus:
        if gpu["mode"] == "mig":
            for profile, count in gpu["layout"].items():
                name = GPU_RESOURCE if strategy == "single" else mig_resource(profile)
                counts[name] = counts.get(name, 0) + count
        else:
            counts[GPU_RESOURCE] = counts.get(GPU_RESOURCE, 0) + gpu.get("replicas", 1)
    return dict(sorted(counts.items()))


def config_name(config):
    """The name of a config device_plugin_config made: whole, time-slicing-N, mig-single or mig-mixed."""
    resources = ((config.get("sharing") or {}).get("timeSlicing") or {}).get("resources") or []
    if resources:
        return _TIME_SLICING + str(resources[0]["replicas"])
    strategy = config["flags"]["migStrategy"]
    return DEFAULT_CONFIG if strategy == "none" else "mig-" + strategy


def config_from_name(name):
    """The config a name stands for; None for a name config_name never makes."""
    name = str(name)
    if name == DEFAULT_CONFIG:
        return device_plugin_config([])
    if name in ("mig-single", "mig-mixed"):
        return {"version": "v1", "flags": {"migStrategy": name[len("mig-"):]}}
    replicas = name[len(_TIME_SLICING):] if name.startswith(_TIME_SLICING) else ""
    if replicas.isdigit() and str(int(replicas)) == replicas and int(replicas) >= 2:
        return device_plugin_config([{"mode": "time_slicing", "replicas": int(replicas)}])
    return None


def available_configs(names):
    """{name: config} for the ConfigMap: the default and each name the nodes' labels use that config_from_name knows."""
    wanted = sorted({DEFAULT_CONFIG} | {str(name) for name in names})
    return {name: config_from_name(name) for name in wanted if config_from_name(name) is not None}
