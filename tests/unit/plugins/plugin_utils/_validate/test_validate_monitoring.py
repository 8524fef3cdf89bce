"""monitoring.up from what the Prometheus servers among the nodes answered: the active targets (the format of
/api/v1/targets?state=active) and the nvidia_smi_up series (/api/v1/query), as gpu_monitoring's scrape jobs label them."""

import json
import pathlib
import re

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import monitoring as vm


def target(node, health="up", error=""):
    return {"labels": {"job": "node", "node": node, "cluster": "cluster_sim", "instance": "%s:9100" % node},
            "scrapeUrl": "http://%s:9100/metrics" % node, "health": health, "lastError": error}


def smi(node, value):
    return {"metric": {"__name__": "nvidia_smi_up", "job": "node", "node": node}, "value": [1795834644.1, value]}


def nodes(targets=None, samples=None, answered=True):
    server = {"gpu_node": False, "monitoring": {"answered": answered, "targets": targets if targets is not None else
                                                [target("sim-head"), target("sim-gpu1"), target("sim-gpu2")],
                                                "smi_up": samples if samples is not None else
                                                [smi("sim-gpu1", "1"), smi("sim-gpu2", "1")]}}
    return {"sim-head": server, "sim-gpu1": {"gpu_node": True, "monitoring": {"answered": False}},
            "sim-gpu2": {"gpu_node": True, "monitoring": {"answered": False}}}


def result(all_nodes, host, gpus_answer=True):
    return vm.monitoring_check(host, all_nodes[host], vm.scraped(all_nodes), vm.servers(all_nodes), gpus_answer, 9090)


def test_every_node_scraped_and_up_passes():
    all_nodes = nodes()
    assert result(all_nodes, "sim-gpu1")["status"] == "pass"
    assert result(all_nodes, "sim-gpu1")["message"] == "scraped by Prometheus on sim-head, up; nvidia_smi_up 1"
    assert result(all_nodes, "sim-head", gpus_answer=None)["message"] == "scraped by Prometheus on sim-head, up"


def test_no_prometheus_in_the_run_skips_saying_why():
    checked = result(nodes(answered=False), "sim-gpu1")
    assert checked["status"] == "skip" and "no Prometheus answered on port 9090" in checked["message"]


def test_a_prometheus_that_refuses_the_password_fails_naming_the_variables():
    all_nodes = nodes(answered=False)
    all_nodes["sim-head"]["monitoring"]["refused"] = True
    checked = vm.monitoring_check("sim-gpu1", all_nodes["sim-gpu1"], vm.scraped(all_nodes), vm.servers(all_nodes), True,
                                  9090, refused=vm.refusing(all_nodes))
    assert checked["status"] == "fail"
    assert checked["message"].startswith("Prometheus on sim-head refused validate's user and password (HTTP 401); set "
                                         "validate_prometheus_username and validate_prometheus_password")


def test_a_node_no_server_scrapes_fails_naming_the_servers():
    checked = result(nodes(targets=[target("sim-head"), target("sim-gpu1")]), "sim-gpu2")
    assert checked["status"] == "fail"
    assert checked["message"].startswith("no Prometheus of this run (sim-head) scrapes sim-gpu2's node exporter")


def test_a_target_down_fails_with_prometheus_error_and_the_fix():
    checked = result(nodes(targets=[target("sim-gpu1", "down", 'Get "http://sim-gpu1:9100/metrics": connection refused')]),
                     "sim-gpu1")
    assert checked["status"] == "fail" and "connection refused" in checked["message"]
    assert "systemctl status prometheus-node-exporter" in checked["message"] and checked["measured"] == "down"


def up_window(node, value):
    return {"metric": {"job": "node", "node": node, "instance": "%s:9100" % node}, "value": [1795834644.1, value]}


def test_a_target_whose_last_scrape_failed_but_was_up_within_the_window_passes():
    # A slow scrape on a busy node (the lab's validate stage, seven runs side by side on 2 cores, met one) is not an
    # outage: max_over_time(up[window]) is 1 while any scrape of the window succeeded.
    all_nodes = nodes(targets=[target("sim-gpu1", "down", "context deadline exceeded")], samples=[])
    all_nodes["sim-head"]["monitoring"]["up_window"] = [up_window("sim-gpu1", "1")]
    checked = vm.monitoring_check("sim-gpu1", all_nodes["sim-gpu1"], vm.scraped(all_nodes), vm.servers(all_nodes), True,
                                  9090, "90s")
    assert (checked["status"], checked["measured"]) == ("pass", "up within 90s")
    assert checked["message"] == ("scraped by Prometheus on sim-head, up within the last 90s; its last scrape failed "
                                  "(down: context deadline exceeded)")


@pytest.mark.parametrize("window", [[up_window("sim-gpu1", "0")], [], [up_window("sim-gpu2", "1")]])
def test_a_target_down_for_the_whole_window_or_without_samples_fails(window):
    all_nodes = nodes(targets=[target("sim-gpu1", "down", "connection refused"), target("sim-gpu2")])
    all_nodes["sim-head"]["monitoring"]["up_window"] = window
    checked = result(all_nodes, "sim-gpu1")
    assert (checked["status"], checked["measured"]) == ("fail", "down")
    assert "and no scrape of the last 1m succeeded" in checked["message"]


@pytest.mark.parametrize("samples, words", [
    ([smi("sim-gpu2", "1")], "has no nvidia_smi_up from sim-gpu1"),
    ([smi("sim-gpu1", "0"), smi("sim-gpu2", "1")], "nvidia_smi_up is 0 on sim-gpu1 while its GPUs answer"),
])
def test_gpus_that_answer_need_nvidia_smi_up_1(samples, words):
    checked = result(nodes(samples=samples), "sim-gpu1")
    assert checked["status"] == "fail" and words in checked["message"]
    assert "dlinfra-gpu-metrics" in checked["message"]


@pytest.mark.parametrize("gpus_answer", [False, None])
def test_nvidia_smi_up_is_not_asked_where_the_gpus_do_not_answer_or_were_not_read(gpus_answer):
    assert result(nodes(samples=[smi("sim-gpu1", "0")]), "sim-gpu1", gpus_answer)["status"] == "pass"


def test_a_second_server_does_not_override_the_first_ones_target():
    all_nodes = nodes()
    all_nodes["sim-gpu2"]["monitoring"] = {"answered": True, "targets": [target("sim-gpu1", "down", "x")], "smi_up": []}
    assert vm.servers(all_nodes) == ["sim-gpu2", "sim-head"]
    assert vm.scraped(all_nodes)["sim-gpu1"]["server"] == "sim-gpu2"  # the first server in name order scrapes it


# What the real Prometheus answered (Debian 12's 2.42, in the gpu_monitoring molecule scenario): the server
# debian12-gpu_monitoring scrapes itself and debian13-gpu_monitoring, healthy and with debian13's node exporter
# stopped. fixtures/validate_monitoring/README.md says how they were recorded.
FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "validate_monitoring"
SERVER, OTHER = "debian12-gpu_monitoring", "debian13-gpu_monitoring"


def recorded(state, gpu_nodes=()):
    """Every node's raw monitoring data as roles/validate/tasks/monitoring.yml keeps it: the server's answers, and a
    refused connection (answered false) on the node without a Prometheus."""
    targets = json.loads((FIXTURES / ("prometheus_2.42_targets_%s.json" % state)).read_text())
    smi_up = json.loads((FIXTURES / ("prometheus_2.42_nvidia_smi_up_%s.json" % state)).read_text())
    assert targets["status"] == smi_up["status"] == "success"
    return {SERVER: {"gpu_node": SERVER in gpu_nodes,
                     "monitoring": {"answered": True, "targets": targets["data"]["activeTargets"],
                                    "smi_up": smi_up["data"]["result"]}},
            OTHER: {"gpu_node": OTHER in gpu_nodes, "monitoring": {"answered": False, "targets": [], "smi_up": []}}}


@pytest.mark.parametrize("host", [SERVER, OTHER])
def test_recorded_healthy_answers_pass_every_node(host):
    assert result(recorded("healthy"), host, gpus_answer=None) == {
        "check": "monitoring.up", "status": "pass", "expected": "up", "measured": "up",
        "message": "scraped by Prometheus on debian12-gpu_monitoring, up"}


@pytest.mark.parametrize("host", [SERVER, OTHER])
def test_recorded_nvidia_smi_up_passes_gpu_nodes_whose_gpus_answer(host):
    # The collector on both containers reads a recorded nvidia-smi report, so both series are 1 (the value is a string
    # in the API's [time, value] pair).
    checked = result(recorded("healthy", gpu_nodes=(SERVER, OTHER)), host, gpus_answer=True)
    assert (checked["status"], checked["measured"]) == ("pass", "up, nvidia_smi_up 1")


def test_recorded_target_down_fails_with_prometheus_error_and_the_fix():
    checked = result(recorded("one_down"), OTHER, gpus_answer=None)
    assert (checked["status"], checked["expected"], checked["measured"]) == ("fail", "up", "down")
    assert re.fullmatch(
        r"Prometheus on debian12-gpu_monitoring cannot scrape debian13-gpu_monitoring's node exporter \(down: Get "
        r'"http://debian13-gpu_monitoring:9100/metrics": dial tcp [0-9.]+:9100: connect: connection refused\), and no '
        r"scrape of the last 1m succeeded; check `systemctl status prometheus-node-exporter` there and that its port is "
        r"reachable from debian12-gpu_monitoring",
        checked["message"]), checked["message"]
    assert result(recorded("one_down"), SERVER, gpus_answer=None)["status"] == "pass"


def test_recorded_target_down_on_a_gpu_node_names_the_scrape_not_the_collector():
    # Prometheus marks a failed target's series stale at once: nvidia_smi_up of the stopped node is gone from the query,
    # and the failure is the scrape's, not a missing collector.
    all_nodes = recorded("one_down", gpu_nodes=(OTHER,))
    assert OTHER not in [s["metric"]["node"] for s in all_nodes[SERVER]["monitoring"]["smi_up"]]
    assert "cannot scrape debian13-gpu_monitoring's node exporter" in result(all_nodes, OTHER)["message"]
