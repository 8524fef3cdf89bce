# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where node exporter listens: the default route's address, a given address of the host, or every interface; each
refusal with its fix; the flags, on iproute2's own JSON (recorded in a Debian 13 container)."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.listen import (
    host_addresses, listen_address, listen_flags, route_source)

IP_ADDR = ('[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"addr_info":[{"family":"inet",'
           '"local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo"}]},{"ifindex":40,"link_index":41,'
           '"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"addr_info":[{"family":"inet",'
           '"local":"172.17.0.2","prefixlen":16,"broadcast":"172.17.255.255","scope":"global","label":"eth0"},'
           '{"family":"inet6","local":"fd00::2","prefixlen":64,"scope":"global"}]}]')
IP_ROUTE = '[{"dst":"192.0.2.1","gateway":"172.17.0.1","dev":"eth0","prefsrc":"172.17.0.2","flags":[],"uid":0,"cache":[]}]'
ADDRESSES = host_addresses(IP_ADDR)


def test_the_hosts_addresses_and_its_default_routes_source():
    assert ADDRESSES == ["127.0.0.1", "172.17.0.2", "fd00::2"]
    assert route_source(IP_ROUTE) == "172.17.0.2"
    assert route_source("[]") == "" and route_source("") == ""


@pytest.mark.parametrize("setting, address", [
    ("", "172.17.0.2"), ("fd00::2", "fd00::2"), ("0.0.0.0", "0.0.0.0"), ("::", "::"), ("127.0.0.1", "127.0.0.1")])
def test_the_address_it_listens_on(setting, address):
    assert listen_address(setting, ADDRESSES, "172.17.0.2") == (address, "")


@pytest.mark.parametrize("setting, source, problem", [
    ("", "", "gpu_monitoring_listen_address is empty and the host has no default route to take its address from; "
             "fix: set it to the host's address on the cluster network (0.0.0.0: every interface)"),
    ("gpu1.cluster", "172.17.0.2", "gpu_monitoring_listen_address='gpu1.cluster' is not an IP address; fix: give the "
                                   "host's address on the cluster network, or leave it empty for the address of its "
                                   "default route"),
    ("10.9.0.5", "172.17.0.2", "gpu_monitoring_listen_address=10.9.0.5 is not an address of this host (it has "
                               "127.0.0.1, 172.17.0.2, fd00::2); fix: give one of them, or leave it empty for the "
                               "address of its default route"),
])
def test_an_address_it_cannot_listen_on_is_refused_with_the_fix(setting, source, problem):
    assert listen_address(setting, ADDRESSES, source) == ("", problem)


@pytest.mark.parametrize("address, flags", [
    ("172.17.0.2", "--web.listen-address=172.17.0.2:9100 --web.listen-address=127.0.0.1:9100"),
    ("fd00::2", "--web.listen-address=[fd00::2]:9100 --web.listen-address=127.0.0.1:9100"),
    ("127.0.0.1", "--web.listen-address=127.0.0.1:9100"),
    ("0.0.0.0", "--web.listen-address=:9100"),
    ("::", "--web.listen-address=:9100"),
])
def test_the_flags(address, flags):
    assert listen_flags(address, "9100") == flags
