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


def target_clusters(targets, groups, cluster_pattern):
    """{cluster: [its targets, in the order given]}: the staging plan places a cluster's shards on its own targets
    (a training job reads them within its cluster); targets in no cluster group form one more, named ''."""
    pattern = re.compile(cluster_pattern)
    named = [(group, set(hosts)) for group, hosts in sorted(groups.items()) if pattern.search(group)]
    found = {}
    for host in targets:
        cluster = next((group for group, hosts in named if host in hosts), "")
        found.setdefault(cluster, []).append(host)
    return found


def staging_slice_problems(targets, groups, cluster_pattern, in_play, limited=None):
    """What keeps the staging plan from running on this play: targets the limit selects (limited: its hosts, None
    without --limit) that the play leaves out, then each cluster whose targets the play takes only in part (its plan
    places shards on all of them at once). A cluster the limit leaves out entirely is another slice's."""
    in_play = set(in_play)
    selected = None if limited is None else set(limited)
    missing = [host for host in targets if host not in in_play and (selected is None or host in selected)]
    problems = []
    if missing:
        problems.append("shard_staging_targets: %s are not in this play; run the play on every target (hosts: "
                        "stage_targets) or take them out of shard_staging_targets" % ", ".join(missing))
    for cluster, members in target_clusters(targets, groups, cluster_pattern).items():
        taken = [host for host in members if host in in_play]
        left = [host for host in members if host not in in_play and host not in missing]
        if not taken or not left:
            continue
        where = ("cluster %s" % cluster if cluster else
                 "the targets in no cluster group (shard_staging_cluster_group_pattern %s)" % cluster_pattern)
        fix = "--limit %s" % (cluster or ",".join(members))
        problems.append(
            "shard_staging_targets: %s: --limit takes %s but not %s, and the staging plan places the cluster's shards on "
            "all its targets at once; fix: run the play on the whole cluster (%s), or take %s out of "
            "shard_staging_targets" % (where, ", ".join(taken), ", ".join(left), fix, ", ".join(left)))
    return problems
