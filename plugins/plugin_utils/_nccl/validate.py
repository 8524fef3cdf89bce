# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nccl role's validation decides: pure Python.

``skip_reason`` says why a host is not measured (empty where it is); ``run_problem`` says what is wrong with a run's
result, for the assertion that it used every GPU, ended cleanly and reached the floor.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import as_int


def skip_reason(gpu_count, driver_state, message, multinode, check_mode):
    """Why all_reduce_perf does not run on this host, '' where it does.

    gpu_count, driver_state and message: the host's nvidia_gpu_facts. multinode: nccl_validate_multinode.
    check_mode: ansible_check_mode.
    """
    if gpu_count == 0:
        return "no NVIDIA GPU on PCI"
    if driver_state != "ok":
        return "the NVIDIA driver does not answer (%s: %s)" % (driver_state, message)
    if gpu_count == 1 and not multinode:
        return "one GPU: an all-reduce over one rank moves no data (busbw 0); nccl_validate_multinode measures across nodes"
    if check_mode:
        return "check mode does not run the benchmark"
    return ""


def run_problem(ranks, expected_ranks, rc, stderr, metric, busbw, floor):
    """The first of: too few ranks, a non-zero exit, or the bandwidth below the floor (this last line also where the
    run is fine: the assertion shows it only when it fails).

    ranks: the ranks nccl_busbw read. expected_ranks: the GPUs the run should have used (read as
    Jinja's int filter reads it). rc and stderr: the run's.
    metric: nccl_validate_metric. busbw: that figure. floor: nccl_validate_min_busbw.
    """
    if ranks != as_int(expected_ranks):
        return ("all_reduce_perf ran %s rank(s), not %s: check that every node shows its GPUs (nvidia-smi) and that mpirun "
                "reaches every host" % (ranks, expected_ranks))
    if rc != 0:
        return "all_reduce_perf exited with %s: %s" % (rc, stderr.strip())
    return ("the %s bus bandwidth is %s GB/s, below nccl_validate_min_busbw %s GB/s; check nccl.conf (NCCL_SOCKET_IFNAME, "
            "NCCL_IB_HCA), the NVLink and NIC links, and run again with nccl_debug: INFO to see the transport NCCL chose"
            % (metric, busbw, floor))
