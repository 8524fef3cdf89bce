# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_monitoring role's Grafana dashboard and its provisioning files (docs/grafana.md).

The dashboard's layout and data source references, its variables chained cluster -> rack -> node -> gpu, and its
PromQL: every query reads only series the collector writes (gpu_metrics.py), node exporter's `up` or `ALERTS`, and
is valid PromQL by `promtool check rules` (each query written, Grafana's variables replaced, as a recording rule);
the Xid-by-code query is run on recorded series with `promtool test rules`. promtool comes as for the alerting rules
(the session fixture of tests/unit/conftest.py): these tests fail, never skip, without it.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

import pytest
import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils import gpu_metrics, staging_metrics

ROOT = pathlib.Path(__file__).resolve().parents[4]
GRAFANA = ROOT / "roles" / "gpu_monitoring" / "files" / "grafana"
DASHBOARD = GRAFANA / "dlinfra-gpu-cluster.json"
DASHBOARD_PROVIDER = GRAFANA / "provisioning" / "dashboards" / "dlinfra.yml"
DATASOURCE = GRAFANA / "provisioning" / "datasources" / "dlinfra-prometheus.yml"
DOC = ROOT / "docs" / "grafana.md"

DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
# Series from elsewhere than the collector: node exporter's scrape, and the alerts Prometheus evaluates.
# Prometheus' own, and node exporter's filesystem collector's (the staging mount's free bytes).
OTHER_SERIES = {"up", "ALERTS", "node_filesystem_avail_bytes"}
CHAINED = ("cluster", "rack", "node", "gpu")
# What Grafana's variables become for promtool: a regex matching anything, and a duration.
SUBSTITUTIONS = {"cluster": ".*", "rack": ".*", "node": ".*", "gpu": ".*", "datasource": "prometheus",
                 "__range": "5m", "__rate_interval": "5m", "__interval": "5m"}
KEYWORDS = {"and", "or", "unless", "offset", "bool", "inf", "nan"}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def dashboard():
    return json.loads(DASHBOARD.read_text())


def panels():
    """Every panel, rows and the panels inside collapsed rows included."""
    for panel in dashboard()["panels"]:
        yield panel
        yield from panel.get("panels", [])


def variables():
    return {variable["name"]: variable for variable in dashboard()["templating"]["list"]}


def variable_query(variable):
    query = variable["query"]
    return query["query"] if isinstance(query, dict) else query


def expressions():
    """(where, PromQL) of every query: the panels' targets and the query variables' label_values selectors."""
    found = []
    for panel in panels():
        for target in panel.get("targets", []):
            found.append(("panel %d %s, %s" % (panel["id"], panel["title"], target["refId"]), target["expr"]))
    for name, variable in variables().items():
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable_query(variable).strip())
            assert match, "variable %s: not label_values(selector, label)" % name
            found.append(("variable %s" % name, match.group(1)))
    return found


def substitute(expr):
    """The query as Prometheus gets it from Grafana, the variables replaced."""
    replaced = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda match: SUBSTITUTIONS[match.group(1) or match.group(2)], expr)
    assert "$" not in replaced, replaced
    return replaced


def series_names(expr):
    """Metric names a PromQL expression reads: identifiers outside label matchers, strings, ranges and grouping
    clauses, and not followed by '(' (a function or an aggregation)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values
    text = re.sub(r"\{[^}]*\}", "{}", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "[]", text)  # ranges and subqueries' durations
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana's variables: offset $__range
    text = GROUPING.sub(" ", text)  # by (...), on (...): label names
    return {name for name in re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)\b(?!\s*\()", text)
            if name not in KEYWORDS and not re.fullmatch(r"\d+\w*", name)}


def run(argv):
    completed = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    return completed.returncode, completed.stdout


# The dashboard


def test_dashboard_identity_and_schema():
    board = dashboard()
    assert board["uid"] == "dlinfra-gpu-cluster"
    assert board["id"] is None  # Grafana assigns the database id; a fixed one would clash on import
    assert 36 <= board["schemaVersion"] <= 41  # Grafana 10 and 11
    assert board["annotations"]["list"] == []  # Grafana adds its built-in annotation; ours would name another source


def test_every_panel_has_a_unique_id_and_its_own_place_on_the_grid():
    cells = {}
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in panels():
        grid = panel["gridPos"]
        assert set(grid) >= {"x", "y", "w", "h"} and all(isinstance(grid[key], int) for key in "xywh"), panel["title"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, "%s overlaps %s" % (panel["title"], cells[(x, y)])
                cells[(x, y)] = panel["title"]


def test_every_panel_has_a_title_and_every_query_panel_a_description():
    for panel in panels():
        assert panel["title"], panel["id"]
        if panel["type"] != "row":
            assert panel.get("description") and panel.get("targets"), panel["title"]


def _datasource_references(node, path="dashboard"):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield path, value
            else:
                yield from _datasource_references(value, "%s.%s" % (path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _datasource_references(value, "%s[%d]" % (path, index))


def test_every_datasource_reference_is_the_datasource_variable():
    references = list(_datasource_references(dashboard()))
    assert [(path, ref) for path, ref in references if ref != DATASOURCE_REF] == []
    query_panels = [panel for panel in panels() if panel["type"] != "row"]
    # Each query panel, each of its targets and each query variable: none may fall back to Grafana's default.
    expected = len(query_panels) + sum(len(panel["targets"]) for panel in query_panels) + len(CHAINED)
    assert len(references) == expected


def test_the_variables_chain_cluster_rack_node_gpu():
    found = variables()
    assert list(found) == ["datasource"] + list(CHAINED)
    source = found["datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    for position, name in enumerate(CHAINED):
        variable = found[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"], name
        # "All" as .* matches a target without the label (a node in no rack group); Grafana's own "All" would not.
        assert variable["allValue"] == ".*", name
        query = variable_query(variable)
        assert variable["definition"] == query and query.startswith("label_values("), name
        assert query.rstrip().endswith(", %s)" % name), name
        assert set(re.findall(r"\$(\w+)", query)) == set(CHAINED[:position]), name
        assert 'job="node"' in query, name


def test_the_panels_the_issue_asks_for_read_their_series():
    read = set()
    for _where, expr in expressions():
        read |= series_names(expr)
    for name in ("up", "ALERTS", "nvidia_gpus_answering", "nvidia_gpus_on_pci", "nvidia_smi_up",
                 "nvidia_gpu_temperature_celsius", "nvidia_gpu_power_draw_watts", "nvidia_gpu_power_limit_watts",
                 "nvidia_gpu_sm_clock_hertz", "nvidia_gpu_utilization_ratio", "nvidia_gpu_memory_used_bytes",
                 "nvidia_gpu_memory_total_bytes", "nvidia_gpu_ecc_volatile_errors_total",
                 "nvidia_gpu_remapped_rows_pending", "nvidia_gpu_remapped_rows_failed",
                 "nvidia_gpu_pcie_link_generation", "nvidia_gpu_pcie_link_generation_max",
                 "nvidia_gpu_pcie_link_width", "nvidia_gpu_pcie_link_width_max",
                 "nvidia_gpu_clock_event_reason_active", "nvidia_xid_events_total", "nvidia_driver_info"):
        assert name in read, name


def test_the_staging_row_shows_held_vs_planned_the_last_result_throughput_and_headroom():
    (row,) = [panel for panel in panels() if panel["type"] == "row" and panel["title"] == "Staging"]
    below = [panel for panel in panels() if panel["type"] != "row" and panel["gridPos"]["y"] > row["gridPos"]["y"]]
    exprs = {panel["title"]: [target["expr"] for target in panel["targets"]] for panel in below}
    read = {title: set().union(*map(series_names, found)) for title, found in exprs.items()}
    assert read == {"Staged share of the plan, per dataset and node": {"dlinfra_staging_shards"},
                    "Last staging run, per dataset and node": {"dlinfra_staging_last_run_result"},
                    "Staging throughput": {"dlinfra_staging_transferred_bytes_total"},
                    "Free space above the staging plan's headroom": {
                        "node_filesystem_avail_bytes", "dlinfra_staging_headroom_bytes"}}
    (share,) = exprs["Staged share of the plan, per dataset and node"]
    assert 'state="held"' in share and 'state="planned"' in share and "ignoring (state)" in share
    (throughput,) = exprs["Staging throughput"]
    assert throughput.startswith("sum by (node, dataset) (rate(")  # a counter: its rate is the bytes per second
    # StagingHeadroomLow's comparison, as a margin: one series per dataset, matched to its mount's free bytes
    (room,) = exprs["Free space above the staging plan's headroom"]
    assert "- on (instance, job, mountpoint) group_right () dlinfra_staging_headroom_bytes" in room


@pytest.mark.parametrize("expr, expected", [
    ('sum by (xid) (increase(nvidia_xid_events_total{node=~"$node"}[$__range]))', {"nvidia_xid_events_total"}),
    ('count(ALERTS{alertstate="firing"}) or vector(0)', {"ALERTS"}),
    ("(x unless x offset $__range) or increase(y[$__range])", {"x", "y"}),
    ("a_b / on (gpu) group_left (model) c offset 5m unless d", {"a_b", "c", "d"}),
])
def test_series_names_finds_the_series_of_an_expression(expr, expected):
    assert series_names(expr) == expected


def test_queries_read_only_series_the_collector_node_exporter_or_prometheus_write():
    written = set(gpu_metrics._families()) | set(staging_metrics.staging_families()) | OTHER_SERIES  # pylint: disable=protected-access
    unknown = {where: sorted(series_names(expr) - written) for where, expr in expressions()}
    assert {where: names for where, names in unknown.items() if names} == {}
    assert all(series_names(expr) for _where, expr in expressions())


def test_queries_are_valid_promql(promtool, tmp_path):
    rules = [{"record": "dashboard:query_%d" % index, "expr": substitute(expr)}
             for index, (_where, expr) in enumerate(expressions())]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    code, output = run([promtool, "check", "rules", str(path)])
    assert code == 0, output
    assert "SUCCESS: %d rules found" % len(rules) in output, output


def test_xid_by_code_counts_a_series_born_in_the_range_whole(promtool, tmp_path):
    (panel,) = [panel for panel in panels() if panel["title"] == "Xid reports by code, over the range"]
    expr = substitute(panel["targets"][0]["expr"]).replace("[5m]", "[1h]").replace("offset 5m", "offset 1h")
    labels = 'job="node", cluster="c1", rack="r1", node="gpu01", pci_bus_id="00000000:07:00.0"'
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                # Xid 79's first report since boot at 90 min: its series starts then, with 1.
                {"series": 'nvidia_xid_events_total{%s, xid="79"}' % labels, "values": "_x90 1x30"},
                # Xid 13 seen before the range, once more at 91 min.
                {"series": 'nvidia_xid_events_total{%s, xid="13"}' % labels, "values": "2x90 3x30"},
                # Xid 48 before the range only.
                {"series": 'nvidia_xid_events_total{%s, xid="48"}' % labels, "values": "1x120"},
            ],
            "promql_expr_test": [{"expr": expr, "eval_time": "120m", "exp_samples": [
                {"labels": '{xid="13"}', "value": 1}, {"labels": '{xid="48"}', "value": 0},
                {"labels": '{xid="79"}', "value": 1}]}],
        }],
    }
    path = tmp_path / "xid_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    code, output = run([promtool, "test", "rules", str(path)])
    assert code == 0, output


# The provisioning files and docs/grafana.md


def provider():
    (entry,) = yaml.safe_load(DASHBOARD_PROVIDER.read_text())["providers"]
    return entry


def datasource():
    (entry,) = yaml.safe_load(DATASOURCE.read_text())["datasources"]
    return entry


def test_the_datasource_is_the_dashboards_default():
    assert yaml.safe_load(DATASOURCE.read_text())["apiVersion"] == 1
    entry = datasource()
    assert entry["type"] == "prometheus" and entry["access"] == "proxy"
    assert entry["uid"] == variables()["datasource"]["current"]["value"]
    assert entry["url"] == "http://PROMETHEUS_HOST:9090"  # the placeholder docs/grafana.md replaces


def test_the_dashboard_provider_reads_a_folder_of_its_own():
    assert yaml.safe_load(DASHBOARD_PROVIDER.read_text())["apiVersion"] == 1
    entry = provider()
    assert entry["type"] == "file" and entry["options"]["path"].startswith("/")
    # Grafana keeps folders and dashboards under one uid space: a folder uid equal to the dashboard's clashes.
    assert entry["folderUid"] != dashboard()["uid"]


def doc_copies():
    """{src relative to the collection: dest} of docs/grafana.md's `ansible ... copy` commands."""
    text = DOC.read_text()
    return dict(re.findall(r"src=\$COLLECTION/(\S+) dest=(\S+)", text))


def test_the_doc_copies_each_file_where_grafana_reads_it():
    copies = doc_copies()
    relative = {path: str(path.relative_to(ROOT)) for path in (DASHBOARD, DASHBOARD_PROVIDER, DATASOURCE)}
    assert sorted(copies) == sorted(relative.values())
    assert copies[relative[DASHBOARD]] == provider()["options"]["path"] + "/"
    assert copies[relative[DASHBOARD_PROVIDER]] == "/etc/grafana/provisioning/dashboards/"
    assert copies[relative[DATASOURCE]] == "/etc/grafana/provisioning/datasources/"
    text = DOC.read_text()
    assert "path=/etc/grafana/provisioning/datasources/%s regexp=PROMETHEUS_HOST" % DATASOURCE.name in text
    assert dashboard()["uid"] in text and datasource()["uid"] in text
