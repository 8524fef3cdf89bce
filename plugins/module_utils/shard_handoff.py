# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lists a training job reads from dest: shards.txt, sources.txt and one list per rank."""

import os
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_dest import write_atomically
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.shard_errors import StagingError


HANDOFF_LIST = "shards.txt"
HANDOFF_SOURCES = "sources.txt"
HANDOFF_RANKS = "ranks"


def _rank_file(rank):
    return os.path.join(HANDOFF_RANKS, "rank-%04d.txt" % rank)


def write_handoff(dest, shards, ranks, check_mode=False, streamed=()):
    """Write the lists a training job reads: shards.txt (what to read: local paths, and the URLs of the ``streamed``
    shards, which stay at their source), sources.txt (every shard's URL) and ranks/rank-NNNN.txt (disjoint round-robin
    parts of shards.txt, one per rank), in the order given (merged by name with ``streamed``). Returns the files it changed (would change, in check
    mode). Rank files beyond ``ranks`` are removed."""
    if ranks < 1:
        raise StagingError("ranks is %d; give 1 or more training ranks per node" % ranks)
    dest = os.path.abspath(dest)
    entries = [(shard["name"], os.path.join(dest, shard["name"]), shard["url"]) for shard in shards]
    if streamed:
        entries = sorted(entries + [(shard["name"], shard["url"], shard["url"]) for shard in streamed])
    paths = [read for _name, read, _url in entries]
    wanted = {HANDOFF_LIST: paths, HANDOFF_SOURCES: [url for _name, _read, url in entries]}
    for rank in range(ranks):
        wanted[_rank_file(rank)] = paths[rank::ranks]
    changed = []
    for relative, lines in sorted(wanted.items()):
        path = os.path.join(dest, relative)
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        try:
            with open(path, "rb") as handle:
                if handle.read() == data:
                    continue
        except OSError:
            pass
        changed.append(relative)
        if not check_mode:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomically(path, data)
    ranks_dir = os.path.join(dest, HANDOFF_RANKS)
    stale = sorted(entry for entry in (os.listdir(ranks_dir) if os.path.isdir(ranks_dir) else [])
                   if os.path.join(HANDOFF_RANKS, entry) not in wanted and re.match(r"^rank-\d{4,}\.txt$", entry))
    for entry in stale:
        changed.append(os.path.join(HANDOFF_RANKS, entry))
        if not check_mode:
            os.unlink(os.path.join(ranks_dir, entry))
    return changed
