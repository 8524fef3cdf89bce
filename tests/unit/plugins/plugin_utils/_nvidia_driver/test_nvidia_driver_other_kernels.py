# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel packages a node moving to another flavour, or between DKMS and precompiled modules, swaps out."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nvidia_driver import nvidia_driver_other_kernel_packages
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.swap import other_kernel_packages

UBUNTU = {"open": ["nvidia-dkms-580-server-open"], "proprietary": ["nvidia-dkms-580-server"]}
EL = {"open": ["kmod-nvidia-open-dkms"], "proprietary": ["kmod-nvidia-latest-dkms"]}
SHARED = {"open": ["nvidia-kernel-dkms", "nvidia-open-kernel-dkms"], "proprietary": ["nvidia-kernel-dkms"],
          "legacy": [["nvidia-legacy-dkms"], "nvidia-kernel-dkms"]}
PRECOMPILED_OTHER = ["linux-modules-nvidia-580-server-generic", "linux-modules-nvidia-580-server-6.8.0-31-generic"]


@pytest.mark.parametrize("kernel, flavor, precompiled, remove, expected", [
    pytest.param(UBUNTU, "open", False, [], ["nvidia-dkms-580-server"], id="dkms-other-flavour"),
    pytest.param(EL, "proprietary", False, [], ["kmod-nvidia-open-dkms"], id="el"),
    pytest.param(UBUNTU, "open", True, [], ["nvidia-dkms-580-server-open", "nvidia-dkms-580-server"],
                 id="precompiled-every-dkms"),
    pytest.param(UBUNTU, "open", True, PRECOMPILED_OTHER,
                 ["nvidia-dkms-580-server-open", "nvidia-dkms-580-server"] + PRECOMPILED_OTHER,
                 id="precompiled-of-another-flavour"),
    pytest.param(UBUNTU, "proprietary", False, ["linux-modules-nvidia-580-server-open-generic"],
                 ["nvidia-dkms-580-server-open", "linux-modules-nvidia-580-server-open-generic"], id="dkms-after-precompiled"),
    pytest.param(SHARED, "open", False, [], ["nvidia-legacy-dkms"], id="shared-packages-kept-nested-flattened"),
    pytest.param(SHARED, "proprietary", True, [],
                 ["nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-legacy-dkms"], id="each-once"),
])
def test_other_kernel_packages(kernel, flavor, precompiled, remove, expected):
    assert other_kernel_packages(kernel, flavor, precompiled, remove) == expected


def test_the_filter_takes_what_ansible_gives():
    assert nvidia_driver_other_kernel_packages(UBUNTU, "open", False, None) == ["nvidia-dkms-580-server"]
