# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's report writer, on the controller: an evaluated report (docs/validate_report.schema.json) -> three files.

  summarize(report)          -> the summary: overall status, counts by status, each node's status
  junit_xml(report)          -> JUnit XML text: one <testsuite> per node, one <testcase> per check of that node
  html_page(report)          -> one self-contained HTML page: summary table, four matplotlib plots as inline SVG,
                                the failing and skipped checks (needs matplotlib; raises MissingMatplotlib without)
  write_report(report, dest) -> writes report.json, junit.xml and report.html into dest, each atomically

A node fails when any of its checks fails; skips never fail. Every output is a function of the report alone (no
clock, no random ids), so writing the same report twice gives byte-identical files. Standard library only, apart
from matplotlib for the plots, which is imported when report.html is drawn.
"""

import contextlib
import html
import json
import os
import re
import tempfile
import xml.etree.ElementTree as ET

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import plots
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.plots import MissingMatplotlib

STATUSES = ("pass", "fail", "skip")
LETTERS = {"pass": "P", "fail": "F", "skip": "S"}
# Characters XML 1.0 cannot carry (command output can hold escape sequences): shown as \xNN / \uNNNN instead.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")

__all__ = ["MissingMatplotlib", "ReportError", "html_page", "junit_xml", "summarize", "write_report"]


class ReportError(ValueError):
    pass


def _text(value):
    if value is None:
        return ""
    return _NOT_XML.sub(lambda m: "\\x%02x" % ord(m.group()) if ord(m.group()) < 256 else "\\u%04x" % ord(m.group()),
                        str(value))


def _node_names(report):
    names = [node["name"] for node in report.get("nodes") or []]
    for item in report.get("checks") or []:
        if item.get("node") not in names:
            names.append(item.get("node"))
    return names


def summarize(report):
    """{"status", "counts": {pass, fail, skip}, "nodes": {node: pass|fail}} from report["checks"]."""
    counts = {status: 0 for status in STATUSES}
    nodes = dict.fromkeys(_node_names(report), "pass")
    for index, item in enumerate(report.get("checks") or []):
        if not isinstance(item.get("node"), str) or not item.get("node") or not isinstance(item.get("check"), str):
            raise ReportError("checks[%d] has no node or check name: %r" % (index, item))
        if item.get("status") not in counts:
            raise ReportError("checks[%d] (%s on %s): status %r is none of %s" % (
                index, item["check"], item["node"], item.get("status"), ", ".join(STATUSES)))
        counts[item["status"]] += 1
        if item["status"] == "fail":
            nodes[item["node"]] = "fail"
    return {"status": "fail" if counts["fail"] else "pass", "counts": counts, "nodes": nodes}


def _details(item):
    """expected / measured / message of a check, one per line (the lines that have a value)."""
    lines = ["%s: %s" % (what, _text(item[what])) for what in ("expected", "measured") if item.get(what) is not None]
    return "\n".join(lines + [_text(item.get("message"))]).strip()


def junit_xml(report):
    summary = summarize(report)
    meta = {node["name"]: node for node in report.get("nodes") or []}
    timestamp = _TIMESTAMP.match(report.get("generated") or "")
    root = ET.Element("testsuites", {"name": "dlinfra.gpu_cluster validate", "tests": str(sum(summary["counts"].values())),
                                     "failures": str(summary["counts"]["fail"]), "errors": "0",
                                     "skipped": str(summary["counts"]["skip"])})
    for name in summary["nodes"]:
        checks = [item for item in report.get("checks") or [] if item["node"] == name]
        attributes = {"name": _text(name), "tests": str(len(checks)),
                      "failures": str(sum(item["status"] == "fail" for item in checks)), "errors": "0",
                      "skipped": str(sum(item["status"] == "skip" for item in checks))}
        if timestamp:  # the Ant schema's form: local date and time, no zone (the report's is UTC)
            attributes["timestamp"] = timestamp.group()
        attributes["hostname"] = _text(name)
        suite = ET.SubElement(root, "testsuite", attributes)
        node = meta.get(name) or {}
        properties = [(key, node.get(key)) for key in ("cluster", "rack") if node.get(key)]
        if node.get("groups"):
            properties.append(("groups", ",".join(node["groups"])))
        if properties:
            holder = ET.SubElement(suite, "properties")
            for key, value in properties:
                ET.SubElement(holder, "property", {"name": key, "value": _text(value)})
        for item in checks:
            case = ET.SubElement(suite, "testcase", {"classname": _text(name), "name": _text(item["check"])})
            if item["status"] == "fail":
                failure = ET.SubElement(case, "failure", {"message": _text(item.get("message")),
                                                          "type": _text(item["check"].split(".", 1)[0])})
                failure.text = _details(item)  # GitLab shows this text, not the message attribute
            elif item["status"] == "skip":
                ET.SubElement(case, "skipped", {"message": _text(item.get("message"))})
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _columns(report):
    """[(category, [check id, ...]), ...] in the order the checks first appear."""
    columns = {}
    for item in report.get("checks") or []:
        ids = columns.setdefault(item["check"].split(".", 1)[0], [])
        if item["check"] not in ids:
            ids.append(item["check"])
    return list(columns.items())


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:1.5rem;color:#1f2328}
header{padding:1rem 1.25rem;border-radius:6px;color:#fff;margin-bottom:1.5rem}
header h1{margin:0 0 .4rem;font-size:1.6rem} header p{margin:.2rem 0}
header.pass{background:%(pass)s} header.fail{background:%(fail)s}
table{border-collapse:collapse;margin-bottom:1.5rem;font-size:.85rem}
th,td{border:1px solid #d0d7de;padding:.25rem .45rem;text-align:left;vertical-align:top}
thead th{background:#f6f8fa} th.category{text-align:center}
th.check{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:normal}
#summary td.cell{text-align:center;font-weight:bold;color:#fff;min-width:1.6rem;cursor:help}
td.pass,span.pass{background:%(pass)s;color:#fff} td.fail,span.fail{background:%(fail)s;color:#fff}
td.skip,span.skip{background:%(skip)s;color:#fff} #summary td.none{background:#fff;color:#8c959f}
span.pass,span.fail,span.skip{padding:0 .4rem;border-radius:3px}
figure.plot{margin:0 0 1.5rem;max-width:960px} figure.plot svg{max-width:100%%;height:auto}
figcaption{font-weight:bold;margin-bottom:.3rem} #details td.message{white-space:pre-wrap}
""" % {"pass": plots.PASS, "fail": plots.FAIL, "skip": plots.SKIP}

_CAPTIONS = {"plot-nccl": "NCCL bus bandwidth", "plot-disk": "Staging filesystem throughput",
             "plot-gpus": "GPUs per rack", "plot-datasets": "Dataset placement"}


def _e(value):
    return html.escape(_text(value), quote=True)


def _driver_cell(driver):
    """'Hopper / 580 open', 'Volta / no module loaded', '-' for a node without GPUs."""
    if not driver:
        return "-"
    loaded = "%s %s" % (driver["branch"], driver["flavor"] or "") if driver.get("branch") else "no module loaded"
    return "%s / %s" % (", ".join(driver["architectures"]), loaded.strip())


def _fabric_cell(fabric):
    """'mlx5_0 1 ACTIVE 400 Gb/s InfiniBand, PIX to 0000:18:00.0; ...', 'no HCA', '-' where not read or no GPUs."""
    if not fabric:
        return "-"
    if not fabric["hcas"]:
        return "no HCA"
    cells = []
    for hca in fabric["hcas"]:
        shown = []
        for port in hca["ports"]:
            rate = " %g Gb/s" % port["rate_gbps"] if port["rate_gbps"] else ""
            shown.append("%s %s%s %s" % (port["port"], port["state"] or "?", rate, port["link_layer"] or ""))
        ports = ", ".join(shown) or "no port"
        near = ", %s to %s" % (hca["relation"], " ".join(hca["nearest_gpus"])) if hca["relation"] else ""
        cells.append("%s %s%s" % (hca["name"], ports.strip(), near))
    return "; ".join(cells)


def _summary_table(report, summary):
    columns = _columns(report)
    meta = {node["name"]: node for node in report.get("nodes") or []}
    by_cell = {(item["node"], item["check"]): item for item in report.get("checks") or []}
    out = ['<table id="summary">', "<thead>", '<tr><th rowspan="2">node</th><th rowspan="2">cluster / rack</th>'
           '<th rowspan="2">GPUs / driver</th><th rowspan="2">GPU sharing</th><th rowspan="2">HCAs, ports / nearest GPUs</th>'
           '<th rowspan="2">result</th>']
    out += ['<th class="category" colspan="%d">%s</th>' % (len(ids), _e(category)) for category, ids in columns]
    out.append("</tr><tr>")
    out += ['<th class="check" title="%s">%s</th>' % (_e(check), _e(check.split(".", 1)[-1])) for dummy, ids in columns for check in ids]
    out.append("</tr>")
    out.append("</thead><tbody>")
    for name, status in summary["nodes"].items():
        node = meta.get(name) or {}
        place = " / ".join(_e(node.get(key) or "-") for key in ("cluster", "rack"))
        out.append('<tr data-node="%s"><th>%s</th><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class="%s">%s</td>' % (
            _e(name), _e(name), place, _e(_driver_cell(node.get("driver"))), _e(node.get("sharing") or "-"),
            _e(_fabric_cell(node.get("fabric"))), status, status.upper()))
        for dummy, ids in columns:
            for check in ids:
                item = by_cell.get((name, check))
                if item is None:
                    out.append('<td class="cell none" title="%s: not run on %s">-</td>' % (_e(check), _e(name)))
                else:
                    out.append('<td class="cell %s" title="%s">%s</td>' % (
                        item["status"], _e("%s: %s\n%s" % (check, item["status"], _details(item))),
                        LETTERS[item["status"]]))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _details_table(report):
    rows = [item for item in report.get("checks") or [] if item["status"] != "pass"]
    out = ['<table id="details">', "<thead><tr><th>node</th><th>check</th><th>status</th><th>expected</th>"
           "<th>measured</th><th>message</th></tr></thead><tbody>"]
    for item in sorted(rows, key=lambda item: item["status"] != "fail"):  # failures first, each in report order
        out.append('<tr><td>%s</td><td>%s</td><td class="%s">%s</td><td>%s</td><td>%s</td><td class="message">%s</td>'
                   "</tr>" % (_e(item["node"]), _e(item["check"]), item["status"], item["status"], _e(item.get("expected")),
                              _e(item.get("measured")), _e(item.get("message"))))
    if not rows:
        out.append('<tr><td colspan="6">every check passed</td></tr>')
    out.append("</tbody></table>")
    return "\n".join(out)


def _training_table(report):
    """Each rank of training.ddp's job: its node, backend, steps, samples/s and step time."""
    ranks = (report.get("measurements") or {}).get("training") or []
    if not ranks:
        return []
    out = ['<table id="training">', "<caption>training.ddp: each rank of the DDP job</caption>",
           "<thead><tr><th>node</th><th>rank</th><th>local rank</th><th>backend</th><th>steps</th><th>samples/s</th>"
           "<th>s a step</th><th>state</th></tr></thead>", "<tbody>"]
    for item in ranks:
        out.append("<tr>%s</tr>" % "".join("<td>%s</td>" % _e(item.get(key)) for key in (
            "node", "rank", "local_rank", "backend", "steps", "samples_per_s", "step_time_s", "state")))
    return out + ["</tbody>", "</table>"]


def html_page(report):
    summary = summarize(report)
    svgs = plots.plots(report.get("measurements") or {})
    counts = summary["counts"]
    failing = [name for name, status in summary["nodes"].items() if status == "fail"]
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           "<title>GPU cluster validation: %s</title>" % summary["status"].upper(), "<style>%s</style>" % _CSS,
           "</head>", "<body>",
           '<header class="%s" id="status"><h1>GPU cluster validation: %s</h1>' % (summary["status"], summary["status"].upper()),
           "<p>%d passed, %d failed, %d skipped on %d node(s)%s</p>" % (
               counts["pass"], counts["fail"], counts["skip"], len(summary["nodes"]),
               "; failing: " + _e(", ".join(failing)) if failing else ""),
           "<p>generated %s from the inventory %s</p></header>" % (_e(report.get("generated")), _e(report.get("inventory"))),
           "<h2>Checks by node</h2>",
           "<p>P pass, F fail, S skip, - not run; hover over a cell for expected, measured and the message.</p>",
           _summary_table(report, summary), "<h2>Measurements</h2>"]
    for plot_id, svg in svgs.items():
        out.append('<figure class="plot" id="%s"><figcaption>%s</figcaption>\n%s</figure>' % (
            plot_id, _CAPTIONS[plot_id], svg.strip()))
    out += _training_table(report)
    out += ["<h2>Failing and skipped checks</h2>", _details_table(report), "</body>", "</html>"]
    return "\n".join(out) + "\n"


def _write_atomic(directory, name, text):
    """Write text to directory/name through a temporary file in the same directory and os.replace: a reader (or a
    run killed halfway) sees the old file or the new one, never part of one."""
    path = os.path.join(directory, name)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix="." + name + ".", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where the platform allows it
        directory_handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_handle)
        finally:
            os.close(directory_handle)
    return path


def write_report(report, dest_dir):
    """Write report.json (the report with its summary), junit.xml and report.html into dest_dir (created if missing).

    Returns {"report.json": path, "junit.xml": path, "report.html": path}. Without matplotlib, report.json and
    junit.xml are still written, a report.html of an earlier run is removed (it would describe another run), and
    MissingMatplotlib says what to install.
    """
    full = dict(report, summary=summarize(report))
    try:
        document = json.dumps(full, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    except (TypeError, ValueError) as error:
        raise ReportError("the report is not plain JSON data: %s" % error)
    os.makedirs(dest_dir, exist_ok=True)
    paths = {"report.json": _write_atomic(dest_dir, "report.json", document),
             "junit.xml": _write_atomic(dest_dir, "junit.xml", junit_xml(full))}
    try:
        page = html_page(full)
    except MissingMatplotlib as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(dest_dir, "report.html"))
        raise MissingMatplotlib("%s. %s and %s were written; report.html was not" % (
            error, paths["report.json"], paths["junit.xml"])) from error
    paths["report.html"] = _write_atomic(dest_dir, "report.html", page)
    return paths
