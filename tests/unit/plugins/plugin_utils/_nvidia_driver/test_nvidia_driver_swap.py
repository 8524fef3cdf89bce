# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node keeps one driver. The Debian lines follow dpkg-query's and apt-get's output on Debian 12, in a container that
had the release's 535 family (nvidia-smi, libcuda1, libnvidia-cfg1, nvidia-kernel-dkms, held) and then took the
nvidia-tesla-470 one; the Ubuntu ones follow the names and source packages of Ubuntu 24.04's archive."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.swap import swap_out, swap_problem

MAIN, TESLA = "nvidia-graphics-drivers", "nvidia-graphics-drivers-tesla-470"
# dpkg-query -W -f '${Package} ${db:Status-Abbrev} ${source:Package}\n' (an excerpt of every package's line).
NODE_535 = [
    "adduser ii  adduser", "firmware-nvidia-gsp ii  nvidia-graphics-drivers",
    "glx-alternative-nvidia ii  glx-alternative", "libcuda1:amd64 hi  nvidia-graphics-drivers",
    "libnvidia-cfg1:amd64 hi  nvidia-graphics-drivers", "libnvidia-ml1:amd64 ii  nvidia-graphics-drivers",
    "nvidia-alternative ii  nvidia-graphics-drivers", "nvidia-kernel-common ii  nvidia-support",
    "nvidia-kernel-dkms hi  nvidia-graphics-drivers", "nvidia-modprobe ii  nvidia-modprobe",
    "nvidia-persistenced hi  nvidia-persistenced", "nvidia-smi hi  nvidia-graphics-drivers",
    "nvidia-tesla-470-alternative un  nvidia-tesla-470-alternative",
]
KEEP_535 = ["nvidia-smi", "libcuda1", "libnvidia-cfg1", "nvidia-kernel-dkms", "nvidia-persistenced"]
KEEP_470 = ["nvidia-tesla-470-smi", "libnvidia-tesla-470-cuda1", "libnvidia-tesla-470-cfg1",
            "nvidia-tesla-470-kernel-dkms", "nvidia-persistenced"]
FAMILY_535 = ["firmware-nvidia-gsp", "libcuda1", "libnvidia-cfg1", "libnvidia-ml1", "nvidia-alternative",
              "nvidia-kernel-dkms", "nvidia-smi"]


def test_a_node_moving_to_tesla_470_removes_the_release_s_family_and_keeps_the_rest():
    assert swap_out(NODE_535, KEEP_470, [], TESLA) == FAMILY_535


def test_a_node_that_keeps_its_driver_has_nothing_to_remove():
    assert swap_out(NODE_535, KEEP_535, ["nvidia-open-kernel-dkms"], MAIN) == []
    assert swap_out([], KEEP_535, [], MAIN) == []


def test_a_node_moving_to_the_open_flavour_removes_the_proprietary_kernel_package_only():
    keep = [name for name in KEEP_535 if name != "nvidia-kernel-dkms"] + ["nvidia-open-kernel-dkms"]
    assert swap_out(NODE_535, keep, ["nvidia-kernel-dkms"], MAIN) == ["nvidia-kernel-dkms"]


def test_packages_removed_with_their_configuration_left_do_not_count():
    after = ["nvidia-alternative rc  nvidia-graphics-drivers", "nvidia-tesla-470-smi hi  nvidia-graphics-drivers-tesla-470",
             "libnvidia-tesla-470-cuda1:amd64 hi  nvidia-graphics-drivers-tesla-470"]
    assert swap_out(after, KEEP_470, [], TESLA) == []
    assert swap_out(after, KEEP_535, [], MAIN) == ["libnvidia-tesla-470-cuda1", "nvidia-tesla-470-smi"]


def test_every_other_tesla_family_goes_too():
    both = NODE_535 + ["nvidia-tesla-535-smi ii  nvidia-graphics-drivers-tesla-535"]
    assert swap_out(both, KEEP_470, [], TESLA) == FAMILY_535 + ["nvidia-tesla-535-smi"]


def test_without_a_family_held_packages_of_other_sources_stay():
    # NVIDIA's repository is one family; a held package of another source (the toolkit role's) is not the driver's.
    node = NODE_535 + ["nvidia-container-toolkit hi  nvidia-container-toolkit"]
    assert swap_out(node, KEEP_535, [], "") == []


# Ubuntu 24.04, proprietary 580-server modules by DKMS, held by an earlier run.
UBUNTU_580 = [
    "nvidia-headless-no-dkms-580-server hi  nvidia-graphics-drivers-580-server",
    "nvidia-utils-580-server hi  nvidia-graphics-drivers-580-server",
    "nvidia-dkms-580-server hi  nvidia-graphics-drivers-580-server",
    "nvidia-kernel-common-580-server ii  nvidia-graphics-drivers-580-server",
    "linux-modules-nvidia-580-server-6.8.0-31-generic hi  linux-restricted-modules",
]


def test_on_ubuntu_the_other_flavour_s_held_meta_package_goes_with_its_kernel_package():
    keep = ["nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server", "nvidia-dkms-580-server-open"]
    assert swap_out(UBUNTU_580, keep, ["nvidia-dkms-580-server"]) == [
        "nvidia-dkms-580-server", "nvidia-headless-no-dkms-580-server"]


def test_on_ubuntu_another_branch_s_held_packages_go():
    keep = ["nvidia-headless-no-dkms-590-server", "nvidia-utils-590-server", "nvidia-dkms-590-server"]
    assert swap_out(UBUNTU_580, keep, []) == [
        "nvidia-dkms-580-server", "nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server"]


def test_precompiled_modules_go_only_where_named():
    # A held modules package of an older kernel is not the driver's source: it stays unless the module filter names it.
    keep = ["nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server", "nvidia-dkms-580-server"]
    assert swap_out(UBUNTU_580, keep, []) == []
    assert swap_out(UBUNTU_580, keep, ["linux-modules-nvidia-580-server-6.8.0-31-generic"]) == [
        "linux-modules-nvidia-580-server-6.8.0-31-generic"]


# dpkg-query -W -f '${Package} ${source:Package}\n' for the Remv lines of apt-get --simulate install ... nvidia-smi- ...
REMOVED_535 = ["%s nvidia-graphics-drivers" % name for name in FAMILY_535]


def test_a_move_that_removes_driver_packages_only_goes_ahead():
    assert swap_problem("gpu01", REMOVED_535, FAMILY_535, "470") == ""
    assert swap_problem("gpu01", ["nvidia-tesla-470-smi nvidia-graphics-drivers-tesla-470",
                                  "libnvidia-tesla-470-cuda1:amd64 nvidia-graphics-drivers-tesla-470"], [], "535") == ""
    assert swap_problem("gpu01", [], FAMILY_535, "470") == ""
    # Ubuntu: the old flavour's meta package, the precompiled modules, and a named package of any source.
    assert swap_problem("gpu01", ["nvidia-driver-580-server nvidia-graphics-drivers-580-server",
                                  "linux-modules-nvidia-580-server-generic linux-restricted-modules-meta",
                                  "named-one other-source"], ["named-one"], "580 (open kernel modules)") == ""


def test_a_move_that_would_take_other_packages_stops_naming_them():
    assert swap_problem("gpu01", REMOVED_535 + ["libnccl2:amd64 nccl"], FAMILY_535,
                        "470 (proprietary kernel modules)") == (
        "gpu01: moving the NVIDIA driver to 470 (proprietary kernel modules) would also remove libnccl2, which is not "
        "part of a driver but depends on the one installed; remove it first, or keep the node on its installed driver "
        "with nvidia_driver_branch and nvidia_driver_flavor")
    assert "would also remove cuda-app, libnccl2, which are not part of a driver but depend on" in swap_problem(
        "gpu01", REMOVED_535 + ["libnccl2 nccl", "cuda-app"], FAMILY_535, "470")
