# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import json

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._train import job as train_job

DIGEST = "sha256:" + "a" * 64
SETTINGS = {"job": "yt8m", "job_root": "/var/lib/dlinfra/train", "dest": "/srv/ssd/yt8m", "checkpoint_dir": "",
            "command": [], "nproc_per_node": 0, "require_gpus": False, "master_addr": "", "master_port": 29500,
            "environment": {"USE_LIBUV": "0"}}


def world(host, node_rank, ranks=2, nodes=2, first=None, digest=DIGEST, rendezvous="gpu1"):
    first = node_rank * ranks if first is None else first
    return {"dataset": "yt8m", "node": host, "node_rank": node_rank, "nodes": nodes, "world_size": nodes * ranks,
            "rendezvous": rendezvous, "plan_digest": digest,
            "ranks": [{"local_rank": r, "global_rank": first + r, "list": "ranks/rank-%04d.txt" % r} for r in range(ranks)],
            "epoch": {"unit": "samples", "per_rank": 400, "unread": 0}}


def nodes(**overrides):
    found = {"gpu1": {"world": world("gpu1", 0), "probe": ["gpus 0"], "address": "10.0.0.1"},
             "gpu2": {"world": world("gpu2", 1), "probe": ["gpus 0"], "address": "10.0.0.2"}}
    for host, node in overrides.items():
        found[host] = dict(found.get(host, {"probe": [], "address": host}), **node)
    return found


def test_every_rank_gets_torchruns_environment_and_its_list():
    launch = train_job.launch("yt8m", nodes(), SETTINGS)
    assert launch["problems"] == []
    units = launch["units"]
    assert [unit["unit"] for unit in units["gpu2"]] == ["dlinfra-train-yt8m-rank-0002.service",
                                                        "dlinfra-train-yt8m-rank-0003.service"]
    env = units["gpu2"][1]["env"]
    assert env == {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                   "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
                   "DLINFRA_DATASET": "yt8m", "DLINFRA_HANDOFF": "/srv/ssd/yt8m",
                   "DLINFRA_RANK_LIST": "/srv/ssd/yt8m/ranks/rank-%04d.txt", "DLINFRA_WORLD": "/srv/ssd/yt8m/world.json",
                   "DLINFRA_PLAN_DIGEST": DIGEST, "DLINFRA_NODE_RANK": "1", "DLINFRA_FIRST_RANK": "2",
                   "DLINFRA_JOB_DIR": "/var/lib/dlinfra/train/yt8m",
                   "DLINFRA_CHECKPOINT_DIR": "/var/lib/dlinfra/train/yt8m/checkpoints", "USE_LIBUV": "0"}
    run = units["gpu2"][1]["systemd_run"]
    assert run[:5] == ["systemd-run", "--unit", "dlinfra-train-yt8m-rank-0003.service", "--property", "RemainAfterExit=yes"]
    assert "--setenv=RANK=3" in run


def test_master_addr_setting_wins_over_the_rendezvous_nodes_address():
    launch = train_job.launch("yt8m", nodes(), dict(SETTINGS, master_addr="ib0.gpu1"))
    assert {unit["env"]["MASTER_ADDR"] for units in launch["units"].values() for unit in units} == {"ib0.gpu1"}


def test_hosts_without_the_hand_off_start_nothing():
    launch = train_job.launch("yt8m", nodes(cpu1={"world": None}), SETTINGS)
    assert launch["problems"] == [] and sorted(launch["units"]) == ["gpu1", "gpu2"]


def test_two_clusters_are_two_worlds():
    other = "sha256:" + "b" * 64
    found = nodes(b1={"world": world("b1", 0, digest=other, rendezvous="b1"), "address": "10.1.0.1"},
                  b2={"world": world("b2", 1, digest=other, rendezvous="b1"), "address": "10.1.0.2"})
    launch = train_job.launch("yt8m", found, SETTINGS)
    assert launch["problems"] == []
    assert launch["units"]["b2"][0]["env"]["MASTER_ADDR"] == "10.1.0.1"


@pytest.mark.parametrize("found, settings, wanted", [
    (nodes(gpu1={"world": None}, gpu2={"world": None}), SETTINGS,
     "dataset yt8m: no host of the play (gpu1, gpu2) holds its hand-off"),
    ({"gpu1": nodes()["gpu1"]}, SETTINGS, "dataset yt8m: hosts gpu1 hold plan sha256:aaaaaaaaaaaa of 2 nodes, but the play "
                                          "lacks node rank(s) 1"),
    (nodes(gpu2={"world": world("gpu2", 1, digest="sha256:" + "c" * 64)}), SETTINGS, "lacks node rank(s) 0"),
    (nodes(gpu1={"world": dict(world("gpu1", 0), world_size=5)}, gpu2={"world": dict(world("gpu2", 1), world_size=5)}),
     SETTINGS, "the rank lists of gpu1, gpu2 add up to 4, the plan's world has 5"),
    (nodes(), dict(SETTINGS, nproc_per_node=4),
     "gpu1, dataset yt8m: train_nproc_per_node is 4, but its hand-off has 2 rank lists"),
    (nodes(gpu2={"probe": ["gpus 1"]}), dict(SETTINGS, require_gpus=True), "gpu2, dataset yt8m: 2 ranks but 1 GPU(s)"),
    (nodes(gpu2={"probe": ["staging", "gpus 0"]}), SETTINGS,
     "gpu2, dataset yt8m: a shard_staging run is still writing /srv/ssd/yt8m"),
    (nodes(gpu1={"probe": ["running dlinfra-train-yt8m-rank-0000.service"]}), SETTINGS,
     "gpu1: job yt8m is still running (dlinfra-train-yt8m-rank-0000.service); fix: wait for it, or stop it"),
    (nodes(), dict(SETTINGS, job="Big Job"), "train_job='Big Job' is not a job name"),
    (nodes(), dict(SETTINGS, command=["", "train.py"]), "train_command starts with an empty word"),
])
def test_each_refusal_names_the_host_the_dataset_and_the_fix(found, settings, wanted):
    launch = train_job.launch("yt8m", found, settings)
    assert launch["units"] == {}
    assert any(wanted in problem for problem in launch["problems"]), launch["problems"]
    assert all("fix:" in problem for problem in launch["problems"])


def test_gpus_do_not_matter_unless_required():
    assert train_job.launch("yt8m", nodes(gpu2={"probe": ["gpus 0"]}), SETTINGS)["problems"] == []


def test_every_problem_is_reported_at_once():
    found = nodes(gpu2={"probe": ["staging"]})
    problems = train_job.launch("yt8m", found, dict(SETTINGS, nproc_per_node=3, command=[""]))["problems"]
    assert len(problems) == 4  # the command, gpu1's and gpu2's rank counts, gpu2's staging run


def status(**state):
    return {"rc": 0, "stdout": json.dumps(dict({"running": [], "failed": [], "progress": {}}, **state))}


@pytest.mark.parametrize("result, wanted", [
    (status(progress={"0000": {"state": "done"}}), ""),
    (status(failed=["u3"]), "rank unit(s) failed: u3"),
    (status(running=["u1"]), "still running after train_timeout=60 s, now stopped"),
    (status(progress={"0001": {"rank": 1, "node": "gpu1", "state": "running", "step": 4}}),
     "rank(s) ended without finishing: rank 1 on gpu1: running"),
    ({"rc": 1, "stderr": "boom"}, "its status could not be read: boom"),
])
def test_outcome(result, wanted):
    assert train_job.outcome(result, 60) == wanted


def test_rank_line():
    line = train_job.rank_line({"rank": 2, "node": "gpu2", "state": "done", "step": 80, "steps": 40, "resumed_at": 40,
                                "samples_per_s": 49.7, "step_time_s": 0.2})
    assert line == "rank 2 on gpu2: done, step 80 of 40 an epoch, resumed at step 40, 49.7 samples/s, 0.2 s a step"
