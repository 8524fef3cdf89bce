# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which version of the driver's packages the nvidia_driver role installs, out of apt's and dnf's listings."""

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nvidia_driver import nvidia_driver_package_version
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.versions import package_version

# apt-cache madison, newest first (CUDA repository and Ubuntu's archive side by side).
MADISON = ["580.95.05-1ubuntu1", "580.95.05-0ubuntu0.24.04.2", "580.82.07-0ubuntu0.24.04.1", "575.57.08-1ubuntu1",
           "570.172.08-1ubuntu1", "570.172.08"]
# repoquery, in no useful order.
REPOQUERY = ["3:580.82.07-1.el9", "580.9.1-1.el9", "580.82.07-1.el9", "580.105.08-1.el9", "575.57.08-1.el9",
             "580.95.05-1.el9"]


@pytest.mark.parametrize("available, version, branch, expected", [
    pytest.param(MADISON, "", "580", "580.95.05-1ubuntu1", id="branch-newest-first"),
    pytest.param(MADISON, "", 575, "575.57.08-1ubuntu1", id="branch-as-a-number"),
    pytest.param(MADISON, "580.82.07", "580", "580.82.07-0ubuntu0.24.04.1", id="version-revision"),
    pytest.param(MADISON, "570.172.08", "570", "570.172.08", id="exact-version-before-revisions"),
    pytest.param(MADISON, "580.95.05-0ubuntu0.24.04.2", "580", "580.95.05-0ubuntu0.24.04.2", id="full-version"),
    pytest.param(MADISON, "580.95", "580", "", id="no-partial-version"),
    pytest.param(MADISON, "", "590", "", id="branch-not-offered"),
    pytest.param(MADISON, "", "57", "", id="branch-prefix-is-not-a-branch"),
    pytest.param([], "", "580", "", id="nothing-offered"),
    pytest.param(["580x95-1", "580.95-1"], "", "580", "580.95-1", id="dot-is-literal"),
])
def test_apt_takes_the_first_that_fits(available, version, branch, expected):
    assert package_version(available, version, branch, "apt") == expected


@pytest.mark.parametrize("available, version, branch, expected", [
    pytest.param(REPOQUERY, "", "580", "580.105.08-1.el9", id="branch-newest-as-loose-versions"),
    pytest.param(REPOQUERY, "580.82.07", "580", "580.82.07-1.el9", id="version"),
    pytest.param(["580.82.07", "580.82.07-1.el9"], "580.82.07", "580", "580.82.07-1.el9", id="newest-of-version"),
    pytest.param(["580.82.07"], "580.82.07", "580", "580.82.07", id="bare-version"),
    pytest.param(REPOQUERY, "580.82", "580", "", id="no-partial-version"),
    pytest.param(REPOQUERY, "", "590", "", id="branch-not-offered"),
    pytest.param([], "580.82.07", "580", "", id="nothing-offered"),
])
def test_dnf_takes_the_newest_that_fits(available, version, branch, expected):
    assert package_version(available, version, branch, "dnf") == expected


def test_the_filter_refuses_an_unknown_manager():
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_package_version: manager is 'zypper'"):
        nvidia_driver_package_version(MADISON, "", "580", "zypper")


def test_the_filter_reads_what_ansible_gives():
    assert nvidia_driver_package_version(None, "", "580", "apt") == ""
    assert nvidia_driver_package_version(("580.95.05-1",), "", "580", "apt") == "580.95.05-1"
