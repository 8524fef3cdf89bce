# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a --limit keeps each cluster whole enough for site.yml: the steps run once per cluster (MicroK8s' joins and
addons, the staging plan) run on or through the cluster's first head, so a slice that takes some of a cluster's hosts
must take that head too."""

import re


def clusters(groups, site_group, cluster_pattern):
    """{cluster: [its hosts of the site group, in inventory order]}: the groups matching the pattern, and the site's hosts
    in none of them as one cluster named after the site group (as the microk8s role treats them)."""
    site = groups.get(site_group) or []
    pattern = re.compile(cluster_pattern)
    found = {group: [host for host in site if host in hosts] for group, hosts in sorted(groups.items())
             if pattern.search(group)}
    found = {group: hosts for group, hosts in found.items() if hosts}
    clustered = {host for hosts in found.values() for host in hosts}
    rest = [host for host in site if host not in clustered]
    if rest:
        found[site_group] = rest
    return found


def limit_problems(groups, limited, settings):
    """One line per cluster the limit cuts from its first head: 'WHERE: WHAT; fix: HOW'. limited: the hosts the limit
    selects, or None without --limit. settings: site_group, cluster_group_pattern, head_group."""
    if limited is None:
        return []
    limited = set(limited)
    heads = groups.get(settings["head_group"]) or []
    problems = []
    for cluster, members in clusters(groups, settings["site_group"], settings["cluster_group_pattern"]).items():
        cluster_heads = [host for host in heads if host in members]
        taken = [host for host in members if host in limited]
        if not cluster_heads or not taken or cluster_heads[0] in limited:
            continue
        problems.append(
            "cluster %s: --limit takes %s but not its first head %s, which runs the cluster's once-per-cluster steps "
            "(MicroK8s joins and addons, the staging plan); fix: add the head (--limit %s) or slice by cluster "
            "(--limit %s)" % (cluster, ", ".join(taken), cluster_heads[0], ",".join(taken + [cluster_heads[0]]), cluster))
    return problems
