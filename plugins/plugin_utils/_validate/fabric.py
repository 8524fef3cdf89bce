# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's fabric checks on a GPU node, from its rdma_fabric_facts (tasks/fabric.yml): fabric.ports (every port the
inventory expects ACTIVE at the cluster's rate and link layer) and fabric.gpudirect (GPUDirect RDMA where expected);
and nccl.transport, the fabric as NCCL used it in the multi-node all-reduce (the nccl phase's run).
The sentences come from plugin_utils/_fabric; a node without HCAs where none are expected has nothing to check."""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.pcie_paths import RELATIONS
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._fabric.gpudirect import gpudirect_problem
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._fabric.ports import ALL, port_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.transport import (
    parse_nccl_transport, transport_problems, transport_summary)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import check, ran


def _ports(hcas):
    return [(hca["name"], port) for hca in hcas for port in hca.get("ports") or []]


def node_fabric(raw):
    """What the report's node table shows of a GPU node's fabric, or None where rdma_fabric_facts did not run or failed:
    {"hcas": [{"name", "ports": [{"port", "state", "link_layer", "rate_gbps"}], "nearest_gpus", "relation"}]}, where
    nearest_gpus are the GPUs (PCI addresses) closest to the HCA on PCIe and relation how close (RELATIONS: PIX is one
    switch apart, SYS across sockets; null where sysfs places neither)."""
    facts = raw.get("fabric") or {}
    if not ran(facts) or "hcas" not in facts:
        return None
    hcas = []
    for hca in facts.get("hcas") or []:
        paths = [path for path in facts.get("pcie_paths") or []
                 if path.get("hca") == hca["name"] and path.get("relation") in RELATIONS]
        best = min((RELATIONS.index(path["relation"]) for path in paths), default=None)
        hcas.append({"name": hca["name"],
                     "ports": [{key: port.get(key) for key in ("port", "state", "link_layer", "rate_gbps")}
                               for port in hca.get("ports") or []],
                     "nearest_gpus": sorted(path["gpu_pci_address"] for path in paths
                                            if RELATIONS.index(path["relation"]) == best),
                     "relation": None if best is None else RELATIONS[best]})
    return {"hcas": hcas}


def fabric_checks(host, raw):
    """[fabric.ports, fabric.gpudirect] for a GPU node's raw data (its ``fabric`` and ``expected``)."""
    facts, expected = raw.get("fabric") or {}, raw["expected"]
    if not ran(facts):
        reason = "rdma_fabric_facts did not run on this node"
        return [check("fabric.ports", "skip", reason), check("fabric.gpudirect", "skip", reason)]
    if "hcas" not in facts:  # the module failed (the role lets the run go on): its message says why
        reason = "rdma_fabric_facts failed: %s" % (facts.get("msg") or "no message")
        return [check("fabric.ports", "fail", reason), check("fabric.gpudirect", "fail", reason)]
    hcas = facts.get("hcas") or []
    wanted = expected.get("fabric_ports", ALL)
    if not hcas and wanted == ALL:
        ports = check("fabric.ports", "skip", "no RDMA HCA on this node: its ranks reach other nodes over TCP sockets")
    else:
        problems = port_problems(host, facts, wanted, expected.get("fabric_rate_gbps"),
                                 expected.get("fabric_link_layer"))
        shown = ", ".join("%s:%s %s %s" % (name, port.get("port"), port.get("state"), port.get("rate") or "")
                          for name, port in _ports(hcas))
        ports = (check("fabric.ports", "fail", "; ".join(problems), expected.get("fabric_rate_gbps") or None, shown)
                 if problems else
                 check("fabric.ports", "pass", "%d port(s) of %d HCA(s) up as expected" % (len(_ports(hcas)), len(hcas)),
                       expected.get("fabric_rate_gbps") or None, shown))
    wanted_gdr = expected.get("fabric_gpudirect")
    method = (facts.get("gpudirect") or {}).get("method")
    if not wanted_gdr:
        gpudirect = check("fabric.gpudirect", "skip", "not expected (validate_fabric_gpudirect); available: %s"
                          % (method or "none"))
    elif not hcas:
        gpudirect = check("fabric.gpudirect", "skip", "no RDMA HCA on this node to move GPU memory through")
    else:
        problem = gpudirect_problem(host, facts, wanted_gdr)
        gpudirect = (check("fabric.gpudirect", "fail", problem, wanted_gdr, method) if problem else
                     check("fabric.gpudirect", "pass", "GPUDirect RDMA through %s" % method, wanted_gdr, method))
    return [ports, gpudirect]


def transport_check(cluster_first, expected, reason):
    """nccl.transport: the transport of each inter-node channel of the cluster's multi-node all-reduce, from its
    NCCL_DEBUG=INFO log (run on the cluster's first GPU node, whose raw data is cluster_first). It fails where nodes
    with HCAs ran over sockets, or ran without GPUDirect RDMA where validate_fabric_gpudirect expects it, quoting
    NCCL's own line. reason: why the all-reduce did not run (None: it ran)."""
    if reason:
        return check("nccl.transport", "skip", reason)
    result = cluster_first["allreduce_multinode"]
    if result.get("rc") != 0:
        return check("nccl.transport", "skip", "the multi-node all-reduce failed (nccl.busbw_multinode says how)")
    parsed = parse_nccl_transport("%s\n%s" % (result.get("stdout") or "", result.get("stderr") or ""))
    facts = cluster_first.get("fabric") or {}
    has_hcas = bool(ran(facts) and facts.get("hca_count"))
    gdr = bool(expected.get("fabric_gpudirect"))
    summary = transport_summary(parsed)
    wanted = ("NET/IB with GPUDirect RDMA" if gdr else "NET/IB") if has_hcas else "any"
    measured = "%s: %d inter-node channel(s), %d with GPUDirect RDMA, %d over sockets" % (
        "/".join(summary["networks"]) or "no network named", summary["net_channels"], summary["gdr_channels"],
        summary["socket_channels"])
    problems = transport_problems(parsed, has_hcas, gdr)
    if problems:
        return check("nccl.transport", "fail", "; ".join(problems), wanted, measured)
    return check("nccl.transport", "pass", "NCCL ran the all-reduce's inter-node channels over %s" % measured, wanted,
                 measured)
