# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the shards of a partitioned (or streamed) dataset go: shares that follow compute, held to within one shard,
and stable from one run to the next.

Shares. A node's fair share is proportional to its training ranks (its GPUs), in bytes: ``fair_shares`` fills the nodes
like water, so a node whose usable space is below its share is capped at that space and the rest is spread over the
others by the same rule. Free space is a limit, never a reason to take more.

Preference. Each shard ranks the nodes by a consistent-hashing ring: every node has ``VNODES_PER_RANK`` points per rank
at fixed hashes of its name, and a shard walks clockwise from the hash of its own name. The walk is cheap (a bisect and
a few steps, pure Python: no (shard, node) matrix) and, like rendezvous hashing, adding or removing a node only inserts or
deletes it in the shards' walks; the others keep their order.

Placement (``place_shards``), in five steps, each deterministic and independent of the order of hosts and shards:

1. keep: each copy the previous plan had on a node stays while the node holds at most its share plus one shard;
2. fill: the copies still to place go, nearest first over all shards (a heap on the walk distance), to the first node of
   their walk that has room for the whole shard within its share;
3. round up: what fragments left goes the same way to a node still below its share (so ending at most one shard above);
4. last resort: a copy that found no place within the shares goes where it fits in the node's usable space;
5. even out: a node a whole shard below its share takes shards from nodes above theirs, until no such move is left.

Steps 1 and 5 make a re-run with the same inputs a fixed point (every copy is kept, no move is left), and make a change
move little: a node added takes its share from the nodes above theirs (about 1/N of the copies), a node removed gives
its copies to nodes with room, and an upgrade from an older plan keeps every copy the new shares allow. Consistent
hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, 2018) bounds each node by (1+eps) times the average and
pays O(1/eps^2) moves per change; keeping the previous plan is what lets the bound be one shard at no such cost.
``benchmarks/staging/bench_plan.py`` measures balance, churn and time.

``split_ranks`` then divides a node's shards among its ranks: equal samples where the index counts them, else equal
bytes, within one shard.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError, byte_count

# Ring points per training rank: 8 ranks x 1,000 nodes make 128,000 points (0.2 s to hash).
VNODES_PER_RANK = 16
_MASK64 = (1 << 64) - 1
_MIX1 = 0xFF51AFD7ED558CCD
_MIX2 = 0xC4CEB9FE1A85EC53


# ---------------------------------------------------------------------------------------------------------------
# Capacity and mode


def node_capacity(host, info, headroom):
    """Bytes ``host`` can give this dataset: free + what the dataset's directory already takes, less ``headroom`` of the
    filesystem size.

    ``info`` holds ``free_bytes``, optional ``ours_bytes`` (all that dest takes up, as shard_space measures it),
    optional ``held_bytes`` (the journaled shards' bytes, used only where ``ours_bytes`` is missing) and optional
    ``total_bytes`` (the filesystem size; without it the headroom is taken from the available bytes).

    free + ours is what an interrupted staging run cannot change: each block a partial file or a shard not yet in the
    journal takes from free is in ours. So a killed run leaves every node's capacity, and the next plan, as they were.
    """
    available = node_room(host, info)
    total = info.get("total_bytes")
    if total is not None:
        total = byte_count(total, f"node {host!r} total_bytes", "the size of the filesystem holding dest")
    reserve = math.ceil(headroom * (total if total else available))
    return max(0, available - reserve)


def node_room(host, info):
    """free_bytes + ours_bytes of one node's report (free_bytes + held_bytes where it has no ours_bytes), checked."""
    if not isinstance(info, dict):
        raise ShardPlanError(f"node {host!r}: capacity info must be a mapping with 'free_bytes', got {info!r}")
    free = byte_count(info.get("free_bytes"), f"node {host!r} free_bytes", "the free bytes of the filesystem holding dest")
    if info.get("ours_bytes") is not None:
        return free + byte_count(info["ours_bytes"], f"node {host!r} ours_bytes", "the bytes dest takes up on the node")
    return free + byte_count(info.get("held_bytes", 0), f"node {host!r} held_bytes", "the bytes of this dataset already on the node")


def node_ranks(host, info):
    """The training ranks of one node's report (``ranks``, default 1), checked: a whole number, 1 or more."""
    ranks = info.get("ranks", 1)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ShardPlanError(f"node {host!r}: shard_staging_ranks_per_node is {ranks!r}; it must be a whole number of "
                             "training ranks (GPUs) on the node, 1 or more")
    return ranks


def choose_mode(dataset, mode, total_bytes, capacities, replicas, allow_stream=False):
    """Return "replicate", "partition" or "stream" for ``mode`` (auto | replicate | partition | stream), or raise saying
    what is missing. auto streams only a dataset that fits neither on one node nor across them, and only with
    ``allow_stream``."""
    if mode == "stream":
        return "stream"
    if replicas > len(capacities):
        raise ShardPlanError(
            f"dataset {dataset!r}: replicas is {replicas} but only {len(capacities)} node(s) are targeted: "
            "lower replicas or target more nodes"
        )
    too_small = {host: capacity for host, capacity in sorted(capacities.items()) if capacity < total_bytes}
    if mode == "replicate" or (mode == "auto" and not too_small):
        if too_small:
            shortfalls = ", ".join(f"{host} short by {human_bytes(total_bytes - capacity)} ({total_bytes - capacity} bytes)"
                                   for host, capacity in too_small.items())
            raise ShardPlanError(
                f"dataset {dataset!r} ({human_bytes(total_bytes)}) cannot be replicated: {shortfalls}. "
                "Free space under dest, lower headroom, or set mode to partition / auto"
            )
        return "replicate"
    needed = replicas * total_bytes
    usable = sum(min(capacity, total_bytes) for capacity in capacities.values())
    if needed > usable and mode == "auto" and allow_stream:
        return "stream"
    if needed > usable:
        raise ShardPlanError(
            f"dataset {dataset!r} does not fit on the nodes: {replicas} replica(s) of {human_bytes(total_bytes)} need {human_bytes(needed)} "
            f"but the {len(capacities)} node(s) have {human_bytes(usable)} usable; {human_bytes(needed - usable)} ({needed - usable} bytes) "
            "are missing. Stream it from distributed storage instead (e.g. WebDataset reading straight from the HTTP / AIStore "
            "source; allow_stream: true makes mode auto plan that), or add disks or nodes, or lower replicas or headroom"
        )
    return "partition"


def mode_reason(mode, requested, total_bytes, capacities, replicas):
    """Why the plan has its mode, in words for the plan and the summary."""
    if requested != "auto":
        return f"mode {requested} requested"
    smallest = min(capacities.values()) if capacities else 0
    usable = sum(capacities.values())
    if mode == "replicate":
        return f"{human_bytes(total_bytes)} fits on every node (smallest has {human_bytes(smallest)} usable)"
    if mode == "partition":
        return (f"{human_bytes(total_bytes)} does not fit on every node (smallest has {human_bytes(smallest)} usable) but {replicas} "
                f"cop{'y' if replicas == 1 else 'ies'} fit across the {len(capacities)} nodes ({human_bytes(usable)} usable)")
    return (f"{human_bytes(total_bytes)} fits neither on one node nor {replicas} cop{'y' if replicas == 1 else 'ies'} across the "
            f"{len(capacities)} nodes ({human_bytes(usable)} usable), and allow_stream is true")


def stream_cache(assignment, sizes, capacities, fraction):
    """Shards each node keeps a local copy of in stream mode: of the shards it streams, in name order, as many as fit
    in ``fraction`` of their bytes and in its usable space."""
    by_host = {}
    for shard in sorted(assignment):
        by_host.setdefault(assignment[shard][0], []).append(shard)
    cached = set()
    for host, shards in by_host.items():
        budget = min(int(fraction * sum(sizes[shard] for shard in shards)), capacities.get(host, 0))
        for shard in shards:
            if sizes[shard] > budget:
                break
            budget -= sizes[shard]
            cached.add(shard)
    return cached


# ---------------------------------------------------------------------------------------------------------------
# Shares


def fair_shares(total_bytes, ranks, limits, copies):
    """{host: bytes it should hold}: ``copies`` x ``total_bytes`` in proportion to ``ranks``, no host above its
    ``limits`` (usable bytes; also at most one copy of everything). Water-filling: capped hosts get their limit and the
    rest is shared again among the others. Returns (shares, the set of capped hosts)."""
    limit = {host: min(limits[host], total_bytes) for host in ranks}
    shares, capped = {}, set()
    open_hosts = set(ranks)
    need = copies * total_bytes
    while open_hosts:
        per_rank = need / sum(ranks[host] for host in open_hosts)
        newly_capped = sorted(host for host in open_hosts if limit[host] < per_rank * ranks[host])
        if not newly_capped:
            shares.update((host, per_rank * ranks[host]) for host in open_hosts)
            break
        for host in newly_capped:
            shares[host] = float(limit[host])
            need -= limit[host]
            capped.add(host)
            open_hosts.discard(host)
    return shares, capped


# ---------------------------------------------------------------------------------------------------------------
# Hashing


def _hash64(domain, text):
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, person=domain).digest()
    return int.from_bytes(digest, "little")


def shard_hash(name):
    """Stable 64-bit hash of a shard name (never Python's salted ``hash()``)."""
    return _hash64(b"dlinfra-shard", name)


def node_hash(name):
    """Stable 64-bit hash of a node name."""
    return _hash64(b"dlinfra-node", name)


def pair_key(shard_value, node_value):
    """A 64-bit value mixed from a shard's and a node's hash (murmur3's finaliser): the order in which a node over its
    share keeps the copies of the previous plan."""
    mixed = shard_value ^ node_value
    mixed ^= mixed >> 33
    mixed = (mixed * _MIX1) & _MASK64
    mixed ^= mixed >> 33
    mixed = (mixed * _MIX2) & _MASK64
    return mixed ^ (mixed >> 33)


class Ring(object):
    """The consistent-hashing ring: ``VNODES_PER_RANK`` points per rank of each host."""

    def __init__(self, ranks):
        points = sorted((_hash64(b"dlinfra-vnode", f"{host}#{index}"), host)
                        for host, count in ranks.items() for index in range(count * VNODES_PER_RANK))
        self.positions = [position for position, _host in points]
        self.owners = [host for _position, host in points]
        self.points_of = {}
        for point, host in enumerate(self.owners):
            self.points_of.setdefault(host, []).append(point)

    def start(self, value):
        """The first point at or after ``value`` (clockwise, wrapping)."""
        return bisect.bisect_left(self.positions, value) % len(self.positions)

    def distance(self, value, point):
        return (self.positions[point] - value) & _MASK64


# ---------------------------------------------------------------------------------------------------------------
# Placement


def place_shards(sizes, ranks, limits, copies, previous=None):
    """Place ``copies`` copies of each shard on distinct hosts (see the module's description).

    ``sizes``: {shard: bytes}; ``ranks``: {host: training ranks}; ``limits``: {host: usable bytes}; ``previous``:
    {shard: [hosts]} of the plan before (may name shards and hosts that are gone). Returns (assignment {shard: [hosts]},
    shares {host: fair bytes}, capped hosts). Raises ShardPlanError when a copy fits nowhere.
    """
    hosts = sorted(host for host in ranks if limits.get(host, 0) > 0)
    if copies > len(hosts):
        raise ShardPlanError(f"replicas is {copies} but only {len(hosts)} node(s) have usable space: lower replicas or free space")
    placer = _Placer(sizes, {host: ranks[host] for host in hosts}, limits, copies)
    placer.keep(previous or {})
    placer.walk(lambda host, size: placer.load[host] + size <= placer.shares[host])
    placer.walk(lambda host, size: placer.load[host] < placer.shares[host] and placer.load[host] + size <= placer.limit[host])
    placer.walk(lambda host, size: placer.load[host] + size <= placer.limit[host])
    placer.even_out()
    placer.keep_order(previous or {})
    for name in sorted(placer.missing()):
        raise ShardPlanError(
            f"shard {name!r} ({human_bytes(sizes[name])}) cannot get {copies} copies: only {len(placer.assignment[name])} node(s) "
            "still have room for it. Free space on the nodes, lower replicas or headroom, or stream the dataset instead")
    return placer.assignment, placer.shares, placer.capped


class _Placer(object):
    """The state of one placement: each host's load against its share, each shard's hosts."""

    def __init__(self, sizes, ranks, limits, copies):
        self.sizes = sizes
        self.copies = copies
        total = sum(sizes.values())
        self.limit = {host: min(limits[host], total) for host in ranks}
        self.shares, self.capped = fair_shares(total, ranks, self.limit, copies)
        self.load = dict.fromkeys(ranks, 0)
        self.assignment = {name: [] for name in sorted(sizes)}
        self.values = {name: shard_hash(name) for name in self.assignment}
        self.ring = Ring(ranks)
        # A shard may go one shard above its node's share in step 1: the largest shard is that margin for every node.
        self.margin = max(sizes.values(), default=0)

    def missing(self):
        return [name for name, where in self.assignment.items() if len(where) < self.copies]

    def _add(self, name, host):
        self.assignment[name].append(host)
        self.load[host] += self.sizes[name]

    def keep(self, previous):
        """Step 1: the previous plan's copies, each node keeping them in its own pair_key order while within bounds."""
        node_values = {host: node_hash(host) for host in self.load}
        # First copies before second ones: a node over its share sheds a shard's later copy, so that two nodes do not
        # both shed the same shard (whose copies would then have to find two new homes).
        kept = sorted((copy, pair_key(self.values[name], node_values[host]), name, host)
                      for name, where in previous.items() if name in self.values
                      for copy, host in enumerate(dict.fromkeys(where)) if host in node_values)
        for _copy, _key, name, host in kept:
            size = self.sizes[name]
            bound = min(self.shares[host] + self.margin, self.limit[host])
            if self.load[host] + size <= bound and len(self.assignment[name]) < self.copies:
                self._add(name, host)

    def keep_order(self, previous):
        """Each shard's hosts in the previous plan's order, new ones after them: the first host fetches from the source."""
        for name, where in self.assignment.items():
            before = previous.get(name)
            if before and len(where) > 1:
                rank = {host: position for position, host in enumerate(before)}
                where.sort(key=lambda host: rank.get(host, len(before)))

    def walk(self, accepts):
        """Steps 2, 3 and 4: each copy still to place walks the ring; over all shards, the nearest (shard, point) pair
        is tried first, and the copy goes to the first host of its walk that ``accepts(host, size)``. A host that
        would not accept even the smallest shard is closed: its points are skipped from then on."""
        ring = self.ring
        owners = ring.owners
        alive = _AlivePoints(len(owners))
        smallest = min(self.sizes.values(), default=0)
        heap = []
        for name in self.missing():
            value = self.values[name]
            point = ring.start(value)
            heap.append((ring.distance(value, point), name, point, point))
        heapq.heapify(heap)
        tried = {}
        closed = set()
        while heap:
            _distance, name, point, first = heapq.heappop(heap)
            where = self.assignment[name]
            seen = tried.setdefault(name, set(where))
            host = owners[point]
            if host not in seen and host not in closed:
                seen.add(host)
                if accepts(host, self.sizes[name]):
                    self._add(name, host)
                    if len(where) >= self.copies:
                        continue
                if not accepts(host, smallest):
                    closed.add(host)
                    alive.close(ring.points_of[host])
            point = alive.after(point, first, lambda candidate: owners[candidate] in seen)
            if point is not None:
                heapq.heappush(heap, (ring.distance(self.values[name], point), name, point, first))

    def even_out(self):
        """Step 5: while a host is a whole margin (the largest shard) below its share and another host is above its
        own, move a shard from the second to the first. A giver stays above its share less the margin, so it does not
        become a taker and start a chain of moves that no change asked for. Each move lowers the bytes above the
        shares, so this ends; candidates in shard-hash order, takers in name order."""
        margin = self.margin
        while True:
            over = {host for host, load in self.load.items() if load > self.shares[host]}
            takers = sorted(host for host in self.load if self.shares[host] - self.load[host] >= margin)
            if not over or not takers:
                return
            candidates = sorted((self.values[name], name) for name, where in self.assignment.items()
                                if any(host in over for host in where))
            moved = False
            for taker in takers:
                for _value, name in candidates:
                    size, where = self.sizes[name], self.assignment[name]
                    if taker in where or self.load[taker] + size > self.shares[taker]:
                        continue
                    givers = [host for host in where if self.load[host] - size > self.shares[host] - margin]
                    if not givers:
                        continue
                    giver = max(givers, key=lambda host: (self.load[host] - self.shares[host], host))
                    if self.load[giver] <= self.shares[giver]:
                        continue
                    where[where.index(giver)] = taker
                    self.load[giver] -= size
                    self.load[taker] += size
                    moved = True
                    if self.shares[taker] - self.load[taker] < margin:
                        break
            if not moved:
                return


class _AlivePoints(object):
    """The ring's points that are still open, with a jump to the next open one (union-find with path halving), so
    that a walk past closed hosts costs no step per closed point."""

    def __init__(self, count):
        self.count = count
        # next_open[i] == i: point i is open; else a point at or before the next open one after i (count: wrap).
        self.next_open = list(range(count + 1))

    def close(self, points):
        for point in points:
            self.next_open[point] = point + 1

    def _find(self, point):
        next_open = self.next_open
        while next_open[point] != point:
            next_open[point] = next_open[next_open[point]]
            point = next_open[point]
        return point

    def after(self, point, first, skip):
        """The next open point after ``point`` going clockwise that ``skip`` does not reject, or None once the walk
        would pass ``first`` (where it began) again."""
        wrapped = point < first
        while True:
            point = self._find(point + 1)
            if point == self.count:
                if wrapped:
                    return None
                wrapped = True
                point = self._find(0)
                if point == self.count:
                    return None
            if wrapped and point >= first:
                return None
            if not skip(point):
                return point


# ---------------------------------------------------------------------------------------------------------------
# Ranks within a node


def split_ranks(weights, ranks):
    """{shard: rank} for one node's shards, ``weights`` {shard: samples or bytes}: the heaviest shard first onto the
    lightest rank (ties: the lower rank; equal weights in name order), so that any two ranks differ by at most the
    heaviest shard."""
    loads = [(0, rank) for rank in range(ranks)]
    ranked = {}
    for name in sorted(weights, key=lambda shard: (-weights[shard], shard)):
        load, rank = heapq.heappop(loads)
        ranked[name] = rank
        heapq.heappush(loads, (load + weights[name], rank))
    return ranked
