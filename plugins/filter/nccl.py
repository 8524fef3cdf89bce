# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl role's preflight problems and its validation's decisions: a thin wrapper over plugin_utils/_nccl."""

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.gpudirect import gpudirect_plan
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.preflight import preflight_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.rdma import availability_problem
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.validate import run_problem, skip_reason


def nccl_problems(settings, found):
    """One line per problem, empty when all is well (see plugin_utils/nccl_preflight)."""
    try:
        return preflight_problems(settings, found)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("nccl_problems: %s" % error) from error


def nccl_skip_reason(gpu, multinode, check_mode):
    """Why the host is not measured, '' where it is (see plugin_utils/_nccl/validate)."""
    return skip_reason(gpu["gpu_count"], gpu.get("driver_state"), gpu.get("message"), multinode, check_mode)


def nccl_run_problem(busbw, run, expected_ranks, metric, floor):
    """What is wrong with an all_reduce_perf run's result (see plugin_utils/_nccl/validate)."""
    return run_problem(busbw["ranks"], expected_ranks, run.get("rc"), str(run.get("stderr", "")), metric,
                       busbw.get(metric), floor)


def nccl_rdma_availability_problem(madison_lines, host, versions):
    """'' when apt can install the pinned RDMA versions, else why not (see plugin_utils/_nccl/rdma)."""
    return availability_problem(host, madison_lines, dict(versions))


def nccl_gpudirect_plan(setting, hca, driver_flavor, kernel_release, conf_extra=None):
    """How GPUDirect RDMA is set up on the node (see plugin_utils/_nccl/gpudirect)."""
    return gpudirect_plan(setting, hca, driver_flavor or None, kernel_release, conf_extra)


class FilterModule:
    def filters(self):
        return {"nccl_problems": nccl_problems, "nccl_skip_reason": nccl_skip_reason,
                "nccl_run_problem": nccl_run_problem, "nccl_rdma_availability_problem": nccl_rdma_availability_problem,
                "nccl_gpudirect_plan": nccl_gpudirect_plan}
