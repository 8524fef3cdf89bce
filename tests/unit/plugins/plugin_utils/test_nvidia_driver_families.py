# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node keeps one of Debian's driver families. The lines follow dpkg-query's and apt-get's output on Debian 12, in a
container that had the release's 535 family (nvidia-smi, libcuda1, libnvidia-cfg1, nvidia-kernel-dkms, held) and then
took the nvidia-tesla-470 one."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils.nvidia_driver_families import (
    other_family_packages, swap_problem)

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
FAMILY_535 = ["firmware-nvidia-gsp", "libcuda1", "libnvidia-cfg1", "libnvidia-ml1", "nvidia-alternative",
              "nvidia-kernel-dkms", "nvidia-smi"]


def test_a_node_moving_to_tesla_470_removes_the_release_s_family_and_keeps_the_rest():
    assert other_family_packages(NODE_535, TESLA) == FAMILY_535


def test_a_node_on_its_family_has_nothing_to_remove():
    assert other_family_packages(NODE_535, MAIN) == []
    assert other_family_packages([], MAIN) == []


def test_packages_removed_with_their_configuration_left_do_not_count():
    after = ["nvidia-alternative rc  nvidia-graphics-drivers", "nvidia-tesla-470-smi hi  nvidia-graphics-drivers-tesla-470",
             "libnvidia-tesla-470-cuda1:amd64 hi  nvidia-graphics-drivers-tesla-470"]
    assert other_family_packages(after, TESLA) == []
    assert other_family_packages(after, MAIN) == ["libnvidia-tesla-470-cuda1", "nvidia-tesla-470-smi"]


def test_every_other_tesla_family_goes_too():
    both = NODE_535 + ["nvidia-tesla-535-smi ii  nvidia-graphics-drivers-tesla-535"]
    assert other_family_packages(both, TESLA) == FAMILY_535 + ["nvidia-tesla-535-smi"]


# dpkg-query -W -f '${Package} ${source:Package}\n' for the Remv lines of apt-get --simulate install ... nvidia-smi- ...
REMOVED_535 = ["%s nvidia-graphics-drivers" % name for name in FAMILY_535]


def test_a_move_that_removes_driver_packages_only_goes_ahead():
    assert swap_problem("gpu01", REMOVED_535, TESLA) == ""
    assert swap_problem("gpu01", ["nvidia-tesla-470-smi nvidia-graphics-drivers-tesla-470",
                                  "libnvidia-tesla-470-cuda1:amd64 nvidia-graphics-drivers-tesla-470"], MAIN) == ""
    assert swap_problem("gpu01", [], TESLA) == ""


def test_a_move_that_would_take_other_packages_stops_naming_them():
    assert swap_problem("gpu01", REMOVED_535 + ["libnccl2:amd64 nccl"], TESLA) == (
        "gpu01: moving the NVIDIA driver to nvidia-graphics-drivers-tesla-470 would also remove libnccl2, which is not "
        "part of a driver family but depends on the one installed; remove it first, or keep the node on the installed "
        "family's branch with nvidia_driver_branch")
    assert "would also remove cuda-app, libnccl2, which are not part of a driver family but depend on" in swap_problem(
        "gpu01", REMOVED_535 + ["libnccl2 nccl", "cuda-app"], TESLA)
