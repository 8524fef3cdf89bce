# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The anaconda filters take what a task hands them (skipped results, text from facts) and reach plugin_utils."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.anaconda import (
    FilterModule, anaconda_install_action, anaconda_install_problems)


def test_both_filters_are_exposed():
    assert FilterModule().filters() == {"anaconda_install_action": anaconda_install_action,
                                        "anaconda_install_problems": anaconda_install_problems}


@pytest.mark.parametrize("args, action", [
    (({}, "miniforge", "24.9.2-0", False), "install"),
    (({}, "miniforge", "24.9.2-0", "true", "true", "0"), "install_into_empty"),
    (({}, "miniforge", "24.9.2-0", True, True, 2), "refuse"),
    ((None, "miniforge", "24.9.2-0", True, True, None), "refuse"),
    (({"flavor": "miniforge", "version": "24.9.2-0", "complete": True}, "miniforge", "24.9.2-0", True, True), "none"),
    (({"flavor": "miniforge", "version": "24.7.1-0", "complete": True}, "miniforge", "24.9.2-0", True, True), "update"),
])
def test_the_action_filter(args, action):
    assert anaconda_install_action(*args) == action


def test_the_problems_filter_and_its_error_for_a_missing_key():
    settings = {"flavor": "miniforge", "architectures": ["x86_64"], "architecture": "x86_64", "installer_sha256": "a" * 64,
                "installer_name": "Miniforge3.sh", "installer_file": "", "installer_url": "", "prefix": "/opt/anaconda3",
                "marker": "/opt/anaconda3/.dlinfra-anaconda-installer.json", "environments": []}
    assert anaconda_install_problems(settings, {"action": "install"}) == []
    assert anaconda_install_problems(dict(settings, prefix="/"), {"action": "install"}) == [
        'anaconda_prefix "/" must be an absolute path without spaces (the installers refuse spaces)']
    with pytest.raises(AnsibleFilterError, match="anaconda_install_problems: 'action'"):
        anaconda_install_problems(settings, {})
