# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private. The host_firewall role's decisions: pure Python.

``preflight_problems`` checks the role's settings and what preflight found on the host (the cluster hosts' addresses as
the host resolves them, the controller's SSH connection) and returns one line per problem, each naming the variable and
the fix. ``ruleset`` turns the same input into what templates/host-firewall.nft.j2 writes: sorted, merged address sets,
so that the same inventory always writes the same file.
"""

import ipaddress
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys, joined

SETTINGS = ("distribution", "major_version", "releases", "cluster_hosts", "allowed_networks", "trusted_interfaces",
            "ssh_ports", "ssh_sources", "open_ports")
FOUND = ("addresses", "connection", "ssh_connection")
OPEN_PORT_KEYS = ("port", "protocol", "sources", "comment")
PROTOCOLS = ("tcp", "udp")
# Connection plugins that reach the host through its sshd: the firewall could cut them.
SSH_CONNECTIONS = ("ssh", "ansible.builtin.ssh", "paramiko", "paramiko_ssh", "ansible.builtin.paramiko_ssh",
                   "ansible.legacy.ssh", "smart")
# An interface name as the kernel takes it (at most 15 characters), with nftables' trailing * for a prefix.
_INTERFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}[*]?$")


def _port(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536 else None


def _networks(values, variable, problems):
    """The networks of ``values`` (addresses or CIDRs); a problem for each one that is neither."""
    networks = []
    for value in values or []:
        try:
            networks.append(ipaddress.ip_network(str(value), strict=False))
        except ValueError:
            problems.append("%s: %r is not an IP address or network (CIDR such as 10.0.0.0/16); correct it"
                            % (variable, value))
    return networks


def _open_port_problems(index, entry):
    label = "host_firewall_open_ports[%d]" % index
    if not isinstance(entry, dict):
        return ["%s is not a mapping; give port, protocol (tcp or udp) and sources (empty: anywhere)" % label]
    problems = []
    unknown = sorted(set(entry) - set(OPEN_PORT_KEYS))
    if unknown:
        problems.append("%s has unknown key(s) %s; known: %s" % (label, joined(unknown), joined(OPEN_PORT_KEYS)))
    if _port(entry.get("port")) is None:
        problems.append("%s: port %r is not a number from 1 to 65535" % (label, entry.get("port")))
    if entry.get("protocol", "tcp") not in PROTOCOLS:
        problems.append("%s: protocol %r is neither tcp nor udp" % (label, entry.get("protocol")))
    _networks(entry.get("sources"), label + ".sources", problems)
    return problems


def _ssh_cut(settings, found, cluster, allowed):
    """The problem where the rules would refuse the controller's own SSH connection, else None."""
    if found["connection"] not in SSH_CONNECTIONS:
        return None
    # SSH_CONNECTION: client address, client port, server address, server port (sshd sets it for the session).
    fields = (found["ssh_connection"] or "").split()
    if len(fields) != 4:
        return None  # not seen (a become method that clears the environment): the rollback timer still guards
    try:
        address = ipaddress.ip_address(fields[0].split("%")[0])
    except ValueError:
        return None  # no IP peer (sshd -i on a pipe says UNKNOWN): the connection crosses no rule
    port = int(fields[3]) if fields[3].isdigit() else None
    if port not in settings["ssh_ports"]:
        return ("host_firewall_ssh_ports (%s) lacks port %s, which the controller's own SSH connection uses: the rules "
                "would cut it; add %s to host_firewall_ssh_ports" % (joined(settings["ssh_ports"]), port, port))
    if not settings["ssh_sources"]:
        return None
    sources = _networks(settings["ssh_sources"], "host_firewall_ssh_sources", [])
    if any(address in network for network in sources + cluster + allowed):
        return None
    return ("host_firewall_ssh_sources (%s) leaves out %s, the address the controller connects from: the rules would "
            "cut its own SSH connection; add %s (or its network) to host_firewall_ssh_sources"
            % (joined(settings["ssh_sources"]), address, address))


def preflight_problems(settings, found):
    """One line per problem (the host's name is added by the role's message), empty when the rules can be loaded."""
    check_keys("host_firewall settings", settings, SETTINGS)
    check_keys("host_firewall found", found, FOUND)
    problems = []
    if settings["distribution"] != "Debian" or str(settings["major_version"]) not in settings["releases"]:
        problems.append("%s %s is not supported: the role knows the nftables packages of Debian %s"
                        % (settings["distribution"], settings["major_version"], joined(settings["releases"])))
    for host in settings["cluster_hosts"]:
        if not found["addresses"].get(host):
            problems.append("host_firewall_cluster_hosts: %s resolves to no address here; set its ansible_host to its "
                            "address on the cluster network, or add that network to host_firewall_allowed_networks"
                            % host)
    cluster = _networks([a for host in settings["cluster_hosts"] for a in found["addresses"].get(host) or []],
                        "the cluster hosts' addresses", problems)
    allowed = _networks(settings["allowed_networks"], "host_firewall_allowed_networks", problems)
    _networks(settings["ssh_sources"], "host_firewall_ssh_sources", problems)
    for name in settings["trusted_interfaces"]:
        if not isinstance(name, str) or not _INTERFACE.match(name):
            problems.append("host_firewall_trusted_interfaces: %r is not an interface name (at most 15 characters, a "
                            "trailing * for every name it starts)" % (name,))
    bad_ports = [port for port in settings["ssh_ports"] if _port(port) is None]
    if not settings["ssh_ports"] or bad_ports:
        problems.append("host_firewall_ssh_ports must list sshd's ports, numbers from 1 to 65535 (got %r): the rules "
                        "never refuse SSH on them" % (settings["ssh_ports"],))
    for index, entry in enumerate(settings["open_ports"]):
        problems.extend(_open_port_problems(index, entry))
    if not problems:
        cut = _ssh_cut(settings, found, cluster, allowed)
        if cut:
            problems.append(cut)
    return problems


def _split(networks):
    """(IPv4, IPv6) as nftables set elements: merged, sorted, a single address without its /32 or /128."""
    def elements(version):
        merged = ipaddress.collapse_addresses(n for n in networks if n.version == version)
        return [str(n.network_address) if n.num_addresses == 1 else str(n) for n in merged]
    return elements(4), elements(6)


def ruleset(settings, found):
    """What the template writes: {cluster_v4, cluster_v6, interfaces, ssh_ports, ssh_v4, ssh_v6, open}. Empty source
    lists (ssh_v4 and ssh_v6 both empty, or an open port's) mean from anywhere."""
    check_keys("host_firewall settings", settings, SETTINGS)
    check_keys("host_firewall found", found, FOUND)
    cluster = [ipaddress.ip_network(a) for host in settings["cluster_hosts"] for a in found["addresses"].get(host) or []]
    cluster_v4, cluster_v6 = _split(cluster + [ipaddress.ip_network(n, strict=False)
                                               for n in settings["allowed_networks"]])
    ssh_v4, ssh_v6 = _split([ipaddress.ip_network(n, strict=False) for n in settings["ssh_sources"]])
    opened = []
    for entry in settings["open_ports"]:
        v4, v6 = _split([ipaddress.ip_network(n, strict=False) for n in entry.get("sources") or []])
        opened.append({"port": entry["port"], "protocol": entry.get("protocol", "tcp"), "v4": v4, "v6": v6,
                       "comment": entry.get("comment", "")})
    return {"cluster_v4": cluster_v4, "cluster_v6": cluster_v6, "interfaces": list(settings["trusted_interfaces"]),
            "ssh_ports": sorted(set(settings["ssh_ports"])), "ssh_v4": ssh_v4, "ssh_v6": ssh_v6,
            "open": sorted(opened, key=lambda e: (e["protocol"], e["port"]))}
