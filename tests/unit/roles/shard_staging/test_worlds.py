# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The worlds shard_staging writes on the heads (tasks/worlds.yml), rendered by Ansible's own templating: each node's
goes to the heads of its own cluster, and what it writes is what kubetpl's job builder takes."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_training_jobs import training_job
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan
from role_vars import defaults, load, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "shard_staging"
GROUPS = {
    "all": ["head-a1", "head-a2", "dgx01", "dgx02", "head-b1", "ws01", "lonely-head", "lonely1"],
    "cluster_a": ["head-a1", "head-a2", "dgx01", "dgx02"],
    "rack_a1": ["head-a1", "head-a2", "dgx01", "dgx02"],
    "cluster_b": ["head-b1", "ws01"],
    "head": ["head-a1", "head-a2", "head-b1", "lonely-head"],
    "ungrouped": ["lonely-head", "lonely1"],
}


def templar(host, **overrides):
    variables = {}
    variables.update(defaults(ROLE))
    variables.update(load(ROLE / "vars" / "main.yml"))
    variables.update({"inventory_hostname": host, "groups": GROUPS,
                      "group_names": sorted(g for g, hosts in GROUPS.items() if host in hosts and g != "all")})
    variables.update(trust(overrides))
    return Templar(loader=DataLoader(), variables=variables)


def resolve(the_templar, expression):
    return the_templar.template(trust("{{ %s }}" % expression))


@pytest.mark.parametrize("host, heads", [
    ("dgx01", ["head-a1", "head-a2"]),
    ("ws01", ["head-b1"]),
    ("lonely1", ["lonely-head"]),  # targets in no cluster group form a cluster with the heads in none
])
def test_each_node_writes_to_the_heads_of_its_own_cluster(host, heads):
    assert resolve(templar(host), "__shard_staging_heads") == heads


def test_no_head_group_writes_nowhere():
    assert resolve(templar("dgx01", shard_staging_head_group="control"), "__shard_staging_heads") == []


def write_task():
    tasks = yaml.safe_load((ROLE / "tasks" / "worlds.yml").read_text())
    return next(task for task in tasks if "ansible.builtin.copy" in task)


def test_the_written_worlds_are_what_kubetpl_makes_a_job_from():
    """Each node renders its file as the task does; the files of a cluster make a job pinned node by node."""
    task = write_task()
    assert task["ansible.builtin.copy"]["dest"] == \
        "{{ shard_staging_worlds_dir }}/{{ __shard_staging_dataset_name }}/{{ inventory_hostname }}.json"
    assert task["loop"] == "{{ __shard_staging_heads }}" and task["delegate_to"] == "{{ item }}"
    records = [{"name": "s-%d.tar" % i, "url": "http://store/s-%d.tar" % i, "size": 10, "sha256": "0" * 64,
                "samples": 5} for i in range(8)]
    plan = make_plan({"name": "yt8m-mini", "mode": "partition"}, records,
                     {"dgx01": {"free_bytes": 1 << 30, "ranks": 2}, "dgx02": {"free_bytes": 1 << 30, "ranks": 2}})
    entries = []
    for host, facts, counted in (("dgx01", {"nodename": "DGX01", "nvidia_gpu": {"gpu_count": 1}}, {"gpu_count": 8}),
                                 ("dgx02", {}, {"skipped": True})):
        the_templar = templar(host, ansible_facts=facts, __shard_staging_dataset_name="yt8m-mini",
                              __shard_staging_world_gpus=counted,
                              __shard_staging_plan={"datasets": {"yt8m-mini": plan}},
                              __shard_staging_space={"results": [
                                  {"item": {"name": "other"}, "dest": "/srv/other"},
                                  {"item": {"name": "yt8m-mini"}, "dest": "/srv/ssd/yt8m-mini"}]})
        entries.append(json.loads(the_templar.template(trust(task["ansible.builtin.copy"]["content"]))))
    assert entries[0] == {"world": plan["nodes"]["dgx01"]["world"], "dest": "/srv/ssd/yt8m-mini", "hostname": "dgx01",
                          "gpus": 8}
    # The GPU count is the task's own reading, not what facts an earlier role left; without facts, the inventory name,
    # and without a reading, no GPU count to check against.
    assert entries[1]["hostname"] == "dgx02" and entries[1]["gpus"] is None
    jobs = training_job("train", "nvcr.io/nvidia/pytorch:24.10-py3", "train.py", "yt8m-mini", entries)[1:]
    assert [job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for job in jobs] == ["dgx01", "dgx02"]
