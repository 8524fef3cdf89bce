"""The evaluator on what the validate role read on the simulated lab (fixtures/validate_raw_sim_lab.json, recorded from
a run on `make demo`'s lab and trimmed to what the evaluator reads), healthy and with one fault at a time."""
from __future__ import annotations

import copy
import json
import pathlib
from xml.etree import ElementTree

import jsonschema
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import checks as validate_checks
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import report as validate_report
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import result as validate_result

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[4]
RAW = json.loads((HERE / "fixtures" / "validate_raw_sim_lab.json").read_text())
PLAN = {"mode": "partition", "replicas": 1, "shard_count": 32, "total_bytes": 3604480}
SCHEMA = json.loads((ROOT / "docs" / "validate_report.schema.json").read_text())
GPU_NODE_CHECKS = {
    "node.reachable", "gpu.count_model", "gpu.driver_state", "gpu.persistence_mode", "gpu.ecc", "gpu.xid", "gpu.nvlink",
    "gpu.pcie_link", "gpu.throttle", "gpu.dcgm_diag", "gpu.host_device_bandwidth", "gpu.sharing", "gpu.driver_version",
    "gpu.driver_consistency", "gpu.driver_flavor", "runtime.docker", "runtime.containerd", "runtime.microk8s", "runtime.cdi",
    "runtime.gpu_container", "nccl.version", "nccl.consistency", "nccl.busbw", "nccl.busbw_multinode", "nccl.transport",
    "k8s.node_ready", "k8s.gpu_resources", "k8s.device_plugin", "k8s.gpu_job", "storage.free_space", "storage.seq_write",
    "storage.seq_read", "dataset.yt8m-mini.placement", "dataset.yt8m-mini.checksums", "dataset.yt8m-mini.ranks",
    "dataset.yt8m-mini.balance", "monitoring.up", "security.listeners", "training.ddp", "training.samples_per_second",
    "fabric.ports", "fabric.gpudirect"}
HEAD_CHECKS = {"node.reachable", "k8s.node_ready", "k8s.gpu_resources", "k8s.device_plugin", "k8s.gpu_job",
               "storage.free_space", "storage.seq_write", "storage.seq_read", "dataset.yt8m-mini.placement",
               "dataset.yt8m-mini.checksums", "dataset.yt8m-mini.ranks", "monitoring.up", "security.listeners"}


def evaluate(nodes):
    return validate_checks.evaluate(nodes, {"cluster_sim": {"yt8m-mini": PLAN}}, {}, "inventories/sim", "2026-11-24T20:00:00Z")


def failing(report):
    return {(c["node"], c["check"]) for c in report["checks"] if c["status"] == "fail"}


def dataset_result(raw):
    return next(r for r in raw["datasets"] if r["item"]["name"] == "yt8m-mini")


def test_the_healthy_lab_passes_with_every_check_of_each_node_present():
    report = evaluate(copy.deepcopy(RAW))
    assert failing(report) == set()
    for node in ("sim-gpu1", "sim-gpu2"):
        assert {c["check"] for c in report["checks"] if c["node"] == node} == GPU_NODE_CHECKS
    assert {c["check"] for c in report["checks"] if c["node"] == "sim-head"} == HEAD_CHECKS
    assert all(c["message"] for c in report["checks"])
    jsonschema.validate(dict(report, summary=validate_report.summarize(report)), SCHEMA)


def test_the_labs_gpu_checks_are_skipped_with_the_reason():
    report = evaluate(copy.deepcopy(RAW))
    skipped = {c["check"]: c["message"] for c in report["checks"] if c["node"] == "sim-gpu1" and c["status"] == "skip"}
    assert "nvidia_driver_kernel_module: false" in skipped["gpu.driver_state"]
    assert skipped["runtime.gpu_container"] == "the driver does not answer (not_loaded)"
    assert skipped["runtime.docker"] == "Docker is not installed on this node"


def test_measurements_hold_the_disks_the_gpus_and_the_placement():
    measurements = evaluate(copy.deepcopy(RAW))["measurements"]
    assert sorted(d["node"] for d in measurements["disk"]) == ["sim-gpu1", "sim-gpu2"]
    assert all(d["read_mbps"] > 0 and d["write_mbps"] > 0 for d in measurements["disk"])
    assert [(g["node"], g["count"]) for g in measurements["gpus"]] == [("sim-gpu1", 1), ("sim-gpu2", 1)]
    placement = measurements["datasets"][0]
    assert placement["mode"] == "partition"
    assert sum(n["planned_shards"] for n in placement["nodes"].values()) == 32
    assert [m["reason"] for m in measurements["nccl_busbw"] if m["scope"] == "node"] == ["the driver does not answer (not_loaded)"] * 2


def plan_with(gpu1_bytes, gpu2_bytes, ranks=(2, 2), **extra):
    """PLAN with per-node figures as shard_staging writes them now."""
    nodes = {host: {"bytes": held, "streamed_bytes": 0, "ranks": count, "rank_bytes": [held // count] * count,
                    "fair_bytes": 1802240, "capped": False}
             for host, held, count in (("sim-gpu1", gpu1_bytes, ranks[0]), ("sim-gpu2", gpu2_bytes, ranks[1]))}
    return dict(PLAN, nodes=nodes, **dict({"balance": None}, **extra))


def balance_checks(plan, limit=None):
    nodes = copy.deepcopy(RAW)
    if limit is not None:
        for raw in nodes.values():
            raw["expected"]["dataset_balance_max"] = limit
    report = validate_checks.evaluate(nodes, {"cluster_sim": {"yt8m-mini": plan}}, {}, "inventories/sim", "2026-11-24T20:00:00Z")
    return {c["node"]: c for c in report["checks"] if c["check"] == "dataset.yt8m-mini.balance"}, report


def test_an_even_plan_passes_the_balance_check_and_the_report_has_each_ranks_bytes():
    checks, report = balance_checks(plan_with(1802240, 1802240, balance=1.0))
    assert {node: c["status"] for node, c in checks.items()} == {"sim-gpu1": "pass", "sim-gpu2": "pass"}
    assert checks["sim-gpu1"]["message"] == "880.0 KiB per rank over 2 rank(s), 1.000 x the average"
    row = report["measurements"]["datasets"][0]
    assert row["balance"] == 1.0 and row["nodes"]["sim-gpu1"]["rank_bytes"] == [901120, 901120]
    jsonschema.validate(dict(report, summary=validate_report.summarize(report)), SCHEMA)


def test_each_node_is_checked_against_its_own_clusters_plan():
    nodes = copy.deepcopy(RAW)
    nodes["sim-gpu2"]["cluster"] = "cluster_b"
    # Each cluster's plan holds its own node only: the whole dataset on one, half of it on the other.
    plans = {cluster: {"yt8m-mini": dict(plan, nodes={host: plan["nodes"][host]})}
             for cluster, host, plan in (("cluster_sim", "sim-gpu1", plan_with(1802240, 0, balance=1.0)),
                                         ("cluster_b", "sim-gpu2", plan_with(0, 3604480, balance=1.0)))}
    report = validate_checks.evaluate(nodes, plans, {}, "inventories/sim", "2026-11-24T20:00:00Z")
    checks = {c["node"]: c for c in report["checks"] if c["check"] == "dataset.yt8m-mini.balance"}
    assert {node: c["status"] for node, c in checks.items()} == {"sim-gpu1": "pass", "sim-gpu2": "pass"}
    assert checks["sim-gpu2"]["message"] == "1.7 MiB per rank over 2 rank(s), 1.000 x the average"
    rows = {row["cluster"]: sorted(row["nodes"]) for row in report["measurements"]["datasets"]}
    assert rows == {"cluster_b": ["sim-gpu2"], "cluster_sim": ["sim-gpu1"]}
    jsonschema.validate(dict(report, summary=validate_report.summarize(report)), SCHEMA)


def test_a_node_above_the_balance_limit_fails_naming_the_limit_and_the_fix():
    checks, _report = balance_checks(plan_with(2162688, 1441792))
    assert checks["sim-gpu2"]["status"] == "pass"
    assert checks["sim-gpu1"]["status"] == "fail"
    assert "1.200 x the average (validate_dataset_balance_max 1.05)" in checks["sim-gpu1"]["message"]
    assert "shard_staging_ranks_per_node" in checks["sim-gpu1"]["message"]
    # The same plan passes with a limit the user raised.
    assert balance_checks(plan_with(2162688, 1441792), limit=1.25)[0]["sim-gpu1"]["status"] == "pass"
    # Bytes per rank, not per node: twice the bytes on twice the ranks is even.
    assert balance_checks(plan_with(2402986, 1201494, ranks=(4, 2)))[0]["sim-gpu1"]["status"] == "pass"


@pytest.mark.parametrize("plan, reason", [
    (PLAN, "planned by an older version"),
    (dict(PLAN, mode="replicate"), "replicated"),
    (None, "no plan"),
])
def test_the_balance_check_is_skipped_where_the_plan_cannot_tell(plan, reason):
    checks, _report = balance_checks(plan)
    assert checks["sim-gpu1"]["status"] == "skip" and reason in checks["sim-gpu1"]["message"]


def missing_shard(nodes):
    result = dataset_result(nodes["sim-gpu1"])
    result["missing"] = ["chunks-000000.tar"]
    result["present"]["shards"] -= 1


def wrong_size(nodes):
    dataset_result(nodes["sim-gpu2"])["wrong_size"] = [{"name": "chunks-000005.tar", "expected": 112640, "actual": 4096}]


def checksum(nodes):
    dataset_result(nodes["sim-gpu2"])["checksum_mismatch"] = list(dataset_result(nodes["sim-gpu2"])["sampled"])


def rank_gap(nodes):
    dataset_result(nodes["sim-gpu1"])["ranks"]["missing"] = ["chunks-000000.tar"]


def driver_expected(nodes):
    nodes["sim-gpu2"]["expected"]["driver_version"] = "535"


def containerd_stopped(nodes):
    nodes["sim-gpu1"]["containerd_active"] = "inactive"


def head_not_ready(nodes):
    listing = json.loads(nodes["sim-head"]["kubectl"][0]["stdout"])
    node = next(n for n in listing["items"] if n["metadata"]["name"] == "sim-head")
    node["status"]["conditions"][0]["status"] = "Unknown"
    nodes["sim-head"]["kubectl"][0]["stdout"] = json.dumps(listing)


def plugin_pod_gone(nodes):
    listing = json.loads(nodes["sim-head"]["kubectl"][1]["stdout"])
    listing["items"] = [p for p in listing["items"] if p["spec"]["nodeName"] != "sim-gpu2"]
    nodes["sim-head"]["kubectl"][1]["stdout"] = json.dumps(listing)


def slow_disk(nodes):
    nodes["sim-gpu1"]["expected"]["storage_min_read_mbps"] = 1e9


def unreachable(nodes):
    nodes["sim-gpu2"] = None


def nccl_elsewhere(nodes):
    nodes["sim-gpu1"]["nccl_libs"] = ["/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"]


@pytest.mark.parametrize("fault, red", [
    (missing_shard, {("sim-gpu1", "dataset.yt8m-mini.placement")}),
    (wrong_size, {("sim-gpu2", "dataset.yt8m-mini.placement")}),
    (checksum, {("sim-gpu2", "dataset.yt8m-mini.checksums")}),
    (rank_gap, {("sim-gpu1", "dataset.yt8m-mini.ranks")}),
    (driver_expected, {("sim-gpu2", "gpu.driver_version")}),
    (containerd_stopped, {("sim-gpu1", "runtime.containerd")}),
    (head_not_ready, {("sim-head", "k8s.node_ready")}),
    (plugin_pod_gone, {("sim-gpu2", "k8s.device_plugin")}),
    (slow_disk, {("sim-gpu1", "storage.seq_read")}),
    (unreachable, {("sim-gpu2", "node.reachable")}),
    # Another version on one node: that node's version check, and the consistency check on both.
    (nccl_elsewhere, {("sim-gpu1", "nccl.version"), ("sim-gpu1", "nccl.consistency"), ("sim-gpu2", "nccl.consistency")}),
])
def test_a_fault_turns_exactly_its_check_red_on_its_node(fault, red, tmp_path):
    nodes = copy.deepcopy(RAW)
    fault(nodes)
    report = evaluate(nodes)
    assert failing(report) == red
    for key in red:
        item = next(c for c in report["checks"] if (c["node"], c["check"]) == key)
        assert item["message"] and (item["expected"] or item["check"] == "node.reachable")
    paths = validate_report.write_report(report, str(tmp_path))
    cases = ElementTree.parse(paths["junit.xml"]).getroot().iter("testcase")
    assert {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None} == red
    assert validate_report.summarize(report)["status"] == "fail"


def test_an_unreachable_node_has_only_the_reachability_check():
    nodes = copy.deepcopy(RAW)
    unreachable(nodes)
    report = evaluate(nodes)
    assert [c["check"] for c in report["checks"] if c["node"] == "sim-gpu2"] == ["node.reachable"]
    # The others still compare within the cluster without it.
    assert ("sim-gpu1", "gpu.driver_consistency") not in failing(report)


@pytest.mark.parametrize("paths, versions", [
    (["/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.550.163.01", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"],
     ["550.163.01"]),
    (["/usr/lib64/libnccl.so.2.22.3", "/usr/lib64/libnccl.so.2"], ["2.22.3"]),
    ([], []),
])
def test_versions_come_from_the_library_file_names(paths, versions):
    assert validate_result.versions_in_names(paths) == versions


@pytest.mark.parametrize("expected, measured, matches", [
    ("550", "550.163.01", True), ("550.163", "550.163.01", True), ("55", "550.163.01", False),
    ("535", "550.163.01", False), ("2.22.3", "2.22.3", True), ("550", None, False),
])
def test_expected_versions_match_on_whole_components(expected, measured, matches):
    assert validate_result.version_matches(expected, measured) is matches


def test_the_placement_plot_draws_each_ranks_bytes_against_the_fair_share():
    from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import plots as _validate_plots

    _checks, report = balance_checks(plan_with(2162688, 1441792, balance=1.2))
    svg = _validate_plots.render("plot-datasets", lambda figure: _validate_plots.draw_datasets(
        figure, report["measurements"]["datasets"]), (9, 3.2))
    assert "bytes per rank against the fair share (dashed), balance 1.200" in svg
    without = balance_checks(PLAN)[1]
    assert "bytes per rank" not in _validate_plots.render("plot-datasets", lambda figure: _validate_plots.draw_datasets(
        figure, without["measurements"]["datasets"]), (9, 3.2))


def time_sliced(nodes, allocatable):
    listing = json.loads(nodes["sim-head"]["kubectl"][0]["stdout"])
    node = next(n for n in listing["items"] if n["metadata"]["name"] == "sim-gpu1")
    node["metadata"]["labels"].update({"dlinfra.io/gpu.sharing": "time-sliced", "nvidia.com/gpu.replicas": "4"})
    node["status"]["allocatable"]["nvidia.com/gpu"] = str(allocatable)
    nodes["sim-head"]["kubectl"][0]["stdout"] = json.dumps(listing)


def test_a_time_sliced_node_is_expected_to_advertise_each_gpu_once_per_replica():
    nodes = copy.deepcopy(RAW)
    time_sliced(nodes, 4)
    report = evaluate(nodes)
    item = next(c for c in report["checks"] if (c["node"], c["check"]) == ("sim-gpu1", "k8s.gpu_resources"))
    assert item["status"] == "pass" and "time-sliced 4 ways" in item["message"]
    time_sliced(nodes, 1)  # the plugin did not take the node's config
    report = evaluate(nodes)
    assert failing(report) == {("sim-gpu1", "k8s.gpu_resources")}
    item = next(c for c in report["checks"] if (c["node"], c["check"]) == ("sim-gpu1", "k8s.gpu_resources"))
    assert (item["expected"], item["measured"]) == ("4 allocatable", "1 allocatable")


def declared(nodes, rules):
    for host in ("sim-gpu1", "sim-gpu2"):
        nodes[host]["expected"]["gpu_sharing_layout"] = rules


def gpu_resources(report):
    return next(c for c in report["checks"] if (c["node"], c["check"]) == ("sim-gpu1", "k8s.gpu_resources"))


def test_a_declared_time_slicing_is_what_the_node_must_advertise_and_be_labelled():
    nodes = copy.deepcopy(RAW)
    declared(nodes, [{"mode": "time_slicing", "replicas": 4}])
    time_sliced(nodes, 4)
    item = gpu_resources(evaluate(nodes))
    assert item["status"] == "pass", item
    assert item["message"] == "labelled and 4 nvidia.com/gpu allocatable, as the declared sharing (time-sliced) gives"
    time_sliced(nodes, 1)
    item = gpu_resources(evaluate(nodes))
    assert (item["status"], item["expected"], item["measured"]) == ("fail", "4 nvidia.com/gpu", "1 nvidia.com/gpu")
    assert item["message"].startswith("1 nvidia.com/gpu allocatable where the declared sharing gives 4 nvidia.com/gpu; "
                                      "run site.yml (microk8s)")


def test_a_node_labelled_whole_where_time_slicing_is_declared_fails_on_its_label():
    nodes = copy.deepcopy(RAW)
    declared(nodes, [{"mode": "time_slicing", "replicas": 4}])
    time_sliced(nodes, 4)
    listing = json.loads(nodes["sim-head"]["kubectl"][0]["stdout"])
    node = next(n for n in listing["items"] if n["metadata"]["name"] == "sim-gpu1")
    node["metadata"]["labels"]["dlinfra.io/gpu.sharing"] = "none"
    nodes["sim-head"]["kubectl"][0]["stdout"] = json.dumps(listing)
    item = gpu_resources(evaluate(nodes))
    assert item["status"] == "fail"
    assert "labelled dlinfra.io/gpu.sharing=none where the declaration says time-sliced" in item["message"]


def test_without_a_declaration_the_labels_say_what_to_expect():
    nodes = copy.deepcopy(RAW)
    declared(nodes, [])
    time_sliced(nodes, 4)
    assert "time-sliced 4 ways" in gpu_resources(evaluate(nodes))["message"]
