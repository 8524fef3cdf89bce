# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record of a dest's last staging run: a small JSON document beside the journal that monitoring reads.

A run that holds dest's lock writes it once it knows its shards (result "running") and again when it ends, whichever
way (result "succeeded" or "failed"). It says when the run started and ended, and how many of the run's listed shards
(and their bytes) dest held against how many were listed. It is rewritten atomically without fsync (a view, not
state: the journal is the state). A record still "running" whose writer's pid is gone is a run that was killed
(``interrupted``, see ``run_result``). Check mode never writes it. The monitoring collector
(module_utils/staging_metrics.py) reads it with ``parse_last_run`` and never has to parse the journal.
"""

import json
import os
import time

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import write_atomically

LAST_RUN_NAME = ".shard_fetch.last_run"
LAST_RUN_VERSION = 1
RESULTS = ("running", "succeeded", "failed")
_COUNT_KEYS = ("shards_planned", "shards_held", "bytes_planned", "bytes_held", "shards_failed")


def held_and_planned(shards, journal):
    """(shards planned, bytes planned, shards held, bytes held) of a run's list in the journal.

    shards: the run's Shard list, or None while a re-run confirms dest from the journal alone (its entries are then
    the list). Bytes planned are None where a listed shard not held has no size."""
    if shards is None:
        count, size = journal.totals()
        return count, size, count, size
    entries = journal.entries
    held = planned_bytes = held_bytes = 0
    unknown = False
    for shard in shards:
        entry = entries.get(shard.name)
        if entry is not None:
            held += 1
            held_bytes += entry[0]
        if shard.size is not None:
            planned_bytes += shard.size
        elif entry is not None:
            planned_bytes += entry[0]
        else:
            unknown = True
    return len(shards), None if unknown else planned_bytes, held, held_bytes


class LastRun(object):
    """One run's record: written when the run starts and when it ends."""

    def __init__(self, dest, run_id, started):
        self.path = os.path.join(dest, LAST_RUN_NAME)
        self.run_id = run_id
        self.started = started
        self.error = None

    def document(self, result, counts, failed, ended=None):
        data = dict(version=LAST_RUN_VERSION, run_id=self.run_id, pid=os.getpid(), result=result,
                    started=round(self.started, 3), ended=None if ended is None else round(ended, 3), shards_failed=failed)
        data.update(zip(("shards_planned", "bytes_planned", "shards_held", "bytes_held"), counts))
        return data

    def write(self, result, counts, failed=0, ended=None):
        """Rewrite the record; a failure to write costs the monitoring view, never the run (kept in self.error)."""
        data = json.dumps(self.document(result, counts, failed, ended), sort_keys=True).encode("utf-8")
        try:
            write_atomically(self.path, data, sync=False)
        except OSError as exc:
            self.error = "cannot write the run record %s: %s; monitoring shows the run's previous state" % (
                self.path, exc.strerror or exc)

    def start(self, counts):
        self.write("running", counts)

    def finish(self, succeeded, counts, failed):
        self.write("succeeded" if succeeded else "failed", counts, failed, time.time())


def parse_last_run(text):
    """The record in text, or None when it is not one (half-written, another format, wrong types)."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("version") != LAST_RUN_VERSION or record.get("result") not in RESULTS:
        return None
    numbers = [record.get("started")] + [record.get(key) for key in _COUNT_KEYS] + [record.get("ended")]
    if record.get("started") is None or not all(value is None or _is_number(value) for value in numbers):
        return None
    if record.get("result") != "running" and record.get("ended") is None:
        return None
    return record


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def run_result(record, pid_alive):
    """The record's result, "interrupted" for a run still "running" whose writer (pid) is gone."""
    if record["result"] == "running" and not pid_alive(record.get("pid")):
        return "interrupted"
    return record["result"]
