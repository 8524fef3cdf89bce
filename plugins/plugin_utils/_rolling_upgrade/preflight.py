# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems the rolling_upgrade role's preflight reports: pure Python.

``preflight_problems`` turns the role's settings and the host's place in the inventory into one line per problem; the
role stops the host, listing them all. Numbers are read as Jinja's ``int`` and ``float`` filters read them (text that is
not a number counts as 0), since the role's variables come from the inventory as text as often as not.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import as_float, as_int, check_keys

SETTINGS = ("cluster", "kubectl_host", "serial", "others", "cluster_hosts", "max_unavailable", "gpu_poll", "gpu_wait",
            "components", "known_components")


def batch_size(serial, others):
    """How many hosts one batch of the upgrade playbook holds: ``serial`` (gpu_cluster_serial as text) hosts, or that
    percentage of ``others`` (the non-head nodes) as Ansible counts it, at least 1."""
    if serial.endswith("%"):
        return max(int(len(others) * as_float(serial[:-1]) / 100), 1)
    return as_int(serial)


def preflight_problems(settings):
    """One line per problem in ``settings`` (keys SETTINGS); empty when the host can go on.

    settings: cluster (the host's cluster_* group, '' for none), kubectl_host (its cluster's first head, '' for none),
    serial (gpu_cluster_serial as text), others (the hosts of gpu_cluster outside the head group: the upgrade
    playbook's batches are made of them), cluster_hosts (the hosts of the cluster group), max_unavailable, gpu_poll,
    gpu_wait (rolling_upgrade_*), components (the keys of rolling_upgrade_target) and known_components (those the role
    knows). At worst one batch holds all of the cluster's nodes among others, up to the batch size.
    """
    check_keys("settings", settings, SETTINGS)
    cluster, serial = settings["cluster"], str(settings["serial"])
    others = list(dict.fromkeys(settings["others"] or []))
    cluster_hosts = set(settings["cluster_hosts"] or [])
    in_batch = min(batch_size(serial, others), len([host for host in others if host in cluster_hosts]))
    max_unavailable = settings["max_unavailable"]
    problems = []

    if not cluster:
        problems.append("the host is in no cluster_* group; put it under its cluster in the inventory")
    if len(settings["kubectl_host"] or "") == 0:
        problems.append("its cluster %s has no host in the head group to run kubectl" % cluster)
    if as_int(max_unavailable) < 1:
        problems.append("rolling_upgrade_max_unavailable must be 1 or more")
    if in_batch > as_int(max_unavailable):
        problems.append("gpu_cluster_serial (%s) puts up to %d nodes of %s in one batch, more than "
                        "rolling_upgrade_max_unavailable (%s): lower gpu_cluster_serial or raise "
                        "gpu_cluster_max_unavailable" % (serial, in_batch, cluster, max_unavailable))
    if not (as_int(settings["gpu_poll"]) >= 1 and as_int(settings["gpu_wait"]) >= 0):
        problems.append("rolling_upgrade_gpu_poll must be 1 or more and rolling_upgrade_gpu_wait 0 or more")
    known = set(settings["known_components"] or [])
    problems.extend("rolling_upgrade_target: unknown component %s" % name
                    for name in settings["components"] or [] if name not in known)
    return problems
