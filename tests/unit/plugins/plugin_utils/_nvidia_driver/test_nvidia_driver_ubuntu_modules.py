# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which of Canonical's precompiled NVIDIA modules follow an Ubuntu node's kernel, and when DKMS builds them instead.

The dpkg-query lines follow the role's format (``${Package};${db:Status-Abbrev};${Depends}``) with package names
and dependencies as Ubuntu 22.04 and 24.04 ship them; no Ubuntu host is reachable here to record real ones.
"""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.ubuntu_modules import (
    installed_packages, precompiled_modules)

OPEN = "580-server-open"


def line(package, depends="", status="ii "):
    return "%s;%s;%s" % (package, status, depends)


def image(release):
    return line("linux-image-%s" % release, "linux-modules-%s, linux-base (>= 4.5ubuntu1~16.04.1)" % release)


def meta(name, release, signed=True):
    return line("linux-image-%s" % name, "linux-image-%s%s, linux-firmware, intel-microcode | amd64-microcode"
                % ("" if signed else "unsigned-", release))


def modules(flavour, *suffixes):
    return ["linux-modules-nvidia-%s-%s" % (flavour, suffix) for suffix in suffixes]


# Ubuntu 24.04 on its GA kernel, with the open server driver's modules in the sources for generic, its HWE line and
# the cloud kernels.
NOBLE = [image("6.8.0-31-generic"), meta("generic", "6.8.0-31-generic")]
NOBLE_AVAILABLE = (modules(OPEN, "generic", "generic-hwe-24.04", "aws", "azure", "gcp", "lowlatency", "6.8.0-31-generic")
                   + modules("580-server", "generic", "6.8.0-31-generic"))


def test_the_generic_kernel_gets_its_meta_package_and_the_running_kernel_s_own():
    assert precompiled_modules(NOBLE, NOBLE_AVAILABLE, "6.8.0-31-generic", OPEN) == {
        "packages": ["linux-modules-nvidia-580-server-open-generic", "linux-modules-nvidia-580-server-open-6.8.0-31-generic"],
        "hold": ["linux-modules-nvidia-580-server-open-6.8.0-31-generic"], "kernel_metas": ["generic"], "remove": [],
        "reason": "Canonical's precompiled modules, following linux-image-generic"}


def test_the_proprietary_flavour_takes_its_own_names():
    result = precompiled_modules(NOBLE, NOBLE_AVAILABLE, "6.8.0-31-generic", "580-server")
    assert result["packages"] == ["linux-modules-nvidia-580-server-generic", "linux-modules-nvidia-580-server-6.8.0-31-generic"]


def test_the_hwe_line_is_followed_where_the_running_kernel_is_its_own():
    # Ubuntu 22.04 with both kernel lines installed, running the HWE one.
    jammy = [image("5.15.0-105-generic"), image("6.8.0-40-generic"), meta("generic", "5.15.0-105-generic"),
             meta("generic-hwe-22.04", "6.8.0-40-generic")]
    available = modules(OPEN, "generic", "generic-hwe-22.04", "6.8.0-40-generic", "5.15.0-105-generic")
    result = precompiled_modules(jammy, available, "6.8.0-40-generic", OPEN)
    assert result["packages"] == ["linux-modules-nvidia-580-server-open-generic-hwe-22.04",
                                  "linux-modules-nvidia-580-server-open-6.8.0-40-generic"]
    assert result["kernel_metas"] == ["generic-hwe-22.04"]


def test_two_kernel_lines_on_one_kernel_both_get_their_modules():
    # At 24.04's release its HWE meta package follows the GA kernel: both lines keep their modules as they part.
    noble = NOBLE + [meta("generic-hwe-24.04", "6.8.0-31-generic")]
    result = precompiled_modules(noble, NOBLE_AVAILABLE, "6.8.0-31-generic", OPEN)
    assert result["packages"] == modules(OPEN, "generic", "generic-hwe-24.04", "6.8.0-31-generic")
    assert result["reason"] == ("Canonical's precompiled modules, following linux-image-generic, "
                                "linux-image-generic-hwe-24.04")


@pytest.mark.parametrize("name, release", [("aws", "6.8.0-1012-aws"), ("azure", "6.8.0-1010-azure"),
                                           ("gcp", "6.8.0-1011-gcp"), ("lowlatency", "6.8.0-31-lowlatency")])
def test_cloud_and_lowlatency_kernels(name, release):
    installed = [image(release), meta(name, release)]
    result = precompiled_modules(installed, NOBLE_AVAILABLE + modules(OPEN, release), release, OPEN)
    assert result["packages"] == modules(OPEN, name, release)


def test_an_unsigned_image_is_the_running_kernel_s_too():
    installed = [line("linux-image-unsigned-6.8.0-31-lowlatency", "linux-modules-6.8.0-31-lowlatency"),
                 meta("lowlatency", "6.8.0-31-lowlatency", signed=False)]
    result = precompiled_modules(installed, NOBLE_AVAILABLE + modules(OPEN, "6.8.0-31-lowlatency"), "6.8.0-31-lowlatency",
                                 OPEN)
    assert result["packages"] == modules(OPEN, "lowlatency", "6.8.0-31-lowlatency")


def test_a_newer_kernel_waiting_for_its_reboot_keeps_the_meta_package_of_its_flavour():
    installed = [image("6.8.0-31-generic"), image("6.8.0-35-generic"), meta("generic", "6.8.0-35-generic")]
    available = NOBLE_AVAILABLE + modules(OPEN, "6.8.0-35-generic")
    assert precompiled_modules(installed, available, "6.8.0-31-generic", OPEN)["packages"] == modules(
        OPEN, "generic", "6.8.0-31-generic")
    available.remove("linux-modules-nvidia-580-server-open-6.8.0-31-generic")
    assert precompiled_modules(installed, available, "6.8.0-31-generic", OPEN) == {
        "packages": ["linux-modules-nvidia-580-server-open-generic"], "hold": [], "kernel_metas": ["generic"], "remove": [],
        "reason": "Canonical's precompiled modules, following linux-image-generic; the sources have none for the "
                  "running kernel 6.8.0-31-generic, so the driver loads after a reboot into the kernel it follows"}


@pytest.mark.parametrize("installed, available, kernel, reason", [
    pytest.param([image("6.8.0-31-generic")], NOBLE_AVAILABLE, "6.8.0-31-generic",
                 "no kernel meta package (linux-image-generic, -aws, ...) is installed", id="no-meta-package"),
    pytest.param(NOBLE, NOBLE_AVAILABLE, "6.9.3-custom1",
                 "no installed kernel meta package (linux-image-generic) follows the running kernel 6.9.3-custom1",
                 id="a-kernel-of-one-s-own"),
    pytest.param(NOBLE, NOBLE_AVAILABLE, "6.8.0-1008-kvm",
                 "no installed kernel meta package (linux-image-generic) follows the running kernel 6.8.0-1008-kvm",
                 id="another-flavour-than-the-meta-package-s"),
    pytest.param([image("6.8.0-1008-kvm"), meta("kvm", "6.8.0-1008-kvm")], NOBLE_AVAILABLE, "6.8.0-1008-kvm",
                 "Ubuntu's sources have no linux-modules-nvidia-580-server-open-kvm for linux-image-kvm",
                 id="no-modules-for-that-kernel"),
    pytest.param(NOBLE, [], "6.8.0-31-generic",
                 "Ubuntu's sources have no linux-modules-nvidia-580-server-open-generic for linux-image-generic",
                 id="restricted-not-in-the-sources"),
    pytest.param([line("linux-image-generic", "linux-image-6.8.0-31-generic", status="rc ")], NOBLE_AVAILABLE,
                 "6.8.0-31-generic", "no kernel meta package (linux-image-generic, -aws, ...) is installed",
                 id="a-removed-meta-package"),
])
def test_dkms_where_no_precompiled_package_follows_the_kernel(installed, available, kernel, reason):
    assert precompiled_modules(installed, available, kernel, OPEN) == {
        "packages": [], "hold": [], "kernel_metas": [], "remove": [], "reason": "DKMS builds the modules: " + reason}


INSTALLED_MODULES = [line(name, status="hi ") for name in (
    modules(OPEN, "generic", "6.8.0-31-generic", "6.8.0-35-generic") + modules("580-server", "generic", "6.8.0-31-generic")
    + modules("570-server-open", "6.8.0-31-generic") + modules("580-open", "generic"))] + [
    line("linux-modules-nvidia-550-server-6.8.0-31-generic", status="rc ")]


def test_precompiled_modules_of_another_flavour_or_branch_are_swapped_out():
    result = precompiled_modules(NOBLE + INSTALLED_MODULES, NOBLE_AVAILABLE, "6.8.0-31-generic", OPEN)
    assert result["packages"] == modules(OPEN, "generic", "6.8.0-31-generic")
    assert result["remove"] == sorted(modules("580-server", "generic", "6.8.0-31-generic")
                                      + modules("570-server-open", "6.8.0-31-generic") + modules("580-open", "generic"))
    proprietary = precompiled_modules(NOBLE + INSTALLED_MODULES, NOBLE_AVAILABLE, "6.8.0-31-generic", "580-server")
    assert "linux-modules-nvidia-580-server-generic" not in proprietary["remove"]
    assert "linux-modules-nvidia-580-server-open-generic" in proprietary["remove"]


def test_dkms_swaps_out_every_installed_precompiled_module():
    result = precompiled_modules(INSTALLED_MODULES, NOBLE_AVAILABLE, "6.8.0-31-generic", OPEN)
    assert result["packages"] == []
    assert result["remove"] == sorted(line.split(";")[0] for line in INSTALLED_MODULES if ";hi " in line)


def test_an_exact_pinned_version_gets_dkms_and_swaps_the_precompiled_modules_out():
    result = precompiled_modules(NOBLE + INSTALLED_MODULES, NOBLE_AVAILABLE, "6.8.0-31-generic", OPEN, "580.95.05")
    assert result["packages"] == [] and result["hold"] == []
    assert result["remove"] == sorted(line.split(";")[0] for line in INSTALLED_MODULES if ";hi " in line)
    assert result["reason"] == (
        "DKMS builds the modules: nvidia_driver_version pins 580.95.05, and Canonical builds its precompiled modules "
        "from the branch's current driver only (pin nvidia_driver_branch alone to use them)")


def test_installed_packages_reads_dpkg_query_s_fields():
    assert installed_packages([
        "linux-image-generic;ii ;linux-image-6.8.0-31-generic (= 6.8.0-31.31), linux-firmware, intel-microcode | "
        "amd64-microcode:amd64",
        "linux-image-virtual;hi ;",
        "linux-image-lowlatency;un ;",
        "linux-image-oem-24.04;rc ;linux-image-6.8.0-1006-oem",
        "",
        "garbage",
    ]) == {"linux-image-generic": ["linux-image-6.8.0-31-generic", "linux-firmware", "intel-microcode", "amd64-microcode"],
           "linux-image-virtual": []}
