# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private. Where node exporter listens: the node's address on the cluster network and its loopback, or every
interface where the site says so (gpu_monitoring_listen_address). Pure Python over ``ip -j`` output."""

import ipaddress
import json

EVERY_INTERFACE = ("0.0.0.0", "::")
LOOPBACK = "127.0.0.1"


def host_addresses(ip_addr_json):
    """The addresses of ``ip -j addr show`` (without prefix lengths)."""
    return [info["local"] for link in json.loads(ip_addr_json or "[]") for info in link.get("addr_info", [])
            if info.get("local")]


def route_source(ip_route_json):
    """The source address of ``ip -j route get ADDRESS`` (the default route's), '' where there is none."""
    routes = json.loads(ip_route_json or "[]")
    return routes[0].get("prefsrc", "") if routes else ""


def listen_address(setting, addresses, source):
    """(address, problem): gpu_monitoring_listen_address where it is an address of the host or every interface; when
    empty, ``source``, the address of the host's default route. The problem ('' when none) says the fix."""
    setting = str(setting or "").strip()
    if setting in EVERY_INTERFACE:
        return setting, ""
    if not setting:
        if source:
            return source, ""
        return "", ("gpu_monitoring_listen_address is empty and the host has no default route to take its address from; "
                    "fix: set it to the host's address on the cluster network (0.0.0.0: every interface)")
    try:
        ipaddress.ip_address(setting)
    except ValueError:
        return "", ("gpu_monitoring_listen_address=%r is not an IP address; fix: give the host's address on the cluster "
                    "network, or leave it empty for the address of its default route" % setting)
    if setting not in addresses:
        return "", ("gpu_monitoring_listen_address=%s is not an address of this host (it has %s); fix: give one of them, "
                    "or leave it empty for the address of its default route" % (setting, ", ".join(addresses) or "none"))
    return setting, ""


def listen_flags(address, port):
    """node exporter's --web.listen-address flags (repeatable since 1.5): every interface as ':PORT', else the address
    and the loopback, where the role's own checks ask it."""
    if address in EVERY_INTERFACE:
        return "--web.listen-address=:%d" % int(port)
    shown = "[%s]" % address if ":" in address else address
    flags = ["--web.listen-address=%s:%d" % (shown, int(port))]
    if address != LOOPBACK:
        flags.append("--web.listen-address=%s:%d" % (LOOPBACK, int(port)))
    return " ".join(flags)
