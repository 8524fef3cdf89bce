# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The anaconda filters take what a task hands them (skipped results, text from facts) and reach plugin_utils."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.anaconda import (
    FilterModule, anaconda_env_step, anaconda_fetch_failure, anaconda_install_action, anaconda_install_problems,
    anaconda_jupyter_config, anaconda_jupyter_problems, anaconda_jupyter_restarts)


def test_the_filters_are_exposed():
    assert FilterModule().filters() == {"anaconda_install_action": anaconda_install_action,
                                        "anaconda_install_problems": anaconda_install_problems,
                                        "anaconda_jupyter_problems": anaconda_jupyter_problems,
                                        "anaconda_jupyter_config": anaconda_jupyter_config,
                                        "anaconda_fetch_failure": anaconda_fetch_failure,
                                        "anaconda_env_step": anaconda_env_step,
                                        "anaconda_jupyter_restarts": anaconda_jupyter_restarts}


JUPYTER = {"users": [{"name": "alice", "port": 8765, "token": "0123456789abcdef"}], "ip": "127.0.0.1", "certfile": "",
           "keyfile": "", "environments": [], "unit": "dlinfra-jupyter@%s.service"}
FOUND = {"passwd": ["alice"], "cert_exists": False, "key_exists": False, "cert_pubkey": "", "key_pubkey": ""}


def test_the_jupyter_problems_filter_reads_raw_ss_and_systemctl_output():
    ss = ("LISTEN 0      5      127.0.0.1:8765 0.0.0.0:* users:((\"python3\",pid=388,fd=3)) ino:14397308 sk:62 "
          "cgroup:/system.slice/fixture-conda-mirror.service <->\n")
    assert anaconda_jupyter_problems(JUPYTER, dict(FOUND, ss=ss, units="MainPID=0\nId=dlinfra-jupyter@alice.service\n")) == [
        "anaconda_jupyter_users[0] (alice): port 8765 is in use on this host (ss -ltnpe: fixture-conda-mirror.service), "
        "not by dlinfra-jupyter@alice.service; choose another port, or stop what listens there"]
    # A skipped probe hands no output at all.
    assert anaconda_jupyter_problems(JUPYTER, dict(FOUND, ss=None)) == []
    with pytest.raises(AnsibleFilterError, match="anaconda_jupyter_problems: found has unknown key"):
        anaconda_jupyter_problems(JUPYTER, dict(FOUND, extra=1))


def test_the_jupyter_config_filter_and_its_error():
    assert anaconda_jupyter_config({"name": "alice", "port": 8888}, "/home/alice",
                                   {"ip": "127.0.0.1", "tls": {}, "kernels": {}})["ServerApp"]["root_dir"] == "/home/alice"
    with pytest.raises(AnsibleFilterError, match="anaconda_jupyter_config: 'port'"):
        anaconda_jupyter_config({"name": "alice"}, "/home/alice", {"ip": "127.0.0.1", "tls": {}, "kernels": {}})


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
