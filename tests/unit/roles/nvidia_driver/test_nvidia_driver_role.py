# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_driver role's platform data and files, rendered by Ansible's own templating.

Ubuntu and EL cannot run here (their archives and NVIDIA's repositories are unreachable), so their package
lists, repository definitions (deb822 / yum_repository arguments), rendered files and what preflight hands its problem
filter are checked here, next to Debian's, from the role's defaults, vars/main.yml and the platform file that
tasks/main.yml would load.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver import preflight as nvidia_driver_preflight
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.choice import driver_plans
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.swap import other_kernel_packages
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.ubuntu_modules import precompiled_modules
from role_vars import platform_file, role_vars, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "nvidia_driver"

PLATFORMS = {
    # id: (distribution, major, os_family, kernel)
    "debian12": ("Debian", "12", "Debian", "6.1.0-18-amd64"),
    "debian13": ("Debian", "13", "Debian", "6.12.38+deb13-amd64"),
    "ubuntu2204": ("Ubuntu", "22", "Debian", "5.15.0-105-generic"),
    "ubuntu2404": ("Ubuntu", "24", "Debian", "6.8.0-31-generic"),
    "rocky8": ("Rocky", "8", "RedHat", "4.18.0-513.5.1.el8_9.x86_64"),
    "rhel9": ("RedHat", "9", "RedHat", "5.14.0-427.13.1.el9_4.x86_64"),
}
CUDA_KEY_2022 = "EB693B3035CD5710E231E123A4B469963BF863CC"


def role_templar(platform, architecture="x86_64", nvswitch_count=0, package_version="", pci_gpus=(), **overrides):
    """The role's variables on one host, gpu01, with the driver plan preflight would make for it alone (its GPUs on
    PCI: ``pci_gpus``, device ids such as "0x2335")."""
    distribution, major, os_family, kernel = PLATFORMS[platform]
    variables = role_vars(ROLE, distribution, major, os_family)
    variables.update(trust(overrides))
    variables.update({
        "ansible_facts": {"distribution": distribution, "distribution_major_version": major, "os_family": os_family,
                          "architecture": architecture, "kernel": kernel},
        "ansible_check_mode": False,
        "ansible_managed": "Ansible managed: do not edit",
        "__nvidia_driver_gpu": {"nvswitch_count": nvswitch_count, "driver_state": "not_installed"},
        "__nvidia_driver_package_version": package_version,
        "inventory_hostname": "gpu01",
    })
    templar = Templar(loader=DataLoader(), variables=variables)
    node = {"cluster": "", "flavor": resolve(templar, "nvidia_driver_flavor"),
            "branch": resolve(templar, "__nvidia_driver_branch_asked"),
            "platform": "%s %s" % (distribution, major), "platform_branch": resolve(templar, "__nvidia_driver_release.branch"),
            "fixed_branch": resolve(templar, "__nvidia_driver_package_sets[__nvidia_driver_source_effective].fixed_branch"
                                             " | default(false)"),
            "offered_branches": resolve(templar, "__nvidia_driver_release.tesla_branches | default([])"
                                                 " if __nvidia_driver_source_effective == 'distribution' else []"),
            "pci_gpus": [{"address": "0000:%02x:00.0" % n, "device_id": d, "class": "0x030200"} for n, d in enumerate(pci_gpus)]}
    variables["__nvidia_driver_plans"] = driver_plans({"gpu01": node})
    return Templar(loader=DataLoader(), variables=variables)


def resolve(templar, name):
    return templar.template(trust("{{ %s }}" % name))


def render(templar, template):
    return templar.template(trust((ROLE / "templates" / template).read_text()))


# Package lists ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("platform, kernel_module, headless, expected", [
    ("debian12", True, True, ["nvidia-smi", "libcuda1", "libnvidia-cfg1", "nvidia-kernel-dkms", "nvidia-persistenced"]),
    ("debian12", False, True, ["nvidia-smi", "libcuda1", "libnvidia-cfg1", "nvidia-persistenced"]),
    ("debian13", True, False, ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced"]),
    ("ubuntu2204", True, True, ["nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server", "nvidia-dkms-580-server"]),
    ("ubuntu2404", False, True, ["nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server"]),
    ("ubuntu2404", True, False, ["nvidia-driver-580-server", "nvidia-dkms-580-server"]),
    ("rocky8", True, True, ["nvidia-driver-cuda", "nvidia-driver-cuda-libs", "nvidia-driver-NVML", "nvidia-persistenced",
                            "kmod-nvidia-latest-dkms"]),
    ("rhel9", False, False, ["nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced"]),
])
def test_packages_follow_the_platform_and_the_kernel_switch(platform, kernel_module, headless, expected):
    templar = role_templar(platform, nvidia_driver_kernel_module=kernel_module, nvidia_driver_headless=headless)
    assert resolve(templar, "__nvidia_driver_packages") == expected


@pytest.mark.parametrize("platform, branch, version, expected", [
    ("debian12", "", "", "535"),
    ("debian13", "", "", "550"),
    ("debian12", "", "535.261.03", "535"),
    ("ubuntu2204", "", "", "580"),
    ("ubuntu2404", "570", "", "570"),
    ("ubuntu2404", "", "535.183.01", "535"),
    ("rhel9", "", "", "580"),
])
def test_branch_comes_from_the_branch_the_version_or_the_platform(platform, branch, version, expected):
    templar = role_templar(platform, nvidia_driver_branch=branch, nvidia_driver_version=version)
    assert resolve(templar, "__nvidia_driver_branch") == expected


def test_ubuntu_package_names_carry_the_branch():
    templar = role_templar("ubuntu2204", nvidia_driver_version="535.183.01", nvidia_driver_source="cuda")
    assert resolve(templar, "__nvidia_driver_set.anchor") == "nvidia-utils-535"
    assert resolve(templar, "__nvidia_driver_versioned_packages") == [
        "nvidia-headless-no-dkms-535", "nvidia-utils-535", "nvidia-dkms-535"]


@pytest.mark.parametrize("platform, source", [
    ("debian12", "distribution"), ("debian13", "distribution"), ("ubuntu2204", "distribution"), ("rocky8", "cuda")])
def test_default_source(platform, source):
    assert resolve(role_templar(platform), "__nvidia_driver_source_effective") == source


@pytest.mark.parametrize("platform, setting, nvswitches, expected", [
    ("ubuntu2404", "auto", 6, ["nvidia-fabricmanager-580"]),
    ("ubuntu2404", "auto", 0, []),
    ("ubuntu2404", "never", 6, []),
    ("ubuntu2204", "always", 0, ["nvidia-fabricmanager-580"]),
    ("rhel9", "auto", 12, ["nvidia-fabric-manager"]),
])
def test_fabric_manager_only_with_nvswitches_or_when_asked(platform, setting, nvswitches, expected):
    templar = role_templar(platform, nvswitch_count=nvswitches, nvidia_driver_fabric_manager=setting)
    packages = resolve(templar, "__nvidia_driver_packages")
    assert [p for p in packages if "fabric" in p] == expected


def test_debian_archive_has_no_fabric_manager_but_the_cuda_repository_has():
    assert resolve(role_templar("debian12"), "__nvidia_driver_set.fabric_manager") == ""
    templar = role_templar("debian12", nvidia_driver_source="cuda")
    assert resolve(templar, "__nvidia_driver_set.fabric_manager") == "nvidia-fabricmanager-535"


@pytest.mark.parametrize("platform, expected", [
    ("debian12", "linux-headers-6.1.0-18-amd64"),
    ("ubuntu2404", "linux-headers-6.8.0-31-generic"),
    ("rocky8", "kernel-devel-4.18.0-513.5.1.el8_9.x86_64"),
])
def test_headers_for_the_running_kernel(platform, expected):
    assert resolve(role_templar(platform), "__nvidia_driver_headers_package") == expected


# Repository definitions ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("platform, architecture, url, key, fingerprint", [
    ("debian12", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/", "3bf863cc.pub", CUDA_KEY_2022),
    ("debian13", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/", "8793F200.pub",
     "02182E60104FCDC26EAE1B8597A5D4CB8793F200"),
    ("ubuntu2204", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/", "3bf863cc.pub", CUDA_KEY_2022),
    ("ubuntu2404", "aarch64", "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/", "3bf863cc.pub", CUDA_KEY_2022),
])
def test_deb822_cuda_repository(platform, architecture, url, key, fingerprint):
    templar = role_templar(platform, architecture=architecture, nvidia_driver_source="cuda")
    assert resolve(templar, "__nvidia_driver_cuda_deb822") == {
        "name": "dlinfra-nvidia-cuda", "types": ["deb"], "uris": [url], "suites": ["/"],
        "signed_by": "/etc/apt/keyrings/dlinfra-nvidia-cuda.asc",
    }
    assert resolve(templar, "__nvidia_driver_cuda_key_url") == url + key
    assert resolve(templar, "__nvidia_driver_cuda_key_fingerprint") == fingerprint
    assert resolve(templar, "__nvidia_driver_cuda_deb822.signed_by") == resolve(templar, "__nvidia_driver_cuda_key_path.apt")


@pytest.mark.parametrize("platform, distro", [("rocky8", "rhel8"), ("rhel9", "rhel9")])
def test_yum_cuda_repository(platform, distro):
    templar = role_templar(platform)
    assert resolve(templar, "__nvidia_driver_cuda_yum") == {
        "name": "dlinfra-nvidia-cuda",
        "description": "NVIDIA CUDA %s x86_64" % distro,
        "baseurl": "https://developer.download.nvidia.com/compute/cuda/repos/%s/x86_64/" % distro,
        "gpgkey": "file://" + resolve(templar, "__nvidia_driver_cuda_key_path.dnf"),
        "gpgcheck": True,
    }
    assert resolve(templar, "__nvidia_driver_cuda_key_url").endswith("/%s/x86_64/D42D0685.pub" % distro)
    # No fingerprint is pinned for EL yet: preflight refuses the CUDA source until one is set.
    assert resolve(templar, "__nvidia_driver_cuda_key_fingerprint") == ""


@pytest.mark.parametrize("mirror", ["http://mirror.lab.example/nvidia/ubuntu2404", "http://mirror.lab.example/nvidia/ubuntu2404/"])
def test_mirror_replaces_nvidia_and_carries_the_key(mirror):
    templar = role_templar("ubuntu2404", nvidia_driver_source="cuda", nvidia_driver_cuda_repo_mirror=mirror,
                           nvidia_driver_cuda_repo_key_fingerprint="eb69 3b30 35cd 5710 e231 e123 a4b4 6996 3bf8 63cc")
    assert resolve(templar, "__nvidia_driver_cuda_deb822.uris") == ["http://mirror.lab.example/nvidia/ubuntu2404/"]
    assert resolve(templar, "__nvidia_driver_cuda_key_url") == "http://mirror.lab.example/nvidia/ubuntu2404/3bf863cc.pub"
    assert resolve(templar, "__nvidia_driver_cuda_key_fingerprint") == CUDA_KEY_2022


def test_unsupported_release_resolves_to_empty_values_for_preflight_to_report():
    templar = role_templar("debian12")
    templar.available_variables = dict(templar.available_variables, ansible_facts=dict(
        templar.available_variables["ansible_facts"], distribution_major_version="11"))
    assert resolve(templar, "__nvidia_driver_release.branch") == ""


# Rendered files -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("platform, version, package_line", [
    ("debian12", "535.261.03-1", "Package: nvidia-* libnvidia-* libcuda1 libnvcuvid1 firmware-nvidia-gsp xserver-xorg-video-nvidia"),
    ("debian13", "550.163.01-2", "Package: nvidia-* libnvidia-* libcuda1 libnvcuvid1 firmware-nvidia-gsp xserver-xorg-video-nvidia"),
    ("ubuntu2204", "550.163.01-0ubuntu0.22.04.1", "Package: nvidia-* libnvidia-* xserver-xorg-video-nvidia-*"),
])
def test_apt_preferences_pin_the_exact_version(platform, version, package_line):
    text = render(role_templar(platform, package_version=version), "nvidia-driver.pref.j2")
    stanzas = text.strip().split("\n\n")
    assert len(stanzas) == 1
    lines = stanzas[0].splitlines()
    assert package_line in lines
    assert "Pin: version %s" % version in lines
    assert "Pin-Priority: 1001" in lines
    assert all(re.match(r"^(Explanation|Package|Pin|Pin-Priority): ", line) for line in lines)


def test_apt_preferences_lock_the_fabric_manager_to_the_driver():
    text = render(role_templar("ubuntu2404", package_version="580.95.05-0ubuntu0.24.04.2", nvswitch_count=6), "nvidia-driver.pref.j2")
    fabric = text.strip().split("\n\n")[1].splitlines()
    assert "Package: nvidia-fabricmanager-580" in fabric
    assert "Pin: version 580.95.05-*" in fabric
    assert "Pin-Priority: 1001" in fabric


@pytest.mark.parametrize("platform", ["debian12", "ubuntu2404"])
def test_unattended_upgrades_blacklist_matches_every_pinned_package(platform):
    templar = role_templar(platform)
    text = render(templar, "unattended-upgrades.conf.j2")
    patterns = re.findall(r'^\s+"([^"]+)";$', text, re.MULTILINE)
    assert text.splitlines()[0].startswith("// ")
    assert "Unattended-Upgrade::Package-Blacklist {" in text
    # unattended-upgrades matches these as regular expressions against package names.
    for package in resolve(templar, "__nvidia_driver_packages") + ["libnvidia-ml1", "nvidia-fabricmanager-550"]:
        assert any(re.match(pattern, package) for pattern in patterns), package
    for package in ["linux-image-amd64", "libc6", "mesa-nvidia-something"]:
        assert not any(re.match(pattern, package) for pattern in patterns), package


def test_unattended_upgrades_drop_in_parses_with_apt_config(tmp_path):
    apt_config = pathlib.Path("/usr/bin/apt-config")
    # A test that needs a tool gets it or fails, never skips: apt-config is apt's, on every Debian and Ubuntu.
    assert apt_config.exists(), "apt-config is needed to parse the drop-in: run the tests on Debian or Ubuntu"
    drop_in = tmp_path / "unattended.conf"
    drop_in.write_text(render(role_templar("debian12"), "unattended-upgrades.conf.j2"))
    dump = subprocess.run([str(apt_config), "-c", str(drop_in), "dump", "Unattended-Upgrade::Package-Blacklist"],
                          capture_output=True, text=True, check=True).stdout
    assert 'Unattended-Upgrade::Package-Blacklist:: "^nvidia-.*$";' in dump
    assert 'Unattended-Upgrade::Package-Blacklist:: "^libcuda1$";' in dump


def test_nouveau_blacklist():
    lines = render(role_templar("debian12"), "blacklist-nouveau.conf.j2").splitlines()
    assert lines[0].startswith("# ")
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


# Every platform file has what the tasks read ----------------------------------------------------------------------

@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_platform_files_are_complete(platform):
    distribution, major, os_family, _kernel = PLATFORMS[platform]
    data = yaml.safe_load(platform_file(ROLE, distribution, major, os_family).read_text())
    for key in ("__nvidia_driver_package_manager", "__nvidia_driver_default_source", "__nvidia_driver_releases",
                "__nvidia_driver_package_sets", "__nvidia_driver_pin_packages", "__nvidia_driver_headers_package",
                "__nvidia_driver_initramfs_tool", "__nvidia_driver_initramfs_command", "__nvidia_driver_missing_source_fix"):
        assert key in data, key
    assert major in data["__nvidia_driver_releases"]
    assert data["__nvidia_driver_default_source"] in data["__nvidia_driver_package_sets"]
    assert (ROLE / "tasks" / ("install_%s.yml" % data["__nvidia_driver_package_manager"])).exists()
    assert (ROLE / "tasks" / ("repository_%s.yml" % data["__nvidia_driver_package_manager"])).exists()
    for package_set in data["__nvidia_driver_package_sets"].values():
        # EL's CUDA repository adds the module its streams belong to; Ubuntu's the last branch its names fit,
        # Ubuntu's archive the driver's name in its precompiled modules, and Debian's archive its families' source
        # package.
        optional = {"module", "module_stream", "last_branch", "precompiled", "family_source"}
        assert set(package_set) - optional == {"anchor", "userspace", "full", "kernel", "companions", "fabric_manager",
                                               "dkms_module", "fixed_branch"}
        assert ("module" in package_set) == (os_family == "RedHat") == ("module_stream" in package_set)
        # One kernel module package list and DKMS module name per flavour the plan can give (Debian's tesla families:
        # proprietary only; preflight refuses the open flavour there).
        assert set(package_set["kernel"]) == set(package_set["dkms_module"])
        assert set(package_set["kernel"]) in ({"open", "proprietary"}, {"proprietary"})
        assert isinstance(package_set["fixed_branch"], bool)
    # Debian's archive: its families keep one per node (tasks/swap_apt.yml); NVIDIA's repository is one family.
    assert sorted(name for name, package_set in data["__nvidia_driver_package_sets"].items()
                  if "family_source" in package_set) == (["distribution", "tesla"] if distribution == "Debian" else [])


@pytest.mark.parametrize("platform, source, branch, gpus, expected", [
    ("debian13", "", "", ["0x2335"] * 8,  # H200 with nvidia_driver_flavor open: Debian's own open module
     ["nvidia-smi", "libcuda1", "libnvidia-cfg1", "nvidia-open-kernel-dkms", "nvidia-persistenced"]),
    ("debian13", "cuda", "570", ["0x2901"] * 8,  # B200: open only
     ["nvidia-smi", "libcuda1", "libnvidia-cfg1", "nvidia-kernel-open-dkms", "nvidia-persistenced"]),
    ("ubuntu2404", "", "570", ["0x2901"] * 8,
     ["nvidia-headless-no-dkms-570-server-open", "nvidia-utils-570-server", "nvidia-dkms-570-server-open"]),
    ("ubuntu2204", "cuda", "570", ["0x2901"] * 8,
     ["nvidia-headless-no-dkms-570-open", "nvidia-utils-570", "nvidia-dkms-570-open"]),
    ("rhel9", "", "570", ["0x2901"] * 8,
     ["nvidia-driver-cuda", "nvidia-driver-cuda-libs", "nvidia-driver-NVML", "nvidia-persistenced", "kmod-nvidia-open-dkms"]),
])
def test_the_open_flavour_takes_the_open_kernel_module_packages(platform, source, branch, gpus, expected):
    templar = role_templar(platform, pci_gpus=gpus, nvidia_driver_source=source, nvidia_driver_branch=branch,
                           nvidia_driver_flavor="open" if gpus[0] == "0x2335" else "auto")
    assert resolve(templar, "__nvidia_driver_plans")["gpu01"]["problems"] == []
    assert resolve(templar, "__nvidia_driver_flavor") == "open"
    assert resolve(templar, "__nvidia_driver_packages") == expected


@pytest.mark.parametrize("platform, branch, gpus, flavor, stream, kernel", [
    ("rhel9", "", ["0x2901"] * 8, "open", "580-open", ["kmod-nvidia-open-dkms"]),  # B200: open only
    ("rocky8", "", ["0x1db5"] * 2, "proprietary", "580-dkms", ["kmod-nvidia-latest-dkms"]),  # V100: no open module
    ("rhel9", "570", ["0x2330"] * 8, "open", "570-open", ["kmod-nvidia-open-dkms"]),  # H100 pinned to 570
    ("rocky8", "535", ["0x2330"] * 8, "proprietary", "535-dkms", ["kmod-nvidia-latest-dkms"]),  # before 560: proprietary
])
def test_el_enables_the_module_stream_of_the_branch_and_flavour(platform, branch, gpus, flavor, stream, kernel):
    templar = role_templar(platform, pci_gpus=gpus, nvidia_driver_branch=branch)
    assert resolve(templar, "__nvidia_driver_plans")["gpu01"]["problems"] == []
    assert resolve(templar, "__nvidia_driver_flavor") == flavor
    assert resolve(templar, "__nvidia_driver_set.module") == "nvidia-driver"
    assert resolve(templar, "__nvidia_driver_set.module_stream") == stream
    assert resolve(templar, "__nvidia_driver_set.kernel[__nvidia_driver_flavor]") == kernel
    assert other_kernels(templar) == (
        ["kmod-nvidia-latest-dkms"] if flavor == "open" else ["kmod-nvidia-open-dkms"])


@pytest.mark.parametrize("platform, branch, gpus, expected_branch, dkms, expected", [
    ("debian12", "", ["0x102d"] * 4,  # Tesla K80: Kepler ends with 470, which Debian 12 carries as nvidia-tesla-470
     "470", "nvidia-tesla-470", ["nvidia-tesla-470-smi", "libnvidia-tesla-470-cuda1", "libnvidia-tesla-470-cfg1",
                                 "nvidia-tesla-470-kernel-dkms", "nvidia-persistenced"]),
    ("debian13", "535", ["0x2330"] * 8,  # H100 pinned to 535: Debian 13's nvidia-tesla-535
     "535", "nvidia-tesla-535", ["nvidia-tesla-535-smi", "libnvidia-tesla-535-cuda1", "libnvidia-tesla-535-cfg1",
                                 "nvidia-tesla-535-kernel-dkms", "nvidia-persistenced"]),
    ("debian12", "", ["0x1db5"] * 2,  # V100: the release's own branch and family
     "535", "nvidia-current", ["nvidia-smi", "libcuda1", "libnvidia-cfg1", "nvidia-kernel-dkms", "nvidia-persistenced"]),
])
def test_debian_archive_older_branches_come_from_its_tesla_families(platform, branch, gpus, expected_branch, dkms, expected):
    templar = role_templar(platform, pci_gpus=gpus, nvidia_driver_branch=branch)
    assert resolve(templar, "__nvidia_driver_plans")["gpu01"]["problems"] == []
    assert resolve(templar, "__nvidia_driver_branch") == expected_branch
    assert resolve(templar, "__nvidia_driver_packages") == expected
    assert resolve(templar, "__nvidia_driver_set.anchor") == expected[0]
    assert resolve(templar, "__nvidia_driver_set.dkms_module.proprietary") == dkms


# Preflight ----------------------------------------------------------------------------------------------------------

def preflight_problems(templar, secure_boot_state=None, mok_files=None):
    """The problem list of preflight's fail task: its settings and findings gathered by its own task vars (with what
    mokutil printed and which MOK files exist, where given), handed to the Python its filter (nvidia_driver_problems)
    wraps."""
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    task_vars = next(task["vars"] for task in tasks if "ansible.builtin.fail" in task)
    assert task_vars["__nvidia_driver_problems"] == (
        "{{ __nvidia_driver_settings | dlinfra.gpu_cluster.nvidia_driver_problems(__nvidia_driver_found) }}")
    variables = dict(templar.available_variables, **trust(task_vars))
    if secure_boot_state is not None:
        variables["__nvidia_driver_sb_state"] = {"stdout": secure_boot_state, "rc": 0}
    if mok_files is not None:
        variables["__nvidia_driver_mok_files"] = {"results": [{"item": path, "stat": {"exists": exists}}
                                                              for path, exists in mok_files.items()]}
    templar = Templar(loader=DataLoader(), variables=variables)
    return nvidia_driver_preflight.preflight_problems(resolve(templar, "__nvidia_driver_settings"),
                                                      resolve(templar, "__nvidia_driver_found"))


@pytest.mark.parametrize("platform, pci_gpus, overrides", [
    ("ubuntu2404", ["0x2330"] * 8, {}),
    ("debian12", ["0x102d"] * 4, {}),  # K80 on Debian 12's nvidia-tesla-470
    ("debian13", ["0x2335"] * 8, {"nvidia_driver_flavor": "open"}),
    ("ubuntu2204", ["0x2901"] * 8, {"nvidia_driver_source": "cuda", "nvidia_driver_branch": "570",
                                    "nvidia_driver_version": "570.86.15"}),
    ("rhel9", [], {"nvidia_driver_cuda_repo_key_fingerprint": "d42d 0685"}),
    ("ubuntu2404", ["0x2330"] * 8, {"nvidia_driver_source": "cuda", "nvidia_driver_branch": "580"}),
    # Debian's CUDA packages never carried the branch in their names.
    ("debian13", ["0x2335"] * 8, {"nvidia_driver_source": "cuda", "nvidia_driver_branch": "590"}),
])
def test_good_settings_pass_preflight(platform, pci_gpus, overrides):
    assert preflight_problems(role_templar(platform, pci_gpus=pci_gpus, **overrides), "SecureBoot disabled") == []


@pytest.mark.parametrize("platform, pci_gpus, overrides, expected", [
    ("debian13", ["0x2330"] * 8, {"nvidia_driver_branch": "535", "nvidia_driver_flavor": "open"},
     "the packages of driver branch 535 (nvidia-tesla-535-smi) carry no open kernel modules;"),
    ("debian12", [], {"nvidia_driver_source": "runfile"},
     "nvidia_driver_source=runfile is not available on Debian; use one of: distribution, tesla, cuda"),
    ("ubuntu2404", [], {"nvidia_driver_branch": "570", "nvidia_driver_version": "550.163.01"},
     "nvidia_driver_version=550.163.01 is not on nvidia_driver_branch=570;"),
    ("rocky8", [], {}, "no fingerprint is pinned for the CUDA repository key on this platform; set"
                       " nvidia_driver_cuda_repo_key_fingerprint to the fingerprint NVIDIA publishes for"
                       " https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/D42D0685.pub"),
    ("debian12", ["0x2330"] * 8, {"nvswitch_count": 6},
     "6 NVSwitch(es) need the fabric manager, which the distribution source does not carry;"),
    ("ubuntu2204", ["0x0000"], {}, "gpu01: unknown NVIDIA device 10de:0000:"),
    ("ubuntu2404", ["0x2330"] * 8, {"nvidia_driver_source": "cuda", "nvidia_driver_branch": "590"},
     "driver branch 590 is newer than the packages the cuda source's set names on Ubuntu:"),
    ("ubuntu2204", ["0x2901"] * 8, {"nvidia_driver_source": "cuda", "nvidia_driver_version": "595.45.04"},
     "driver branch 595 is newer than the packages the cuda source's set names on Ubuntu:"),
])
def test_each_problem_names_the_variable_and_the_fix(platform, pci_gpus, overrides, expected):
    problems = preflight_problems(role_templar(platform, pci_gpus=pci_gpus, **overrides))
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems[0]


def test_an_unsupported_release_is_named():
    templar = role_templar("debian12")
    templar.available_variables = dict(templar.available_variables, ansible_facts=dict(
        templar.available_variables["ansible_facts"], distribution_major_version="11"))
    assert preflight_problems(templar) == ["Debian 11 is not supported; supported Debian releases: 12, 13"]


def test_secure_boot_needs_a_signing_key_that_exists():
    assert preflight_problems(role_templar("debian13"), "SecureBoot enabled") == [
        "Secure Boot is enabled, so the kernel will refuse the unsigned DKMS module; enroll a Machine Owner Key for DKMS"
        " (mokutil --import /var/lib/dkms/mok.pub, then confirm it in the firmware at the next boot) and set"
        " nvidia_driver_secure_boot_mok_signing=true, or turn Secure Boot off"]
    templar = role_templar("debian13", nvidia_driver_secure_boot_mok_signing=True)
    assert preflight_problems(templar, "SecureBoot enabled", {"/var/lib/dkms/mok.key": True, "/var/lib/dkms/mok.pub": True}) == []
    assert preflight_problems(templar, "SecureBoot enabled", {"/var/lib/dkms/mok.key": False, "/var/lib/dkms/mok.pub": True}) == [
        "nvidia_driver_secure_boot_mok_signing is true but /var/lib/dkms/mok.key do(es) not exist; create the key pair DKMS"
        " signs with (dkms generate_mok), enroll it with mokutil --import, or point nvidia_driver_secure_boot_mok_key /"
        " _certificate at yours"]


# Ubuntu's precompiled modules ---------------------------------------------------------------------------------------

# A node on Ubuntu 24.04's generic kernel (role_templar's 6.8.0-31-generic), as tasks/precompiled_apt.yml's probes see
# it.
NOBLE_KERNEL_PACKAGES = ["linux-image-6.8.0-31-generic;ii ;linux-modules-6.8.0-31-generic",
                         "linux-image-generic;ii ;linux-image-6.8.0-31-generic, linux-firmware"]
NOBLE_MODULES = ["linux-modules-nvidia-580-server-open-generic", "linux-modules-nvidia-580-server-open-6.8.0-31-generic",
                 "linux-modules-nvidia-580-server-generic", "linux-modules-nvidia-580-server-6.8.0-31-generic"]


def ubuntu_modules(templar, installed=tuple(NOBLE_KERNEL_PACKAGES), available=tuple(NOBLE_MODULES)):
    """The role's variables once precompiled_apt.yml chose the kernel side: its set_fact's filter call, checked as written,
    made with the Python the filter wraps on what its two probes printed."""
    tasks = yaml.safe_load((ROLE / "tasks" / "precompiled_apt.yml").read_text())
    choose = next(task for task in tasks if task["name"] == "Choose the precompiled modules or DKMS")
    install = yaml.safe_load((ROLE / "tasks" / "install_apt.yml").read_text())
    include = next(task for task in install if task.get("ansible.builtin.include_tasks") == "precompiled_apt.yml")
    assert " ".join(choose["ansible.builtin.set_fact"]["__nvidia_driver_ubuntu_modules"].split()) == (
        "{{ __nvidia_driver_kernel_found.stdout_lines | dlinfra.gpu_cluster.nvidia_driver_ubuntu_modules("
        " __nvidia_driver_precompiled_found.stdout_lines, ansible_facts['kernel'], __nvidia_driver_set.precompiled,"
        " nvidia_driver_version) }}")
    assert include["when"] == "__nvidia_driver_precompiled_wanted"
    chosen = precompiled_modules(list(installed), list(available), resolve(templar, "ansible_facts['kernel']"),
                                 resolve(templar, "__nvidia_driver_set.precompiled"),
                                 resolve(templar, "nvidia_driver_version"))
    return Templar(loader=DataLoader(), variables=dict(templar.available_variables, __nvidia_driver_ubuntu_modules=chosen))


@pytest.mark.parametrize("platform, overrides, wanted", [
    ("ubuntu2404", {}, True),
    ("ubuntu2204", {"nvidia_driver_source": "distribution"}, True),
    ("ubuntu2404", {"nvidia_driver_ubuntu_precompiled": False}, False),
    ("ubuntu2404", {"nvidia_driver_ubuntu_precompiled": "false"}, False),
    ("ubuntu2404", {"nvidia_driver_kernel_module": False}, False),
    ("ubuntu2404", {"nvidia_driver_source": "cuda"}, False),
    ("debian13", {}, False),
    ("rhel9", {}, False),
])
def test_precompiled_modules_are_looked_for_on_ubuntu_s_archive_only(platform, overrides, wanted):
    assert resolve(role_templar(platform, **overrides), "__nvidia_driver_precompiled_wanted") is wanted


@pytest.mark.parametrize("gpus, flavour", [(["0x2901"] * 8, "580-server-open"), (["0x1db5"] * 2, "580-server")])
def test_the_precompiled_name_follows_the_branch_and_flavour(gpus, flavour):
    assert resolve(role_templar("ubuntu2404", pci_gpus=gpus), "__nvidia_driver_set.precompiled") == flavour


def test_precompiled_modules_replace_the_dkms_package_and_only_the_running_kernel_s_is_held():
    templar = ubuntu_modules(role_templar("ubuntu2404", pci_gpus=["0x2901"] * 8, package_version="580.95.05-0ubuntu0.24.04.2"))
    assert resolve(templar, "__nvidia_driver_precompiled") is True
    assert resolve(templar, "__nvidia_driver_versioned_packages") == [
        "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server"]
    assert swap_args(templar)[3:] == [
        "nvidia-headless-no-dkms-580-server-open=580.95.05-0ubuntu0.24.04.2",
        "nvidia-utils-580-server=580.95.05-0ubuntu0.24.04.2",
        "linux-modules-nvidia-580-server-open-generic", "linux-modules-nvidia-580-server-open-6.8.0-31-generic"]
    assert resolve(templar, "__nvidia_driver_packages") == [
        "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-6.8.0-31-generic"]
    # Both DKMS packages are swapped out, whichever flavour the node had (Ansible's difference filter keeps no order).
    assert sorted(other_kernels(templar)) == [
        "nvidia-dkms-580-server", "nvidia-dkms-580-server-open"]


def test_the_precompiled_modules_of_the_other_flavour_are_swapped_out():
    installed = NOBLE_KERNEL_PACKAGES + ["linux-modules-nvidia-580-server-generic;hi ;",
                                         "linux-modules-nvidia-580-server-6.8.0-31-generic;hi ;"]
    templar = ubuntu_modules(role_templar("ubuntu2404", pci_gpus=["0x2901"] * 8), installed=installed)
    assert sorted(other_kernels(templar)) == [
        "linux-modules-nvidia-580-server-6.8.0-31-generic", "linux-modules-nvidia-580-server-generic",
        "nvidia-dkms-580-server", "nvidia-dkms-580-server-open"]


def test_without_precompiled_modules_for_the_kernel_dkms_builds_them_as_before():
    installed = NOBLE_KERNEL_PACKAGES + ["linux-modules-nvidia-580-server-open-generic;ii ;"]
    templar = ubuntu_modules(role_templar("ubuntu2404", pci_gpus=["0x1db5"] * 2, package_version="580.95.05-1"),
                             installed=installed, available=())
    assert resolve(templar, "__nvidia_driver_precompiled") is False
    assert resolve(templar, "__nvidia_driver_packages") == [
        "nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server", "nvidia-dkms-580-server"]
    assert swap_args(templar)[-1] == "nvidia-dkms-580-server=580.95.05-1"
    # The precompiled modules a node had go in the same transaction that brings the DKMS package.
    assert sorted(other_kernels(templar)) == [
        "linux-modules-nvidia-580-server-open-generic", "nvidia-dkms-580-server-open"]


def test_an_exact_pinned_version_gets_dkms_at_that_version():
    templar = ubuntu_modules(role_templar("ubuntu2404", pci_gpus=["0x2901"] * 8, nvidia_driver_version="580.82.07",
                                          package_version="580.82.07-0ubuntu0.24.04.1"))
    assert resolve(templar, "__nvidia_driver_precompiled") is False
    assert swap_args(templar)[-1] == "nvidia-dkms-580-server-open=580.82.07-0ubuntu0.24.04.1"


def other_kernels(templar):
    """The role's __nvidia_driver_other_kernel_packages: its filter call, checked as written, made with the Python the
    filter wraps on the values the role passes it."""
    assert " ".join(role_vars(ROLE, "Debian", "12", "Debian")["__nvidia_driver_other_kernel_packages"].split()) == (
        "{{ __nvidia_driver_set.kernel | dlinfra.gpu_cluster.nvidia_driver_other_kernel_packages(__nvidia_driver_flavor,"
        " __nvidia_driver_precompiled, (__nvidia_driver_ubuntu_modules | default({})).remove | default([])) }}")
    return other_kernel_packages(resolve(templar, "__nvidia_driver_set.kernel"), resolve(templar, "__nvidia_driver_flavor"),
                                 resolve(templar, "__nvidia_driver_precompiled"),
                                 resolve(templar, "(__nvidia_driver_ubuntu_modules | default({})).remove | default([])"))


def swap_args(templar, swap_out=()):
    """The swap's apt-get arguments, with ``swap_out`` as the installed packages it removes (tasks/swap_apt.yml)."""
    variables = dict(templar.available_variables, __nvidia_driver_swap_out=list(swap_out))
    return resolve(Templar(loader=DataLoader(), variables=variables), "__nvidia_driver_swap_args")


@pytest.mark.parametrize("version, source, other", [
    ("470.256.02-1~deb12u1", "nvidia-graphics-drivers-tesla-470", ["libcuda1", "nvidia-alternative", "nvidia-smi"]),
    ("535.261.03-1", "nvidia-graphics-drivers", ["libnvidia-tesla-470-cuda1", "nvidia-tesla-470-smi"]),
])
def test_a_node_moving_between_debian_s_families_swaps_the_other_family_out(version, source, other):
    branch = version.split(".")[0]
    templar = role_templar("debian12", pci_gpus=["0x1db5"] * 2, package_version=version, nvidia_driver_branch=branch)
    assert resolve(templar, "__nvidia_driver_set.family_source") == source
    args = swap_args(templar, other)
    assert args[:3] == ["--no-install-recommends", "--allow-change-held-packages", "--allow-downgrades"]
    assert args[3:] == [name + "=" + version for name in resolve(templar, "__nvidia_driver_versioned_packages")] + [
        name + "-" for name in other]
    assert any("kernel-dkms=" in arg for arg in args)


def test_the_swap_keeps_the_kernel_packages_where_the_role_leaves_the_module_be():
    templar = role_templar("debian12", pci_gpus=["0x2335"] * 8, package_version="535.261.03-1",
                           nvidia_driver_flavor="open")
    assert "nvidia-kernel-dkms" not in resolve(templar, "__nvidia_driver_swap_keep")
    assert "nvidia-open-kernel-dkms" in resolve(templar, "__nvidia_driver_swap_keep")
    templar = role_templar("debian12", pci_gpus=["0x2335"] * 8, package_version="535.261.03-1",
                           nvidia_driver_kernel_module=False)
    assert {"nvidia-kernel-dkms", "nvidia-open-kernel-dkms"} <= set(resolve(templar, "__nvidia_driver_swap_keep"))


def test_the_cuda_repository_keeps_no_family_of_debian_s():
    templar = role_templar("debian12", pci_gpus=["0x1db5"] * 2, nvidia_driver_source="cuda")
    assert resolve(templar, "__nvidia_driver_set.family_source | default('none')") == "none"


def test_the_tasks_skip_headers_and_the_dkms_check_for_precompiled_modules():
    install = yaml.safe_load((ROLE / "tasks" / "install_apt.yml").read_text())
    headers = next(task for task in install if task["name"] == "Install the headers for the running kernel")
    assert headers["when"] == "nvidia_driver_kernel_module and not __nvidia_driver_precompiled"
    verify = yaml.safe_load((ROLE / "tasks" / "verify.yml").read_text())
    dkms = [task for task in verify if "dkms" in str(task.get("ansible.builtin.command", "")) or "DKMS" in task["name"]]
    assert len(dkms) == 2
    assert all(task["when"].endswith("and not __nvidia_driver_precompiled") for task in dkms)
