# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight role's checks of the inventory and its hosts, as one pure function."""

import re
from collections import defaultdict


def _names(hosts):
    return ", ".join(sorted(hosts))


def inventory_problems(groups, settings):
    """Problems in the shape of the inventory itself, as 'WHERE: WHAT; fix: HOW' lines."""
    problems = []
    for group in settings.get("required_groups") or []:
        if not groups.get(group):
            problems.append(
                "inventory: required group '%s' is missing or empty; fix: add the hosts that play this part to [%s] "
                "(or drop it from preflight_required_groups)" % (group, group))

    pattern = re.compile(settings.get("cluster_group_pattern") or r"(?!)")
    clusters_of = defaultdict(list)
    for group in sorted(groups):
        if pattern.search(group):
            for host in groups[group]:
                clusters_of[host].append(group)
    for host in sorted(clusters_of):
        if len(clusters_of[host]) > 1:
            problems.append(
                "%s: in %d clusters (%s); fix: keep the host in exactly one cluster group"
                % (host, len(clusters_of[host]), " and ".join(clusters_of[host])))

    targets_group = settings.get("stage_targets_group")
    for host in sorted(set(groups.get(targets_group) or [])) if targets_group else []:
        if host not in clusters_of:
            problems.append(
                "%s: a staging target ([%s]) that is in no cluster (groups matching '%s'); fix: add it to its cluster's group"
                % (host, targets_group, pattern.pattern))

    head_group = settings.get("head_group")
    heads_by_cluster = defaultdict(list)
    for host in sorted(set(groups.get(head_group) or [])) if head_group else []:
        heads_by_cluster[" and ".join(clusters_of.get(host, [])) or "no cluster"].append(host)
    for cluster in sorted(heads_by_cluster):
        heads = heads_by_cluster[cluster]
        if len(heads) > 1 and len(heads) % 2 == 0:
            problems.append(
                "%s: [%s] holds %d control planes (%s), an even number has no quorum; fix: use 1, 3 or 5 per cluster"
                % (cluster, head_group, len(heads), _names(heads)))
    return problems


def host_problems(hostvars, hosts, settings):
    """Problems of the hosts themselves, read from their gathered facts."""
    problems = []
    supported = settings.get("supported_platforms") or {}
    supported_text = "; ".join("%s %s" % (name, ", ".join(str(v) for v in versions)) for name, versions in sorted(supported.items()))
    hosts_by_hostname = defaultdict(list)
    for host in sorted(hosts):
        facts = hostvars[host].get("ansible_facts") or {}
        if "distribution" not in facts:
            problems.append("%s: no facts were gathered; fix: check that the host is reachable and has python3" % host)
            continue
        distribution = facts["distribution"]
        major = str(facts.get("distribution_major_version", ""))
        if major not in [str(v) for v in supported.get(distribution, [])]:
            problems.append(
                "%s: %s %s is not supported (supported: %s); fix: reinstall the host with a supported release or remove it "
                "from the inventory" % (host, distribution, facts.get("distribution_version", major), supported_text))
        hosts_by_hostname[facts.get("hostname", host)].append(host)
    for hostname in sorted(hosts_by_hostname):
        if len(hosts_by_hostname[hostname]) > 1:
            problems.append(
                "%s: all report the hostname '%s'; fix: give each host a unique name (hostnamectl set-hostname)"
                % (_names(hosts_by_hostname[hostname]), hostname))
    return problems


def preflight_problems(hostvars, groups, hosts, settings):
    return inventory_problems(groups, settings) + host_problems(hostvars, hosts, settings)


class FilterModule:
    def filters(self):
        return {"preflight_problems": preflight_problems}
