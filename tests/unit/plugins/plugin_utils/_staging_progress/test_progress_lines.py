# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lines shard_fetch_wait prints: a node's progress, the cluster total, the summary at a node's end."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_progress.lines import (
    eta_seconds, final_progress, human_duration, progress_line, summary_line, total_line)

TB = 10 ** 12
RUNNING = dict(phase="transfer", shards_done=1234, shards_total=10000, bytes_done=int(1.2 * TB), bytes_total=int(9.8 * TB),
               rate=1.1 * 10 ** 9, failed=0)


# The collection's one byte formatter (module_utils/byte_units.py): binary units, as the plan summary of the same run.
@pytest.mark.parametrize("count, text", [(0, "0 B"), (999, "999 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (524288, "512.0 KiB"),
                                         (2097152, "2.0 MiB"), (int(1.2 * TB), "1.1 TiB"), (None, "0 B")])
def test_human_bytes(count, text):
    assert human_bytes(count) == text


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (44.6, "45s"), (200, "3m 20s"), (7800, "2h 10m"), (3 * 86400 + 4 * 3600 + 59, "3d 4h"),
                                           (-5, "0s")])
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def test_a_progress_line_has_shards_bytes_rate_and_eta():
    assert progress_line("gpu1", "yt8m", RUNNING) == "gpu1 yt8m: 1,234/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m"


@pytest.mark.parametrize("change, tail", [
    (dict(rate=0), "0 B/s, ETA unknown"),
    (dict(failed=3), "1.0 GiB/s, ETA 2h 10m, 3 failed"),
    (dict(phase="finishing", bytes_done=int(9.8 * TB)), "8.9 TiB/8.9 TiB, transfers done, finishing"),
    (dict(bytes_total=0, bytes_done=0), "1,234/10,000 shards, 0 B, 1.0 GiB/s, ETA unknown"),
])
def test_a_progress_line_says_what_it_cannot_tell(change, tail):
    assert progress_line("gpu1", "yt8m", dict(RUNNING, **change)).endswith(tail)


def test_eta_is_the_bytes_left_at_the_current_rate():
    assert eta_seconds(dict(bytes_total=1000, bytes_done=400, rate=100)) == 6
    assert eta_seconds(dict(bytes_total=1000, bytes_done=1000, rate=0)) == 0
    assert eta_seconds(dict(bytes_total=1000, bytes_done=400, rate=0)) is None


def test_the_total_sums_the_nodes_and_waits_for_the_slowest():
    entries = {"gpu1": RUNNING,
               "gpu2": dict(RUNNING, bytes_done=int(8.8 * TB), rate=10 ** 9, failed=2),
               "gpu3": final_progress(None, dict(fetched=9000, confirmed=1000, total=10000, fetched_bytes=int(9.8 * TB)))}
    line = total_line("yt8m", entries, 4)
    assert line == ("all yt8m: 12,468/30,000 shards, 18.0 TiB/26.7 TiB, 2.0 GiB/s, ETA 2h 10m, 2 failed "
                    "(3 of 4 nodes reporting, 1 done)")


def test_the_summary_line_from_the_result():
    result = dict(fetched=1234, resumed=12, confirmed=8766, removed=0, failed_shards=[], elapsed=7800.0, fetched_bytes=int(9.8 * TB),
                  throughput=1.1 * 10 ** 9)
    assert summary_line("gpu1", "yt8m", result) == ("gpu1 yt8m: done in 2h 10m, 1,234 fetched (12 resumed), 8,766 confirmed, "
                                                    "0 removed, 0 failed, 8.9 TiB at 1.0 GiB/s")
    assert summary_line("gpu1", "yt8m", dict(failed=True, msg="dest is not writable")) is None
