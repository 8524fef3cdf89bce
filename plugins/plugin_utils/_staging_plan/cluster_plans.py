# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the shard_plan action's work: each dataset planned once per cluster on its targets' room, its plan, each
node's lists and peer configuration written (list_store), and the clusters' outcomes merged into what the task reports.
May change without notice."""

import gc
import json
import os

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.discovery import learn_shards
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.list_store import prune_lists, read_json, write_lists
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.peers import peer_configs
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import host_shards, host_streamed, make_plan, rank_split

# Per node: what the role's fetch reads, from whichever cluster's plan holds the node.
NODE_KEYS = ("nodes", "lists", "stream_lists", "peer_lists")
LIST_KEYS = ("lists", "stream_lists", "peer_lists")


def node_lists(plan, shards, split=None):
    """What each node's list files hold: ({host: [its shard records, each with its "rank"]}, {host: [{"name", "url",
    "rank"} of the shards it streams]} (empty unless the plan streams). Built for every node in one pass over the plan
    (``host_shards``, ``rank_split``, or the ``split`` make_plan already made), not one pass per node; nodes with the
    same list and rank split share one list object."""
    by_record = {record["name"]: record for record in shards}
    ranks = split or rank_split(plan, {record["name"]: record.get("samples") for record in shards})
    hosts = sorted(plan["nodes"])
    held = _per_host(hosts, host_shards(plan), ranks, lambda shard, rank: dict(by_record[shard], rank=rank))
    streamed = {}
    if plan["mode"] == "stream":
        streamed = _per_host(hosts, host_streamed(plan), ranks,
                             lambda shard, rank: {key: by_record[shard].get(key) for key in ("name", "url", "size", "samples")}
                             | {"rank": rank})
    return held, streamed


def _per_host(hosts, names_by_host, ranks, entry):
    """{host: [entry(name, its rank) for each of its shard names]}, made once for hosts that share one list of names and
    one rank split (every node of a replicated plan): write_lists then encodes and writes it once."""
    made, lists = {}, {}
    for host in hosts:
        names, ranked = names_by_host[host], ranks[host]
        key = (id(names), id(ranked))
        if key not in made:
            made[key] = [entry(shard, ranked[shard]) for shard in names]
        lists[host] = made[key]
    return lists


def plan_dataset(dataset, shards, nodes, plan_dir, endpoints, check_mode, earlier=None):
    """Plan one dataset whose shards are known (``learn_shards``) on ``nodes`` (their room), write its plan (unless
    ``check_mode``), each node's lists and peer configuration, and return what the task reports for it. ``earlier``: a
    plan file to start from when plan_dir holds none yet (see cluster_plan_dir)."""
    # A large plan is hundreds of thousands of small dicts and lists and no reference cycle: the cycle collector
    # would walk them again and again (about 0.5 s of 4.5 at 1,000 nodes x 100,000 shards), so it waits meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _plan_dataset(dataset, shards, nodes, plan_dir, endpoints, check_mode, earlier)
    finally:
        if collecting:
            gc.enable()


def _plan_dataset(dataset, shards, nodes, plan_dir, endpoints, check_mode, earlier):
    name = dataset["name"]
    plan_path = os.path.join(plan_dir, name + ".plan.json")
    previous = read_json(plan_path)
    moved = False
    if previous is None and earlier:
        # A plan written before plans were made per cluster: kept as this cluster's where it placed nothing elsewhere,
        # and written to the cluster's directory even when nothing changes.
        found = read_json(earlier)
        if found is not None and set(found.get("nodes") or {}) <= set(nodes):
            previous, moved = found, True
    settings = {key: dataset[key] for key in ("name", "mode", "replicas", "headroom", "allow_stream", "stream_cache_fraction",
                                              "peer_assist")
                if dataset.get(key) is not None}
    split = {}
    plan = make_plan(settings, shards, nodes, previous, rank_split_out=split)
    # The plan shows signed URLs' query values as *** (redact_url): its readers need no signature, and a store that signs
    # its URLs afresh for each run does not make every run a change of plan. The node lists keep whole URLs (owner-only
    # files: write_atomically's mkstemp): the nodes fetch with them.
    plan["sources"] = {record["name"]: {"url": redact_url(record["url"]), "sha256": record["sha256"]} for record in shards}
    changes = plan["changes"]
    changed = (previous is None or changes["fetch_copies"] > 0 or changes["remove_copies"] > 0
               or previous.get("sources") != plan["sources"])
    held, streamed = node_lists(plan, shards, split)
    # Checked before anything is written: a plan task that fails here leaves the saved plan as it was.
    peers = peer_configs(name, plan, endpoints)
    # Compact: json's C encoder writes it (a plan of 100,000 shards x 2 copies in 0.6 s instead of 9 s indented).
    plan_file = ({plan_path: json.dumps(plan, sort_keys=True, separators=(",", ":")).encode("utf-8")}
                 if (changed or moved) and not check_mode else {})
    # One batch, keyed by kind and host: a host has a held list, a streamed list and a peer configuration.
    every = {("held", host): contents for host, contents in held.items()}
    every.update({("streamed", host): contents for host, contents in streamed.items()})
    every.update({("peers", host): contents for host, contents in peers.items()})
    paths = write_lists(plan_dir, every, also=plan_file)
    lists, stream_lists, peer_lists = ({host: paths[(kind, host)] for host in source} for kind, source in
                                       (("held", held), ("streamed", streamed), ("peers", peers)))
    return {
        "changed": changed,
        "mode": plan["mode"],
        "headroom": plan["headroom"],
        "transfer": plan["transfer"],
        "peer_lists": peer_lists,
        "summary": plan["summary"],
        "plan_file": plan_path,
        "changes": plan["changes"],
        "nodes": plan["nodes"],
        "lists": lists,
        "stream_lists": stream_lists,
        "mode_reason": plan["mode_reason"],
        "balance": plan["balance"],
        "rank_split_by": plan["rank_split_by"],
        "_before": previous["summary"] if previous else "dataset %s: no plan yet" % name,
    }


def cluster_plan_dir(plan_dir, cluster):
    """Where a cluster's plans and lists go: a directory per cluster group, plan_dir itself for targets in none. Each
    slice of a run sliced by cluster writes its own."""
    return os.path.join(plan_dir, cluster) if cluster else plan_dir


def merge_clusters(planned):
    """One dataset's outcome over its clusters' plans ({cluster: plan_dataset's outcome}): the nodes' keys merged, the
    summaries one per line, the changes added up; each cluster's own outcome under "clusters"."""
    def lines(key):
        return "\n".join(("cluster %s: " % cluster if cluster else "") + one[key] for cluster, one in planned.items())

    merged = {"changed": any(one["changed"] for one in planned.values()), "summary": lines("summary"),
              "_before": lines("_before"), "changes": {}, "clusters": {},
              # The dataset's, the same in every cluster's plan.
              "headroom": next(iter(planned.values()))["headroom"]}
    for key in NODE_KEYS:
        merged[key] = {}
    for cluster, one in planned.items():
        for key in NODE_KEYS:
            merged[key].update(one.pop(key))
        for key, value in one["changes"].items():  # counts, and the list of the nodes dropped
            merged["changes"][key] = merged["changes"].get(key, [] if isinstance(value, list) else 0) + value
        one.pop("_before")
        merged["clusters"][cluster] = one
    return merged


def plan_clusters(dataset, space, clusters, bases, endpoints, timeout, check_mode):
    """Each cluster's plan of one dataset, its shards learned once; the nodes' lists and figures of all of them.

    ``space``: {host: {dataset: its room}} (targets.target_inputs); ``clusters``: {cluster: [its hosts]}, "" for the
    targets in no cluster; ``bases``: {cluster: the directory its plans go under}; ``endpoints``: {host: where it serves
    peers}."""
    name = dataset["name"]
    shards = None
    planned = {}
    for cluster, hosts in clusters.items():
        nodes = {}
        for host in sorted(hosts):
            room = (space[host] or {}).get(name)
            if not room:
                raise ShardPlanError("dataset %r: no space report from target %s: it is unreachable or failed earlier; bring it "
                                     "back or remove it from shard_staging_targets" % (name, host))
            nodes[host] = room
        if shards is None:
            shards = learn_shards(dataset, timeout)
        planned[cluster] = plan_dataset(dataset, shards, nodes, cluster_plan_dir(bases[cluster], cluster), endpoints,
                                        check_mode, earlier=os.path.join(bases[cluster], name + ".plan.json") if cluster else None)
    return merge_clusters(planned)


def prune_clusters(bases, planned):
    """Remove the list files of each cluster's directory that neither this run's ``planned`` datasets ({name:
    plan_clusters' outcome}) nor any run of the last hour named (list_store.prune_lists)."""
    named = [path for one in planned.values() for key in LIST_KEYS for path in one[key].values()]
    for cluster, base in bases.items():
        prune_lists(cluster_plan_dir(base, cluster), named)
