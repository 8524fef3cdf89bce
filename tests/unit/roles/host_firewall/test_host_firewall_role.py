# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host_firewall role's platform data and files, rendered by Ansible's own templating for both Debian releases: the
pinned package, the settings its filters read, the nftables rules (nft checks them on the node, through the template's
validate) and the unit."""

from __future__ import annotations

import pathlib

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.host_firewall import (
    host_firewall_problems, host_firewall_ruleset)
from role_vars import defaults, load, platform_file, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "host_firewall"
GROUPS = {"gpu_cluster": ["head", "gpu1"]}
RESOLVED = '{"head": ["10.0.0.10"], "gpu1": ["10.0.0.11", "fd00::11"]}'


def role_templar(major, **overrides):
    variables = {}
    variables.update(defaults(ROLE))
    variables.update(trust(overrides))  # inventory, below role vars
    variables.update(load(ROLE / "vars" / "main.yml"))
    variables.update(load(platform_file(ROLE, "Debian", major, "Debian")))
    variables.update({"ansible_facts": {"distribution": "Debian", "distribution_major_version": major,
                                        "os_family": "Debian", "env": {}},
                      "groups": GROUPS, "ansible_connection": "ssh",
                      "__host_firewall_resolved": {"stdout": RESOLVED},
                      "ansible_managed": "Ansible managed: do not edit", "ansible_check_mode": False})
    templar = Templar(loader=DataLoader(), variables=variables)
    rules = host_firewall_ruleset(*inputs(templar))
    return templar.copy_with_new_env(available_variables=dict(variables, __host_firewall_rules=rules))


def inputs(templar):
    """The settings and the findings the role's tasks hand its filters."""
    return templar.template(trust("{{ __host_firewall_settings }}")), templar.template(trust("{{ __host_firewall_found }}"))


def resolve(templar, name):
    return templar.template(trust("{{ %s }}" % name))


def render(templar, template):
    return templar.template(trust((ROLE / "templates" / template).read_text()))


def rule_lines(text):
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("major, packages", [("12", {"nftables": "1.0.6-2+deb12u2"}), ("13", {"nftables": "1.1.3-1"})])
def test_each_release_pins_nftables(major, packages):
    assert resolve(role_templar(major), "__host_firewall_packages") == packages


def test_an_unknown_release_has_nothing_to_install_and_is_refused():
    templar = role_templar("11")
    assert resolve(templar, "__host_firewall_packages") == {}
    assert host_firewall_problems(*inputs(templar)) == [
        "Debian 11 is not supported: the role knows the nftables packages of Debian 12, 13"]


def test_the_cluster_is_the_gpu_cluster_group_by_default():
    assert resolve(role_templar("13"), "__host_firewall_settings.cluster_hosts") == ["head", "gpu1"]


def test_by_default_the_table_drops_all_but_the_cluster_ssh_and_local_containers():
    lines = rule_lines(render(role_templar("13"), "host-firewall.nft.j2"))
    assert lines[:2] == ["table inet dlinfra_host_firewall", "delete table inet dlinfra_host_firewall"]
    assert "elements = { 10.0.0.10/31 }" in lines  # 10.0.0.10 and .11, merged and "elements = { fd00::11 }" in lines
    chain = lines[lines.index("chain input {") + 1:]
    assert chain[:5] == ["type filter hook input priority filter; policy drop;",
                         "ct state established,related accept", "ct state invalid drop", 'iif "lo" accept',
                         "meta l4proto { 1, 58 } accept"]
    assert 'tcp dport { 22 } accept comment "SSH, never refused"' in chain
    assert 'ip saddr @cluster_v4 accept comment "the cluster\'s hosts"' in chain
    assert 'ip6 saddr @cluster_v6 accept comment "the cluster\'s hosts"' in chain
    assert [line for line in chain if line.startswith("iifname")] == [
        'iifname "%s" accept comment "containers and pods on this host"' % name
        for name in ("docker0", "cali*", "vxlan.calico", "cni*")]
    assert chain[-2:] == ["}", "}"]


def test_ssh_from_given_sources_and_ports_open_beyond_the_cluster():
    text = render(role_templar("12", host_firewall_ssh_sources=["192.168.5.0/24", "fd00:9::/64"],
                               host_firewall_ssh_ports=[22, 2222],
                               host_firewall_open_ports=[{"port": 8888, "sources": ["10.9.0.0/24"],
                                                          "comment": 'Jupyter "lab"'},
                                                         {"port": 53, "protocol": "udp"}]),
                  "host-firewall.nft.j2")
    lines = rule_lines(text)
    assert 'ip saddr { 192.168.5.0/24 } tcp dport { 22, 2222 } accept comment "SSH"' in lines
    assert 'ip6 saddr { fd00:9::/64 } tcp dport { 22, 2222 } accept comment "SSH"' in lines
    assert not any("never refused" in line for line in lines)
    assert "ip saddr { 10.9.0.0/24 } tcp dport 8888 accept comment \"Jupyter 'lab'\"" in lines
    assert "udp dport 53 accept" in lines


def test_without_cluster_addresses_no_empty_set_is_written():
    templar = role_templar("13", host_firewall_cluster_hosts=[])
    lines = rule_lines(render(templar, "host-firewall.nft.j2"))
    assert not any("cluster_v" in line for line in lines)


def test_the_unit_loads_only_its_own_table_before_the_network():
    lines = rule_lines(render(role_templar("13"), "dlinfra-host-firewall.service.j2"))
    assert "ExecStart=/usr/sbin/nft -f /etc/dlinfra/host-firewall.nft" in lines
    assert "ExecReload=/usr/sbin/nft -f /etc/dlinfra/host-firewall.nft" in lines
    assert "ExecStop=/usr/sbin/nft delete table inet dlinfra_host_firewall" in lines
    assert "Before=network-pre.target shutdown.target" in lines and "WantedBy=sysinit.target" in lines
