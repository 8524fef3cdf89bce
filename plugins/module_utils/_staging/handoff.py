# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lists a training job reads from dest: shards.txt, sources.txt, one list per rank, and where the node stands in
the training world (world.json)."""

import json
import os
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import (
    UnsafeFileError, open_directory, open_nofollow, write_atomically)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url


HANDOFF_LIST = "shards.txt"
HANDOFF_SOURCES = "sources.txt"
HANDOFF_RANKS = "ranks"
HANDOFF_COUNTS = "ranks.json"
HANDOFF_WORLD = "world.json"
# The hand-off's files in dest itself (the rank lists are in HANDOFF_RANKS).
HANDOFF_FILES = (HANDOFF_LIST, HANDOFF_SOURCES, HANDOFF_COUNTS, HANDOFF_WORLD)
RANK_FILE_RE = re.compile(r"^rank-\d{4,}\.txt$")
# A rank's list relative to dest, with its local rank for %04d: what a launcher tells the ranks (k8s_training_jobs).
RANK_LIST_PATTERN = os.path.join(HANDOFF_RANKS, "rank-%04d.txt")


def rank_list(rank):
    """A rank's list, relative to dest."""
    return RANK_LIST_PATTERN % rank


def write_handoff(dest, shards, ranks, check_mode=False, streamed=(), world=None):
    """Write the lists a training job reads: shards.txt (what to read: local paths, and the URLs of the ``streamed``
    shards, which stay at their source), sources.txt (every shard's URL), ranks/rank-NNNN.txt (disjoint parts of
    shards.txt, one per rank: the planner's "rank" of each entry where every entry has one, else round-robin) and
    ranks.json (each rank's shards, bytes and samples, so that a job can set its epoch length without reading the
    files), in the order given (merged by name with ``streamed``), and with ``world`` (the node's part of its cluster's
    plan, shard_world.node_world) world.json. Returns the files it changed (would change, in check mode). Rank files
    beyond ``ranks`` are removed.

    Nothing is written through a symbolic link: a link (or anything but a regular file) at a list's name, or a ``ranks``
    that is a link or not a directory, raises StagingError naming it, in check mode too, before any list is changed.
    The lists are written by name inside dest and ranks opened as directories, then replaced by rename."""
    if ranks < 1:
        raise StagingError("ranks is %d; give 1 or more training ranks per node" % ranks)
    dest = os.path.abspath(dest)
    # URLs as shown (credentials as ***): the lists are read by anyone who trains, and must hold no secret.
    entries = [(shard["name"], os.path.join(dest, shard["name"]), redact_url(shard["url"]), shard) for shard in shards]
    if streamed:
        entries = sorted(entries + [(shard["name"], redact_url(shard["url"]), redact_url(shard["url"]), shard)
                                    for shard in streamed], key=lambda entry: entry[0])
    paths = [read for _name, read, _url, _shard in entries]
    wanted = {HANDOFF_LIST: paths, HANDOFF_SOURCES: [url for _name, _read, url, _shard in entries]}
    planned = all(isinstance(shard.get("rank"), int) and 0 <= shard["rank"] < ranks for _n, _r, _u, shard in entries)
    parts = [[] for _rank in range(ranks)]
    for position, entry in enumerate(entries):
        parts[entry[3]["rank"] if planned else position % ranks].append(entry)
    for rank, part in enumerate(parts):
        wanted[rank_list(rank)] = [read for _name, read, _url, _shard in part]
    wanted[HANDOFF_COUNTS] = [rank_counts(parts, planned)]
    if world is not None:
        if len(world.get("ranks") or ()) != ranks:
            raise StagingError("the world of the plan gives this node %d ranks, the hand-off %d: re-run the play, whose plan "
                               "gives both" % (len(world.get("ranks") or ()), ranks))
        wanted[HANDOFF_WORLD] = [json.dumps(world, sort_keys=True)]
    if not check_mode:
        os.makedirs(dest, exist_ok=True)
    try:
        dest_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if check_mode:
            return sorted(wanted)
        raise
    ranks_fd = None
    try:
        ranks_fd = _open_ranks(dest, dest_fd, create=not check_mode)
        # Every list is read (and so checked) before any is written: a planted link stops the hand-off unchanged.
        changes = []
        for relative, lines in sorted(wanted.items()):
            data = "".join(line + "\n" for line in lines).encode("utf-8")
            directory, name = _where(relative, dest_fd, ranks_fd)
            if _current(name, directory, os.path.join(dest, relative)) != data:
                changes.append((relative, directory, name, data))
        stale = []
        if ranks_fd is not None:
            stale = sorted(entry for entry in os.listdir(ranks_fd)
                           if os.path.join(HANDOFF_RANKS, entry) not in wanted and RANK_FILE_RE.match(entry))
        if not check_mode:
            for _relative, directory, name, data in changes:
                write_atomically(name, data, dir_fd=directory)
            for entry in stale:
                # unlink(2) removes a link itself, never what it points to.
                os.unlink(entry, dir_fd=ranks_fd)
        return [change[0] for change in changes] + [os.path.join(HANDOFF_RANKS, entry) for entry in stale]
    finally:
        if ranks_fd is not None:
            os.close(ranks_fd)
        os.close(dest_fd)


def rank_counts(parts, planned):
    """ranks.json's one line: {"split": "planned" or "round-robin", "ranks": [{"rank", "shards", "bytes", "samples"}]}
    (bytes and samples None where an entry does not say)."""
    def total(part, key):
        values = [shard.get(key) for _name, _read, _url, shard in part]
        return None if None in values else sum(values)
    return json.dumps({"split": "planned" if planned else "round-robin",
                       "ranks": [{"rank": rank, "shards": len(part), "bytes": total(part, "size"), "samples": total(part, "samples")}
                                 for rank, part in enumerate(parts)]}, sort_keys=True)


def _open_ranks(dest, dest_fd, create):
    """An open descriptor of dest/ranks (created unless in check mode), or None when it does not exist (check mode)."""
    if create:
        try:
            os.mkdir(HANDOFF_RANKS, dir_fd=dest_fd)
        except FileExistsError:
            pass
    try:
        return open_directory(HANDOFF_RANKS, dir_fd=dest_fd, shown="the hand-off directory %s" % os.path.join(dest, HANDOFF_RANKS))
    except FileNotFoundError:
        if create:
            raise
        return None
    except UnsafeFileError as exc:
        raise StagingError(str(exc))


def _where(relative, dest_fd, ranks_fd):
    """(directory descriptor, name) of a list given by its path relative to dest; None for a ranks dir not made yet."""
    head, name = os.path.split(relative)
    return (ranks_fd if head == HANDOFF_RANKS else dest_fd), name


def _current(name, directory, shown):
    """The bytes of an existing list, None when there is none to read; a link at its name raises StagingError."""
    if directory is None:
        return None
    try:
        fd = open_nofollow(name, os.O_RDONLY | os.O_NONBLOCK, dir_fd=directory, shown="the hand-off list %s" % shown)
        with os.fdopen(fd, "rb") as handle:
            return handle.read()
    except UnsafeFileError as exc:
        raise StagingError(str(exc))
    except OSError:
        return None
