# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl role's platform data, preflight checks and files, rendered by Ansible's own templating.

Only Debian runs in molecule (NVIDIA's repository, Ubuntu's and EL's archives are unreachable from the test machines),
so the CUDA-repository version patterns, package lists, build settings and preflight problems of every platform are
checked here, from the role's defaults, vars/main.yml and the platform file tasks/main.yml would load.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nccl import nccl_skip_reason
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl import preflight as nccl_preflight
from role_vars import defaults, load, platform_file, trust

pytestmark = pytest.mark.usefixtures("ansible_plugin_loader")  # nccl.conf asks the gpudirect plan filter

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "nccl"

PLATFORMS = {
    # id: (distribution, major, os_family)
    "debian12": ("Debian", "12", "Debian"),
    "debian13": ("Debian", "13", "Debian"),
    "ubuntu2204": ("Ubuntu", "22", "Debian"),
    "ubuntu2404": ("Ubuntu", "24", "Debian"),
    "rocky8": ("Rocky", "8", "RedHat"),
    "rhel9": ("RedHat", "9", "RedHat"),
    "debian11": ("Debian", "11", "Debian"),
}

# Package versions as the sources list them: Debian 13's archive, NVIDIA's apt and dnf repositories.
DEBIAN_ARCHIVE = ["2.22.3-1-1"]
CUDA_APT = ["2.23.4-1+cuda12.6", "2.22.3-1+cuda12.6", "2.22.3-1+cuda12.5", "2.22.3-1+cuda12.4", "2.21.5-1+cuda12.4"]


def role_templar(platform, nvcc=True, **overrides):
    distribution, major, os_family = PLATFORMS[platform]
    variables = {}
    variables.update(defaults(ROLE))
    variables.update(trust(overrides))  # inventory, below role vars
    variables.update(load(ROLE / "vars" / "main.yml"))
    variables.update(load(platform_file(ROLE, distribution, major, os_family)))
    variables.update({
        "ansible_facts": {"distribution": distribution, "distribution_major_version": major, "os_family": os_family,
                          "architecture": "x86_64"},
        "ansible_managed": "Ansible managed: do not edit",
        "inventory_hostname": "gpu01",
        "__nccl_nvcc": {"stat": {"exists": nvcc}},
        "__nccl_package_version": "2.22.3-1-1",
    })
    return Templar(loader=DataLoader(), variables=variables)


def resolve(templar, name):
    return templar.template(trust("{{ %s }}" % name))


def render(templar, template):
    return templar.template(trust((ROLE / "templates" / template).read_text()))


def preflight_problems(templar):
    """The problem list of preflight's fail task: its settings and findings gathered by its own task vars, handed to
    the Python its filter (nccl_problems) wraps."""
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    task_vars = next(task["vars"] for task in tasks if "ansible.builtin.fail" in task)
    assert task_vars["__nccl_problems"] == "{{ __nccl_settings | dlinfra.gpu_cluster.nccl_problems(__nccl_found) }}"
    templar = templar.copy_with_new_env(available_variables=dict(templar.available_variables, **trust(task_vars)))
    return nccl_preflight.preflight_problems(resolve(templar, "__nccl_settings"), resolve(templar, "__nccl_found"))


# Sources and versions -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("platform, source", [
    ("debian12", "none"), ("debian13", "distribution"), ("ubuntu2204", "cuda"), ("ubuntu2404", "cuda"),
    ("rocky8", "cuda"), ("rhel9", "cuda"), ("debian11", "unsupported")])
def test_default_source(platform, source):
    assert resolve(role_templar(platform), "__nccl_source_effective") == source


@pytest.mark.parametrize("platform, overrides, available, expected", [
    # Debian 13's archive build of 2.22.3.
    ("debian13", {}, DEBIAN_ARCHIVE, ["2.22.3-1-1"]),
    # The CUDA repository: only the build for the asked CUDA version, never a neighbour's.
    ("debian12", {"nccl_source": "cuda", "nccl_cuda_version": "12.4"}, CUDA_APT, ["2.22.3-1+cuda12.4"]),
    ("ubuntu2404", {"nccl_cuda_version": "12.6"}, CUDA_APT, ["2.22.3-1+cuda12.6"]),
    ("ubuntu2204", {"nccl_cuda_version": "12.6", "nccl_version": "2.23.4"}, CUDA_APT, ["2.23.4-1+cuda12.6"]),
    ("rhel9", {"nccl_cuda_version": "12.1"}, CUDA_APT, []),
    # The dots are literal: 2.22.3 must not match 2x22y3.
    ("debian13", {}, ["2x22y3-1-1"], []),
])
def test_version_pattern_picks_the_pinned_build(platform, overrides, available, expected):
    pattern = resolve(role_templar(platform, **overrides), "__nccl_version_pattern")
    assert [version for version in available if re.match(pattern, version)] == expected


@pytest.mark.parametrize("platform, dev, expected", [
    ("debian13", True, ["libnccl2", "libnccl-dev"]),
    ("debian13", False, ["libnccl2"]),
    ("ubuntu2404", True, ["libnccl2", "libnccl-dev"]),
    ("rocky8", True, ["libnccl", "libnccl-devel"]),
])
def test_packages(platform, dev, expected):
    assert resolve(role_templar(platform, nccl_dev=dev), "__nccl_package_list") == expected


def test_apt_preferences_pin_both_packages_to_the_version():
    text = render(role_templar("debian13"), "nccl.pref.j2")
    assert "\nPackage: libnccl2 libnccl-dev\nPin: version 2.22.3-1-1\nPin-Priority: 1001\n" in text
    assert text.startswith("Explanation: ")


# nccl.conf ------------------------------------------------------------------------------------------------------

def test_nccl_conf_sorted_named_settings_win_and_empty_ones_are_left_out():
    templar = role_templar("debian13", nccl_socket_ifname="ib0", nccl_debug="", nccl_ib_hca="mlx5_0:1",
                           nccl_conf_extra={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_GID_INDEX": 3})
    lines = render(templar, "nccl.conf.j2").splitlines()
    assert lines[0].startswith("# Ansible managed")
    assert [line for line in lines if not line.startswith("#")] == [
        "NCCL_IB_GID_INDEX=3", "NCCL_IB_HCA=mlx5_0:1", "NCCL_SOCKET_IFNAME=ib0"]


def test_nccl_conf_without_settings_holds_comments_only():
    lines = render(role_templar("debian13"), "nccl.conf.j2").splitlines()
    assert lines and all(line.startswith("#") for line in lines)


# nccl-tests build -------------------------------------------------------------------------------------------------

SHA = "0123456789abcdef" * 4


@pytest.mark.parametrize("platform, overrides, expected", [
    ("debian13", {}, ["CUDA_HOME=/usr", "CUDA_LIB=/usr/lib/x86_64-linux-gnu",
                      "BUILDDIR=/opt/nccl-tests/build/2.17.8-0123456789ab"]),
    ("ubuntu2404", {"nccl_tests_mpi": True}, [
        "CUDA_HOME=/usr/local/cuda", "CUDA_LIB=/usr/local/cuda/lib64", "BUILDDIR=/opt/nccl-tests/build/2.17.8-0123456789ab-mpi",
        "MPI=1", "MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi"]),
    ("rhel9", {"nccl_tests_mpi": True, "nccl_tests_cuda_home": "/usr/local/cuda-12.4",
               "nccl_tests_make_args": ["NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"]}, [
        "CUDA_HOME=/usr/local/cuda-12.4", "CUDA_LIB=/usr/local/cuda-12.4/lib64",
        "BUILDDIR=/opt/nccl-tests/build/2.17.8-0123456789ab-mpi", "MPI=1", "MPI_HOME=/usr/lib64/openmpi",
        "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"]),
])
def test_make_variables(platform, overrides, expected):
    templar = role_templar(platform, nccl_tests_sha256=SHA, **overrides)
    assert resolve(templar, "__nccl_tests_make_vars") == expected


def test_default_archive_is_nvidias_tag_and_a_mirror_replaces_it():
    assert resolve(role_templar("debian13"), "__nccl_tests_url") == \
        "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.8.tar.gz"
    mirror = "http://mirror.lab.example/nccl-tests/v2.17.8.tar.gz"
    assert resolve(role_templar("debian13", nccl_tests_url=mirror), "__nccl_tests_url") == mirror


# Preflight ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("platform, overrides", [
    ("debian13", {}),
    ("debian13", {"nccl_cuda_version": "12.4"}),
    ("debian12", {"nccl_source": "cuda", "nccl_cuda_version": "12.4"}),
    ("ubuntu2204", {"nccl_cuda_version": "12.6"}),
    ("rocky8", {"nccl_cuda_version": "12.6", "nccl_tests_install": True, "nccl_tests_sha256": SHA}),
    ("debian13", {"nccl_validate": True, "nccl_validate_multinode": True, "nccl_tests_mpi": True}),
])
def test_good_settings_pass_preflight(platform, overrides):
    assert preflight_problems(role_templar(platform, **overrides)) == []


@pytest.mark.parametrize("platform, overrides, expected", [
    ("debian12", {}, "Debian 12 has no NCCL package in its archive (Debian 13 is the first with libnccl2, in contrib);"
                     " set nccl_source: cuda and nccl_cuda_version to the cluster's CUDA release (for example 12.4), with"
                     " NVIDIA's CUDA repository"),
    ("debian12", {"nccl_source": "distribution"}, "nccl_source=distribution: Debian 12 has no NCCL package in its archive;"
                                                  " use nccl_source: cuda"),
    ("debian11", {}, "Debian 11 is not supported; supported Debian releases: 12, 13"),
    ("ubuntu2404", {}, "nccl_cuda_version='': NVIDIA's repository builds each NCCL release per CUDA version"),
    ("rhel9", {"nccl_cuda_version": "12"}, "nccl_cuda_version='12': NVIDIA's repository builds"),
    ("debian13", {"nccl_cuda_version": "12.6"}, "nccl_cuda_version=12.6: Debian 13's libnccl2 is built for CUDA 12.4;"),
    ("debian13", {"nccl_version": "2.22"}, "nccl_version='2.22' is not an NCCL release"),
    ("debian13", {"nccl_conf_extra": {"IB_GID_INDEX": 3}}, "nccl_conf_extra has key(s) NCCL does not read from nccl.conf:"
                                                           " IB_GID_INDEX;"),
    ("debian13", {"nccl_ib_hca": "mlx5_0\nNCCL_DEBUG=TRACE"}, "the nccl.conf value(s) of NCCL_IB_HCA hold a line break"),
    ("debian13", {"nccl_tests_install": True}, "nccl_tests_install is true but nccl_tests_sha256 is not a sha256"
                                               " (64 hex digits): no checksum, no build; set it to the sha256 of"
                                               " https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.8.tar.gz"),
    ("debian13", {"nccl_validate": True, "nccl_validate_multinode": True}, "nccl_validate_multinode is true but"
                                                                           " nccl_tests_mpi is false"),
])
def test_each_problem_names_the_variable_and_the_fix(platform, overrides, expected):
    problems = preflight_problems(role_templar(platform, **overrides))
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems[0]


def test_missing_nvcc_is_a_problem_only_when_building():
    templar = role_templar("ubuntu2404", nvcc=False, nccl_cuda_version="12.6", nccl_tests_install=True, nccl_tests_sha256=SHA)
    assert preflight_problems(templar) == [
        "nccl_tests_install is true but /usr/local/cuda/bin/nvcc does not exist: building nccl-tests needs CUDA's compiler;"
        " install the CUDA toolkit (nvidia-cuda-toolkit on Debian) or point nccl_tests_cuda_home at it"]
    assert preflight_problems(role_templar("ubuntu2404", nvcc=False, nccl_cuda_version="12.6")) == []


def test_every_problem_is_reported_at_once():
    templar = role_templar("debian12", nccl_version="2", nccl_conf_extra={"bad": 1}, nccl_tests_install=True)
    assert len(preflight_problems(templar)) == 4


@pytest.mark.parametrize("platform", ["debian12", "debian13", "ubuntu2204", "rocky8"])
def test_platform_files_are_complete(platform):
    keys = set(yaml.safe_load(platform_file(ROLE, *PLATFORMS[platform]).read_text()))
    assert keys == {"__nccl_package_manager", "__nccl_releases", "__nccl_packages", "__nccl_tests_cuda_home",
                    "__nccl_tests_mpi_home", "__nccl_tests_build_packages", "__nccl_tests_mpi_packages",
                    "__nccl_rdma_releases", "__nccl_rdma_core_packages"}


# Validation: which hosts are measured (no GPU here, so the decision is checked on the facts module's states) ------------

def validation_skip_reason(gpu, check_mode=False, **overrides):
    tasks = yaml.safe_load((ROLE / "tasks" / "validate.yml").read_text())
    task_vars = next(task["vars"] for task in tasks if task["name"] == "Decide whether this host is measured")
    assert task_vars["__nccl_reason"] == (
        "{{ __nccl_gpu | dlinfra.gpu_cluster.nccl_skip_reason(nccl_validate_multinode, ansible_check_mode) }}")
    return nccl_skip_reason(gpu, resolve(role_templar("debian13", **overrides), "nccl_validate_multinode"), check_mode)


@pytest.mark.parametrize("gpu, check_mode, overrides, expected", [
    ({"gpu_count": 8, "driver_state": "ok", "message": ""}, False, {}, ""),
    ({"gpu_count": 0, "driver_state": "no_gpu", "message": ""}, False, {}, "no NVIDIA GPU on PCI"),
    ({"gpu_count": 8, "driver_state": "version_mismatch", "message": "reboot to load 550.163.01"}, False, {},
     "the NVIDIA driver does not answer (version_mismatch: reboot to load 550.163.01)"),
    ({"gpu_count": 1, "driver_state": "ok", "message": ""}, False, {}, "one GPU: an all-reduce over one rank moves no data"),
    ({"gpu_count": 1, "driver_state": "ok", "message": ""}, False, {"nccl_validate_multinode": True}, ""),
    ({"gpu_count": 8, "driver_state": "ok", "message": ""}, True, {}, "check mode does not run the benchmark"),
])
def test_validation_runs_only_where_gpus_answer(gpu, check_mode, overrides, expected):
    reason = validation_skip_reason(gpu, check_mode, **overrides)
    assert reason.startswith(expected) and (expected or reason == "")
