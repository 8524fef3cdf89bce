# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark's data: random shards on disk under nginx's root, their shard list, and the check of a fetched copy."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

WRITE_CHUNK = 1 << 20


class Case(object):
    """One data set: `count` shards of `size` bytes under `<root>/<name>/`, served at `<base_url>/<name>/`."""

    def __init__(self, name, title, count, size):
        self.name = name
        self.title = title
        self.count = count
        self.size = size
        self.source_dir = None
        self.shards = []

    @property
    def total_bytes(self):
        return self.count * self.size

    def shard_names(self):
        return ["shard-%06d.tar" % number for number in range(self.count)]

    def create(self, root, base_url):
        """Write the shards with fresh random content and build the shard list ({name, url, size, sha256})."""
        self.source_dir = os.path.join(root, self.name)
        os.makedirs(self.source_dir)
        self.shards = []
        for name in self.shard_names():
            hasher = hashlib.sha256()
            with open(os.path.join(self.source_dir, name), "wb") as handle:
                remaining = self.size
                while remaining:
                    block = os.urandom(min(WRITE_CHUNK, remaining))
                    hasher.update(block)
                    handle.write(block)
                    remaining -= len(block)
            self.shards.append({"name": name, "url": "%s/%s/%s" % (base_url, self.name, name), "size": self.size, "sha256": hasher.hexdigest()})
        return self

    def write_shard_list(self, path, shards=None):
        with open(path, "w") as handle:
            json.dump({"shards": self.shards if shards is None else shards}, handle)
        return path

    def remove_source(self):
        if self.source_dir:
            shutil.rmtree(self.source_dir, ignore_errors=True)


def file_sha256(path):
    hasher = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while True:
            block = handle.read(WRITE_CHUNK)
            if not block:
                return hasher.hexdigest()
            hasher.update(block)


def check_copy(dest, shards, hashed="all", limit=5, besides=()):
    """Problems with the copy of `shards` in dest (missing, wrong size, wrong sha256): a list, empty when it is whole.

    Hidden names (a tool's own journal, lock or control files) and the names in `besides` are ignored. Sizes are checked for every shard;
    sha256 for every shard (hashed="all"), the first and the last ("ends") or none ("none").
    """
    to_hash = {"all": range(len(shards)), "ends": {0, len(shards) - 1}, "none": ()}[hashed]
    problems = []
    try:
        present = {entry.name: entry.stat().st_size for entry in os.scandir(dest) if not entry.name.startswith(".") and entry.name not in besides}
    except OSError as exc:
        return ["cannot list %s: %s" % (dest, exc.strerror)]
    for index, shard in enumerate(shards):
        size = present.pop(shard["name"], None)
        if size is None:
            problems.append("%s is missing" % shard["name"])
        elif size != shard["size"]:
            problems.append("%s has %d bytes, expected %d" % (shard["name"], size, shard["size"]))
        elif index in to_hash and file_sha256(os.path.join(dest, shard["name"])) != shard["sha256"]:
            problems.append("%s has the wrong sha256" % shard["name"])
        if len(problems) >= limit:
            return problems + ["(stopped after %d problems)" % limit]
    if present:
        problems.append("%d unexpected files, e.g. %s" % (len(present), sorted(present)[0]))
    return problems


def random_pattern(size):
    """Random bytes to write from, at least one chunk more than WRITE_CHUNK so that consecutive chunks differ."""
    return memoryview(os.urandom(max(size, 2 * WRITE_CHUNK)))


def write_same_files(dest, shards, pattern):
    """Write files of the shards' names and sizes into dest from `pattern`: the disk's side of the work, without HTTP."""
    os.makedirs(dest, exist_ok=True)
    span = len(pattern) - WRITE_CHUNK
    offset = 0
    for shard in shards:
        fd = os.open(os.path.join(dest, shard["name"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            remaining = shard["size"]
            while remaining:
                count = os.write(fd, pattern[offset:offset + min(WRITE_CHUNK, remaining)])
                remaining -= count
                offset = (offset + count) % span
        finally:
            os.close(fd)
