# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reads the bus bandwidth out of an nccl-tests run (all_reduce_perf and the other *_perf binaries).

Controller side: the nccl role's nccl_busbw filter (plugins/filter/nccl_tests.py) and validate's evaluator use it."""

import re

from ansible.errors import AnsibleFilterError

# '#  Rank  0 Group  0 Pid  54740 on     thanos device  0 [0x07] NVIDIA A100-SXM4-80GB' (older releases: no Group).
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|-?inf)")
# What nccl-tests and NCCL print when a run dies: 'host: Test CUDA failure common.cu:1304 ...', 'NCCL WARN ...'.
_FAILURE = re.compile(r"Test (?:CUDA |NCCL )?failure|NCCL WARN|Test timeout|invalid size")
_TIME_COLUMNS = ("time", "cputime")


def _header_columns(line):
    """The column names of a results header ('#  size  count  type  redop  root  time  algbw  busbw #wrong ...')."""
    columns = line.lstrip("#").split()
    if {"size", "count", "busbw"} <= set(columns) and any(name in columns for name in _TIME_COLUMNS):
        return columns
    return None


def _layout(columns):
    """(prefix columns, [(placement, group columns)]): one group per placement, out-of-place then in-place."""
    starts = [index for index, name in enumerate(columns) if name in _TIME_COLUMNS]
    prefix = columns[:starts[0]]
    width = (starts[1] - starts[0]) if len(starts) > 1 else len(columns) - starts[0]
    placements = ("out_of_place", "in_place")
    return prefix, [(placements[n], columns[start:start + width]) for n, start in enumerate(starts[:2])]


def _int(text):
    try:
        return int(text)
    except ValueError:
        return None


def _number(text):
    return None if text == "N/A" else float(text)


def _row(tokens, prefix, groups):
    """One results line as a dict, or None when the line is something else (NCCL INFO, MPI chatter)."""
    width = len(prefix) + sum(len(group) for placement, group in groups)
    if len(tokens) < width or _int(tokens[0]) is None or _int(tokens[1]) is None:
        return None
    row = {}
    for name, value in zip(prefix, tokens):
        row[name] = _int(value) if name in ("size", "count", "root") else value
    position = len(prefix)
    try:
        for placement, group in groups:
            values = {}
            for name, value in zip(group, tokens[position:position + len(group)]):
                if name in _TIME_COLUMNS:
                    values["time_us"] = float(value)
                elif name == "#wrong":
                    # %g: '0', '96', '2.09715e+06'; 'N/A' when the run did not check its results (-c 0).
                    values["wrong"] = None if value == "N/A" else int(float(value))
                elif name == "error":
                    # Releases before 2.10 print the largest deviation here, not a count.
                    values["error"] = _number(value)
                else:
                    values[name] = _number(value)
            row[placement] = values
            position += len(group)
    except ValueError:
        return None
    return row


def parse_nccl_tests(output):
    """Everything the output says, without judging it: rows, ranks, hosts and nccl-tests' own summary lines."""
    lines = output.splitlines() if isinstance(output, str) else [str(line) for line in output or []]
    result = {"rows": [], "ranks": 0, "hosts": [], "runs": 0, "avg_busbw": None, "avg_busbw_lines": 0,
              "out_of_bounds": None, "out_of_bounds_failed": False, "failures": []}
    layout = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            columns = _header_columns(stripped)
            if columns:
                layout = _layout(columns)
            elif stripped.lstrip("#").lstrip().startswith("nThread "):
                result["runs"] += 1
            elif _RANK.match(stripped):
                match = _RANK.match(stripped)
                result["ranks"] += 1
                if match.group(2) not in result["hosts"]:
                    result["hosts"].append(match.group(2))
            elif _OUT_OF_BOUNDS.match(stripped):
                match = _OUT_OF_BOUNDS.match(stripped)
                result["out_of_bounds"] = (result["out_of_bounds"] or 0) + int(match.group(1))
                result["out_of_bounds_failed"] = result["out_of_bounds_failed"] or match.group(2) == "FAILED"
            elif _AVG_BUSBW.match(stripped):
                result["avg_busbw"] = float(_AVG_BUSBW.match(stripped).group(1))
                result["avg_busbw_lines"] += 1
            continue
        if _FAILURE.search(stripped):
            result["failures"].append(stripped)
        elif layout and stripped:
            row = _row(stripped.split(), *layout)
            if row is not None:
                result["rows"].append(row)
    return result


def _placements(row):
    return [row[name] for name in ("out_of_place", "in_place") if name in row]


def _describe_failures(parsed):
    failures = parsed["failures"][:5]
    return ("; it reported: " + " | ".join(failures)) if failures else ""


def nccl_busbw(output):
    """The bus bandwidth figures of one nccl-tests run; fails on a run with no results or with wrong results."""
    if not isinstance(output, (str, list)):
        raise AnsibleFilterError("nccl_busbw: expected the stdout (or stdout_lines) of an nccl-tests binary, got %s"
                                 % type(output).__name__)
    parsed = parse_nccl_tests(output)
    if parsed["runs"] > 1 or parsed["avg_busbw_lines"] > 1:
        raise AnsibleFilterError(
            "nccl_busbw: the output holds %d separate runs instead of one: mpirun started an nccl-tests binary built "
            "without MPI, so each process tested its own GPUs alone; build nccl-tests with MPI=1 (nccl_tests_mpi: true)"
            % max(parsed["runs"], parsed["avg_busbw_lines"]))
    if not parsed["rows"]:
        raise AnsibleFilterError(
            "nccl_busbw: no result rows in the nccl-tests output (%s)%s"
            % ("no results header either: is this nccl-tests output?" if not parsed["runs"]
               else "the run stopped before its first measurement", _describe_failures(parsed)))

    wrong = []
    for row in parsed["rows"]:
        counts = ["%d %s" % (values["wrong"], placement.replace("_", "-"))
                  for placement, values in (("out_of_place", row.get("out_of_place")), ("in_place", row.get("in_place")))
                  if values and values.get("wrong")]
        if counts:
            wrong.append("wrong elements at %s B: %s" % (row["size"], ", ".join(counts)))
    if parsed["out_of_bounds_failed"]:
        wrong.append("nccl-tests counted %s out-of-bounds values" % parsed["out_of_bounds"])
    if wrong:
        raise AnsibleFilterError(
            "nccl_busbw: the collective returned wrong results (data corruption): %s; check the GPUs' and NICs' "
            "error counters (nvidia-smi -q -d ECC, ibv_devinfo), the NCCL and network plugin versions, and rerun"
            % "; ".join(wrong))

    largest_size = max(row["size"] for row in parsed["rows"])
    at_largest = [values["busbw"] for row in parsed["rows"] if row["size"] == largest_size for values in _placements(row)]
    every = [values["busbw"] for row in parsed["rows"] for values in _placements(row)]
    avg = parsed["avg_busbw"]
    return {
        # nccl-tests' own summary: the mean over every size and placement, small (latency-bound) sizes included.
        "avg": avg if avg is not None else round(sum(every) / len(every), 4),
        "peak": max(every),
        # The lower of out-of-place and in-place at the largest size: what a large gradient all-reduce sees.
        "largest": min(at_largest),
        "largest_size": largest_size,
        "ranks": parsed["ranks"],
        "hosts": parsed["hosts"],
        "rows": parsed["rows"],
    }
