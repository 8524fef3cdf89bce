# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which transport NCCL used, read from a run's NCCL_DEBUG=INFO log, and whether that is what the cluster should use.

The lines read (formats as NCCL 2.x prints them; the host:pid:tid [device] prefix and an mpirun rank prefix vary):

    gpu01:4211:4290 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>
    gpu01:4211:4290 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
    gpu01:4211:4290 [0] NCCL INFO Using network IB                      (or Socket)
    gpu01:4211:4290 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
    gpu01:4211:4290 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA     (GPUDirect RDMA)
    gpu01:4211:4290 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0            (through host memory)
    gpu01:4211:4290 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/Socket/0
    gpu01:4211:4290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read               (within a node; also
                                                       P2P/CUMEM, P2P/direct pointer, SHM/direct/direct)

Older releases write 'Channel 00 :' without the '/0'. NCCL's IB plugin names itself NET/IBext_v8 and the like.
"""

import re

# The channel's index, the two ranks with their device (a CUDA index or a bus id), the direction of a network channel
# and the transport after 'via'.
_CHANNEL = re.compile(r"NCCL INFO Channel (\d+)(?:/\d+)? : (\d+)\[([0-9a-fA-Fx]+)\] -> (\d+)\[([0-9a-fA-Fx]+)\]"
                      r"(?: \[(send|receive)\])? via (.+?)\s*$")
_NET_USING = re.compile(r"NCCL INFO NET/(\w+) : Using (.*)$")
_NETWORK = re.compile(r"NCCL INFO Using network (\w+)")
_GDR_DISABLED = re.compile(r"NCCL INFO (?:NET/\w+ : )?GPU Direct RDMA Disabled for")
_NO_IB_DEVICE = re.compile(r"NCCL INFO NET/IB : No device found")
_DEVICE = re.compile(r"\[(\d+)\]([^\s\[;]+)")
_INFO = "NCCL INFO"


def _transport(via):
    """'NET/IB/0/GDRDMA' -> {kind: net, network: IB, gdr: True}; 'P2P/IPC/read' -> {kind: p2p, ...}; SHM -> shm."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        # NET/IBext_v8/2 is the IB plugin of NCCL's net-plugin interface: still InfiniBand or RoCE verbs.
        network = "IB" if parts[1].startswith("IB") else parts[1]
        return {"kind": "net", "network": network, "gdr": "GDRDMA" in parts[2:]}
    kind = {"P2P": "p2p", "SHM": "shm"}.get(parts[0], "other")
    return {"kind": kind, "network": None, "gdr": None}


def _clean(line):
    return line.rstrip("\r\n").strip()


def parse_nccl_transport(log):
    """Everything the log says about transports, without judging it.

    Returns {info_lines, networks, net_devices, gdr_disabled_lines, no_ib_device_lines, channels}: networks the
    'Using network X' names in order of first appearance; net_devices {network: [device names]} from the 'NET/X : Using'
    lines; channels one dict per channel line {line, channel, from_rank, to_rank, direction, via, kind, network, gdr}.
    """
    lines = log.splitlines() if isinstance(log, str) else [str(line) for line in log or []]
    parsed = {"info_lines": 0, "networks": [], "net_devices": {}, "gdr_disabled_lines": [], "no_ib_device_lines": [],
              "channels": []}
    for raw in lines:
        line = _clean(raw)
        if _INFO not in line:
            continue
        parsed["info_lines"] += 1
        channel = _CHANNEL.search(line)
        if channel:
            number, from_rank, _from_device, to_rank, _to_device, direction, via = channel.groups()
            entry = {"line": line, "channel": int(number), "from_rank": int(from_rank), "to_rank": int(to_rank),
                     "direction": direction, "via": via}
            entry.update(_transport(via))
            parsed["channels"].append(entry)
            continue
        using = _NET_USING.search(line)
        if using:
            devices = parsed["net_devices"].setdefault(using.group(1), [])
            for _index, name in _DEVICE.findall(using.group(2)):
                if name not in devices:
                    devices.append(name)
            continue
        network = _NETWORK.search(line)
        if network and network.group(1) not in parsed["networks"]:
            parsed["networks"].append(network.group(1))
        if _GDR_DISABLED.search(line):
            parsed["gdr_disabled_lines"].append(line)
        if _NO_IB_DEVICE.search(line):
            parsed["no_ib_device_lines"].append(line)
    return parsed


def transport_summary(parsed):
    """Counts for the report: {networks, net_channels, gdr_channels, socket_channels, intra_node_channels}."""
    channels = parsed["channels"]
    net = [channel for channel in channels if channel["kind"] == "net"]
    return {"networks": parsed["networks"], "net_channels": len(net),
            "gdr_channels": sum(1 for channel in net if channel["gdr"]),
            "socket_channels": sum(1 for channel in net if channel["network"] == "Socket"),
            "intra_node_channels": sum(1 for channel in channels if channel["kind"] in ("p2p", "shm"))}


def _quoted(lines):
    return "'%s'" % lines[0] if lines else ""


def transport_problems(parsed, has_hcas, gdr_expected):
    """One sentence per problem, each quoting NCCL's own line; [] when the run used what it should.

    parsed: parse_nccl_transport's result for a multi-node run. has_hcas: whether the cluster's nodes have HCAs
    (rdma_fabric_facts' hca_count). gdr_expected: whether GPUDirect RDMA should carry the inter-node channels.
    """
    if not parsed["info_lines"]:
        return ["the log has no 'NCCL INFO' line: run the all-reduce with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS unset or "
                "including INIT and NET) so that NCCL says which transport it chose"]
    net = [channel for channel in parsed["channels"] if channel["kind"] == "net"]
    if not net:
        return ["the log has no inter-node channel line ('Channel NN/N : ... via NET/...'): the run did not span two "
                "nodes, or NCCL_DEBUG_SUBSYS left the lines out; run across at least two nodes with NCCL_DEBUG=INFO"]
    problems = []
    sockets = [channel for channel in net if channel["network"] == "Socket"]
    if has_hcas and sockets:
        cause = _quoted(parsed["no_ib_device_lines"])
        problems.append(
            "NCCL ran %d of %d inter-node channels over sockets although the nodes have HCAs: %s%s; check that "
            "NCCL_IB_DISABLE is not set, that NCCL_IB_HCA names HCAs the nodes have (rdma_fabric_facts), that rdma-core's "
            "libibverbs and the HCA's verbs provider are installed, and that the ports are ACTIVE"
            % (len(sockets), len(net), _quoted([sockets[0]["line"]]), " (NCCL also said %s)" % cause if cause else ""))
    without_gdr = [channel for channel in net if channel["network"] != "Socket" and not channel["gdr"]]
    if gdr_expected and without_gdr:
        cause = _quoted(parsed["gdr_disabled_lines"])
        problems.append(
            "NCCL ran %d of %d inter-node channels without GPUDirect RDMA, through host memory: %s%s; load nvidia_peermem "
            "or use DMA-BUF (open kernel module, Linux 5.12 or later: rdma_fabric_facts' gpudirect says which the node "
            "can do), and where the GPU and HCA are further apart than NCCL's default allows (rdma_fabric_facts' "
            "pcie_paths), set NCCL_NET_GDR_LEVEL"
            % (len(without_gdr), len(net), _quoted([without_gdr[0]["line"]]),
               " (NCCL also said %s)" % cause if cause else ""))
    return problems
