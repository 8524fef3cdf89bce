# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_monitoring role's Prometheus alerting rules: `promtool check rules`, `promtool test rules` on
alert_rules_test.yml, and the ties the rules keep to the collector (only series it writes) and to validate (its check
ids and its list of slowdown reasons).

promtool is Prometheus' own, the session fixture of tests/unit/conftest.py: $PROMTOOL,
.cache/promtool/bin/promtool or promtool on PATH, else tests/harness/setup/ensure_promtool.sh unpacks it from Debian's
`prometheus` package (~2.5 s). Without it these tests fail, saying so; they never skip.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils import gpu_metrics, staging_metrics
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import gpu as validate_gpu

ROOT = pathlib.Path(__file__).resolve().parents[4]
RULES = ROOT / "roles" / "gpu_monitoring" / "files" / "prometheus" / "dlinfra-gpu.rules.yml"
UNIT_TESTS = pathlib.Path(__file__).with_name("alert_rules_test.yml")
# Series from elsewhere than the collector: Prometheus' own per target, node exporter's free bytes per filesystem and
# its infiniband collector's RDMA ports (node_exporter's collector/infiniband_linux.go names them).
OTHER_SERIES = {"up", "node_filesystem_avail_bytes", "node_infiniband_state_id", "node_infiniband_rate_bytes_per_second",
                "node_infiniband_symbol_error_total", "node_infiniband_link_downed_total",
                "node_infiniband_port_errors_received_total"}
# The labels the collector and the scrape give the series the alerts read (device and port: node exporter's RDMA
# ports; counter: the one RdmaPortErrors adds).
KNOWN_LABELS = {"instance", "job", "gpu", "uuid", "model", "pci_bus_id", "xid", "type", "reason", "cause", "dataset",
                "result", "state", "mountpoint", "device", "port", "counter"}
# Check ids of validate that are not GPU checks: monitoring.up is issue 35's item 6; a staging alert names the dataset
# check (validate_checks.dataset_checks: dataset.NAME.placement) of the dataset in its labels, or the staging
# filesystem's free space (validate_checks.storage_checks: storage.free_space); the RDMA alerts name the HCA ports'
# check (_validate/fabric.py: fabric.ports).
OTHER_CHECKS = {"monitoring.up", "dataset.{{ $labels.dataset }}.placement", "storage.free_space", "fabric.ports"}
WRITTEN = set(gpu_metrics._families()) | set(staging_metrics.staging_families())  # pylint: disable=protected-access


def alerts():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def unit_tests():
    return yaml.safe_load(UNIT_TESTS.read_text())


def run(argv):
    completed = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    return completed.returncode, completed.stdout


def test_promtool_check_rules_passes(promtool):
    code, output = run([promtool, "check", "rules", str(RULES)])
    assert code == 0, output
    assert "SUCCESS: %d rules found" % len(alerts()) in output, output


def test_promtool_test_rules_passes(promtool):
    code, output = run([promtool, "test", "rules", str(UNIT_TESTS)])
    assert code == 0, output
    assert "SUCCESS" in output, output


def test_the_unit_tests_load_the_shipped_rules_file():
    assert [(UNIT_TESTS.parent / path).resolve() for path in unit_tests()["rule_files"]] == [RULES]


def test_every_alert_has_a_firing_and_a_silent_case():
    cases = [case for test in unit_tests()["tests"] for case in test.get("alert_rule_test", [])]
    firing = {case["alertname"] for case in cases if case.get("exp_alerts")}
    silent = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    names = {rule["alert"] for rule in alerts()}
    assert len(names) == len(alerts()), "two rules share an alert name"
    assert (sorted(names - firing), sorted(names - silent)) == ([], [])
    assert sorted((firing | silent) - names) == []


def _series_names(text):
    """Metric names in PromQL text: identifiers followed by a selector or standing alone, not labels or functions."""
    text = re.sub(r'"[^"]*"', '""', text)  # label values
    text = re.sub(r"\{[^}]*\}", "{}", text)  # label matchers
    text = re.sub(r"\b(on|ignoring|by|without|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    return {name for name in re.findall(r"\b([a-z_][a-z0-9_]*)\b(?!\s*\()", text)
            if name not in {"and", "or", "unless", "on", "ignoring", "by", "without", "bool"}}


def test_rules_read_only_series_the_collector_writes():
    written = WRITTEN | OTHER_SERIES
    read = set()
    for rule in alerts():
        read |= _series_names(rule["expr"])
        for annotation in rule["annotations"].values():
            read |= {name for query in re.findall(r'printf "([^"]*)"', annotation) for name in _series_names(query)}
    assert sorted(read - written) == []
    assert "nvidia_gpu_pcie_link_width_max" in read  # the parsing above finds the annotations' queries


def test_unit_test_inputs_are_series_the_collector_writes():
    written = WRITTEN | OTHER_SERIES
    inputs = {series["series"].split("{", 1)[0].strip() for test in unit_tests()["tests"] for series in test["input_series"]}
    assert sorted(inputs - written) == []


def test_alerts_name_validate_checks_and_labels_the_collector_writes():
    for rule in alerts():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["labels"]["check"] in set(validate_gpu.CHECK_IDS) | OTHER_CHECKS, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
        used = {label for text in rule["annotations"].values() for label in re.findall(r"\$labels\.(\w+)", text)}
        assert sorted(used - KNOWN_LABELS) == [], rule["alert"]


def test_slowdown_alert_reads_validate_slowdown_reasons():
    (rule,) = [rule for rule in alerts() if rule["alert"] == "NvidiaGpuSlowdown"]
    reasons = re.search(r'reason=~"([^"]*)"', rule["expr"]).group(1).split("|")
    assert sorted(reasons) == sorted(validate_gpu.SLOWDOWN_REASONS)
