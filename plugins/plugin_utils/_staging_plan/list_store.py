# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the planner's durable file store under plan_dir: files written atomically (synced on threads, then renamed),
each node's list stored under its content hash, and lists no run names pruned. May change without notice."""

import hashlib
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

# Threads that fsync a batch of written files: an fsync waits on the disk, not the interpreter, so a thousand nodes' list
# files overlap their waits.
SYNC_CONCURRENCY = 8
# List files under plan_dir/lists that no run has named for this long are removed: with signed URLs every run writes new
# ones (a list at 1,000,000 shards is ~170 MB). A run started meanwhile on the same plan_dir renews the lists it names.
LIST_KEEP_SECONDS = 3600


def write_atomically(files):
    """Write each {path: bytes} of ``files`` so that a reader sees either the old file or the whole new one, also after
    a crash: all are written to temporary files first (owner-only: mkstemp), then synced on threads, then renamed."""
    temporaries = []
    try:
        for path, data in files.items():
            directory = os.path.dirname(path)
            os.makedirs(directory, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
            temporaries.append((temporary, path))
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
        if temporaries:
            with ThreadPoolExecutor(min(SYNC_CONCURRENCY, len(temporaries))) as pool:
                list(pool.map(_sync, [temporary for temporary, _path in temporaries]))
        for temporary, path in temporaries:
            os.replace(temporary, path)
    except BaseException:
        for temporary, _path in temporaries:
            if os.path.exists(temporary):
                os.unlink(temporary)
        raise


def _sync(path):
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def list_file(plan_dir, shards):
    """(path, bytes) of one node's shard list: stored under its content hash, so an unchanged list is a file kept."""
    data = json.dumps(shards, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return os.path.join(plan_dir, "lists", hashlib.sha256(data).hexdigest() + ".json"), data


def write_lists(plan_dir, by_host, also=None):
    """Store each host's list of ``by_host`` (a cache: check mode may write it) and return {host: its path}. Hosts that
    share one list object share one file, so a replicated plan's list is encoded and hashed once; a file already there
    is only touched (kept by prune_lists for LIST_KEEP_SECONDS more). ``also``: {path: bytes} written in the same batch."""
    encoded, paths, files = {}, {}, {}
    for host, contents in by_host.items():
        if id(contents) not in encoded:
            path, data = list_file(plan_dir, contents)
            encoded[id(contents)] = path
            try:
                os.utime(path)
            except FileNotFoundError:
                files[path] = data
        paths[host] = encoded[id(contents)]
    write_atomically(files | (also or {}))  # ``also`` renamed last: a plan file never names lists not yet in place
    return paths


def write_list(plan_dir, shards):
    """Store one node's shard list (see write_lists) and return its path."""
    return write_lists(plan_dir, {None: shards})[None]


def prune_lists(plan_dir, named, now=None):
    """Remove the list files under plan_dir/lists that are not in ``named`` (this run's) and that no run has named for
    LIST_KEEP_SECONDS; return how many went."""
    directory = os.path.join(plan_dir, "lists")
    now = time.time() if now is None else now
    named = {os.path.abspath(path) for path in named}
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if not entry.name.endswith(".json") or entry.path in named or not entry.is_file(follow_symlinks=False):
            continue
        if now - entry.stat(follow_symlinks=False).st_mtime > LIST_KEEP_SECONDS:
            try:
                os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def read_json(path):
    """The JSON document at ``path``, None where there is no file."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
