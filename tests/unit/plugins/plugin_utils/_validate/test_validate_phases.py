# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate.yml run with some phase tags only (--tags validate_gpu): the checks of the phases it did not read are in
the report as skipped, saying why, and those it read are evaluated as in a full run."""
import copy
import json
import pathlib

import jsonschema
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import checks as validate_checks
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import phases as validate_phases
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import report as validate_report

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[4]
RAW = json.loads((HERE / "fixtures" / "validate_raw_sim_lab.json").read_text())
PLAN = {"mode": "partition", "replicas": 1, "shard_count": 32, "total_bytes": 3604480}
SCHEMA = json.loads((ROOT / "docs" / "validate_report.schema.json").read_text())


def report_for(nodes):
    report = validate_checks.evaluate(nodes, {"cluster_sim": {"yt8m-mini": PLAN}}, {}, "inventories/sim", "2026-11-24T20:00:00Z")
    return validate_phases.mark_unread(report, nodes)


def with_read(phases):
    nodes = copy.deepcopy(RAW)
    for raw in nodes.values():
        raw["read"] = {phase: phase in phases for phase in validate_phases.PHASES}
    return nodes


@pytest.mark.parametrize("name, phase", [
    ("gpu.ecc", "validate_gpu"), ("gpu.driver_version", "validate_gpu"), ("runtime.docker", "validate_runtime"),
    ("nccl.busbw_multinode", "validate_nccl"), ("nccl.transport", "validate_nccl"), ("storage.seq_read", "validate_storage"),
    ("dataset.yt8m-mini.balance", "validate_datasets"), ("k8s.gpu_job", "validate_kubernetes"), ("node.reachable", None),
])
def test_each_check_belongs_to_the_phase_that_reads_its_data(name, phase):
    assert validate_phases.phase_of(name) == phase


def test_every_check_of_the_evaluator_has_a_phase():
    report = report_for(copy.deepcopy(RAW))
    assert {c["check"] for c in report["checks"] if validate_phases.phase_of(c["check"]) is None} == {"node.reachable"}


def test_raw_data_without_read_counts_every_phase_as_read():
    plain = validate_checks.evaluate(copy.deepcopy(RAW), {"cluster_sim": {"yt8m-mini": PLAN}}, {}, "inventories/sim", "2026-11-24T20:00:00Z")
    assert report_for(copy.deepcopy(RAW)) == plain
    assert report_for(with_read(validate_phases.PHASES)) == plain


@pytest.mark.parametrize("phase", validate_phases.PHASES)
def test_one_phase_read_keeps_its_checks_and_skips_the_others_saying_why(phase):
    full = {(c["node"], c["check"]): c for c in report_for(copy.deepcopy(RAW))["checks"]}
    report = report_for(with_read({phase}))
    assert {(c["node"], c["check"]) for c in report["checks"]} == set(full)  # every check present, as in a full run
    for item in report["checks"]:
        own = validate_phases.phase_of(item["check"])
        if own in (phase, None):
            assert item == full[(item["node"], item["check"])]
        else:
            assert item["status"] == "skip"
            assert item["message"] == "not read in this run: the tags given (--tags) left out %s" % own
    jsonschema.validate(dict(report, summary=validate_report.summarize(report)), SCHEMA)


def test_a_failure_in_a_phase_not_read_is_not_reported():
    nodes = with_read(validate_phases.PHASES)
    nodes["sim-gpu2"]["containerd_active"] = "inactive"
    assert [(c["node"], c["check"]) for c in report_for(copy.deepcopy(nodes))["checks"] if c["status"] == "fail"] \
        == [("sim-gpu2", "runtime.containerd")]
    for raw in nodes.values():
        raw["read"]["validate_runtime"] = raw["read"]["validate_nccl"] = False
    report = report_for(nodes)
    assert [c for c in report["checks"] if c["status"] == "fail"] == []
    assert all(m["status"] == "skip" and m["busbw_gbps"] is None for m in report["measurements"]["nccl_busbw"])


def test_nothing_read_leaves_only_reachability():
    report = report_for(with_read(set()))
    assert {c["status"] for c in report["checks"] if c["check"] != "node.reachable"} == {"skip"}
    assert {c["status"] for c in report["checks"] if c["check"] == "node.reachable"} == {"pass"}
