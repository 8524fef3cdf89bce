# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side planning for the shard_staging role: which node keeps which shard of a sharded dataset.

Pure Python (stdlib only; numpy is used when importable, never required). The pieces, in the order the role uses them:

- ``expand_source`` turns brace patterns (``http://store/yt8m/chunks-{000000..099999}.tar``) into shard URLs;
- ``parse_index`` reads a ``SHA256SUMS`` file or a ``wids-shard-index-v1`` JSON index (sizes, checksums);
- ``make_plan`` picks the mode (replicate / partition), places the shards and compares with the previous plan.

Placement is weighted rendezvous (HRW) hashing. A shard's score on a node is ``-w / ln(u)``, with ``w`` the node's
weight (its usable bytes, rounded to 8 significant bits so that a few MB of log files do not move shards) and ``u``
in (0, 1) taken from a 64-bit mix of two blake2b hashes, one of the shard name and one of the node name. A shard
goes to the ``replicas`` best-scoring nodes that still have room; shards are placed in name order, so a full node
is skipped in the same way on every run. Placement depends only on shard names, sizes, node names and capacities.

Why exact HRW with an integer mixer: HRW costs one score per (shard, node), 1e8 for 100,000 shards on 1,000
nodes. A blake2b per pair would take minutes, so each name is hashed once (101,000 calls, 0.1 s) and a pair
score is a few integer operations (murmur3's 64-bit finaliser over the XOR of the two hashes), which numpy
evaluates for a block of shards x all nodes at once. numpy's ``log`` may differ from ``math.log`` in the last bits,
so the numpy path only proposes each shard's ranking; where two neighbouring scores are closer than 1e-9
(relative) the shard is ranked again in pure Python, which makes both paths return identical plans.
A sublinear scheme (hierarchical HRW, virtual-node rings) was rejected: it loses either exact weights or the
"moves go only to the new node" property.

Measured on the 2-core development machine (AMD EPYC, Python 3.11, numpy 2.4), ``make_plan`` including hashing:
100,000 shards x 8 nodes: 1.0 s pure Python, 0.6 s numpy; 100,000 shards x 1,000 nodes x 2 replicas: 1.5 s numpy,
64 s pure Python (the fallback stays correct for any size, only slower; both paths gave the same plan).
Balance, 100,000 shards on 8 nodes: every node within -1.1 % / +0.9 % of its weighted share (equal and 2:1 weights).
With several replicas and unequal weights, small nodes get somewhat more than their weighted share (a node cannot be
chosen twice for a shard); the capacity check keeps every node within its usable bytes.
See ``benchmarks/staging/bench_plan.py``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re

try:
    import numpy
except ImportError:
    numpy = None

MODES = ("auto", "replicate", "partition", "stream")
SCHEMES = ("http", "https", "file")
PLAN_VERSION = 1
WIDS_KIND = "wids-shard-index-v1"
# Shards per dataset: a pattern that names more is refused before anything is expanded. The planner and the engine are
# measured at 1,000,000 (benchmarks/staging); 10,000,000 took 21 s and 1.9 GB just to expand on the controller.
MAX_SHARDS = 2_000_000

_MASK64 = (1 << 64) - 1
_MIX1 = 0xFF51AFD7ED558CCD
_MIX2 = 0xC4CEB9FE1A85EC53
_UNIT = 2.0 ** -52
_WEIGHT_BITS = 8
# numpy's log is within a few ulps of math.log; scores closer than this are re-ranked in pure Python.
_RELATIVE_TOLERANCE = 1e-9
_NUMPY_BLOCK_CELLS = 1 << 17
_EXTRA_CANDIDATES = 2

_RANGE = re.compile(r"^(\d+)\.\.(\d+)\Z")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}\Z")
_SHA256SUMS_LINE = re.compile(r"^(\\?)([0-9a-fA-F]{64}) [ *](.+)$")
_URL_PREFIXES = tuple(scheme + "://" for scheme in SCHEMES)


class ShardPlanError(Exception):
    """An input that cannot be planned; the message names the input and says what to do."""


# ---------------------------------------------------------------------------------------------------------------
# Source patterns


def expand_source(source):
    """Expand ``source`` (brace patterns joined by ``::``) into the list of shard URLs, in pattern order."""
    if not isinstance(source, str) or not source.strip():
        raise ShardPlanError(f"source {source!r} is empty: give a URL pattern such as http://store/ds/shard-{{000000..000099}}.tar")
    urls = []
    by_name = {}
    for pattern in _split_patterns(source):
        expanded = _expand_pattern(pattern)
        for url in expanded:
            if not url.startswith(_URL_PREFIXES):
                _raise_bad_scheme(url, pattern)
            name = shard_name(url)
            if name in by_name:
                raise ShardPlanError(
                    f"shard name {name!r} appears twice, from {by_name[name]!r} and {url!r} (pattern {pattern!r}): "
                    "shards are stored by file name, so every URL must end in a distinct file name"
                )
            by_name[name] = url
        urls.extend(expanded)
        if len(urls) > MAX_SHARDS:
            raise ShardPlanError(f"source {source!r} expands to more than {MAX_SHARDS} URLs: check the brace ranges")
    return urls


def shard_name(url):
    """The file name a shard is stored under: the last path segment of its URL (query and fragment dropped)."""
    rest = url.split("://", 1)[1] if "://" in url else url
    path = rest.split("#", 1)[0].split("?", 1)[0]
    name = path.rsplit("/", 1)[-1] if "/" in path else ""
    if name in ("", ".", ".."):
        raise ShardPlanError(f"URL {url!r} does not end in a file name: shard URLs must look like http://store/ds/shard-000000.tar")
    return name


def _split_patterns(source):
    """Split on ``::`` outside square brackets, so that IPv6 hosts such as ``http://[::1]/`` stay whole."""
    patterns = []
    depth = 0
    start = 0
    index = 0
    while index < len(source):
        char = source[index]
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif char == ":" and depth == 0 and source.startswith("::", index):
            patterns.append(source[start:index])
            start = index + 2
            index += 1
        index += 1
    patterns.append(source[start:])
    stripped = [pattern.strip() for pattern in patterns]
    for position, pattern in enumerate(stripped, 1):
        if not pattern:
            raise ShardPlanError(f"source {source!r} has an empty pattern (number {position}): remove the extra '::'")
        if any(char.isspace() for char in pattern):
            raise ShardPlanError(f"pattern {pattern!r} contains whitespace: percent-encode it (%20) or remove it")
    return stripped


def _expand_pattern(pattern):
    parts = _parse_groups(pattern)
    count = 1
    for part in parts:
        count *= len(part)
    if count > MAX_SHARDS:
        raise ShardPlanError(f"pattern {pattern!r} expands to {count} URLs, more than {MAX_SHARDS}: check the brace ranges")
    if len(parts) == 1:
        return list(parts[0])
    return ["".join(combination) for combination in itertools.product(*parts)]


def _parse_groups(pattern):
    """Cut a pattern into alternatives: a literal is one choice, a brace group its list or range."""
    parts = []
    literal_start = 0
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "}":
            raise ShardPlanError(f"pattern {pattern!r} has a '}}' without a matching '{{' at position {index}")
        if char == "{":
            close = pattern.find("}", index + 1)
            nested = pattern.find("{", index + 1)
            if close < 0:
                raise ShardPlanError(f"pattern {pattern!r} has a '{{' without a matching '}}' at position {index}")
            if 0 <= nested < close:
                raise ShardPlanError(f"pattern {pattern!r} nests braces at position {nested}: write one flat group per position")
            if index > literal_start:
                parts.append([pattern[literal_start:index]])
            parts.append(_group_values(pattern, pattern[index + 1:close]))
            literal_start = index = close + 1
            continue
        index += 1
    if literal_start < len(pattern):
        parts.append([pattern[literal_start:]])
    return parts


def _group_values(pattern, body):
    group = "{" + body + "}"
    if "," in body:
        return body.split(",")
    if ".." not in body:
        raise ShardPlanError(f"brace group {group!r} in pattern {pattern!r} is neither a list {{a,b}} nor a range {{000..099}}")
    match = _RANGE.match(body)
    if not match:
        raise ShardPlanError(
            f"bad range {group!r} in pattern {pattern!r}: a range is {{first..last}} with non-negative integers, e.g. {{000000..099999}}"
        )
    first_text, last_text = match.groups()
    first, last = int(first_text), int(last_text)
    if first > last:
        raise ShardPlanError(f"range {group!r} in pattern {pattern!r} is reversed: write {{{last_text}..{first_text}}}")
    if last - first >= MAX_SHARDS:
        raise ShardPlanError(f"range {group!r} in pattern {pattern!r} has more than {MAX_SHARDS} values: check its endpoints")
    padded = (len(first_text) > 1 and first_text[0] == "0") or (len(last_text) > 1 and last_text[0] == "0")
    width = max(len(first_text), len(last_text)) if padded else 0
    return [str(number).zfill(width) for number in range(first, last + 1)]


def _raise_bad_scheme(url, pattern):
    scheme = url.split("://", 1)[0] if "://" in url else None
    where = f"URL {url!r} (pattern {pattern!r})"
    if scheme is None:
        raise ShardPlanError(f"{where} has no scheme: write it as http://, https:// or file:// followed by the path")
    raise ShardPlanError(f"{where} has the unknown scheme {scheme!r}: use one of {', '.join(s + '://' for s in SCHEMES)}")


# ---------------------------------------------------------------------------------------------------------------
# Shard indexes


def parse_index(text, origin="index"):
    """Read a shard index: a SHA256SUMS file or a wids-shard-index-v1 JSON document (detected from the content).

    Returns ``{shard name: {"size": int or None, "sha256": lower-case hex or None}}``; ``origin`` names the file in errors.
    """
    if not isinstance(text, str) or not text.strip():
        raise ShardPlanError(f"{origin} is empty: give a SHA256SUMS file or a {WIDS_KIND} JSON index")
    if text.lstrip().startswith(("{", "[")):
        return _parse_wids(text, origin)
    return _parse_sha256sums(text, origin)


def _parse_sha256sums(text, origin):
    entries = {}
    first_line = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _SHA256SUMS_LINE.match(line)
        if not match:
            shown = line if len(line) <= 80 else line[:77] + "..."
            raise ShardPlanError(
                f"{origin} line {number}: expected '<64 hex digits>  <file name>' as sha256sum writes it, got {shown!r}"
            )
        escaped, digest, path = match.groups()
        if escaped:
            path = path.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\")
        name = path.rsplit("/", 1)[-1]
        if name in ("", ".", ".."):
            raise ShardPlanError(f"{origin} line {number}: {path!r} is not a file name")
        if name in entries:
            raise ShardPlanError(f"{origin} line {number}: shard {name!r} is listed again (first on line {first_line[name]}): keep one line per shard")
        first_line[name] = number
        entries[name] = {"size": None, "sha256": digest.lower()}
    return entries


def _parse_wids(text, origin):
    try:
        document = json.loads(text)
    except ValueError as error:
        line = getattr(error, "lineno", "?")
        column = getattr(error, "colno", "?")
        reason = getattr(error, "msg", str(error))
        raise ShardPlanError(f"{origin} line {line} column {column}: invalid JSON ({reason})") from None
    if not isinstance(document, dict):
        raise ShardPlanError(f"{origin}: a {WIDS_KIND} index is a JSON object with a 'shardlist', not a {type(document).__name__}")
    kind = document.get("__kind__")
    if kind is not None and kind != WIDS_KIND:
        raise ShardPlanError(f"{origin}: '__kind__' is {kind!r}; only {WIDS_KIND!r} indexes are understood")
    if document.get("wids_version") != 1:
        raise ShardPlanError(f"{origin}: 'wids_version' is {document.get('wids_version')!r}, expected 1 ({WIDS_KIND})")
    entries = {}
    locations = {}
    _collect_wids_shards(document, origin, "", entries, locations)
    if not entries:
        raise ShardPlanError(f"{origin}: the index lists no shards (empty 'shardlist')")
    return entries


def _collect_wids_shards(document, origin, where, entries, locations):
    shardlist = document.get("shardlist", [])
    if not isinstance(shardlist, list):
        raise ShardPlanError(f"{origin}: '{where}shardlist' must be a list of {{\"url\": ..., \"nsamples\": ...}} objects")
    for position, shard in enumerate(shardlist):
        location = f"{where}shardlist[{position}]"
        name, info = _wids_entry(shard, origin, location)
        if name in entries:
            raise ShardPlanError(f"{origin}: {location} repeats shard {name!r} (first at {locations[name]}): keep one entry per shard")
        entries[name] = info
        locations[name] = location
    datasets = document.get("datasets", [])
    if not isinstance(datasets, list):
        raise ShardPlanError(f"{origin}: '{where}datasets' must be a list of sub-dataset objects")
    for position, component in enumerate(datasets):
        component_where = f"{where}datasets[{position}]."
        if not isinstance(component, dict) or "source_url" in component:
            raise ShardPlanError(
                f"{origin}: {component_where[:-1]} refers to another index file; list its shards inline or give that index directly"
            )
        _collect_wids_shards(component, origin, component_where, entries, locations)


def _wids_entry(shard, origin, location):
    if not isinstance(shard, dict) or not isinstance(shard.get("url"), str) or not shard["url"]:
        raise ShardPlanError(f"{origin}: {location} must be an object with a 'url' string")
    url = shard["url"]
    name = url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1]
    if name in ("", ".", ".."):
        raise ShardPlanError(f"{origin}: {location} url {url!r} does not end in a file name")
    size = shard.get("filesize")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ShardPlanError(f"{origin}: {location} ({name}) has 'filesize' {size!r}; it must be a whole number of bytes")
    digest = shard.get("sha256")
    if digest is not None and (not isinstance(digest, str) or not _SHA256.match(digest)):
        raise ShardPlanError(f"{origin}: {location} ({name}) has 'sha256' {digest!r}; it must be 64 hex digits")
    return name, {"size": size, "sha256": digest.lower() if digest else None}


def shard_records(urls, index=None):
    """Join URLs with an index from ``parse_index``: ``[{"name", "url", "size", "sha256"}]`` (size/sha256 None if unknown)."""
    index = index or {}
    records = []
    for url in urls:
        name = shard_name(url)
        known = index.get(name, {})
        records.append({"name": name, "url": url, "size": known.get("size"), "sha256": known.get("sha256")})
    return records


# ---------------------------------------------------------------------------------------------------------------
# Capacity and mode


def node_capacity(host, info, headroom):
    """Bytes ``host`` can give this dataset: free + what the dataset's directory already takes, less ``headroom`` of the
    filesystem size.

    ``info`` holds ``free_bytes``, optional ``ours_bytes`` (all that dest takes up, as shard_space measures it),
    optional ``held_bytes`` (the journaled shards' bytes, used only where ``ours_bytes`` is missing) and optional
    ``total_bytes`` (the filesystem size; without it the headroom is taken from the available bytes).

    free + ours is what an interrupted staging run cannot change: each block a partial file or a shard not yet in the
    journal takes from free is in ours. free + held was not (those blocks were in neither), so a node's weight fell
    with how far a killed run had got, and the re-run's plan moved shards.
    """
    available = node_room(host, info)
    total = info.get("total_bytes")
    if total is not None:
        total = _byte_count(total, f"node {host!r} total_bytes", "the size of the filesystem holding dest")
    reserve = math.ceil(headroom * (total if total else available))
    return max(0, available - reserve)


def node_room(host, info):
    """free_bytes + ours_bytes of one node's report (free_bytes + held_bytes where it has no ours_bytes), checked."""
    if not isinstance(info, dict):
        raise ShardPlanError(f"node {host!r}: capacity info must be a mapping with 'free_bytes', got {info!r}")
    free = _byte_count(info.get("free_bytes"), f"node {host!r} free_bytes", "the free bytes of the filesystem holding dest")
    if info.get("ours_bytes") is not None:
        return free + _byte_count(info["ours_bytes"], f"node {host!r} ours_bytes", "the bytes dest takes up on the node")
    return free + _byte_count(info.get("held_bytes", 0), f"node {host!r} held_bytes", "the bytes of this dataset already on the node")


def node_weight(capacity):
    """The HRW weight of a node: its capacity rounded down to 8 significant bits (0.4 % steps)."""
    if capacity <= 0:
        return 0.0
    shift = max(0, capacity.bit_length() - _WEIGHT_BITS)
    return float((capacity >> shift) << shift)


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
            shortfalls = ", ".join(f"{host} short by {_human(total_bytes - capacity)} ({total_bytes - capacity} bytes)"
                                   for host, capacity in too_small.items())
            raise ShardPlanError(
                f"dataset {dataset!r} ({_human(total_bytes)}) cannot be replicated: {shortfalls}. "
                "Free space under dest, lower headroom, or set mode to partition / auto"
            )
        return "replicate"
    needed = replicas * total_bytes
    usable = sum(capacities.values())
    if needed > usable and mode == "auto" and allow_stream:
        return "stream"
    if needed > usable:
        raise ShardPlanError(
            f"dataset {dataset!r} does not fit on the nodes: {replicas} replica(s) of {_human(total_bytes)} need {_human(needed)} "
            f"but the {len(capacities)} node(s) have {_human(usable)} usable; {_human(needed - usable)} ({needed - usable} bytes) "
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
        return f"{_human(total_bytes)} fits on every node (smallest has {_human(smallest)} usable)"
    if mode == "partition":
        return (f"{_human(total_bytes)} does not fit on every node (smallest has {_human(smallest)} usable) but {replicas} "
                f"cop{'y' if replicas == 1 else 'ies'} fit across the {len(capacities)} nodes ({_human(usable)} usable)")
    return (f"{_human(total_bytes)} fits neither on one node nor {replicas} cop{'y' if replicas == 1 else 'ies'} across the "
            f"{len(capacities)} nodes ({_human(usable)} usable), and allow_stream is true")


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
# Weighted rendezvous hashing


def _hash64(domain, text):
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, person=domain).digest()
    return int.from_bytes(digest, "little")


def shard_hash(name):
    """Stable 64-bit hash of a shard name (never Python's salted ``hash()``)."""
    return _hash64(b"dlinfra-shard", name)


def node_hash(name):
    """Stable 64-bit hash of a node name."""
    return _hash64(b"dlinfra-node", name)


def pair_unit(shard_value, node_value):
    """The uniform ``u`` in (0, 1) of a (shard, node) pair: murmur3's 64-bit finaliser over the XOR of the two hashes."""
    mixed = shard_value ^ node_value
    mixed ^= mixed >> 33
    mixed = (mixed * _MIX1) & _MASK64
    mixed ^= mixed >> 33
    mixed = (mixed * _MIX2) & _MASK64
    mixed ^= mixed >> 33
    return ((mixed >> 12) + 0.5) * _UNIT


def hrw_score(shard, node, weight):
    """The weighted HRW score ``-w / ln(u)`` of ``shard`` on ``node`` (higher wins)."""
    return -weight / math.log(pair_unit(shard_hash(shard), node_hash(node)))


class _PythonRanker:
    """Exact rankings in pure Python. Ranks by ``ln(u) / w``, which orders nodes like ``-w / ln(u)``."""

    def __init__(self, node_values, weights):
        self.pairs = list(zip(node_values, weights))
        self.positions = range(len(self.pairs))

    def full(self, shard_value):
        keys = [math.log(pair_unit(shard_value, node_value)) / weight for node_value, weight in self.pairs]
        # A stable sort with reverse=True keeps equal keys in node-name order.
        return sorted(self.positions, key=keys.__getitem__, reverse=True)

    def tops(self, shard_values, depth):
        return [self.full(value)[:depth] for value in shard_values]


class _NumpyRanker:
    """numpy proposes rankings for blocks of shards; rows whose order rests on near-equal scores go to pure Python."""

    def __init__(self, node_values, weights):
        self.python = _PythonRanker(node_values, weights)
        self.nodes = numpy.array(node_values, dtype=numpy.uint64)
        self.weights = numpy.array(weights, dtype=numpy.float64)

    def _keys(self, shard_values):
        shards = numpy.array(shard_values, dtype=numpy.uint64)
        mixed = shards[:, None] ^ self.nodes[None, :]
        shifted = numpy.empty_like(mixed)
        for multiplier in (_MIX1, _MIX2, None):
            numpy.right_shift(mixed, numpy.uint64(33), out=shifted)
            mixed ^= shifted
            if multiplier is not None:
                mixed *= numpy.uint64(multiplier)
        numpy.right_shift(mixed, numpy.uint64(12), out=shifted)
        keys = shifted.astype(numpy.float64)
        keys += 0.5
        keys *= _UNIT
        numpy.log(keys, out=keys)
        keys /= self.weights
        return keys

    @staticmethod
    def _separated(sorted_keys):
        """Rows whose neighbouring keys differ by more than the tolerance, so that their order is certain."""
        gaps = sorted_keys[:, :-1] - sorted_keys[:, 1:]
        return numpy.all(gaps > _RELATIVE_TOLERANCE * numpy.abs(sorted_keys[:, 1:]), axis=1)

    def full(self, shard_value):
        keys = self._keys([shard_value])
        order = numpy.argsort(-keys, axis=1, kind="stable")
        if not self._separated(numpy.take_along_axis(keys, order, axis=1))[0]:
            return self.python.full(shard_value)
        return order[0].tolist()

    def tops(self, shard_values, depth):
        count = len(self.weights)
        if depth >= count:
            return [self.full(value) for value in shard_values]
        keys = self._keys(shard_values)
        # The best depth + 1: the extra one proves that nothing left out was within the tolerance.
        best = numpy.argpartition(keys, count - depth - 1, axis=1)[:, count - depth - 1:]
        best_keys = numpy.take_along_axis(keys, best, axis=1)
        order = numpy.argsort(-best_keys, axis=1, kind="stable")
        best = numpy.take_along_axis(best, order, axis=1)
        certain = self._separated(numpy.take_along_axis(best_keys, order, axis=1)).tolist()
        rankings = best[:, :depth].tolist()
        for row, is_certain in enumerate(certain):
            if not is_certain:
                rankings[row] = self.python.full(shard_values[row])[:depth]
        return rankings


def numpy_available():
    """Whether the vectorised placement path can be used."""
    return numpy is not None


def place_shards(sizes, capacities, replicas, use_numpy=None):
    """Place each shard on ``replicas`` distinct nodes by weighted HRW, skipping nodes without room.

    ``sizes``: {shard name: bytes}; ``capacities``: {host: usable bytes}. Returns {shard name: [hosts, best first]}.
    ``use_numpy``: None uses numpy when importable; True requires it; False forces pure Python (same result).
    """
    hosts = sorted(host for host, capacity in capacities.items() if capacity > 0)
    if replicas > len(hosts):
        raise ShardPlanError(f"replicas is {replicas} but only {len(hosts)} node(s) have usable space: lower replicas or free space")
    if use_numpy and numpy is None:
        raise ShardPlanError("use_numpy is true but numpy cannot be imported: install numpy or leave use_numpy unset")
    remaining = [capacities[host] for host in hosts]
    node_values = [node_hash(host) for host in hosts]
    weights = [node_weight(capacity) for capacity in remaining]
    vectorised = numpy is not None if use_numpy is None else use_numpy
    ranker = _NumpyRanker(node_values, weights) if vectorised else _PythonRanker(node_values, weights)
    depth = min(len(hosts), replicas + _EXTRA_CANDIDATES)
    block = max(1, _NUMPY_BLOCK_CELLS // len(hosts)) if vectorised else 256
    names = sorted(sizes)
    assignment = {}
    for start in range(0, len(names), block):
        block_names = names[start:start + block]
        block_values = [shard_hash(name) for name in block_names]
        for name, value, candidates in zip(block_names, block_values, ranker.tops(block_values, depth)):
            size = sizes[name]
            chosen = [position for position in candidates if remaining[position] >= size][:replicas]
            if len(chosen) < replicas and depth < len(hosts):
                chosen = [position for position in ranker.full(value) if remaining[position] >= size][:replicas]
            if len(chosen) < replicas:
                raise ShardPlanError(
                    f"shard {name!r} ({_human(size)}) cannot get {replicas} copies: only {len(chosen)} node(s) still have room "
                    "for it. Free space on the nodes, lower replicas or headroom, or stream the dataset instead"
                )
            for position in chosen:
                remaining[position] -= size
            assignment[name] = [hosts[position] for position in chosen]
    return assignment


# ---------------------------------------------------------------------------------------------------------------
# Plans


def make_plan(dataset, shards, nodes, previous=None, use_numpy=None):
    """Plan one dataset.

    ``dataset``: {"name", "mode" (auto|replicate|partition, default auto), "replicas" (default 1), "headroom" (default 0.05)}.
    ``shards``: [{"name", "url", "size", "sha256"}], e.g. from ``shard_records``; every size must be known.
    ``nodes``: {host: {"free_bytes", "ours_bytes" (optional), "held_bytes" (optional), "total_bytes" (optional)}}, see
    ``node_capacity``.
    ``previous``: the plan this function returned last time, to report what moves.
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
    if chosen_mode == "replicate":
        plan["replicated_on"] = hosts
        held = {host: (len(sizes), total) for host in hosts}
    elif chosen_mode == "partition":
        plan["assignment"] = place_shards(sizes, capacities, replicas, use_numpy)
        held = _counts(hosts, plan["assignment"], sizes)
    else:
        # Nothing has to fit: equal weights and no room limit make this plain rendezvous hashing, so each node streams
        # its own disjoint share, and a node added or removed moves only its share.
        plan["assignment"] = place_shards(sizes, {host: 1 << 62 for host in hosts}, 1, use_numpy)
        cached = stream_cache(plan["assignment"], sizes, capacities, cache_fraction)
        plan["cached"] = sorted(cached)
        held = _counts(hosts, {shard: where for shard, where in plan["assignment"].items() if shard in cached}, sizes)
        streamed = _counts(hosts, {shard: where for shard, where in plan["assignment"].items() if shard not in cached}, sizes)
    plan["stored_bytes"] = sum(stored for _count, stored in held.values())
    plan["nodes"] = {
        host: {
            "capacity": capacities[host],
            "weight": node_weight(capacities[host]),
            "shards": held[host][0],
            "bytes": held[host][1],
            "free_after": node_room(host, nodes[host]) - held[host][1],
            "streamed_shards": streamed[host][0],
            "streamed_bytes": streamed[host][1],
        }
        for host in hosts
    }
    _add_changes(plan, previous)
    _add_transfer(plan, previous, peer_assist)
    plan["summary"] = summarize(plan)
    return plan


def copies_per_shard(plan):
    return len(plan["replicated_on"]) if plan["mode"] == "replicate" else plan["replicas"]


def seeders(plan):
    """{shard: the node that fetches it from its source}: the first node of its placement (for a replicated plan,
    equal-weight HRW over the nodes, so each node seeds an even share). The other nodes that hold it take it from there."""
    if plan["mode"] == "replicate":
        hosts = plan["replicated_on"]
        placed = place_shards(plan["shards"], {host: 1 << 62 for host in hosts}, 1)
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
        _byte_count(size, f"dataset {dataset!r} shard {shard_label!r} size", "the shard's size in bytes")
        if shard_label in sizes:
            raise ShardPlanError(f"dataset {dataset!r}: shard {shard_label!r} is listed twice: shard names must be unique")
        sizes[shard_label] = size
    if not sizes:
        raise ShardPlanError(f"dataset {dataset!r} has no shards: check its source pattern")
    return sizes


def _byte_count(value, what, meaning):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ShardPlanError(f"{what} is {value!r}; it must be a whole number of bytes ({meaning})")
    return value


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
        _check_previous(previous, plan["dataset"])
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
    """Hosts that keep ``shard`` under ``plan`` (HRW order for a partitioned plan)."""
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
    between = (f": {_human(transfer['source_bytes'])} from the source, {_human(transfer['peer_bytes'])} between peers"
               if transfer.get("peer_assist") and changes["fetch_bytes"] else "")
    return (
        f"dataset {plan['dataset']}: {plan['mode']} ({copies}), {plan['shard_count']} shards, {_human(plan['total_bytes'])} "
        f"({_human(plan['stored_bytes'])} stored) on {len(nodes)} nodes, fullest {fullest} at {fullest_share:.1%} of usable space; "
        f"fetch {changes['fetch_copies']} copies ({_human(changes['fetch_bytes'])}{between}), "
        f"remove {changes['remove_copies']} copies ({_human(changes['remove_bytes'])}); {plan['mode']} because "
        f"{plan.get('mode_reason') or 'an earlier plan chose it'}"
    )


def _human(count):
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"
