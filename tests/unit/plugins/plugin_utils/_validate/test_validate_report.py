# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's report writer on a report of the shape validate_checks.evaluate emits: 3 GPU nodes of cluster_sim in
two racks, one failing check (sim-gpu2's PCIe link), three skips, the cluster-wide NCCL run skipped, fio numbers and
one dataset partitioned over two of the nodes (fixtures/validate_report_3_nodes.json; the NCCL numbers are those of
the 8x A100 SXM4 nccl-tests capture the nccl_tests filter tests read)."""

import copy
import html
import json
import pathlib
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import report as validate_report
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.report import (
    MissingMatplotlib, ReportError, html_page, junit_xml, summarize, write_report)

ROOT = pathlib.Path(__file__).resolve().parents[5]
FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "validate_report_3_nodes.json"
SCHEMA = json.loads((ROOT / "docs" / "validate_report.schema.json").read_text())
PLOT_IDS = ("plot-nccl", "plot-disk", "plot-gpus", "plot-datasets")
NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}  # XML namespace names, never fetched


@pytest.fixture
def report():
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    dest = tmp_path_factory.mktemp("report") / "validate-report"  # not there yet: write_report creates it
    return write_report(json.loads(FIXTURE.read_text()), str(dest))


def validate(document):
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(document)


def test_the_schema_is_valid_and_the_fixture_and_the_written_report_follow_it(report, written):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validate(report)
    document = json.loads(pathlib.Path(written["report.json"]).read_text())
    validate(document)
    assert document == dict(report, summary=summarize(report))


@pytest.mark.parametrize("broken", [
    {"checks": [{"node": "n", "check": "gpu.count", "status": "passed", "expected": None, "measured": None, "message": ""}]},
    {"checks": [{"node": "n", "check": "count", "status": "pass", "expected": None, "measured": None, "message": ""}]},
    {"generated": "2026-11-24 20:00:00"},
    {"nodes": [{"name": "n", "cluster": None, "rack": None, "groups": [], "extra": 1}]},
])
def test_the_schema_refuses_what_the_writer_does_not_take(report, broken):
    with pytest.raises(jsonschema.ValidationError):
        validate(dict(report, **broken))


def test_the_summary_fails_exactly_the_node_with_a_failing_check(report):
    assert summarize(report) == {"status": "fail", "counts": {"pass": 42, "fail": 1, "skip": 3},
                                 "nodes": {"sim-gpu1": "pass", "sim-gpu2": "fail", "sim-gpu3": "pass"}}


@pytest.mark.parametrize("statuses, node_status, overall", [
    (["pass", "skip"], "pass", "pass"),  # skips never fail
    (["skip", "skip"], "pass", "pass"),
    (["pass", "fail", "skip"], "fail", "fail"),
])
def test_a_node_fails_when_one_of_its_checks_fails(statuses, node_status, overall):
    checks = [{"node": "n1", "check": "gpu.c%d" % i, "status": s, "expected": None, "measured": None, "message": "m"}
              for i, s in enumerate(statuses)]
    summary = summarize({"nodes": [{"name": "n1", "cluster": None, "rack": None, "groups": []}], "checks": checks})
    assert (summary["nodes"], summary["status"]) == ({"n1": node_status}, overall)


def test_an_unknown_status_is_refused_with_the_check_named(report):
    report["checks"][4]["status"] = "warn"
    with pytest.raises(ReportError, match=r"checks\[4\] \(runtime.docker on sim-gpu1\): status 'warn'"):
        summarize(report)


def test_junit_has_a_suite_per_node_and_a_failure_for_exactly_the_failing_check(report):
    root = ET.fromstring(junit_xml(report))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("46", "1", "3", "0")
    suites = root.findall("testsuite")
    assert [suite.get("name") for suite in suites] == ["sim-gpu1", "sim-gpu2", "sim-gpu3"]
    for suite in suites:
        cases = suite.findall("testcase")
        mine = [c for c in report["checks"] if c["node"] == suite.get("name")]
        assert [(c.get("classname"), c.get("name")) for c in cases] == [(c["node"], c["check"]) for c in mine]
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == len(suite.findall("testcase/failure"))
        assert int(suite.get("skipped")) == len(suite.findall("testcase/skipped"))
        assert suite.get("timestamp") == "2026-11-24T20:00:00"
    failures = [(suite.get("name"), case.get("name"), case.find("failure")) for suite in suites
                for case in suite.findall("testcase") if case.find("failure") is not None]
    assert [found[:2] for found in failures] == [("sim-gpu2", "gpu.pcie_link")]
    failure = failures[0][2]
    assert failure.get("message").startswith("GPU 3 (00000000:4B:00.0) links at Gen4 x8")
    assert failure.text.splitlines()[:2] == ["expected: Gen4 x16", "measured: Gen4 x8"]
    skipped = {(case.get("classname"), case.get("name")): case.find("skipped").get("message")
               for case in root.iter("testcase") if case.find("skipped") is not None}
    assert skipped == {(c["node"], c["check"]): c["message"] for c in report["checks"] if c["status"] == "skip"}


def test_junit_stays_well_formed_with_markup_and_terminal_escapes_in_messages(report):
    report["checks"][2].update(status="fail", message='nvidia-smi said \x1b[31m<ERR> & "quoted"\x00', measured="a\nb")
    failure = ET.fromstring(junit_xml(report)).find("testsuite/testcase[@name='gpu.pcie_link']/failure")
    assert failure.get("message") == 'nvidia-smi said \\x1b[31m<ERR> & "quoted"\\x00'
    assert "measured: a\nb" in failure.text


def _figure(page, plot_id):
    match = re.search(r'<figure class="plot" id="%s">(.*?)</figure>' % plot_id, page, re.S)
    assert match, plot_id
    return match.group(1)


def test_the_page_has_the_summary_table_and_four_inline_svg_plots(written, report):
    page = pathlib.Path(written["report.html"]).read_text()
    table = re.search(r'<table id="summary">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r'<tr data-node="([^"]+)">', table) == ["sim-gpu1", "sim-gpu2", "sim-gpu3"]
    # cluster / rack, then GPUs / driver: the architectures and the loaded module (none in the report for sim-gpu3)
    assert re.findall(r'<tr data-node="[^"]+"><th>[^<]+</th><td>[^<]+</td><td>([^<]+)</td>', table) == [
        "Ada / 550 proprietary", "Ada / no module loaded", "-"]
    # then the declared GPU sharing (none for sim-gpu3, which the run did not read)
    assert re.findall(r'<tr data-node="[^"]+"><th>[^<]+</th><td>[^<]+</td><td>[^<]+</td><td>([^<]+)</td>', table) == [
        "GPUs 0-3 time-sliced x4", "GPUs 0-3 whole", "-"]
    # then the HCAs: each one's ports and its nearest GPUs on PCIe; none on sim-gpu2; not read on sim-gpu3
    assert re.findall(r'<tr data-node="[^"]+"><th>[^<]+</th>(?:<td>[^<]+</td>){3}<td>([^<]+)</td>', table) == [
        "mlx5_0 1 ACTIVE 400 Gb/s InfiniBand, PIX to 0000:18:00.0; mlx5_1 1 DOWN Ethernet, NODE to 0000:2a:00.0 "
        "0000:3a:00.0", "no HCA", "-"]
    assert [html.unescape(title) for title in re.findall(r'<td class="cell fail" title="([^"]*)">F</td>', table)] == [
        "gpu.pcie_link: fail\nexpected: Gen4 x16\nmeasured: Gen4 x8\nGPU 3 (00000000:4B:00.0) links at Gen4 x8, below its "
        "Gen4 x16 maximum: reseat the card or check the riser, then run validate again"]
    assert table.count('class="cell pass"') == 42 and table.count('class="cell skip"') == 3
    header = re.search(r"<thead>(.*?)</thead>", table, re.S).group(1)
    assert re.findall(r'<th class="category" colspan="(\d+)">([^<]+)</th>', header) == [
        ("1", "node"), ("3", "gpu"), ("3", "runtime"), ("3", "nccl"), ("2", "k8s"), ("3", "storage"), ("1", "dataset")]
    for plot_id in PLOT_IDS:
        figure = _figure(page, plot_id)
        assert figure.count("<svg ") == 1 and figure.count("<path ") >= 4
    # Why the cluster-wide bandwidth is missing is written in the plot itself; floors and replicas too.
    assert "validate_nccl_multinode is false" in _figure(page, "plot-nccl")
    assert "floor (read)" in _figure(page, "plot-disk") and "NVIDIA L40S" in _figure(page, "plot-gpus")
    assert "imagenet-1k-wds: 1 replica (partition), 128 shards, 137.0 GiB" in _figure(page, "plot-datasets")
    training = re.search(r'<table id="training">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r"<tr><td>([^<]+)</td><td>(\d+)</td>.*?<td>([\d.]+)</td><td>([\d.]+)</td><td>done</td></tr>",
                      training) == [("sim-gpu1", "0", "812.4", "0.0123"), ("sim-gpu2", "8", "798.1", "0.0125")]
    details = re.search(r'<table id="details">(.*?)</table>', page, re.S).group(1)
    assert details.count("<tr><td>") == 4 and details.index("gpu.pcie_link") < details.index("runtime.cdi")


def test_the_page_is_self_contained_with_unique_ids(written):
    page = pathlib.Path(written["report.html"]).read_text()
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) == NAMESPACES
    for fetching in ("<script", "<link", "<img", "<iframe", "@import", "src=", "@font-face", "url(http", "<?xml",
                     "<!DOCTYPE svg", "<metadata", "dc:date"):
        assert fetching not in page
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    for reference in re.findall(r'(?:url\(#|xlink:href="#)([^")]+)', page):
        assert reference in ids


def test_a_second_write_is_byte_identical(written, report, tmp_path):
    again = write_report(report, str(tmp_path))
    for name, path in written.items():
        assert pathlib.Path(again[name]).read_bytes() == pathlib.Path(path).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml", "report.html", "report.json"]


def test_without_matplotlib_json_and_junit_are_written_and_the_error_says_what_to_install(report, tmp_path, monkeypatch):
    write_report(report, str(tmp_path))
    report["checks"][0]["message"] = "a later run"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(MissingMatplotlib, match="pip install matplotlib on the controller, or in the execution environment"):
        write_report(report, str(tmp_path))
    assert "a later run" in (tmp_path / "report.json").read_text() and "junit.xml" in {p.name for p in tmp_path.iterdir()}
    assert not (tmp_path / "report.html").exists()  # the earlier run's page would describe another run


def test_a_failed_replace_leaves_the_previous_file_and_no_temporary(report, tmp_path, monkeypatch):
    paths = write_report(report, str(tmp_path))
    before = pathlib.Path(paths["report.json"]).read_bytes()

    def refuse(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(validate_report.os, "replace", refuse)
    with pytest.raises(OSError):
        write_report(dict(report, inventory="/elsewhere"), str(tmp_path))
    assert pathlib.Path(paths["report.json"]).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml", "report.html", "report.json"]


KILLED_WRITER = """
import json, os, signal, sys
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import report as validate_report
report = json.load(open(sys.argv[1]))
report["inventory"] = "/a/later/run"
validate_report.os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # dies with the new text written, unrenamed
validate_report.write_report(report, sys.argv[2])
"""


def test_a_writer_killed_mid_write_leaves_the_previous_report_whole(report, tmp_path):
    paths = write_report(report, str(tmp_path))
    before = {name: pathlib.Path(path).read_bytes() for name, path in paths.items()}
    child = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(FIXTURE), str(tmp_path)],
                           cwd=ROOT, env={"PYTHONPATH": str(ROOT / "collections"), "PATH": "/usr/bin:/bin"}, check=False)
    assert child.returncode == -signal.SIGKILL
    assert {name: pathlib.Path(path).read_bytes() for name, path in paths.items()} == before
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in before]
    assert len(leftovers) == 1 and re.fullmatch(r"\.report\.json\..+\.tmp", leftovers[0])
    assert "/a/later/run" in (tmp_path / leftovers[0]).read_text()  # the new text went to the temporary only


def test_empty_measurements_still_give_four_plots_that_say_why(report):
    report["measurements"] = {"nccl_busbw": [], "disk": [], "gpus": [], "datasets": []}
    page = html_page(copy.deepcopy(report))
    for plot_id, words in (("plot-nccl", "no NCCL measurement"), ("plot-disk", "no storage measurement"),
                           ("plot-gpus", "no GPU node"), ("plot-datasets", "no staged dataset")):
        assert "<svg " in _figure(page, plot_id) and words in _figure(page, plot_id)


def test_reasons_and_names_are_drawn_as_written(report):
    report["measurements"]["nccl_busbw"][-1]["reason"] = "mpirun not in $PATH for $USER <ops> & co"
    report["checks"][3]["message"] = '--> <script>alert(1)</script> "quoted"'
    page = html_page(report)
    # As one <text> element (mathtext would split it into glyphs); matplotlib's comment above it does not count.
    assert re.search(r">cluster cluster_sim: mpirun not in \$PATH for \$USER &lt;ops&gt; &amp; co</text>",
                     _figure(page, "plot-nccl"))
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &quot;quoted&quot;" in page
