# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What dcgmi diag -j and nvbandwidth print, as data: the parsers behind validate's gpu.dcgm_diag and
gpu.host_device_bandwidth. Pure Python (stdlib only); each raises ValueError saying why output cannot be read."""

import json

_DCGM_STATUS = {"pass": "pass", "passed": "pass", "fail": "fail", "failed": "fail", "warn": "warn", "warning": "warn",
                "skip": "skip", "skipped": "skip", "not run": "not_run", "notrun": "not_run"}


def _json_document(text):
    """The JSON object in a command's output; dcgmi may print a line before it."""
    start = (text or "").find("{")
    if start < 0:
        raise ValueError("no JSON document in the output: %s" % ((text or "").strip()[:200] or "(empty)"))
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except ValueError as error:
        raise ValueError("the output is not a JSON document (%s)" % error) from None


def _messages(items):
    """Warning or info entries: plain strings (DCGM 3.x) or objects with a 'warning' (DCGM 3.2 and 4.x)."""
    found = []
    for item in items or []:
        text = item.get("warning") or item.get("message") if isinstance(item, dict) else item
        if text:
            found.append(str(text).strip())
    return found


def parse_dcgmi_diag_json(text):
    """The results of `dcgmi diag -r N -j`.

    DCGM 3.x nests the categories under 'DCGM GPU Diagnostic' and names GPUs in 'gpu_ids'; DCGM 4.x nests them under
    'DCGM Diagnostic', names entities ('entity_group', 'entity_id') and keeps its version under 'metadata'. Both are
    read. Returns {version, runtime_error, results: [{category, test, gpu, status, messages}]}: one entry per test and
    GPU (or group of GPUs), status one of pass, fail, warn, skip, not_run, or the word dcgmi printed when it is none of
    those. Raises ValueError for output that is no result document.
    """
    document = _json_document(text)
    if not isinstance(document, dict):
        raise ValueError("the output is a JSON %s, not dcgmi's result object" % type(document).__name__)
    root = document.get("DCGM GPU Diagnostic") or document.get("DCGM Diagnostic") or document
    metadata = document.get("metadata") or {}
    results = []
    for category in root.get("test_categories") or []:
        for test in (category or {}).get("tests") or []:
            for entry in [item for item in (test or {}).get("results") or [] if isinstance(item, dict)]:
                gpu = entry.get("gpu_ids") if "gpu_ids" in entry else entry.get("entity_id")
                status = str(entry.get("status") or "").strip()
                results.append({"category": category.get("category"), "test": test.get("name"),
                                "gpu": None if gpu is None else str(gpu), "status": _DCGM_STATUS.get(status.lower(), status),
                                "messages": _messages(entry.get("warnings"))})
    return {"version": root.get("version") or metadata.get("version"),
            "runtime_error": root.get("runtime_error") or document.get("runtime_error"), "results": results}


def _float(text):
    try:
        return float(text)
    except ValueError:
        return None


def parse_nvbandwidth(text, testcase="host_to_device_memcpy_ce"):
    """GB/s per GPU of one testcase in nvbandwidth's text output (`nvbandwidth -t host_to_device_memcpy_ce`).

    nvbandwidth prints 'Running <testcase>.', a description, a matrix (a header of column numbers, then one row per
    source: the CPU for host-to-device copies, columns are GPUs by CUDA index) and, from v0.5 on, 'SUM <testcase> <GB/s>'.
    Returns {testcase, gbps: {gpu index: GB/s}, sum}; with several rows a GPU's figure is its best one. Cells reading
    N/A are left out. Raises ValueError when the testcase has no matrix (not run, waived, failed).
    """
    lines = [line.strip() for line in (text or "").splitlines()]
    try:
        start = lines.index("Running %s." % testcase)
    except ValueError:
        raise ValueError("nvbandwidth printed no %s result: %s" % (testcase, (text or "").strip()[-300:] or "(no output)")) from None
    columns, gbps, total, said = None, {}, None, []
    for line in lines[start + 1:]:
        if line.startswith("Running "):
            break
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "SUM" and len(tokens) == 3:
            total = _float(tokens[2])
        elif columns is None and all(token.isdigit() for token in tokens):
            columns = [int(token) for token in tokens]
        elif columns is not None and tokens[0].isdigit() and len(tokens) == len(columns) + 1:
            for column, cell in zip(columns, tokens[1:]):
                value = _float(cell)
                if value is not None:
                    gbps[column] = max(value, gbps.get(column, value))
        else:
            said.append(line)
    if not gbps:
        raise ValueError("nvbandwidth measured nothing for %s: %s" % (testcase, " ".join(said)[:300] or "(no matrix)"))
    return {"testcase": testcase, "gbps": gbps, "sum": total}
