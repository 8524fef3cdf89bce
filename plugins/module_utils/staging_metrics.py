# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The staging part of the GPU monitoring collector: each dataset's shards held against planned, its last run and the
transfer of a run in progress, from the files the staging engine keeps in the dataset's dest (issue 35).

Which datasets a node holds, and where: the index the shard_staging role writes on each target (a JSON object,
{"version": 1, "datasets": [{"name", "dest"}]}), read on every run, so the collector learns of a dataset whenever
shard_staging runs, before or after gpu_monitoring. A node without the index is no staging target: no series.

Per dataset it reads two small files, never the journal (a million shards are a hundred MB of JSON): the run record
(.shard_fetch.last_run, see _staging.last_run) and, while a run is live, its progress file (.shard_fetch.progress, see
_staging.progress), each with the engine's own parser. A file is opened without following a link and without
blocking (a FIFO planted in dest must not hang the collector), and read only up to MAX_FILE_BYTES. A file that is
missing, half-written or of another format costs that dataset's series only: dlinfra_staging_up is 0 for it and the
problem goes to stderr (the unit's journal), as nvidia_smi_up does for nvidia-smi.

The room the plan keeps: an index entry that gives the dataset's headroom (the fraction of the dest filesystem its plan
keeps free) and the node's reserve bytes has dlinfra_staging_headroom_bytes, the free bytes the plan counts on:
ceil(headroom x the filesystem's size) + reserve, as the planner (plugin_utils/shard_placement.node_capacity) works it
out. Its label mountpoint names the filesystem as node exporter does (init's mount table, so not the unit's own
mounts), for an alert on node_filesystem_avail_bytes below it.

Stdlib only: the gpu_monitoring role copies this file and the engine modules it imports to the node.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import nearest_existing
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.last_run import (
    LAST_RUN_NAME,
    parse_last_run,
    run_result,
)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import (
    PROGRESS_NAME,
    parse_progress,
    pid_alive,
)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.prometheus_text import MetricFamily

DEFAULT_INDEX = "/var/lib/dlinfra-shard-staging/datasets.json"
INDEX_VERSION = 1
# The engine's record and progress documents are a few hundred bytes; anything much larger is not theirs.
MAX_FILE_BYTES = 64 * 1024
# The states of dlinfra_staging_last_run_result, one series each: none (no run recorded yet), running, succeeded,
# failed, interrupted (a run still recorded as running whose process is gone: killed).
RESULTS = ("none", "running", "succeeded", "failed", "interrupted")


def staging_families():
    specs = (
        ("dlinfra_staging_index_up", "gauge",
         "1 when shard_staging's index of the node's datasets was read and every entry in it was usable, else 0."),
        ("dlinfra_staging_up", "gauge",
         "1 when the dataset's staging files (run record, progress) could be read or are not there yet, and its dest "
         "filesystem measured, else 0."),
        ("dlinfra_staging_shards", "gauge",
         "Shards of the dataset's last run list: planned for this node, and held (staged and journaled) at its start or end."),
        ("dlinfra_staging_bytes", "gauge", "Bytes of those shards, planned and held."),
        ("dlinfra_staging_last_run_start_timestamp_seconds", "gauge", "When the dataset's last staging run started."),
        ("dlinfra_staging_last_run_end_timestamp_seconds", "gauge", "When the dataset's last staging run ended."),
        ("dlinfra_staging_last_run_result", "gauge",
         "1 for the result of the dataset's last staging run: none, running, succeeded, failed or interrupted (killed)."),
        ("dlinfra_staging_last_run_failed_shards", "gauge", "Shards the dataset's last staging run could not stage."),
        ("dlinfra_staging_transferred_bytes_total", "counter",
         "Bytes the running staging run has received so far (its own, from 0 at its start); rate() is its throughput."),
        ("dlinfra_staging_headroom_bytes", "gauge",
         "Free bytes the dataset's plan keeps on its dest filesystem (mountpoint): its headroom of the filesystem's "
         "size plus the node's shard_staging_reserve_bytes."),
    )
    return {name: MetricFamily(name, kind, text) for name, kind, text in specs}


def read_small_file(path):
    """(text, None), (None, None) when there is no file, or (None, why) when it cannot be read as a small regular file.

    Never follows a link, never blocks on a FIFO or device, never reads more than MAX_FILE_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as error:
        if error.errno == errno.ELOOP:
            return None, "%s is a symbolic link; the engine writes no link there" % path
        return None, "could not open %s (%s)" % (path, error.strerror or error)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "%s is not a regular file" % path
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError as error:
        return None, "could not read %s (%s)" % (path, error.strerror or error)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        return None, "%s is larger than %d bytes; it is not the engine's" % (path, MAX_FILE_BYTES)
    return data.decode("utf-8", errors="replace"), None


def _room(entry):
    """(headroom, reserve_bytes) of an index entry, or None where it gives no usable pair (an index written before
    shard_staging recorded them)."""
    headroom, reserve = entry.get("headroom"), entry.get("reserve_bytes", 0)
    numbers = (isinstance(headroom, (int, float)) and not isinstance(headroom, bool)
               and isinstance(reserve, int) and not isinstance(reserve, bool))
    return (float(headroom), reserve) if numbers and 0 <= headroom < 1 and reserve >= 0 else None


def load_index(path):
    """([(name, dest, room)], None), room as _room gives it; ([], None) when there is no index; (the usable entries,
    why) when it is not all usable."""
    text, problem = read_small_file(path) if path else (None, None)
    if text is None:
        return [], problem
    try:
        index = json.loads(text)
    except ValueError as error:
        return [], "%s is not JSON (%s); run site.yml (shard_staging) to rewrite it" % (path, error)
    if not isinstance(index, dict) or index.get("version") != INDEX_VERSION or not isinstance(index.get("datasets"), list):
        return [], "%s is not a version %d dataset index; run site.yml (shard_staging) to rewrite it" % (path, INDEX_VERSION)
    datasets, seen, bad = [], set(), 0
    for entry in index["datasets"]:
        name, dest = (entry.get("name"), entry.get("dest")) if isinstance(entry, dict) else (None, None)
        if isinstance(name, str) and name and name not in seen and isinstance(dest, str) and os.path.isabs(dest):
            datasets.append((name, dest, _room(entry)))
            seen.add(name)
        else:
            bad += 1
    return datasets, ("%s: %d entries without a name of their own and an absolute dest were skipped" % (path, bad)
                      if bad else None)


def _unescape(field):
    """A mountinfo path field: the kernel writes space, tab, newline and backslash as octal escapes (\\040...)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mount_points(procfs_root="/proc"):
    """The mount points of init's mount table (node exporter's view), else this process's; (points, why)."""
    why = None
    for pid in ("1", "self"):
        path = os.path.join(procfs_root, pid, "mountinfo")
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return [_unescape(line.split()[4]) for line in handle if len(line.split()) > 4], None
        except OSError as error:
            why = why or "could not read %s (%s)" % (path, error.strerror or error)
    return [], why


def mount_point_of(path, points):
    """The longest of points that holds path (both absolute and resolved), or None."""
    held = [point for point in points if path == point or path.startswith(point.rstrip("/") + "/")]
    return max(held, key=len) if held else None


def _headroom(families, labels, dest, room, points):
    """Add the dataset's dlinfra_staging_headroom_bytes; return a problem or None."""
    measured = os.path.realpath(nearest_existing(dest))
    try:
        stats = os.statvfs(measured)
    except OSError as error:
        return "cannot measure the filesystem of %s at %s (%s); check the mount" % (dest, measured, error.strerror or error)
    mountpoint = mount_point_of(measured, points)
    if mountpoint is None:
        return "no mount in the mount table holds %s" % measured
    headroom, reserve = room
    families["dlinfra_staging_headroom_bytes"].add(
        labels + (("mountpoint", mountpoint),), math.ceil(headroom * stats.f_blocks * stats.f_frsize) + reserve)
    return None


def _dataset(families, name, dest):
    """Add one dataset's series; return its problems."""
    labels = (("dataset", name),)
    problems = []
    text, problem = read_small_file(os.path.join(dest, LAST_RUN_NAME))
    record = None
    if problem:
        problems.append(problem)
    elif text is not None:
        record = parse_last_run(text)
        if record is None:
            problems.append("%s is not a run record the engine writes (half-written, or another version)"
                            % os.path.join(dest, LAST_RUN_NAME))
    result = run_result(record, pid_alive) if record else "none"
    if record is None and (problem or text is not None):
        result = None  # unknown: no result series rather than a made-up "none"
    if record:
        for state in ("held", "planned"):
            families["dlinfra_staging_shards"].add(labels + (("state", state),), record.get("shards_" + state))
            families["dlinfra_staging_bytes"].add(labels + (("state", state),), record.get("bytes_" + state))
        families["dlinfra_staging_last_run_start_timestamp_seconds"].add(labels, record["started"])
        families["dlinfra_staging_last_run_end_timestamp_seconds"].add(labels, record.get("ended"))
        families["dlinfra_staging_last_run_failed_shards"].add(labels, record.get("shards_failed"))
    if result is not None:
        for state in RESULTS:
            families["dlinfra_staging_last_run_result"].add(labels + (("result", state),), state == result)
    if result == "running":
        text, problem = read_small_file(os.path.join(dest, PROGRESS_NAME))
        progress = parse_progress(text) if text is not None else None
        if problem:
            problems.append(problem)
        elif text is not None and progress is None:
            problems.append("%s is not a progress document the engine writes (half-written, or another version)"
                            % os.path.join(dest, PROGRESS_NAME))
        elif progress is not None and progress.get("pid") == record.get("pid") and progress.get("run_id") == record.get("run_id"):
            done = progress.get("bytes_done")
            if isinstance(done, (int, float)) and not isinstance(done, bool) and done >= 0:
                families["dlinfra_staging_transferred_bytes_total"].add(labels, done)
    return problems


def collect_staging(families, index_path, procfs_root="/proc"):
    """Add the staging series of every dataset in the index at index_path to families; return the problems."""
    datasets, problem = load_index(index_path)
    problems = [problem] if problem else []
    if index_path and (datasets or problem or os.path.exists(index_path)):
        families["dlinfra_staging_index_up"].add((), not problem)
    points, points_problem = mount_points(procfs_root) if any(room for _name, _dest, room in datasets) else ([], None)
    for name, dest, room in datasets:
        found = _dataset(families, name, dest)
        if room:
            found.append(points_problem or _headroom(families, (("dataset", name),), dest, room, points))
        found = [text for text in found if text]
        families["dlinfra_staging_up"].add((("dataset", name),), not found)
        problems.extend("dataset %s: %s" % (name, text) for text in found)
    return problems
