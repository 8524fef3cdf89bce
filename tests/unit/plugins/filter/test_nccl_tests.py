# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl_busbw filter on nccl-tests output captured on real GPU systems (fixtures/nccl_tests/README.md)."""

import pathlib

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nccl_tests import FilterModule, nccl_busbw, parse_nccl_tests

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "nccl_tests"


def fixture(name):
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize("name, avg, peak, largest, largest_size, ranks, hosts, rows", [
    # One process driving 8 GPUs: largest = the lower of out-of-place 232.44 and in-place 231.59 at 4 GiB.
    ("all_reduce_8x_a100_sxm4_80gb.txt", 66.2058, 232.44, 231.59, 4294967296, 8, ["thanos"], 30),
    # 8 MPI processes; the Open MPI lines between the rows are not rows.
    ("all_reduce_8x_a100_sxm4_80gb_mpirun.txt", 72.7724, 232.93, 232.81, 4294967296, 8, ["thanos"], 30),
    ("all_reduce_24x_a800_12_nodes.txt", 41.6967, 42.34, 42.31, 2147483648, 24,
     ["kubeflow-nccl-test-3-master-0"] + ["kubeflow-nccl-test-3-worker-%d" % n for n in range(11)], 3),
    # Releases before 2.10: 'error' (a deviation, not a count) instead of '#wrong', and no root column.
    ("all_reduce_12x_v100_legacy_error_column.txt", 42.5578, 123.57, 123.56, 8589934592, 12, ["seville"], 31),
    ("alltoall_1x_rtx5090_in_place_unchecked.txt", 0.0, 0.0, 0.0, 33554432, 1, ["GENOA-01"], 1),
])
def test_bus_bandwidth_of_good_runs(name, avg, peak, largest, largest_size, ranks, hosts, rows):
    result = nccl_busbw(fixture(name))
    assert result["avg"] == pytest.approx(avg)
    assert result["peak"] == pytest.approx(peak)
    assert result["largest"] == pytest.approx(largest)
    assert result["largest_size"] == largest_size
    assert result["ranks"] == ranks
    assert result["hosts"] == hosts
    assert len(result["rows"]) == rows


def test_a_row_keeps_both_placements():
    row = nccl_busbw(fixture("all_reduce_8x_a100_sxm4_80gb.txt"))["rows"][-1]
    assert row == {
        "size": 4294967296, "count": 1073741824, "type": "float", "redop": "sum", "root": -1,
        "out_of_place": {"time_us": 32336.0, "algbw": 132.82, "busbw": 232.44, "wrong": 0},
        "in_place": {"time_us": 32455.0, "algbw": 132.34, "busbw": 231.59, "wrong": 0},
    }


def test_legacy_rows_carry_the_deviation_and_no_root():
    row = nccl_busbw(fixture("all_reduce_12x_v100_legacy_error_column.txt"))["rows"][0]
    assert "root" not in row
    assert row["out_of_place"] == {"time_us": 61.03, "algbw": 0.0, "busbw": 0.0, "error": 2e-07}


def test_unchecked_placement_reads_as_none():
    row = nccl_busbw(fixture("alltoall_1x_rtx5090_in_place_unchecked.txt"))["rows"][0]
    assert row["out_of_place"]["wrong"] == 0
    assert row["in_place"]["wrong"] is None
    assert row["in_place"]["algbw"] == 43046.10


def test_stdout_lines_work_as_well_as_stdout():
    text = fixture("all_reduce_24x_a800_12_nodes.txt")
    assert nccl_busbw(text.splitlines()) == nccl_busbw(text)


def test_wrong_elements_fail_with_size_and_placement():
    with pytest.raises(AnsibleFilterError) as error:
        nccl_busbw(fixture("all_reduce_2x_gh200_wrong_results.txt"))
    message = str(error.value)
    assert "wrong results (data corruption)" in message
    assert "wrong elements at 1048576 B: 96 out-of-place, 32 in-place; nccl-tests counted 4 out-of-bounds values" in message
    assert "nccl-tests counted 4 out-of-bounds values" in message


def test_legacy_out_of_bounds_summary_fails_without_a_count_column():
    with pytest.raises(AnsibleFilterError, match=r"wrong results \(data corruption\): nccl-tests counted 4 out-of-bounds values"):
        nccl_busbw(fixture("all_gather_12x_v100_legacy_out_of_bounds.txt"))


def test_a_run_that_died_before_any_row_says_why():
    with pytest.raises(AnsibleFilterError) as error:
        nccl_busbw(fixture("all_reduce_8x_gh200_devices_busy.txt"))
    message = str(error.value)
    assert "no result rows" in message
    assert "the run stopped before its first measurement" in message
    assert "'CUDA-capable device(s) is/are busy or unavailable'" in message


def test_separate_runs_under_mpirun_point_at_the_mpi_build():
    with pytest.raises(AnsibleFilterError, match="2 separate runs instead of one.*built without MPI.*nccl_tests_mpi: true"):
        nccl_busbw(fixture("all_reduce_2_nodes_mpirun_without_mpi_head.txt"))


@pytest.mark.parametrize("output, expected", [
    ("", "no results header either"),
    ("bash: all_reduce_perf: command not found\n", "no results header either"),
    ([], "no results header either"),
])
def test_output_that_is_not_nccl_tests(output, expected):
    with pytest.raises(AnsibleFilterError, match=expected):
        nccl_busbw(output)


def test_a_non_text_input_is_refused():
    with pytest.raises(AnsibleFilterError, match="expected the stdout"):
        nccl_busbw({"stdout": ""})


def test_average_is_computed_when_the_summary_is_missing():
    lines = fixture("all_reduce_24x_a800_12_nodes.txt").splitlines()
    result = nccl_busbw([line for line in lines if "Avg bus bandwidth" not in line])
    assert result["avg"] == pytest.approx((41.26 + 41.22 + 41.57 + 41.48 + 42.31 + 42.34) / 6, abs=1e-4)


def test_parse_reports_without_judging():
    parsed = parse_nccl_tests(fixture("all_reduce_2x_gh200_wrong_results.txt"))
    assert parsed["out_of_bounds"] == 4 and parsed["out_of_bounds_failed"]
    assert parsed["runs"] == 1 and parsed["ranks"] == 2
    assert parsed["failures"] == [".. gpu-1-1 pid 662195: Test failure common.cu:1189",
                                  ".. gpu-1-7 pid 2448661: Test failure common.cu:1189"]


def test_filter_is_registered():
    assert FilterModule().filters() == {"nccl_busbw": nccl_busbw}
