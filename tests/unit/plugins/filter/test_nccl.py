# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl_problems filter reaches plugin_utils and turns a missing or unknown key into a filter error."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nccl import (
    FilterModule, nccl_gpudirect_plan, nccl_problems, nccl_rdma_availability_problem, nccl_run_problem, nccl_skip_reason)

SETTINGS = {
    "distribution": "Debian", "major_version": "13", "releases": ["12", "13"], "default_source": "distribution",
    "distribution_cuda": "12.4", "source": "distribution", "version": "2.22.3", "cuda_version": "", "conf_extra": {},
    "conf": [], "tests_install": False, "tests_sha256": "", "tests_src": "", "tests_url": "https://example/t.tar.gz",
    "tests_nvcc": "/usr/bin/nvcc", "tests_mpi": False, "validate": False, "validate_multinode": False,
    "package_manager": "apt", "rdma": "auto", "rdma_wanted": False, "rdma_versions": {"rdma_core": "", "perftest": ""},
}


def test_the_filter_is_exposed():
    assert FilterModule().filters() == {"nccl_problems": nccl_problems, "nccl_skip_reason": nccl_skip_reason,
                                        "nccl_run_problem": nccl_run_problem,
                                        "nccl_rdma_availability_problem": nccl_rdma_availability_problem,
                                        "nccl_gpudirect_plan": nccl_gpudirect_plan}


def test_the_gpudirect_plan_takes_an_empty_flavor_as_no_planned_driver():
    assert nccl_gpudirect_plan("auto", True, "", "6.12.0")["note"].startswith("no GPUDirect RDMA yet")
    assert nccl_gpudirect_plan(True, True, "open", "6.12.0")["method"] == "dmabuf"


def test_the_filter_returns_the_lines():
    assert nccl_problems(SETTINGS, {"nvcc_exists": False}) == []
    assert nccl_problems(dict(SETTINGS, version="2.22"), {}) == [
        "nccl_version='2.22' is not an NCCL release (major.minor.patch, for example 2.22.3)"]


def test_a_missing_or_unknown_key_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="nccl_problems: 'version'"):
        nccl_problems({key: value for key, value in SETTINGS.items() if key != "version"}, {})
    with pytest.raises(AnsibleFilterError, match="nccl_problems: found has unknown key.s. nvcc"):
        nccl_problems(SETTINGS, {"nvcc": True})


def test_the_rdma_availability_filter_reads_madison_lines_for_the_host():
    versions = {"rdma_core": "56.1-1", "perftest": "25.01.0+0.80-1"}
    assert nccl_rdma_availability_problem([" rdma-core | 56.1-1 | x", " perftest | 25.01.0+0.80-1 | x"], "n1", versions) == ""
    assert nccl_rdma_availability_problem([], "n1", versions).startswith("n1: the apt sources have no rdma-core 56.1-1")
