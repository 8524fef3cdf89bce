# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each problem the nvidia_driver role's preflight reports, word for word, and the settings that do not raise it."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.preflight import (
    FOUND, SETTINGS, preflight_problems)

CUDA_KEY = "EB693B3035CD5710E231E123A4B469963BF863CC"
KEY_URL = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub"
# Ubuntu 24.04 with its archive's 550 driver on a node without NVSwitches or Secure Boot: all well.
UBUNTU24 = {
    "distribution": "Ubuntu", "major_version": "24", "releases": ["22", "24"], "source": "",
    "source_effective": "distribution", "sources": ["distribution", "cuda"], "branch": "", "version": "",
    "cuda_key_fingerprint": CUDA_KEY, "cuda_key_url": KEY_URL, "fabric_manager_wanted": False,
    "fabric_manager_package": "nvidia-fabricmanager-550", "source_last_branch": "", "mok_signing": False,
    "mok_certificate": "/var/lib/dkms/mok.pub",
}
PLANNED = {"plan_problems": [], "branch": "550", "flavor": "proprietary", "anchor": "nvidia-utils-550-server",
           "kernel_flavors": ["open", "proprietary"], "nvswitch_count": 0, "secure_boot_state": "",
           "missing_mok_files": []}


def problems(found=None, **settings):
    return preflight_problems(dict(UBUNTU24, **settings), dict(PLANNED, **(found or {})))


def test_the_keys_are_those_the_docs_name():
    assert set(UBUNTU24) == set(SETTINGS)
    assert set(PLANNED) == set(FOUND)


@pytest.mark.parametrize("settings, found", [
    pytest.param({}, {}, id="ubuntu24-archive"),
    pytest.param({"branch": "550", "version": "550.163.01"}, {}, id="branch-and-version-agree"),
    pytest.param({"branch": "550"}, {}, id="branch-only"),
    pytest.param({"version": "570.86.15"}, {}, id="version-only"),
    pytest.param({"source": "cuda", "source_effective": "cuda"}, {}, id="cuda-repository"),
    pytest.param({"fabric_manager_wanted": True}, {"nvswitch_count": 6}, id="nvswitches-with-fabric-manager"),
    pytest.param({"fabric_manager_package": ""}, {"nvswitch_count": 6}, id="fabric-manager-not-wanted"),
    pytest.param({}, {"secure_boot_state": "SecureBoot disabled"}, id="secure-boot-off"),
    pytest.param({"mok_signing": True}, {"secure_boot_state": "SecureBoot enabled"}, id="secure-boot-with-mok"),
    pytest.param({}, {"flavor": "open"}, id="open-flavour"),
    pytest.param({"source_effective": "cuda", "source_last_branch": "580"}, {"branch": "580"}, id="cuda-at-its-last-branch"),
    pytest.param({"source_effective": "cuda", "source_last_branch": "580"}, {"branch": "470"}, id="cuda-older-branch"),
    pytest.param({"source_last_branch": ""}, {"branch": "595"}, id="a-set-without-a-last-branch"),
])
def test_good_settings_are_no_problem(settings, found):
    assert problems(found, **settings) == []


def test_the_plan_s_problems_come_first_as_they_are():
    plan = ["gpu01: unknown NVIDIA device 0xffff: its driver cannot be chosen for it; set nvidia_driver_flavor (open or "
            "proprietary) and nvidia_driver_branch for this host by hand"]
    assert problems({"plan_problems": plan}, major_version="20") == plan + [
        "Ubuntu 20 is not supported; supported Ubuntu releases: 22, 24"]


def test_an_unsupported_release():
    assert problems(major_version="20") == ["Ubuntu 20 is not supported; supported Ubuntu releases: 22, 24"]


def test_a_source_the_platform_does_not_have():
    assert problems({"kernel_flavors": []}, source="runfile", source_effective="runfile") == [
        "nvidia_driver_source=runfile is not available on Ubuntu; use one of: distribution, cuda"]


@pytest.mark.parametrize("plan_problems, lines", [([], 1), (["gpu01: the plan's own"], 1)])
def test_a_branch_whose_packages_lack_the_flavour(plan_problems, lines):
    found = {"plan_problems": plan_problems, "branch": "535", "flavor": "open", "anchor": "nvidia-tesla-535-smi",
             "kernel_flavors": ["proprietary"]}
    result = problems(found, distribution="Debian", major_version="13", releases=["12", "13"],
                      sources=["distribution", "tesla", "cuda"])
    assert len(result) == lines
    if not plan_problems:
        assert result == [
            "the packages of driver branch 535 (nvidia-tesla-535-smi) carry no open kernel modules; set "
            "nvidia_driver_flavor: proprietary, or another nvidia_driver_branch"]


@pytest.mark.parametrize("branch", ["590", "595", "610"])
def test_a_branch_past_the_source_s_package_names(branch):
    assert problems({"branch": branch}, source="cuda", source_effective="cuda", source_last_branch="580") == [
        "driver branch %s is newer than the packages the cuda source's set names on Ubuntu: from branch 590 NVIDIA's "
        "repository drops the branch from its package names (nvidia-dkms-open, not nvidia-dkms-590-open) and locks a "
        "branch with pinning packages instead; set nvidia_driver_branch (or nvidia_driver_version) to 580 or lower, or "
        "choose another nvidia_driver_source" % branch]


def test_a_branch_past_the_source_s_names_comes_before_the_version_problem():
    lines = problems({"branch": "590"}, source_effective="cuda", source_last_branch="580", branch="590",
                     version="595.1")
    assert [line.split(" ")[0] for line in lines] == ["driver", "nvidia_driver_version=595.1"]


def test_a_plan_with_problems_has_no_branch_to_check_against_the_source():
    assert problems({"plan_problems": ["gpu01: the plan's"], "branch": ""}, source_last_branch="580") == ["gpu01: the plan's"]
    assert problems({"plan_problems": ["gpu01: the plan's"], "branch": "590"}, source_last_branch="580") == [
        "gpu01: the plan's"]


@pytest.mark.parametrize("branch, version", [("550", "535.261.03"), ("55", "550.163.01"), ("550", "5501.1"),
                                             (570, "550.163.01"), ("570", 550)])
def test_a_version_off_the_branch(branch, version):
    assert problems(branch=branch, version=version) == [
        "nvidia_driver_version=%s is not on nvidia_driver_branch=%s; set one of them, or make them agree" % (version, branch)]


def test_the_cuda_repository_without_a_pinned_key():
    assert problems(source_effective="cuda", cuda_key_fingerprint="") == [
        "no fingerprint is pinned for the CUDA repository key on this platform; set nvidia_driver_cuda_repo_key_fingerprint "
        "to the fingerprint NVIDIA publishes for %s" % KEY_URL]
    assert problems(cuda_key_fingerprint="") == []


def test_nvswitches_without_a_fabric_manager():
    assert problems({"nvswitch_count": 6}, fabric_manager_wanted=True, fabric_manager_package="") == [
        "6 NVSwitch(es) need the fabric manager, which the distribution source does not carry; set "
        "nvidia_driver_source=cuda (NVIDIA's repository has nvidia-fabricmanager)"]


@pytest.mark.parametrize("state", ["SecureBoot enabled", "SecureBoot enabled\n", "sb: SecureBoot enabled (deployed)"])
def test_secure_boot_without_a_signing_key(state):
    assert problems({"secure_boot_state": state}) == [
        "Secure Boot is enabled, so the kernel will refuse the unsigned DKMS module; enroll a Machine Owner Key for DKMS "
        "(mokutil --import /var/lib/dkms/mok.pub, then confirm it in the firmware at the next boot) and set "
        "nvidia_driver_secure_boot_mok_signing=true, or turn Secure Boot off"]


@pytest.mark.parametrize("state", ["", None, "SecureBoot disabled", "EFI variables are not supported on this system",
                                   "secureboot enabled"])
def test_secure_boot_off_or_unknown_is_no_problem(state):
    assert problems({"secure_boot_state": state}) == []


@pytest.mark.parametrize("missing, named", [
    (["/var/lib/dkms/mok.key"], "/var/lib/dkms/mok.key"),
    (["/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub"], "/var/lib/dkms/mok.key and /var/lib/dkms/mok.pub"),
])
def test_signing_key_files_that_do_not_exist(missing, named):
    assert problems({"missing_mok_files": missing}, mok_signing=True) == [
        "nvidia_driver_secure_boot_mok_signing is true but %s do(es) not exist; create the key pair DKMS signs with (dkms "
        "generate_mok), enroll it with mokutil --import, or point nvidia_driver_secure_boot_mok_key / _certificate at "
        "yours" % named]


def test_every_problem_at_once_in_the_order_preflight_lists_them():
    lines = problems({"plan_problems": ["gpu01: the plan's"], "nvswitch_count": 4, "secure_boot_state": "SecureBoot enabled",
                      "missing_mok_files": ["/k"], "kernel_flavors": []},
                     major_version="20", source="cuda", source_effective="cuda", sources=["distribution"], branch="550",
                     version="535.1", cuda_key_fingerprint="", fabric_manager_wanted=True, fabric_manager_package="")
    assert [line.split(" ")[0] for line in lines] == [
        "gpu01:", "Ubuntu", "nvidia_driver_source=cuda", "nvidia_driver_version=535.1", "no", "4", "Secure",
        "nvidia_driver_secure_boot_mok_signing"]


def test_an_unknown_key_is_refused_by_name():
    with pytest.raises(ValueError, match="settings has unknown key.s. flavor; known: distribution"):
        problems(flavor="open")
    with pytest.raises(ValueError, match="found has unknown key.s. problems"):
        problems({"problems": []})
