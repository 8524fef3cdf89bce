# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.training import training_checks

BATCH = 2


def rank(number, local, steps=2, **changes):
    item = {"rank": number, "local_rank": local, "node": "gpu%d" % (number // 2 + 1), "state": "done", "steps": steps,
            "batch_size": BATCH, "backend": "gloo", "allreduce_ok": True, "replicas_equal": True,
            "samples_per_s": 50.0 + number, "step_time_s": 0.04}
    item.update(changes)
    return item


def node(first, reads=None, dataset="yt8m", error="", floor=0.0, progress_changes=None):
    """A node of two ranks (first, first + 1); each rank reads its own shard's samples unless reads says."""
    progress = {"%04d" % r: rank(r, r - first, **(progress_changes or {}).get(r, {})) for r in (first, first + 1)}
    reads = reads or {r: ["shard-%d/s%d" % (r, k) for k in range(2 * BATCH)] for r in (first, first + 1)}
    return {"expected": {"training_dataset": dataset, "training_min_samples_per_s": floor},
            "training": {"ran": True, "error": error, "status": {
                "progress": progress,
                "samples": {"rank-%04d.epoch-0.txt" % r: lines for r, lines in reads.items()}}}}


def world(**nodes):
    found = {"gpu1": node(0), "gpu2": node(2)}
    found.update(nodes)
    return found


def by_name(checks):
    return {item["check"]: item for item in checks}


def test_a_good_world_passes_with_each_ranks_figures():
    nodes = world()
    checks, per_rank = training_checks("gpu2", nodes["gpu2"], nodes, replicated=False)
    found = by_name(checks)
    assert found["training.ddp"]["status"] == "pass"
    assert "2 rank(s) here of a world of 4 (gloo): 2 steps each, 16 samples read once each within the world" \
        in found["training.ddp"]["message"]
    assert found["training.samples_per_second"]["status"] == "pass"
    assert found["training.samples_per_second"]["measured"] == "52.0"
    assert [(item["rank"], item["samples_per_s"]) for item in per_rank] == [(2, 52.0), (3, 53.0)]


def test_a_sample_read_twice_across_the_world_fails_naming_it_and_its_ranks():
    overlap = {2: ["shard-0/s0"] + ["shard-2/s%d" % k for k in range(1, 4)], 3: ["shard-3/s%d" % k for k in range(4)]}
    nodes = world(gpu2=node(2, reads=overlap))
    found = by_name(training_checks("gpu1", nodes["gpu1"], nodes, replicated=False)[0])
    assert found["training.ddp"]["status"] == "fail"
    assert "1 sample(s) were read more than once within the world in one epoch (shard-0/s0 by ranks 0, 2)" \
        in found["training.ddp"]["message"]
    assert found["training.samples_per_second"]["status"] == "skip"


def test_a_replicated_dataset_is_read_once_per_node_not_per_world():
    same = {r: ["shard-%d/s%d" % (r % 2, k) for k in range(4)] for r in (2, 3)}
    nodes = world(gpu2=node(2, reads=same))
    assert by_name(training_checks("gpu2", nodes["gpu2"], nodes, replicated=True)[0])["training.ddp"]["status"] == "pass"
    assert by_name(training_checks("gpu2", nodes["gpu2"], nodes, replicated=False)[0])["training.ddp"]["status"] == "fail"


@pytest.mark.parametrize("changes, wanted", [
    ({3: {"steps": 3}}, "rank 2 took 2 steps, the world 2; rank 3 took 3 steps"),
    ({2: {"allreduce_ok": False}}, "rank 2: the all-reduce of a known tensor was wrong"),
    ({3: {"replicas_equal": False}}, "rank 3: its weights differ from the other ranks' after training"),
    ({3: {"state": "failed", "error": "RuntimeError: boom"}}, "rank 3 ended failed: RuntimeError: boom"),
])
def test_each_rank_property_fails_the_check(changes, wanted):
    nodes = world(gpu2=node(2, progress_changes=changes))
    message = by_name(training_checks("gpu2", nodes["gpu2"], nodes, replicated=False)[0])["training.ddp"]["message"]
    assert wanted.split("; ")[-1] in message


def test_a_rank_that_read_fewer_samples_than_its_steps_fails():
    short = {2: ["shard-2/s0"], 3: ["shard-3/s%d" % k for k in range(4)]}
    nodes = world(gpu2=node(2, reads=short))
    message = by_name(training_checks("gpu2", nodes["gpu2"], nodes, replicated=False)[0])["training.ddp"]["message"]
    assert "rank 2 read 1 samples, its 2 steps of 2 take 4" in message


def test_a_job_that_did_not_run_fails_quoting_why():
    nodes = world(gpu1=node(0, error="train: nothing was started: dataset yt8m: a staging run holds it"))
    nodes["gpu1"]["training"]["status"] = {}
    found = by_name(training_checks("gpu1", nodes["gpu1"], nodes, replicated=False)[0])
    assert found["training.ddp"]["status"] == "fail"
    assert "did not run to the end: train: nothing was started: dataset yt8m: a staging run holds it" \
        in found["training.ddp"]["message"]


def test_the_floor_fails_the_slowest_rank():
    nodes = world(gpu1=node(0, floor=50.5))
    found = by_name(training_checks("gpu1", nodes["gpu1"], nodes, replicated=False)[0])
    assert found["training.ddp"]["status"] == "pass"
    assert found["training.samples_per_second"]["status"] == "fail"
    assert "slowest rank 0: 50.0 samples/s" in found["training.samples_per_second"]["message"]
    assert "validate_training_min_samples_per_s 50.5" in found["training.samples_per_second"]["message"]


def test_without_a_dataset_or_a_hand_off_both_checks_skip_saying_why():
    unset = node(0, dataset="")
    assert {item["status"] for item in training_checks("gpu1", unset, {"gpu1": unset}, False)[0]} == {"skip"}
    assert "validate_training_dataset is not set" in training_checks("gpu1", unset, {"gpu1": unset}, False)[0][0]["message"]
    bare = node(0)
    bare["training"]["status"] = {"progress": {}, "samples": {}}
    checks = training_checks("gpu1", bare, {"gpu1": bare}, False)[0]
    assert [item["status"] for item in checks] == ["skip", "skip"]
    assert "holds no hand-off of yt8m" in checks[0]["message"]
