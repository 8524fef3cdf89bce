# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run is given, checked before anything is changed: its settings, and its shard list (loaded from a file, and
every shard checked)."""

import hashlib
import itertools
import json
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import STATE_SUFFIX, cyclic_gc_paused

MAX_NAME_BYTES = 255 - len("." + STATE_SUFFIX)
_URL_PREFIXES = ("http://", "https://", "file://")
_SHARD_KEYS = frozenset(("name", "url", "size", "sha256", "samples", "rank"))
_SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
VERIFY_CHOICES = ("quick", "full")
# The options that reach the node in access_file (a 0600 file the module reads and removes), never in its arguments:
# shard_fetch's action moves them there.
ACCESS_OPTIONS = ("headers", "url_username", "url_password", "proxy", "peer_token")


class Shard(object):
    __slots__ = ("name", "url", "size", "sha256")

    def __init__(self, name, url, size=None, sha256=None):
        self.name = name
        self.url = url
        self.size = size
        self.sha256 = sha256


def _load_json(path, option):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise StagingError("cannot read %s %s: %s" % (option, path, exc))
    return _parse_json(data, path, option)


def _parse_json(data, path, option):
    try:
        with cyclic_gc_paused():
            return json.loads(data)
    except ValueError as exc:
        raise StagingError("cannot read %s %s: %s" % (option, path, exc))


class ShardListFile(object):
    """A shard list in a JSON file (a list of shard objects, or an object with a "shards" list), read once.

    ``digest`` (the sha256 of its bytes) lets a re-run recognise the list the journal last recorded as complete and
    confirm the shards from the journal and a directory scan without parsing the list (see stage())."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as handle:
                self.data = handle.read()
        except OSError as exc:
            raise StagingError("cannot read shards_file %s: %s" % (path, exc))
        self.digest = hashlib.sha256(self.data).hexdigest()

    def load(self):
        data = _parse_json(self.data, self.path, "shards_file")
        if isinstance(data, dict):
            data = data.get("shards")
        if not isinstance(data, list):
            raise StagingError("shards_file %s must hold a JSON list of shards or an object with a 'shards' list" % self.path)
        return data


def load_shards_file(path):
    """Read a shard list from a JSON file: a list of shard objects, or an object with a "shards" list."""
    return ShardListFile(path).load()


def load_peer_file(path):
    """Read a peer-assisted run's settings (see stage()'s ``peer``) from a JSON object."""
    data = _load_json(path, "peer_file")
    if not isinstance(data, dict):
        raise StagingError("peer_file %s must hold a JSON object" % path)
    return data


def _name_problem(name):
    if not isinstance(name, str) or not name:
        return "name must be a non-empty string"
    if "/" in name or "\0" in name:
        return "name must be a plain file name without '/'"
    if name.startswith("."):
        return "name must not start with '.' (hidden names are the engine's own partial and journal files)"
    if len(name) * 4 > MAX_NAME_BYTES and len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return "name is longer than %d bytes" % MAX_NAME_BYTES
    return None


def _shard_problems(index, raw):
    """Return (problems, Shard or None) for one raw shard mapping."""
    if not isinstance(raw, dict):
        return ["shard #%d is not a mapping" % index], None
    # This runs for each of up to 100,000 shards on every run, so plain string tests and no urlsplit.
    name, url, size, sha256 = raw.get("name"), raw.get("url"), raw.get("size"), raw.get("sha256")
    if isinstance(sha256, str):
        sha256 = sha256.lower()
    problems = []
    name_problem = _name_problem(name)
    if name_problem:
        problems.append(name_problem)
    if not isinstance(url, str) or not url.startswith(_URL_PREFIXES):
        problems.append("url must be an http://, https:// or file:// URL, got %r" % (url,))
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        problems.append("size must be a non-negative integer, got %r" % (size,))
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256_RE.match(sha256)):
        problems.append("sha256 must be 64 hex digits, got %r" % (raw.get("sha256"),))
    for key in ("samples", "rank"):
        # The planner's figures for the hand-off lists (samples from the index, the rank that reads the shard).
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append("%s must be a non-negative integer, got %r" % (key, value))
    if len(raw) > 2 and not _SHARD_KEYS.issuperset(raw):
        problems.append("unknown keys %s" % ", ".join(sorted(str(key) for key in set(raw) - _SHARD_KEYS)))
    if problems:
        return ["shard #%d (%s): %s" % (index, name, problem) for problem in problems], None
    return problems, Shard(name, url, size, sha256)


def _shards_if_all_valid(raw_shards):
    """The Shard objects when every shard passes _shard_problems and no name repeats, else None.

    A re-run validates up to 100,000 shards before confirming them, so this checks the list column by column
    in C-level passes. It never rejects anything itself: on None, normalize_shards() checks shard by shard
    and names the problems.
    """
    if not raw_shards:
        return []
    if set(map(type, raw_shards)) != {dict} or max(map(len, raw_shards)) > 6 or not all(map(_SHARD_KEYS.issuperset, raw_shards)):
        return None
    for key in ("samples", "rank"):
        values = [value for value in map(dict.get, raw_shards, itertools.repeat(key)) if value is not None]
        if values and (set(map(type, values)) != {int} or min(values) < 0):
            return None
    names, urls, sizes, digests = ([*map(dict.get, raw_shards, itertools.repeat(key))] for key in ("name", "url", "size", "sha256"))
    if set(map(type, names)) != {str} or len(set(names)) != len(names) or max(map(len, names)) * 4 > MAX_NAME_BYTES:
        return None
    # Joined with NUL, which no valid name contains: an empty or hidden name shows as a NUL pair, NUL-dot or NUL at an end.
    joined = "\0".join(names)
    if (joined.count("\0") != len(names) - 1 or "/" in joined or "\0\0" in joined or "\0." in joined
            or joined.startswith((".", "\0")) or joined.endswith("\0") or not names[0]):
        return None
    if set(map(type, urls)) != {str} or not all(map(str.startswith, urls, itertools.repeat(_URL_PREFIXES))):
        return None
    if not set(map(type, sizes)) <= {int, type(None)} or min([size for size in sizes if size is not None], default=0) < 0:
        return None
    given = [digest for digest in digests if digest is not None]
    if given and (set(map(type, given)) != {str} or set(map(len, given)) != {64} or not _lower_hex("".join(given))):
        return None
    return [*map(Shard, names, urls, sizes, digests)]


def _lower_hex(text):
    try:
        return not text.encode("ascii").translate(None, b"0123456789abcdef")
    except UnicodeEncodeError:
        return False


def normalize_shards(raw_shards, max_problems=20):
    """Validate a list of shard mappings and return Shard objects; raise StagingError listing the problems."""
    if not isinstance(raw_shards, list):
        raise StagingError("shards must be a list of {name, url, size, sha256} mappings")
    shards = _shards_if_all_valid(raw_shards)
    if shards is not None:
        return shards
    problems = []
    shards = []
    seen = set()
    for index, raw in enumerate(raw_shards):
        shard_problems, shard = _shard_problems(index, raw)
        problems.extend(shard_problems)
        if shard is None:
            continue
        if shard.name in seen:
            problems.append("shard #%d (%s): duplicate name" % (index, shard.name))
        seen.add(shard.name)
        shards.append(shard)
    if problems:
        more = len(problems) - max_problems
        listed = "; ".join(problems[:max_problems]) + ("; and %d more" % more if more > 0 else "")
        raise StagingError("invalid shard list: %s" % listed)
    return shards


def check_settings(concurrency, retries, timeout, bandwidth_limit, verify, backoff, journal_interval, checkpoint_bytes, buffer_size,
                   group_commit_bytes, commit_interval):
    problems = []
    if not isinstance(concurrency, int) or not 1 <= concurrency <= 256:
        problems.append("concurrency must be between 1 and 256, got %r" % (concurrency,))
    if not isinstance(retries, int) or retries < 0:
        problems.append("retries must be 0 or more, got %r" % (retries,))
    if not timeout or timeout <= 0:
        problems.append("timeout must be a positive number of seconds, got %r" % (timeout,))
    if bandwidth_limit is not None and bandwidth_limit <= 0:
        problems.append("bandwidth_limit must be a positive number of bytes per second (or unset), got %r" % (bandwidth_limit,))
    if verify not in VERIFY_CHOICES:
        problems.append("verify must be one of %s, got %r" % (", ".join(VERIFY_CHOICES), verify))
    if backoff < 0 or journal_interval <= 0 or checkpoint_bytes <= 0 or buffer_size < 4096:
        problems.append("backoff must be >= 0, journal_interval and checkpoint_bytes > 0, buffer_size >= 4096")
    if not isinstance(group_commit_bytes, int) or group_commit_bytes < 0 or not commit_interval or commit_interval <= 0:
        problems.append("group_commit_bytes must be >= 0 (0: fsync every shard alone) and commit_interval > 0, got %r and %r"
                        % (group_commit_bytes, commit_interval))
    if problems:
        raise StagingError("; ".join(problems))
