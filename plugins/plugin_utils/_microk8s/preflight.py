# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems the microk8s role's preflight reports: pure Python.

``preflight_problems`` turns the role's settings (its variables, the platform's data and the host's place in the
inventory) into one line per problem; the role fails once, listing them all. The channel is matched as text, as
Ansible's ``match`` test matches it.
"""

import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys

SETTINGS = ("distribution", "major_version", "supported", "channel", "join_token", "cluster_groups", "cluster",
            "first_head", "head_group", "gpu_support", "addons", "offline_missing", "gpu_sharing")

_CHANNEL = re.compile(r"^[0-9]+\.[0-9]+(-[a-z0-9]+)?/(stable|candidate|beta|edge)$")
_TOKEN_LENGTH = 32


def _supported_list(supported):
    """'Debian 12, 13; Ubuntu 22, 24'."""
    return "; ".join("%s %s" % (distribution, ", ".join(str(release) for release in releases))
                     for distribution, releases in supported.items())


def preflight_problems(settings):
    """One line per problem in ``settings`` (keys SETTINGS); empty when the role can go on.

    settings: distribution and major_version (the host's), supported (the releases the role supports, by distribution),
    channel (microk8s_channel), join_token (microk8s_join_token), cluster_groups (the host's groups that match
    microk8s_cluster_group_pattern), cluster (its cluster group, '' for none), first_head (the cluster's first host in
    head_group, '' for none), head_group (microk8s_head_group), gpu_support (microk8s_gpu_support), addons (the names
    in microk8s_addons), offline_missing (the files of microk8s_offline_snaps the controller does not have),
    gpu_sharing (microk8s_gpu_sharing_layout resolved against the node's GPUs: gpu_sharing_resolved's result).
    """
    check_keys("settings", settings, SETTINGS)
    distribution, major = str(settings["distribution"]), str(settings["major_version"])
    supported = settings["supported"] or {}
    channel, token = str(settings["channel"]), str(settings["join_token"] or "")
    cluster_groups, gpu_support = list(settings["cluster_groups"] or []), str(settings["gpu_support"])
    missing = list(settings["offline_missing"] or [])
    problems = []

    if major not in [str(release) for release in supported.get(distribution, [])]:
        problems.append("%s %s is not supported; supported: %s" % (distribution, major, _supported_list(supported)))
    if not _CHANNEL.match(channel):
        problems.append("microk8s_channel=%s does not pin a Kubernetes minor; use a channel such as 1.32/stable" % channel)
    if 0 < len(token) < _TOKEN_LENGTH:
        problems.append("microk8s_join_token is %d characters long; MicroK8s needs at least 32 (or leave it empty for a "
                        "random token per run)" % len(token))
    if len(cluster_groups) > 1:
        problems.append("the host is in %s (groups matching microk8s_cluster_group_pattern); a host belongs to one cluster"
                        % " and ".join(cluster_groups))
    if not settings["first_head"]:
        problems.append("cluster %s has no host in the %s group; put its control plane there, or set microk8s_head_group"
                        % (settings["cluster"] or "(hosts in no cluster group)", settings["head_group"]))
    if gpu_support != "none" and "nvidia" in list(settings["addons"] or []):
        problems.append("microk8s_addons lists nvidia while microk8s_gpu_support=%s manages it; remove it from "
                        "microk8s_addons" % gpu_support)
    if missing:
        problems.append("microk8s_offline_snaps names files the controller does not have: %s" % ", ".join(missing))
    return problems + _sharing_problems(settings["gpu_sharing"] or {}, gpu_support)


def _sharing_problems(sharing, gpu_support):
    """The declaration's own problems, then what this role cannot do with a valid one."""
    if sharing.get("problems"):
        return list(sharing["problems"])
    gpus = sharing.get("gpus") or []
    shared = ["GPU %s %s" % (gpu["index"], gpu["mode"]) for gpu in gpus if gpu["mode"] != "whole"]
    problems = []
    if shared and gpu_support != "device_plugin":
        problems.append("microk8s_gpu_sharing_layout shares GPUs (%s), which this role configures in NVIDIA's device "
                        "plugin only; set microk8s_gpu_support=device_plugin (microk8s_gpu_support=%s)"
                        % (", ".join(shared), gpu_support))
    return problems
