# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whose Jupyter server the anaconda role restarts."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.anaconda import anaconda_jupyter_restarts
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._workspace.jupyter import restarts

USERS = [{"name": "ann", "port": 8888}, {"name": "bob", "port": 8889}, {"name": "cy", "port": 8890}]
SKIPPED = {"changed": False, "skipped": True}


def files(*changed):
    """A loop over (user, file) pairs, changed for the users named."""
    results = [{"changed": user["name"] in changed, "item": [user, "cert.pem"]} for user in USERS]
    return {"changed": bool(changed), "results": results}


def tokens(*changed):
    """A loop over users, changed for the users named."""
    return {"changed": bool(changed), "results": [{"changed": user["name"] in changed, "item": user} for user in USERS]}


@pytest.mark.parametrize("everyone, registered, expected", [
    pytest.param(True, [files()], ["ann", "bob", "cy"], id="unit-or-packages-changed"),
    pytest.param(False, [files(), SKIPPED, tokens()], [], id="nothing-changed"),
    pytest.param(False, [files("bob"), SKIPPED, files("cy"), tokens("ann"), tokens()], ["bob", "cy", "ann"],
                 id="each-user-whose-files-changed"),
    pytest.param(False, [files("bob"), files("bob")], ["bob", "bob"], id="as-often-as-changed"),
    pytest.param(False, [{"results": [{"item": USERS[0]}]}, None], [], id="no-changed-key"),
])
def test_restarts(everyone, registered, expected):
    assert restarts(USERS, everyone, registered) == expected


def test_the_filter_takes_what_ansible_gives():
    assert anaconda_jupyter_restarts(USERS, 0, (files("cy"),)) == ["cy"]
    assert anaconda_jupyter_restarts(USERS, 1, ()) == ["ann", "bob", "cy"]
