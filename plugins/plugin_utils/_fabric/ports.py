# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems of one host's HCA ports against what the inventory expects: pure Python, run on the controller.

``port_problems`` returns one sentence per problem, each naming the host, the HCA and port, what was seen and what to
do; empty when every expected port is ACTIVE at the expected rate and link layer. A bad expectation (a rate that is not
a number, a link layer that does not exist) is a problem of its own, naming the variable to fix.
"""

import math

LINK_LAYERS = ("InfiniBand", "Ethernet")
ALL = "all"

_PORTS_VARIABLE = "validate_fabric_expected_ports"
_RATE_VARIABLE = "validate_fabric_expected_rate_gbps"
_LINK_LAYER_VARIABLE = "validate_fabric_expected_link_layer"


def expected_rate(value):
    """The expected rate in Gb/s as a number; None when none is expected ('' or None); ValueError when not a rate."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    rate = float(value)
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(value)
    return rate


def _selection(expected_ports):
    """(wanted {hca: None for every port, or a set of port numbers}, problems); wanted None means every port present."""
    if isinstance(expected_ports, str) and expected_ports.strip() == ALL:
        return None, []
    if isinstance(expected_ports, str) or not isinstance(expected_ports, (list, tuple)):
        return {}, ["%s=%r is neither 'all' nor a list of HCA or HCA:PORT (for example [mlx5_0, 'mlx5_1:1'])"
                    % (_PORTS_VARIABLE, expected_ports)]
    wanted, problems = {}, []
    for entry in expected_ports:
        name, _colon, port = str(entry).strip().partition(":")
        if not name or (port and not port.isdigit()) or not isinstance(entry, str):
            problems.append("%s has %r, which is not HCA or HCA:PORT (for example mlx5_0 or mlx5_0:1)"
                            % (_PORTS_VARIABLE, entry))
        elif not port:
            wanted[name] = None
        elif wanted.get(name, set()) is not None:
            wanted.setdefault(name, set()).add(int(port))
    return wanted, problems


def _down(where, port):
    physical = port.get("phys_state")
    seen = "%s is %s, physical state %s" % (where, port.get("state"), physical)
    if physical == "Polling":
        return ("%s: nothing answers at the other end of the link; reseat or replace the cable (and its transceivers) and "
                "check that the switch port is up" % seen)
    if physical == "Disabled":
        return ("%s: the port is switched off; enable the switch port (and for RoCE bring the interface up with ip link "
                "set DEV up)" % seen)
    return ("%s: the link does not come up; reseat or replace the cable and read the switch port's state and log" % seen)


def _not_active(where, port):
    state, physical = port.get("state"), port.get("phys_state")
    if state == "DOWN":
        return _down(where, port)
    if state in ("INIT", "ARMED") and physical == "LinkUp":
        return ("%s is %s, physical state LinkUp: the link is up but no subnet manager has activated the port; check that "
                "a subnet manager (opensm, UFM or a managed switch's) runs on this fabric and sees the port" % (where, state))
    return ("%s is %s, physical state %s, not ACTIVE; check the cable, the switch port and the subnet manager"
            % (where, state, physical))


def _roce_gid_problem(where, port):
    routable = [gid for gid in port.get("gids") or []
                if gid.get("type") == "RoCE v2" and not str(gid.get("gid", "")).startswith("fe80:")]
    if routable:
        return None
    interfaces = sorted({gid["ndev"] for gid in port.get("gids") or [] if gid.get("ndev")})
    interface = ", ".join(interfaces) or "its network interface"
    return ("%s (RoCE) has no RoCE v2 GID outside link-local: give %s an IP address, which adds the RoCE v2 GID NCCL uses "
            "(NCCL_IB_GID_INDEX selects it)" % (where, interface))


def _port_problems(where, port, rate, link_layer):
    if port.get("state") != "ACTIVE":
        return [_not_active(where, port)]
    problems = []
    seen_layer = port.get("link_layer")
    if link_layer and seen_layer != link_layer:
        problems.append("%s runs %s, expected %s: set the port's type with mlxconfig (LINK_TYPE_P%s) and reboot, or set %s"
                        % (where, seen_layer, link_layer, port.get("port"), _LINK_LAYER_VARIABLE))
    seen_rate = port.get("rate_gbps")
    if rate is not None and seen_rate is None:
        problems.append("%s reports no rate (%r); read the port with ibstat or ethtool" % (where, port.get("rate")))
    elif rate is not None and seen_rate < rate:
        problems.append("%s runs at %g Gb/s (%s), below the expected %g Gb/s: a cable, transceiver or switch port of a "
                        "slower generation, or a link that trained down (read its error counters); check them, or set %s "
                        "if %g Gb/s is this cluster's rate"
                        % (where, seen_rate, port.get("rate"), rate, _RATE_VARIABLE, seen_rate))
    if seen_layer == "Ethernet":
        gid_problem = _roce_gid_problem(where, port)
        if gid_problem:
            problems.append(gid_problem)
    return problems


def port_problems(host, facts, expected_ports=ALL, expected_rate_gbps=None, expected_link_layer=None):
    """One sentence per problem of `host`'s ports; [] when all is well.

    facts: rdma_fabric_facts' result (its ``hcas``). expected_ports: 'all' (every port the host has; a host without
    HCAs then has nothing to check) or a list of 'HCA' (each of its ports) and 'HCA:PORT'. expected_rate_gbps: the
    cluster's rate in Gb/s (a number or its text), '' or None for no rate check. expected_link_layer: 'InfiniBand' or
    'Ethernet', '' or None for either.
    """
    problems = []
    try:
        rate = expected_rate(expected_rate_gbps)
    except (TypeError, ValueError):
        rate = None
        problems.append("%s: %s=%r is not a rate; give Gb/s as a number (400 for NDR, 200 for HDR, 100 for EDR)"
                        % (host, _RATE_VARIABLE, expected_rate_gbps))
    link_layer = expected_link_layer or None
    if link_layer and link_layer not in LINK_LAYERS:
        problems.append("%s: %s=%r is not a link layer; use InfiniBand or Ethernet (RoCE)"
                        % (host, _LINK_LAYER_VARIABLE, expected_link_layer))
        link_layer = None
    wanted, selection_problems = _selection(expected_ports)
    problems.extend("%s: %s" % (host, problem) for problem in selection_problems)

    hcas = {hca["name"]: hca for hca in facts.get("hcas") or []}
    for name in sorted(wanted or {}):
        if name not in hcas:
            problems.append("%s: %s is expected (%s) but the host has no such HCA (it has: %s); check that the card is "
                            "seated and its driver loaded (mlx5_core and mlx5_ib; rdma link show lists what the kernel "
                            "sees), or take it out of %s" % (host, name, _PORTS_VARIABLE, ", ".join(sorted(hcas)) or "none",
                                                             _PORTS_VARIABLE))
    for name in sorted(hcas):
        if wanted is not None and name not in wanted:
            continue
        ports = {port["port"]: port for port in hcas[name].get("ports") or []}
        numbers = sorted(ports) if wanted is None or wanted[name] is None else sorted(wanted[name])
        for number in numbers:
            where = "%s: %s port %s" % (host, name, number)
            if number not in ports:
                problems.append("%s is expected (%s) but %s has no such port (its ports: %s)"
                                % (where, _PORTS_VARIABLE, name, ", ".join(str(n) for n in sorted(ports)) or "none"))
                continue
            problems.extend(_port_problems(where, ports[number], rate, link_layer))
    return problems
