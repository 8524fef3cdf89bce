# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a dataset is made of, for the shard_staging planner: its source patterns expanded into shard URLs, and its index
(a SHA256SUMS file or a wids-shard-index-v1 JSON) read into sizes, checksums and sample counts."""

from __future__ import annotations

import itertools
import json
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError

SCHEMES = ("http", "https", "file")
WIDS_KIND = "wids-shard-index-v1"
# Shards per dataset: a pattern that names more is refused before anything is expanded. The planner and the engine are
# measured at 1,000,000 (benchmarks/staging); 10,000,000 took 21 s and 1.9 GB just to expand on the controller.
MAX_SHARDS = 2_000_000

_RANGE = re.compile(r"^(\d+)\.\.(\d+)\Z")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}\Z")
_SHA256SUMS_LINE = re.compile(r"^(\\?)([0-9a-fA-F]{64}) [ *](.+)$")
_URL_PREFIXES = tuple(scheme + "://" for scheme in SCHEMES)


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

    Returns ``{shard name: {"size", "sha256", "samples"}}`` (each None where the index does not say); ``origin`` names
    the file in errors.
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
        entries[name] = {"size": None, "sha256": digest.lower(), "samples": None}
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
    samples = shard.get("nsamples")
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 0):
        raise ShardPlanError(f"{origin}: {location} ({name}) has 'nsamples' {samples!r}; it must be a whole number of samples")
    return name, {"size": size, "sha256": digest.lower() if digest else None, "samples": samples}


def shard_records(urls, index=None):
    """Join URLs with an index from ``parse_index``: ``[{"name", "url", "size", "sha256", "samples"}]`` (None where the
    index does not say; only a wids index gives samples, from its ``nsamples``)."""
    index = index or {}
    records = []
    for url in urls:
        name = shard_name(url)
        known = index.get(name, {})
        records.append({"name": name, "url": url, "size": known.get("size"), "sha256": known.get("sha256"),
                        "samples": known.get("samples")})
    return records
