# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host_firewall role's decisions: every preflight refusal, the controller's SSH guard, and the merged sets."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._host_firewall.rules import preflight_problems, ruleset

HOSTS = ["head", "gpu1", "gpu2"]
ADDRESSES = {"head": ["10.0.0.10"], "gpu1": ["10.0.0.11", "fd00::11"], "gpu2": ["10.0.0.12"]}


def settings(**overrides):
    base = {"distribution": "Debian", "major_version": "13", "releases": ["12", "13"], "cluster_hosts": HOSTS,
            "allowed_networks": [], "trusted_interfaces": ["docker0", "cali*"], "ssh_ports": [22], "ssh_sources": [],
            "open_ports": []}
    base.update(overrides)
    return base


def found(**overrides):
    base = {"addresses": ADDRESSES, "connection": "ssh", "ssh_connection": "192.168.5.9 50022 10.0.0.11 22"}
    base.update(overrides)
    return base


def test_a_good_input_has_no_problem():
    assert preflight_problems(settings(), found()) == []


@pytest.mark.parametrize("given, seen, expected", [
    ({"major_version": "11"}, {}, "Debian 11 is not supported: the role knows the nftables packages of Debian 12, 13"),
    ({}, {"addresses": dict(ADDRESSES, gpu2=[])},
     "host_firewall_cluster_hosts: gpu2 resolves to no address here; set its ansible_host"),
    ({"allowed_networks": ["10.1.0.0/16", "campus"]}, {},
     "host_firewall_allowed_networks: 'campus' is not an IP address or network"),
    ({"ssh_sources": ["10.9.0.0/33"]}, {}, "host_firewall_ssh_sources: '10.9.0.0/33' is not an IP address or network"),
    ({"trusted_interfaces": ["a-name-longer-than-15"]}, {},
     "host_firewall_trusted_interfaces: 'a-name-longer-than-15' is not an interface name"),
    ({"ssh_ports": []}, {}, "host_firewall_ssh_ports must list sshd's ports, numbers from 1 to 65535 (got [])"),
    ({"ssh_ports": [22, 70000]}, {}, "host_firewall_ssh_ports must list sshd's ports"),
    ({"open_ports": [{"port": 8888, "sources": ["10.9.0.0/24"], "why": "x"}]}, {},
     "host_firewall_open_ports[0] has unknown key(s) why; known: port, protocol, sources, comment"),
    ({"open_ports": [{"port": 0}]}, {}, "host_firewall_open_ports[0]: port 0 is not a number from 1 to 65535"),
    ({"open_ports": [{"port": 53, "protocol": "sctp"}]}, {}, "host_firewall_open_ports[0]: protocol 'sctp' is neither"),
    ({"open_ports": [{"port": 53, "sources": ["x"]}]}, {}, "host_firewall_open_ports[0].sources: 'x' is not an IP"),
    ({"open_ports": ["8888"]}, {}, "host_firewall_open_ports[0] is not a mapping"),
])
def test_each_bad_input_is_named_with_its_fix(given, seen, expected):
    problems = preflight_problems(settings(**given), found(**seen))
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_every_problem_is_reported_at_once():
    problems = preflight_problems(settings(major_version="11", ssh_ports=[], allowed_networks=["x"]), found())
    assert len(problems) == 3


@pytest.mark.parametrize("given, ssh_connection, cut", [
    ({"ssh_ports": [2222]}, "192.168.5.9 50022 10.0.0.11 22",
     "host_firewall_ssh_ports (2222) lacks port 22, which the controller's own SSH connection uses"),
    ({"ssh_sources": ["10.9.0.0/24"]}, "192.168.5.9 50022 10.0.0.11 22",
     "host_firewall_ssh_sources (10.9.0.0/24) leaves out 192.168.5.9, the address the controller connects from"),
    ({"ssh_sources": ["192.168.5.0/24"]}, "192.168.5.9 50022 10.0.0.11 22", None),
    # From a cluster host or an allowed network, every port is open: SSH too.
    ({"ssh_sources": ["10.9.0.0/24"]}, "10.0.0.10 50022 10.0.0.11 22", None),
    ({"ssh_sources": ["10.9.0.0/24"], "allowed_networks": ["192.168.0.0/16"]}, "192.168.5.9 50022 10.0.0.11 22", None),
    ({"ssh_sources": ["fd00:9::/64"]}, "fd00:9::5 50022 fd00::11 22", None),
    # Not seen (a become method that cleared the environment): the rollback timer guards instead.
    ({"ssh_sources": ["10.9.0.0/24"]}, "", None),
    # sshd -i on a pipe (a ProxyCommand that enters the node's namespace): no packet crosses the rules.
    ({"ssh_ports": [2222], "ssh_sources": ["10.9.0.0/24"]}, "UNKNOWN 65535 UNKNOWN 65535", None),
])
def test_rules_that_would_cut_the_controllers_ssh_are_refused(given, ssh_connection, cut):
    problems = preflight_problems(settings(**given), found(ssh_connection=ssh_connection))
    assert problems == ([] if cut is None else [problems[0]])
    if cut:
        assert problems[0].startswith(cut)


def test_a_connection_that_is_not_ssh_cannot_be_cut():
    assert preflight_problems(settings(ssh_ports=[2222]), found(connection="community.docker.docker")) == []


def test_the_sets_are_merged_and_sorted_whatever_the_order():
    rules = ruleset(settings(allowed_networks=["10.0.0.0/25", "192.168.1.7"], ssh_sources=["fd00:9::/64"],
                             open_ports=[{"port": 8888, "sources": ["10.9.0.0/24"], "comment": "Jupyter"},
                                         {"port": 53, "protocol": "udp"}]), found())
    assert rules == {
        "cluster_v4": ["10.0.0.0/25", "192.168.1.7"], "cluster_v6": ["fd00::11"],
        "interfaces": ["docker0", "cali*"], "ssh_ports": [22], "ssh_v4": [], "ssh_v6": ["fd00:9::/64"],
        "open": [{"port": 8888, "protocol": "tcp", "v4": ["10.9.0.0/24"], "v6": [], "comment": "Jupyter"},
                 {"port": 53, "protocol": "udp", "v4": [], "v6": [], "comment": ""}]}
    shuffled = ruleset(settings(cluster_hosts=list(reversed(HOSTS)), allowed_networks=["192.168.1.7", "10.0.0.0/25"],
                                ssh_sources=["fd00:9::/64"],
                                open_ports=[{"port": 53, "protocol": "udp"},
                                            {"port": 8888, "sources": ["10.9.0.0/24"], "comment": "Jupyter"}]), found())
    assert shuffled == rules


def test_unknown_keys_are_a_defect_of_the_role_not_of_the_inventory():
    with pytest.raises(ValueError, match="unknown key"):
        preflight_problems(dict(settings(), extra=1), found())
