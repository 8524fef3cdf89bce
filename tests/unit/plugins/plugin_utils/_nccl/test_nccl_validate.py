# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why the nccl role's validation skips a host, and what it says of a run that failed, word for word."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nccl import nccl_run_problem, nccl_skip_reason
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.validate import run_problem, skip_reason

ONE_GPU = "one GPU: an all-reduce over one rank moves no data (busbw 0); nccl_validate_multinode measures across nodes"
BELOW = ("the largest bus bandwidth is 150.2 GB/s, below nccl_validate_min_busbw 200 GB/s; check nccl.conf "
         "(NCCL_SOCKET_IFNAME, NCCL_IB_HCA), the NVLink and NIC links, and run again with nccl_debug: INFO to see the "
         "transport NCCL chose")


@pytest.mark.parametrize("gpu_count, driver_state, message, multinode, check_mode, expected", [
    pytest.param(8, "ok", "", False, False, "", id="measured"),
    pytest.param(0, "no_gpu", "", False, False, "no NVIDIA GPU on PCI", id="no-gpu"),
    pytest.param(0, "no_gpu", "", True, True, "no NVIDIA GPU on PCI", id="no-gpu-first"),
    pytest.param(8, "version_mismatch", "reboot to load 550.163.01", False, False,
                 "the NVIDIA driver does not answer (version_mismatch: reboot to load 550.163.01)", id="driver-down"),
    pytest.param(1, "ok", "", False, False, ONE_GPU, id="one-gpu"),
    pytest.param(1, "ok", "", True, False, "", id="one-gpu-multinode"),
    pytest.param(1, "ok", "", "false", False, "", id="multinode-as-text-is-true-as-in-jinja"),
    pytest.param(8, "ok", "", False, True, "check mode does not run the benchmark", id="check-mode"),
    pytest.param(1, "ok", "", False, True, ONE_GPU, id="one-gpu-before-check-mode"),
])
def test_skip_reason(gpu_count, driver_state, message, multinode, check_mode, expected):
    assert skip_reason(gpu_count, driver_state, message, multinode, check_mode) == expected


def test_the_skip_filter_reads_the_gpu_facts():
    assert nccl_skip_reason({"gpu_count": 0}, False, False) == "no NVIDIA GPU on PCI"
    assert nccl_skip_reason({"gpu_count": 8, "driver_state": "ok", "message": ""}, False, False) == ""


@pytest.mark.parametrize("ranks, expected_ranks, rc, stderr, expected", [
    pytest.param(4, 8, 1, "boom", "all_reduce_perf ran 4 rank(s), not 8: check that every node shows its GPUs "
                 "(nvidia-smi) and that mpirun reaches every host", id="ranks-first"),
    pytest.param(8, "8", 0, "", BELOW, id="expected-ranks-as-text"),
    pytest.param(8, 8, 3, "  mpirun: host dgx02 unreachable\n", "all_reduce_perf exited with 3: mpirun: host dgx02 "
                 "unreachable", id="exit-code"),
    pytest.param(8, 8, 0, "", BELOW, id="below-the-floor"),
])
def test_run_problem(ranks, expected_ranks, rc, stderr, expected):
    assert run_problem(ranks, expected_ranks, rc, stderr, "largest", 150.2, 200) == expected


def test_the_run_filter_reads_the_figures_and_the_run():
    assert nccl_run_problem({"ranks": 8, "largest": 150.2}, {"rc": 0, "stderr": ""}, 8, "largest", 200) == BELOW
    assert nccl_run_problem({"ranks": 8}, {"rc": 2}, 8, "avg", 1) == "all_reduce_perf exited with 2: "
