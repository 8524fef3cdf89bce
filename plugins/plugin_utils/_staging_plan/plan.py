# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side plan of the shard_staging role: the mode, the placement (``shard_placement``), each rank's part, and
what changes against the previous plan, in one JSON-serialisable document with a one-line summary.

The pieces, in the order the role uses them: ``shard_sources`` learns the shards, ``make_plan`` plans them (and numbers
its training world, ``shard_world``), ``host_shards`` / ``rank_split`` give each node its lists, ``changes_by_node`` and
``summarize`` say what moves.
"""

from __future__ import annotations

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.placement import (
    choose_mode, mode_reason, node_capacity, node_ranks, node_room, place_shards, split_ranks, stream_cache)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError, byte_count
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.world import add_world

MODES = ("auto", "replicate", "partition", "stream")
PLAN_VERSION = 1
# Room without limit, for placements where nothing has to fit (streamed shares, seeders of a replicated plan).
_UNLIMITED = 1 << 62


def make_plan(dataset, shards, nodes, previous=None, rank_split_out=None):
    """Plan one dataset.

    ``dataset``: {"name", "mode" (auto|replicate|partition|stream, default auto), "replicas" (default 1), "headroom"
    (default 0.05), ...}.
    ``shards``: [{"name", "url", "size", "sha256", "samples"}], e.g. from ``shard_records``; every size must be known.
    ``nodes``: {host: {"free_bytes", "ours_bytes" (optional), "held_bytes" (optional), "total_bytes" (optional), "ranks"
    (default 1), "ranks_from" (optional: where the ranks were read, for the plan)}}, see ``node_capacity``.
    ``previous``: the plan this function returned last time: what moves, and the copies placement keeps.
    ``rank_split_out``: a dict to fill with ``rank_split``'s result, for the caller that writes the nodes' lists.
    Returns a JSON-serialisable plan (see the keys below) whose "summary" is one line for check mode.
    """
    name, mode, replicas, headroom = _dataset_settings(dataset)
    allow_stream, cache_fraction = _stream_settings(dataset)
    peer_assist = dataset.get("peer_assist", True)
    if not isinstance(peer_assist, bool):
        raise ShardPlanError(f"dataset {name!r}: peer_assist is {peer_assist!r}; it must be true or false")
    sizes = _shard_sizes(name, shards)
    if not isinstance(nodes, dict) or not nodes:
        raise ShardPlanError(f"dataset {name!r}: no target nodes given; target at least one host with a dest filesystem")
    capacities = {host: node_capacity(host, info, headroom) for host, info in nodes.items()}
    ranks = {host: node_ranks(host, info) for host, info in nodes.items()}
    if previous is not None:
        _check_previous(previous, name)
    total = sum(sizes.values())
    chosen_mode = choose_mode(name, mode, total, capacities, replicas, allow_stream)
    if chosen_mode == "stream":
        replicas = 1
    hosts = sorted(nodes)
    plan = {
        "plan_version": PLAN_VERSION,
        "dataset": name,
        "mode": chosen_mode,
        "requested_mode": mode,
        "mode_reason": mode_reason(chosen_mode, mode, total, capacities, replicas),
        "replicas": len(hosts) if chosen_mode == "replicate" else replicas,
        "headroom": headroom,
        "shard_count": len(sizes),
        "total_bytes": total,
        "shards": {shard: sizes[shard] for shard in sorted(sizes)},
        "assignment": None,
        "replicated_on": None,
        "cached": None,
    }
    streamed = {host: (0, 0) for host in hosts}
    shares, capped = {host: float(total) for host in hosts}, set()
    kept = _placed(previous) if previous else {}
    if chosen_mode == "replicate":
        plan["replicated_on"] = hosts
        held = {host: (len(sizes), total) for host in hosts}
    elif chosen_mode == "partition":
        plan["assignment"], shares, capped = place_shards(sizes, ranks, capacities, replicas, kept)
        held = _counts(hosts, plan["assignment"], sizes)
    else:
        # Nothing has to fit: each node streams its share (by its ranks) and caches what its space allows.
        plan["assignment"], shares, capped = place_shards(sizes, ranks, dict.fromkeys(hosts, _UNLIMITED), 1, kept)
        cached = stream_cache(plan["assignment"], sizes, capacities, cache_fraction)
        plan["cached"] = sorted(cached)
        held = _counts(hosts, {shard: where for shard, where in plan["assignment"].items() if shard in cached}, sizes)
        streamed = _counts(hosts, {shard: where for shard, where in plan["assignment"].items() if shard not in cached}, sizes)
    plan["stored_bytes"] = sum(stored for _count, stored in held.values())
    plan["nodes"] = {
        host: {
            "capacity": capacities[host],
            "ranks": ranks[host],
            "ranks_from": nodes[host].get("ranks_from", "default"),
            "fair_bytes": int(shares.get(host, 0)),
            "capped": host in capped,
            "shards": held[host][0],
            "bytes": held[host][1],
            "free_after": node_room(host, nodes[host]) - held[host][1],
            "streamed_shards": streamed[host][0],
            "streamed_bytes": streamed[host][1],
        }
        for host in hosts
    }
    split = _add_ranks(plan, {record["name"]: record.get("samples") for record in shards})
    if rank_split_out is not None:
        rank_split_out.update(split)
    add_world(plan)
    _add_changes(plan, previous)
    _add_transfer(plan, previous, peer_assist)
    plan["summary"] = summarize(plan)
    return plan


def _placed(previous):
    """{shard: [hosts]} that ``previous`` put copies on, for placement to keep (every host, for a replicated plan)."""
    if previous["mode"] == "replicate":
        return {shard: previous["replicated_on"] for shard in previous["shards"]}
    return previous["assignment"]


def rank_split(plan, samples):
    """{host: {shard: rank}} over what each node reads (stored and streamed), with ``split_ranks``: by samples when
    ``samples`` ({shard: count or None}) has a count for every shard, else by bytes."""
    by_samples = all(samples.get(shard) is not None for shard in plan["shards"])
    weights = samples if by_samples else plan["shards"]
    reads = host_shards(plan)
    for host, names in host_streamed(plan).items():
        if names:
            reads[host] = sorted(reads.get(host, []) + names)
    # Nodes that read one list (every node of a replicated plan) with as many ranks share one split object.
    made, split = {}, {}
    for host, names in reads.items():
        if host in plan["nodes"]:
            key = (id(names), plan["nodes"][host]["ranks"])
            if key not in made:
                made[key] = split_ranks({shard: weights[shard] for shard in names}, key[1])
            split[host] = made[key]
    return split


def _add_ranks(plan, samples):
    """Per node, each rank's bytes (and samples); for the plan, how ranks are split and the balance: the largest bytes
    per rank over the average (1.0 is even; None for a replicated plan, where every node holds everything). Returns
    the split ({host: {shard: rank}})."""
    missing = sorted(shard for shard in plan["shards"] if samples.get(shard) is None)
    plan["rank_split_by"] = "bytes" if missing else "samples"
    if missing and len(missing) < len(plan["shards"]):
        plan["rank_split_note"] = (f"shard {missing[0]!r} and {len(missing) - 1} other(s) have no nsamples in the index: "
                                   "ranks are split by bytes")
    sizes = plan["shards"]
    split = rank_split(plan, samples)
    figures = {}
    for host, ranked in split.items():
        node = plan["nodes"][host]
        if id(ranked) not in figures:
            rank_bytes, rank_samples = [0] * node["ranks"], None if missing else [0] * node["ranks"]
            for shard, rank in ranked.items():
                rank_bytes[rank] += sizes[shard]
                if not missing:
                    rank_samples[rank] += samples[shard]
            figures[id(ranked)] = (rank_bytes, rank_samples)
        node["rank_bytes"], node["rank_samples"] = (None if values is None else list(values) for values in figures[id(ranked)])
    plan["balance"] = None
    if plan["mode"] != "replicate":
        read = {host: node["bytes"] + node["streamed_bytes"] for host, node in plan["nodes"].items()}
        all_ranks = sum(node["ranks"] for node in plan["nodes"].values())
        average = sum(read.values()) / all_ranks
        if average:
            plan["balance"] = round(max(read[host] / node["ranks"] for host, node in plan["nodes"].items()) / average, 4)
    return split


def copies_per_shard(plan):
    return len(plan["replicated_on"]) if plan["mode"] == "replicate" else plan["replicas"]


def seeders(plan):
    """{shard: the node that fetches it from its source}: the first node of its placement (for a replicated plan,
    equal shares over the nodes, so each node seeds an even share). The other nodes that hold it take it from there."""
    if plan["mode"] == "replicate":
        hosts = plan["replicated_on"]
        placed, _shares, _capped = place_shards(plan["shards"], dict.fromkeys(hosts, 1), dict.fromkeys(hosts, _UNLIMITED), 1)
        return {shard: where[0] for shard, where in placed.items()}
    return {shard: where[0] for shard, where in plan["assignment"].items()}


def _add_transfer(plan, previous, peer_assist):
    """How the copies to fetch travel: from the source, or (peer-assisted, when a shard has more than one copy) once from
    the source and then between the nodes."""
    fetch_bytes = plan["changes"]["fetch_bytes"]
    assisted = peer_assist and copies_per_shard(plan) > 1
    plan["transfer"] = {"peer_assist": assisted, "source_bytes": fetch_bytes, "peer_bytes": 0}
    if not assisted:
        return
    new = _holdings(plan)
    old = _holdings(previous) if previous else {}
    sizes = plan["shards"]
    seeded = {}
    for shard, host in seeders(plan).items():
        seeded.setdefault(host, []).append(shard)
    empty = frozenset()
    source = 0
    for host, held in new.items():
        before = old.get(host, empty)
        source += sum(sizes[shard] for shard in seeded.get(host, ()) if shard in held and shard not in before)
    plan["transfer"].update(source_bytes=source, peer_bytes=fetch_bytes - source)


def peer_roles(plan):
    """{host: {"sources": {shard: peer it asks}, "downstream": [hosts that ask it]}} of a peer-assisted plan, else {}."""
    if not plan.get("transfer", {}).get("peer_assist"):
        return {}
    seeder = seeders(plan)
    roles = {host: {"sources": {}, "downstream": set()} for host in plan["nodes"]}
    for shard, hosts in ((shard, shard_nodes(plan, shard)) for shard in sorted(plan["shards"])):
        first = seeder[shard]
        for host in hosts:
            if host != first:
                roles[host]["sources"][shard] = first
                roles[first]["downstream"].add(host)
    return {host: {"sources": role["sources"], "downstream": sorted(role["downstream"])} for host, role in roles.items()}


def _counts(hosts, assignment, sizes):
    """{host: (shards, bytes)} over an assignment."""
    counts = {host: [0, 0] for host in hosts}
    for shard, shard_hosts in assignment.items():
        for host in shard_hosts:
            counts[host][0] += 1
            counts[host][1] += sizes[shard]
    return {host: tuple(count) for host, count in counts.items()}


def _stream_settings(dataset):
    allow_stream = dataset.get("allow_stream", False)
    if not isinstance(allow_stream, bool):
        raise ShardPlanError(f"dataset {dataset.get('name')!r}: allow_stream is {allow_stream!r}; it must be true or false")
    fraction = dataset.get("stream_cache_fraction", 0)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ShardPlanError(f"dataset {dataset.get('name')!r}: stream_cache_fraction is {fraction!r}; it must be a fraction "
                             "from 0 (stream everything) to 1 (keep a local copy of as much as fits)")
    return allow_stream, float(fraction)


def _dataset_settings(dataset):
    if not isinstance(dataset, dict):
        raise ShardPlanError(f"dataset settings must be a mapping with at least 'name', got {dataset!r}")
    name = dataset.get("name")
    if not isinstance(name, str) or not name:
        raise ShardPlanError(f"dataset 'name' must be a non-empty string, got {name!r}")
    mode = dataset.get("mode", "auto")
    if mode not in MODES:
        raise ShardPlanError(f"dataset {name!r}: mode is {mode!r}; choose one of {', '.join(MODES)}")
    replicas = dataset.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ShardPlanError(f"dataset {name!r}: replicas is {replicas!r}; it must be a whole number, 1 or more")
    headroom = dataset.get("headroom", 0.05)
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
        raise ShardPlanError(f"dataset {name!r}: headroom is {headroom!r}; it must be a fraction from 0 up to (not including) 1, e.g. 0.05")
    return name, mode, replicas, float(headroom)


def _shard_sizes(dataset, shards):
    sizes = {}
    for shard in shards:
        shard_label = shard.get("name") if isinstance(shard, dict) else shard
        if not isinstance(shard, dict) or not isinstance(shard.get("name"), str) or not shard["name"]:
            raise ShardPlanError(f"dataset {dataset!r}: shard entry {shard_label!r} must be a mapping with a 'name'")
        size = shard.get("size")
        if size is None:
            raise ShardPlanError(
                f"dataset {dataset!r}: shard {shard_label!r} has no known size: give an index with sizes "
                "(wids 'filesize') or probe the size of each URL before planning"
            )
        byte_count(size, f"dataset {dataset!r} shard {shard_label!r} size", "the shard's size in bytes")
        if shard_label in sizes:
            raise ShardPlanError(f"dataset {dataset!r}: shard {shard_label!r} is listed twice: shard names must be unique")
        sizes[shard_label] = size
    if not sizes:
        raise ShardPlanError(f"dataset {dataset!r} has no shards: check its source pattern")
    return sizes


def _holdings(plan):
    """{host: frozenset of shard names}; the hosts of a replicated plan share one set, which keeps diffs cheap."""
    if plan["mode"] == "replicate":
        every_shard = frozenset(plan["shards"])
        return {host: every_shard for host in plan["replicated_on"]}
    per_host = {host: [] for host in plan["nodes"]}
    stored = _stored(plan)
    for shard, hosts in plan["assignment"].items():
        if shard not in stored:
            continue
        for host in hosts:
            per_host[host].append(shard)
    return {host: frozenset(shards) for host, shards in per_host.items()}


def _check_previous(previous, dataset):
    required = ("plan_version", "dataset", "mode", "shards", "nodes", "assignment", "replicated_on")
    missing = [key for key in required if not isinstance(previous, dict) or key not in previous]
    if missing:
        raise ShardPlanError(f"previous plan for dataset {dataset!r} is not a shard_staging plan (missing {', '.join(missing)}): "
                             "delete it to plan from scratch")
    if previous["plan_version"] != PLAN_VERSION:
        raise ShardPlanError(f"previous plan for dataset {dataset!r} has plan_version {previous['plan_version']!r}, "
                             f"this planner writes {PLAN_VERSION}: delete it to plan from scratch")
    if previous["dataset"] != dataset:
        raise ShardPlanError(f"previous plan is for dataset {previous['dataset']!r}, not {dataset!r}: pass the plan of the same dataset")


def _add_changes(plan, previous):
    """Per node and in total: copies to fetch and copies to remove, compared with ``previous`` (nothing held without one)."""
    empty = frozenset()
    new = _holdings(plan)
    if previous is None:
        old, old_sizes = {}, {}
    else:
        old, old_sizes = _holdings(previous), previous["shards"]
    new_sizes = plan["shards"]
    diffs = {}
    fetched = {}
    totals = {"fetch_copies": 0, "fetch_bytes": 0, "remove_copies": 0, "remove_bytes": 0}
    for host in sorted(set(new) | set(old)):
        held_now, held_before = new.get(host, empty), old.get(host, empty)
        key = (id(held_now), id(held_before))
        if key not in diffs:
            fetch = held_now - held_before
            remove = held_before - held_now
            diffs[key] = (fetch, sum(new_sizes[s] for s in fetch), len(remove), sum(old_sizes[s] for s in remove))
        fetch, fetch_bytes, remove_count, remove_bytes = diffs[key]
        fetched[id(fetch)] = fetch
        change = {"fetch_shards": len(fetch), "fetch_bytes": fetch_bytes, "remove_shards": remove_count, "remove_bytes": remove_bytes}
        if host in plan["nodes"]:
            plan["nodes"][host].update(change)
        totals["fetch_copies"] += len(fetch)
        totals["fetch_bytes"] += fetch_bytes
        totals["remove_copies"] += remove_count
        totals["remove_bytes"] += remove_bytes
    totals["moved_shards"] = len(frozenset().union(*fetched.values()))
    totals["dropped_nodes"] = sorted(set(old) - set(new))
    plan["changes"] = totals


def _stored(plan):
    """The shards a plan stores on its nodes (in stream mode only the cached ones)."""
    return set(plan.get("cached") or []) if plan["mode"] == "stream" else plan["shards"]


def node_shards(plan, host):
    """Sorted names of the shards ``plan`` puts on ``host``'s disk."""
    if plan["mode"] == "replicate":
        return sorted(plan["shards"]) if host in plan["replicated_on"] else []
    stored = _stored(plan)
    return sorted(shard for shard, hosts in plan["assignment"].items() if host in hosts and shard in stored)


def node_streamed(plan, host):
    """Sorted names of the shards ``host`` reads from their source (stream mode), not from its disk."""
    if plan["mode"] != "stream":
        return []
    stored = _stored(plan)
    return sorted(shard for shard, hosts in plan["assignment"].items() if host in hosts and shard not in stored)


def host_shards(plan):
    """``node_shards`` for every node at once: {host: sorted names of the shards ``plan`` puts on its disk}.

    One pass over the assignment (O(shards x replicas + hosts)) instead of one per host. Every node of the plan is a key,
    with [] when it keeps nothing. The nodes of a replicated plan share one list object: do not change it in place.
    """
    if plan["mode"] == "replicate":
        every_shard = sorted(plan["shards"])
        lists = {host: [] for host in plan["nodes"]}
        lists.update((host, every_shard) for host in plan["replicated_on"])
        return lists
    return _by_host(plan, _stored(plan), True)


def host_streamed(plan):
    """``node_streamed`` for every node at once: {host: sorted names of the shards it reads from their source}."""
    if plan["mode"] != "stream":
        return {host: [] for host in plan["nodes"]}
    return _by_host(plan, _stored(plan), False)


def _by_host(plan, stored, keep_stored):
    """{host: sorted shard names} over the assignment, keeping the shards in ``stored`` (or, with ``keep_stored`` false,
    the others). Shards are visited in name order, so each host's list comes out sorted as it is built."""
    lists = {host: [] for host in plan["nodes"]}
    assignment = plan["assignment"]
    for shard in sorted(assignment):
        if (shard in stored) == keep_stored:
            for host in assignment[shard]:
                if host in lists:
                    lists[host].append(shard)
                else:
                    lists[host] = [shard]
    return lists


def shard_nodes(plan, shard):
    """Hosts that keep ``shard`` under ``plan`` (for a partitioned plan, the first is the one that fetches it from the source)."""
    if shard not in plan["shards"]:
        return []
    if plan["mode"] == "replicate":
        return list(plan["replicated_on"])
    return list(plan["assignment"][shard])


def node_changes(plan, previous, host):
    """What ``host`` must do to go from ``previous`` (may be None) to ``plan``: {"fetch": [...], "remove": [...]}."""
    now = set(node_shards(plan, host))
    before = set(node_shards(previous, host)) if previous else set()
    return {"fetch": sorted(now - before), "remove": sorted(before - now)}


def changes_by_node(plan, previous):
    """``node_changes`` for every host of either plan at once (one pass over the assignments instead of one per host)."""
    empty = frozenset()
    new = _holdings(plan)
    old = _holdings(previous) if previous else {}
    return {
        host: {"fetch": sorted(new.get(host, empty) - old.get(host, empty)), "remove": sorted(old.get(host, empty) - new.get(host, empty))}
        for host in sorted(set(new) | set(old))
    }


def summarize(plan):
    """One line for check mode: mode, size, spread over the nodes, and what changes."""
    nodes = plan["nodes"]
    changes = plan["changes"]
    used = [(info["bytes"] / info["capacity"] if info["capacity"] else 0.0, host) for host, info in nodes.items()]
    fullest_share, fullest = max(used) if used else (0.0, "-")
    copies = "on every node" if plan["mode"] == "replicate" else f"{plan['replicas']} cop{'y' if plan['replicas'] == 1 else 'ies'} per shard"
    if plan["mode"] == "stream":
        cached = plan.get("cached") or []
        copies = f"each node streams its share, {len(cached)} shard(s) cached locally"
    transfer = plan.get("transfer") or {}
    between = (f": {human_bytes(transfer['source_bytes'])} from the source, {human_bytes(transfer['peer_bytes'])} between peers"
               if transfer.get("peer_assist") and changes["fetch_bytes"] else "")
    return (
        f"dataset {plan['dataset']}: {plan['mode']} ({copies}), {plan['shard_count']} shards, {human_bytes(plan['total_bytes'])} "
        f"({human_bytes(plan['stored_bytes'])} stored) on {len(nodes)} node{'' if len(nodes) == 1 else 's'}, "
        f"fullest {fullest} at {fullest_share:.1%} of usable space; "
        f"fetch {changes['fetch_copies']} copies ({human_bytes(changes['fetch_bytes'])}{between}), "
        f"remove {changes['remove_copies']} copies ({human_bytes(changes['remove_bytes'])}); {plan['mode']} because "
        f"{plan.get('mode_reason') or 'an earlier plan chose it'}{balance_words(plan)}"
    )


def balance_words(plan):
    """The summary's balance part: max / average bytes per rank, where the ranks came from, and the capped nodes."""
    if plan.get("balance") is None:
        return ""
    nodes = plan["nodes"]
    origins = sorted({info.get("ranks_from", "default") for info in nodes.values()})
    capped = [f"{host} at {human_bytes(info['bytes'] + info['streamed_bytes'])} (fair {human_bytes(round(info['fair_bytes']))} "
              "by ranks, capped by its space)" for host, info in sorted(nodes.items()) if info.get("capped")]
    words = (f"; balance {plan['balance']:.3f} (max / average bytes per rank; {sum(info['ranks'] for info in nodes.values())} "
             f"ranks from {', '.join(origins)}; ranks split by {plan.get('rank_split_by', 'bytes')})")
    if capped:
        shown = ", ".join(capped[:5]) + (f" and {len(capped) - 5} more" if len(capped) > 5 else "")
        words += f"; capped: {shown}"
    return words
