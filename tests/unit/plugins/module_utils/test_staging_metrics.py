# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collector's staging series on files the staging engine itself wrote: stage() runs that succeed and fail, a
dataset with no run yet, a run in progress (the engine's own record and progress writers), a killed run, and files
that are half-written, planted or missing, each costing its own dataset only. The output passes the exposition
check and promtool check metrics (promtool: the session fixture of tests/unit/conftest.py)."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils import staging_metrics
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.last_run import LAST_RUN_NAME, LastRun
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import PROGRESS_NAME, Progress
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.gpu_metrics import collect
from exposition_check import parse_exposition, promtool_check_metrics

FAST = dict(backoff=0.001, backoff_max=0.01, timeout=5, retries=0)
KIB = 1024
COUNTS = dict(fetched=0, fetched_bytes=0, resumed=0, confirmed=0, verified=0, repaired=0, removed=0, from_peers=0)


def write_index(tmp_path, datasets):
    path = tmp_path / "datasets.json"
    path.write_text(json.dumps({"version": 1, "datasets": [{"name": name, "dest": str(dest)} for name, dest in datasets]}))
    return path


def scrape(tmp_path, index):
    """The collector's whole output (nvidia-smi 'false': no GPU here) parsed, its text and its problems."""
    text, problems = collect(command="false", sysfs_root=str(tmp_path / "sys"), procfs_root=str(tmp_path / "proc"),
                             kernel_log="", state_file="", staging_index=str(index))
    return parse_exposition(text), text, problems


def samples(families, name, **labels):
    return [value for sample_labels, value in families.get(name, {"samples": []})["samples"]
            if all(sample_labels.get(key) == wanted for key, wanted in labels.items())]


def one(families, name, **labels):
    found = samples(families, name, **labels)
    assert len(found) == 1, (name, labels, families.get(name))
    return found[0]


def result_of(families, dataset):
    (result,) = [labels["result"] for labels, value in families["dlinfra_staging_last_run_result"]["samples"]
                 if labels["dataset"] == dataset and value == 1]
    assert len(samples(families, "dlinfra_staging_last_run_result", dataset=dataset)) == len(staging_metrics.RESULTS)
    return result


@pytest.fixture
def three_datasets(tmp_path, make_shards, shard_server):
    """'good' staged whole, 'bad' with one shard its store does not have, 'new' listed but never run."""
    shards, _contents = make_shards({"a.tar": KIB, "b.tar": 2 * KIB, "c.tar": 3 * KIB})
    before = time.time()
    good = stage(shards, str(tmp_path / "good"), **FAST)
    missing = dict(shards[2], name="gone.tar", url=shard_server.url("gone.tar"))
    bad = stage(shards[:2] + [missing], str(tmp_path / "bad"), **FAST)
    assert (good["fetched"], good["failed_shards"], len(bad["failed_shards"])) == (3, [], 1)
    index = write_index(tmp_path, [("good", tmp_path / "good"), ("bad", tmp_path / "bad"), ("new", tmp_path / "new")])
    return index, before


def test_held_planned_and_last_run_of_staged_failed_and_unrun_datasets(tmp_path, three_datasets):
    index, before = three_datasets
    families, _text, problems = scrape(tmp_path, index)

    assert [problem for problem in problems if "staging" in problem or "dataset" in problem] == []
    assert one(families, "dlinfra_staging_index_up") == 1
    assert {labels["dataset"]: value for labels, value in families["dlinfra_staging_up"]["samples"]} == {
        "good": 1, "bad": 1, "new": 1}
    for state in ("held", "planned"):
        assert one(families, "dlinfra_staging_shards", dataset="good", state=state) == 3
        assert one(families, "dlinfra_staging_bytes", dataset="good", state=state) == 6 * KIB
    assert one(families, "dlinfra_staging_shards", dataset="bad", state="held") == 2
    assert one(families, "dlinfra_staging_shards", dataset="bad", state="planned") == 3
    assert one(families, "dlinfra_staging_bytes", dataset="bad", state="held") == 3 * KIB
    assert one(families, "dlinfra_staging_bytes", dataset="bad", state="planned") == 6 * KIB
    assert (result_of(families, "good"), result_of(families, "bad"), result_of(families, "new")) == (
        "succeeded", "failed", "none")
    assert one(families, "dlinfra_staging_last_run_failed_shards", dataset="bad") == 1
    assert one(families, "dlinfra_staging_last_run_failed_shards", dataset="good") == 0
    for dataset in ("good", "bad"):
        started = one(families, "dlinfra_staging_last_run_start_timestamp_seconds", dataset=dataset)
        ended = one(families, "dlinfra_staging_last_run_end_timestamp_seconds", dataset=dataset)
        assert before - 1 <= started <= ended <= time.time()
    # A dataset never run has a result (none) and nothing made up.
    for name in ("dlinfra_staging_shards", "dlinfra_staging_bytes", "dlinfra_staging_last_run_start_timestamp_seconds"):
        assert samples(families, name, dataset="new") == []
    assert "dlinfra_staging_transferred_bytes_total" not in families


def test_a_rerun_that_confirms_everything_records_a_new_end(tmp_path, make_shards):
    shards, _contents = make_shards({"a.tar": KIB, "b.tar": KIB})
    dest = str(tmp_path / "ds")
    stage(shards, dest, **FAST)
    first = json.loads((tmp_path / "ds" / LAST_RUN_NAME).read_text())
    second_result = stage(shards, dest, **FAST)
    second = json.loads((tmp_path / "ds" / LAST_RUN_NAME).read_text())
    assert (second_result["fetched"], second_result["confirmed"]) == (0, 2)
    assert second["ended"] >= second["started"] >= first["ended"]
    assert (second["result"], second["shards_held"], second["bytes_held"]) == ("succeeded", 2, 2 * KIB)


def test_a_running_run_exports_what_it_transferred_as_a_counter(tmp_path):
    dest = tmp_path / "ds"
    dest.mkdir()
    record = LastRun(str(dest), "ds-run1", time.time())
    record.start((4, 4 * KIB, 1, KIB))
    progress = Progress(str(dest / PROGRESS_NAME), 5.0, "ds-run1", 4, 3 * KIB, in_flight=lambda: 512)
    progress.write(dict(COUNTS, fetched=1, fetched_bytes=KIB, confirmed=1), [])
    families, text, problems = scrape(tmp_path, write_index(tmp_path, [("ds", dest)]))

    assert problems == ["false exited with 1: (no output)"]
    assert result_of(families, "ds") == "running"
    assert one(families, "dlinfra_staging_transferred_bytes_total", dataset="ds") == KIB + 512
    assert families["dlinfra_staging_transferred_bytes_total"]["type"] == "counter"
    assert one(families, "dlinfra_staging_shards", dataset="ds", state="held") == 1
    assert samples(families, "dlinfra_staging_last_run_end_timestamp_seconds", dataset="ds") == []
    # Another run's progress file (a killed run's, left behind) is not this run's transfer.
    progress.run_id = "ds-other"
    progress.write(dict(COUNTS, fetched=1, fetched_bytes=KIB), [])
    families, text, problems = scrape(tmp_path, write_index(tmp_path, [("ds", dest)]))
    assert "dlinfra_staging_transferred_bytes_total" not in families
    assert "dlinfra_staging_up{dataset=\"ds\"} 1" in text


def test_a_run_whose_process_is_gone_is_interrupted(tmp_path):
    dest = tmp_path / "ds"
    dest.mkdir()
    pid = os.fork()
    if pid == 0:
        try:
            LastRun(str(dest), "ds-run1", time.time()).start((2, 2 * KIB, 0, 0))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    families, _text, _problems = scrape(tmp_path, write_index(tmp_path, [("ds", dest)]))
    assert result_of(families, "ds") == "interrupted"
    assert one(families, "dlinfra_staging_up", dataset="ds") == 1


def test_half_written_and_planted_files_cost_their_dataset_only(tmp_path, three_datasets, promtool):
    _index, _before = three_datasets
    # A run in progress whose progress file is cut short, a record cut short, a FIFO where the record goes.
    cut = tmp_path / "cut"
    cut.mkdir()
    LastRun(str(cut), "cut-run", time.time()).start((2, 2 * KIB, 0, 0))
    progress = Progress(str(cut / PROGRESS_NAME), 5.0, "cut-run", 2, 2 * KIB)
    progress.write(dict(COUNTS), [])
    whole = (cut / PROGRESS_NAME).read_bytes()
    (cut / PROGRESS_NAME).write_bytes(whole[:len(whole) // 2])
    short = tmp_path / "short"
    short.mkdir()
    record = (tmp_path / "good" / LAST_RUN_NAME).read_bytes()
    (short / LAST_RUN_NAME).write_bytes(record[:len(record) // 2])
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(str(fifo / LAST_RUN_NAME))
    index = write_index(tmp_path, [("good", tmp_path / "good"), ("cut", cut), ("short", short), ("fifo", fifo)])

    started = time.monotonic()
    families, text, problems = scrape(tmp_path, index)
    assert time.monotonic() - started < 5

    assert {labels["dataset"]: value for labels, value in families["dlinfra_staging_up"]["samples"]} == {
        "good": 1, "cut": 0, "short": 0, "fifo": 0}
    assert result_of(families, "good") == "succeeded"
    assert result_of(families, "cut") == "running"  # the record is whole; only the progress file is not
    assert samples(families, "dlinfra_staging_last_run_result", dataset="short") == []
    assert samples(families, "dlinfra_staging_last_run_result", dataset="fifo") == []
    assert one(families, "dlinfra_staging_index_up") == 1
    staging = sorted(problem for problem in problems if problem.startswith("dataset "))
    assert [problem.split(":")[0] for problem in staging] == ["dataset cut", "dataset fifo", "dataset short"]
    assert "not a regular file" in staging[1] and "not a progress document" in staging[0]
    code, output = promtool_check_metrics(promtool, text)
    assert code == 0, output


def test_promtool_check_metrics_passes_on_the_staging_series(tmp_path, three_datasets, promtool):
    index, _before = three_datasets
    _families, text, _problems = scrape(tmp_path, index)
    code, output = promtool_check_metrics(promtool, text)
    assert code == 0, output


@pytest.mark.parametrize("content, problem", [
    (None, None),
    ("{\"version\": 1, \"datas", "is not JSON"),
    ("{\"version\": 9, \"datasets\": []}", "is not a version 1 dataset index"),
    ("{\"version\": 1, \"datasets\": [{\"name\": \"a\", \"dest\": \"relative\"}, {\"name\": \"b\", \"dest\": \"/b\"},"
     " {\"name\": \"b\", \"dest\": \"/c\"}]}", "2 entries without a name of their own"),
])
def test_the_index_absent_or_unusable(tmp_path, content, problem):
    index = tmp_path / "datasets.json"
    if content is not None:
        index.write_text(content)
    families, _text, problems = scrape(tmp_path, index)
    staging = [text for text in problems if str(index) in text]
    if content is None:
        assert staging == [] and not [name for name in families if name.startswith("dlinfra_staging_")]
        return
    assert len(staging) == 1 and problem in staging[0]
    assert one(families, "dlinfra_staging_index_up") == 0
    datasets = {labels["dataset"] for labels, _value in families.get("dlinfra_staging_up", {"samples": []})["samples"]}
    assert datasets == ({"b"} if "entries" in problem else set())


def test_no_index_configured_writes_no_staging_series(tmp_path):
    text, _problems = collect(command="false", sysfs_root=str(tmp_path), procfs_root=str(tmp_path), kernel_log="",
                              state_file="")
    assert "dlinfra_staging" not in text


def test_the_series_names_are_the_documented_ones():
    """Names the alert rules and the dashboard use: a rename is a breaking change, so it shows here."""
    assert sorted(staging_metrics.staging_families()) == [
        "dlinfra_staging_bytes", "dlinfra_staging_headroom_bytes", "dlinfra_staging_index_up",
        "dlinfra_staging_last_run_end_timestamp_seconds",
        "dlinfra_staging_last_run_failed_shards", "dlinfra_staging_last_run_result",
        "dlinfra_staging_last_run_start_timestamp_seconds", "dlinfra_staging_shards",
        "dlinfra_staging_transferred_bytes_total", "dlinfra_staging_up"]


# ---- the room the plan keeps free: dlinfra_staging_headroom_bytes ----------------------------------------------------

def mountinfo(*points):
    """A /proc/PID/mountinfo with one line per mount point (escaped as the kernel writes it)."""
    return "".join("%d 1 0:%d / %s rw,relatime - ext4 /dev/sd%d rw\n" % (20 + n, n, point, n) for n, point in enumerate(points))


def write_room_index(tmp_path, **entry):
    path = tmp_path / "datasets.json"
    path.write_text(json.dumps({"version": 1, "datasets": [dict({"name": "ds", "dest": str(tmp_path / "srv" / "ds")}, **entry)]}))
    return path


def fake_proc(tmp_path, tables):
    for pid, text in tables.items():
        (tmp_path / "proc" / pid).mkdir(parents=True)
        (tmp_path / "proc" / pid / "mountinfo").write_text(text)


def scrape_room(tmp_path, index):
    text, problems = collect(command="false", sysfs_root=str(tmp_path / "sys"), procfs_root=str(tmp_path / "proc"),
                             kernel_log="", state_file="", staging_index=str(index))
    return parse_exposition(text), problems


@pytest.mark.parametrize("tables, mountpoint", [
    # init's table wins over the unit's own (PrivateTmp, ProtectHome add mounts node exporter does not see)
    ({"1": mountinfo("/", "{srv}"), "self": mountinfo("/", "{srv}/ds")}, "{srv}"),
    ({"1": mountinfo("/", "{srv}x", "{srv}")}, "{srv}"),  # the longest mount that holds dest, not a name prefix
    ({"1": mountinfo("/", "{tmp}/a\\040b")}, "/"),  # \040: a space in another mount's name
    ({"self": mountinfo("/")}, "/"),  # no init's table to read: this process's
])
def test_headroom_bytes_of_a_dest_not_made_yet_on_its_mount(tmp_path, tables, mountpoint):
    (tmp_path / "srv").mkdir()
    srv, top = os.path.realpath(tmp_path / "srv"), os.path.realpath(tmp_path)
    fake_proc(tmp_path, {pid: text.format(srv=srv, tmp=top) for pid, text in tables.items()})
    families, problems = scrape_room(tmp_path, write_room_index(tmp_path, headroom=0.1, reserve_bytes=1000))

    stats = os.statvfs(tmp_path / "srv")  # dest (srv/ds) is not there yet: its filesystem is srv's
    assert [text for text in problems if "dataset" in text] == []
    assert one(families, "dlinfra_staging_headroom_bytes", dataset="ds", mountpoint=mountpoint.format(srv=srv)) == (
        math.ceil(0.1 * stats.f_blocks * stats.f_frsize) + 1000)
    assert one(families, "dlinfra_staging_up", dataset="ds") == 1


def test_a_space_in_the_mount_point_is_unescaped(tmp_path):
    spaced = tmp_path / "a b"
    spaced.mkdir()
    fake_proc(tmp_path, {"1": mountinfo("/", os.path.realpath(spaced).replace(" ", "\\040"))})
    index = tmp_path / "datasets.json"
    index.write_text(json.dumps({"version": 1, "datasets": [{"name": "ds", "dest": str(spaced), "headroom": 0.05}]}))
    families, _problems = scrape_room(tmp_path, index)
    assert len(samples(families, "dlinfra_staging_headroom_bytes", mountpoint=os.path.realpath(spaced))) == 1


@pytest.mark.parametrize("entry", [
    {},  # an index written before shard_staging recorded the plan's headroom
    {"headroom": 1.0}, {"headroom": -0.1}, {"headroom": "0.05"}, {"headroom": True},
    {"headroom": 0.05, "reserve_bytes": -1}, {"headroom": 0.05, "reserve_bytes": "1G"},
    {"headroom": 0.05, "reserve_bytes": 1.5}, {"headroom": 0.05, "reserve_bytes": float("inf")},
    {"headroom": float("nan")},
])
def test_no_headroom_series_without_a_usable_headroom(tmp_path, entry):
    families, problems = scrape_room(tmp_path, write_room_index(tmp_path, **entry))
    assert samples(families, "dlinfra_staging_headroom_bytes") == []
    assert [text for text in problems if "dataset" in text] == []
    assert one(families, "dlinfra_staging_up", dataset="ds") == 1


def test_an_unreadable_mount_table_costs_the_headroom_and_says_so(tmp_path):
    families, problems = scrape_room(tmp_path, write_room_index(tmp_path, headroom=0.05))
    assert samples(families, "dlinfra_staging_headroom_bytes") == []
    assert one(families, "dlinfra_staging_up", dataset="ds") == 0
    (problem,) = [text for text in problems if "dataset ds" in text]
    assert "could not read %s" % (tmp_path / "proc" / "1" / "mountinfo") in problem
