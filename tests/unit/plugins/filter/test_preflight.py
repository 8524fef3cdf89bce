import pathlib
import subprocess
import sys

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.preflight import host_problems, inventory_problems

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
SETTINGS = {
    "supported_platforms": {"Debian": ["12", "13"], "Ubuntu": ["22", "24"]},
    "required_groups": ["head", "gpu_nodes"],
    "cluster_group_pattern": "^cluster_",
    "stage_targets_group": "stage_targets",
    "head_group": "head",
}
GOOD_GROUPS = {
    "all": ["h1", "w1", "w2"],
    "head": ["h1"],
    "gpu_nodes": ["w1", "w2"],
    "cluster_a": ["h1", "w1", "w2"],
    "stage_targets": ["w1", "w2"],
}


def facts(distribution="Debian", major="12", hostname=None):
    return {"ansible_facts": {"distribution": distribution, "distribution_major_version": major,
                              "distribution_version": major, "hostname": hostname}}


def test_good_inventory_has_no_problems():
    assert inventory_problems(GOOD_GROUPS, SETTINGS) == []


@pytest.mark.parametrize("change, expected", [
    ({"gpu_nodes": []}, "inventory: required group 'gpu_nodes' is missing or empty"),
    ({"cluster_b": ["w2"]}, "w2: in 2 clusters (cluster_a and cluster_b); fix: keep the host in exactly one cluster group"),
    ({"stage_targets": ["w1", "x9"]}, "x9: a staging target ([stage_targets]) that is in no cluster"),
    ({"head": ["h1", "w1"]}, "cluster_a: [head] holds 2 control planes (h1, w1), an even number has no quorum; fix: use 1, 3 or 5"),
])
def test_each_inventory_problem_is_named(change, expected):
    problems = inventory_problems(dict(GOOD_GROUPS, **change), SETTINGS)
    assert len(problems) == 1
    assert problems[0].startswith(expected)


def test_quorum_is_counted_per_cluster():
    groups = dict(GOOD_GROUPS, head=["h1", "h2"], cluster_b=["h2"])
    assert inventory_problems(groups, SETTINGS) == []
    groups = dict(GOOD_GROUPS, head=["h1", "w1", "h2", "h3"], cluster_b=["h2", "h3"])
    assert [p.split(":")[0] for p in inventory_problems(groups, SETTINGS)] == ["cluster_a", "cluster_b"]


def test_three_heads_have_quorum_and_empty_settings_skip_checks():
    assert inventory_problems(dict(GOOD_GROUPS, head=["h1", "w1", "w2"]), SETTINGS) == []
    assert inventory_problems({"head": ["a", "b"], "stage_targets": ["c"]}, {"stage_targets_group": "", "head_group": ""}) == []


def test_all_problems_are_reported_together():
    groups = dict(GOOD_GROUPS, cluster_b=["w1"], head=["h1", "w2"], gpu_nodes=[])
    assert len(inventory_problems(groups, SETTINGS)) == 3


@pytest.mark.parametrize("distribution, major, ok", [
    ("Debian", "12", True), ("Debian", "13", True), ("Debian", "11", False), ("Ubuntu", "24", True), ("CentOS", "9", False),
])
def test_supported_platforms(distribution, major, ok):
    problems = host_problems({"n1": facts(distribution, major, "n1")}, ["n1"], SETTINGS)
    assert (problems == []) is ok
    if not ok:
        assert problems[0].startswith("n1: %s %s is not supported (supported: Debian 12, 13; Ubuntu 22, 24)" % (distribution, major))


def test_duplicate_hostnames_name_every_host():
    hostvars = {"a": facts(hostname="node"), "b": facts(hostname="node"), "c": facts(hostname="other")}
    assert host_problems(hostvars, ["c", "b", "a"], SETTINGS) == [
        "a, b: all report the hostname 'node'; fix: give each host a unique name (hostnamectl set-hostname)"]


def test_host_without_facts_is_a_problem():
    assert host_problems({"n1": {}}, ["n1"], SETTINGS)[0].startswith("n1: no facts were gathered")


def test_filter_runs_in_a_playbook(tmp_path):
    """The filter is found by its FQCN and reports through a real play (no connection needed)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    cluster_a: {hosts: {n1: {ansible_connection: local}}}\n"
                         "    cluster_b: {hosts: {n1: {}}}\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n"
        "        msg: \"{{ hostvars | dlinfra.gpu_cluster.preflight_problems(groups, [], {'cluster_group_pattern': '^cluster_'}) }}\"\n")
    out = subprocess.run([sys.executable, "-m", "ansible", "playbook", "-i", str(inventory), str(playbook)],
                         capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    assert "n1: in 2 clusters (cluster_a and cluster_b)" in out.stdout, out.stdout + out.stderr
