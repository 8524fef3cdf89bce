# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugin_utils/gpu_monitoring_scrape: which hosts run Prometheus, and what each one scrapes with which labels."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.scrape import (
    alertmanagers, prometheus_config, retention_problem, scrape_jobs, scrape_servers)

SETTINGS = {"server_group": "gpu_monitoring_server", "head_group": "head", "cluster_group_pattern": "^cluster_",
            "rack_group_pattern": "^rack_", "role_groups": ["head", "gpu_nodes", "cpu_nodes", "dataset_store"],
            "interval": 15, "node_exporter_port": 9100, "rules_file": "/etc/prometheus/dlinfra-gpu.rules.yml"}
# Two clusters as inventories/lab lays them out: site -> cluster -> rack -> hosts, and the functional groups.
GROUPS = {"all": ["a-head", "a-gpu1", "a-gpu2", "b-head1", "b-head2", "b-gpu1", "store"],
          "cluster_a": ["a-head", "a-gpu1", "a-gpu2"], "rack_a1": ["a-head", "a-gpu1"], "rack_a2": ["a-gpu2"],
          "cluster_b": ["b-head1", "b-head2", "b-gpu1"], "rack_b1": ["b-head1", "b-head2", "b-gpu1"],
          "head": ["a-head", "b-head2", "b-head1"], "gpu_nodes": ["a-gpu1", "a-gpu2", "b-gpu1"],
          "dataset_store": ["store"]}
HOSTS = ["a-head", "a-gpu1", "a-gpu2", "b-head1", "b-head2", "b-gpu1"]


def test_each_cluster_is_scraped_by_its_first_head():
    plan, problems = scrape_servers(HOSTS, GROUPS, SETTINGS)
    assert plan == {"a-head": ["a-head", "a-gpu1", "a-gpu2"], "b-head2": ["b-head1", "b-head2", "b-gpu1"]}
    assert problems == {}


def test_servers_named_in_their_group_scrape_every_host_instead():
    groups = dict(GROUPS, gpu_monitoring_server=["store"])
    plan, problems = scrape_servers(HOSTS + ["store"], groups, SETTINGS)
    assert plan == {"store": HOSTS + ["store"]}
    assert problems == {}


def test_a_server_outside_the_play_is_not_one():
    plan, _problems = scrape_servers(HOSTS, dict(GROUPS, gpu_monitoring_server=["elsewhere"]), SETTINGS)
    assert sorted(plan) == ["a-head", "b-head2"]


def test_a_server_group_defined_without_hosts_is_a_problem_on_every_host():
    plan, problems = scrape_servers(HOSTS, dict(GROUPS, gpu_monitoring_server=[]), SETTINGS)
    assert plan == {} and sorted(problems) == sorted(HOSTS)
    assert problems["a-gpu1"] == (
        "a-gpu1: group gpu_monitoring_server (gpu_monitoring_server_group) has no hosts; put the monitoring servers "
        "in it, or remove the group so that each cluster's first head runs Prometheus")


@pytest.mark.parametrize("retention", ["15d", "8w", "1y", "36h", "90m", "1y2w3d4h5m6s7ms", "0d1h"])
def test_prometheus_durations_are_retentions(retention):
    assert retention_problem(retention) == ""


@pytest.mark.parametrize("retention", ["", "0", "0d", "15", "15 d", "2weeks", "1d1y", "-1d", "1.5d", "15D"])
def test_other_retentions_are_refused_naming_the_variable(retention):
    assert retention_problem(retention) == (
        "gpu_monitoring_retention=%r is not a Prometheus duration above zero; set it like 15d, 8w, 1y or 36h" % retention)


def test_a_cluster_without_a_head_names_each_of_its_hosts_and_the_fixes():
    groups = dict(GROUPS, head=["a-head"])
    plan, problems = scrape_servers(HOSTS, groups, SETTINGS)
    assert list(plan) == ["a-head"]
    assert sorted(problems) == ["b-gpu1", "b-head1", "b-head2"]
    assert problems["b-gpu1"] == (
        "b-gpu1: no Prometheus would scrape it: none of cluster_b's hosts (b-head1, b-head2, b-gpu1) is in group head, "
        "and group gpu_monitoring_server is empty; add a head to the cluster, put a server in group "
        "gpu_monitoring_server, or set gpu_monitoring_prometheus: false where another Prometheus scrapes these hosts")


def test_jobs_carry_cluster_rack_role_and_node_labels():
    plan, _problems = scrape_servers(HOSTS, GROUPS, SETTINGS)
    jobs = scrape_jobs("a-head", plan, GROUPS, dict(SETTINGS, addresses={"a-gpu2": "10.0.0.12"}))

    def target(address, node, rack, role):
        return {"targets": [address], "labels": {"node": node, "cluster": "cluster_a", "rack": rack, "role": role}}

    assert jobs == [{"job_name": "node", "scrape_interval": "15s", "static_configs": [
        target("a-head:9100", "a-head", "rack_a1", "head"), target("a-gpu1:9100", "a-gpu1", "rack_a1", "gpu_nodes"),
        target("10.0.0.12:9100", "a-gpu2", "rack_a2", "gpu_nodes")]}]


def test_a_dcgm_exporter_found_on_a_node_gets_its_own_job():
    plan, _problems = scrape_servers(HOSTS, GROUPS, SETTINGS)
    jobs = scrape_jobs("b-head2", plan, GROUPS, dict(SETTINGS, dcgm_targets={"b-gpu1": "b-gpu1:9400"}))
    assert [job["job_name"] for job in jobs] == ["node", "dcgm"]
    assert jobs[1]["static_configs"] == [
        {"targets": ["b-gpu1:9400"], "labels": {"node": "b-gpu1", "cluster": "cluster_b", "rack": "rack_b1",
                                                "role": "gpu_nodes"}}]


def test_node_exporter_is_scraped_over_https_with_the_password_file_and_the_ca_where_given():
    plan, _problems = scrape_servers(HOSTS, GROUPS, SETTINGS)
    auth = {"username": "prometheus", "password_file": "/etc/dlinfra-gpu-monitoring/web/scrape-password",
            "ca_file": "/etc/dlinfra-gpu-monitoring/web/ca.crt"}
    jobs = scrape_jobs("b-head2", plan, GROUPS, dict(SETTINGS, node_exporter_auth=auth,
                                                     dcgm_targets={"b-gpu1": "b-gpu1:9400"}))
    node, dcgm = jobs
    assert node["scheme"] == "https"
    assert node["basic_auth"] == {"username": "prometheus",
                                  "password_file": "/etc/dlinfra-gpu-monitoring/web/scrape-password"}
    assert node["tls_config"] == {"ca_file": "/etc/dlinfra-gpu-monitoring/web/ca.crt"}
    assert "scheme" not in dcgm and "basic_auth" not in dcgm  # dcgm-exporter is not ours to configure
    assert "scheme" not in scrape_jobs("b-head2", plan, GROUPS, dict(SETTINGS, node_exporter_auth=None))[0]


def test_a_host_in_no_cluster_rack_or_role_group_gets_empty_labels():
    jobs = scrape_jobs("store", {"store": ["store", "odd"]}, GROUPS, SETTINGS)
    assert jobs[0]["static_configs"][1]["labels"] == {"node": "odd", "cluster": "", "rack": "", "role": ""}


@pytest.mark.parametrize("url, expected", [
    ("http://alertmanager:9093", [{"scheme": "http", "static_configs": [{"targets": ["alertmanager:9093"]}]}]),
    ("https://ops.example.org:443/am/", [{"scheme": "https", "static_configs": [{"targets": ["ops.example.org:443"]}],
                                          "path_prefix": "/am"}]),
])
def test_alertmanager_urls(url, expected):
    assert alertmanagers(url) == expected


@pytest.mark.parametrize("url", ["alertmanager:9093", "ftp://x:1", "http://"])
def test_a_bad_alertmanager_url_is_refused(url):
    with pytest.raises(ValueError, match="is not an http.s.://host:port URL"):
        alertmanagers(url)


def test_the_config_has_the_interval_the_rules_and_alertmanager_only_where_set():
    plan, _problems = scrape_servers(HOSTS, GROUPS, SETTINGS)
    config = prometheus_config("a-head", plan, GROUPS, SETTINGS)
    assert list(config) == ["global", "rule_files", "scrape_configs"]
    assert config["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    assert config["rule_files"] == ["/etc/prometheus/dlinfra-gpu.rules.yml"]
    with_am = prometheus_config("a-head", plan, GROUPS, dict(SETTINGS, alertmanager_url="http://am:9093"))
    assert with_am["alerting"] == {"alertmanagers": [{"scheme": "http", "static_configs": [{"targets": ["am:9093"]}]}]}
