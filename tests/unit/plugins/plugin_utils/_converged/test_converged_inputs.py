"""The inputs digest: each thing a role's full run reads on the controller changes it; nothing else does."""

import json

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged import inputs as ci

FACTS = {"distribution": "Debian", "distribution_version": "13.1", "kernel": "6.12.48+deb13-amd64",
         "architecture": "x86_64", "uptime_seconds": 5}


@pytest.fixture
def role(tmp_path):
    root = tmp_path / "ansible_collections" / "dlinfra" / "gpu_cluster"
    path = root / "roles" / "nccl"
    (path / "tasks").mkdir(parents=True)
    (path / "tasks" / "main.yml").write_text("---\n- name: Install\n")
    (path / "defaults").mkdir()
    (path / "defaults" / "main.yml").write_text("---\nnccl_version: 2.21.5\n")
    (path / "README.md").write_text("not read\n")
    (root / "galaxy.yml").write_text("namespace: dlinfra\nversion: 0.1.0\n")
    return path


def digest(role, variables=None, facts=None, inputs=None):
    return ci.inputs_digest(variables or {"nccl_version": "2.21.5"}, facts or FACTS, inputs,
                            ci.role_files_digest(str(role)), ci.collection_version(str(role)))


def test_the_role_public_variables_only():
    names = ["nccl_version", "nccl_tests_install", "__nccl_packages", "nccl", "anaconda_prefix", "ansible_facts"]
    assert ci.role_variables(names, "nccl") == ["nccl_tests_install", "nccl_version"]


def test_the_same_inputs_give_the_same_digest(role):
    assert digest(role) == digest(role)


def test_facts_outside_the_platform_do_not_count(role):
    assert digest(role, facts=dict(FACTS, uptime_seconds=900)) == digest(role)


@pytest.mark.parametrize("change", [
    lambda role: {"variables": {"nccl_version": "2.23.4"}},
    lambda role: {"facts": dict(FACTS, kernel="6.12.57+deb13-amd64")},
    lambda role: {"facts": dict(FACTS, distribution_version="13.2")},
    lambda role: {"inputs": {"gpus": ["10de:2335"]}},
    lambda role: (role / "tasks" / "main.yml").write_text("---\n- name: Install it\n") and {},
    lambda role: (role / "tasks" / "extra.yml").write_text("---\n") and {},
    lambda role: (role.parents[1] / "galaxy.yml").write_text("version: 0.2.0\n") and {},
])
def test_each_input_changes_the_digest(role, change):
    before = digest(role)
    assert digest(role, **change(role)) != before


def test_the_readme_does_not_count(role):
    before = digest(role)
    (role / "README.md").write_text("rewritten\n")
    assert digest(role) == before


def test_an_installed_collection_reads_its_manifest(role):
    (role.parents[1] / "galaxy.yml").unlink()
    (role.parents[1] / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": "1.2.3"}}))
    assert ci.collection_version(str(role)) == "1.2.3"


def test_no_version_file_is_an_empty_version(role):
    (role.parents[1] / "galaxy.yml").unlink()
    assert ci.collection_version(str(role)) == ""
