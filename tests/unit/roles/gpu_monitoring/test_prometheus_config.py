# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prometheus.yml the gpu_monitoring role writes (filter gpu_monitoring_prometheus_config) passes Prometheus' own
`promtool check config`, with the role's rules file, for a lab-like inventory and with an Alertmanager."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.gpu_monitoring import (
    gpu_monitoring_prometheus_config, gpu_monitoring_scrape_plan)
from test_alert_rules import RULES  # promtool is the session fixture of tests/unit/conftest.py

GROUPS = {"all": ["head1", "gpu1", "gpu2"], "cluster_lab": ["head1", "gpu1", "gpu2"], "rack_r1": ["head1", "gpu1", "gpu2"],
          "head": ["head1"], "gpu_nodes": ["gpu1", "gpu2"]}
ADDRESSES = {"head1": "", "gpu1": "10.1.0.11", "gpu2": ""}
DCGM_TARGETS = {"head1": False, "gpu1": "", "gpu2": "gpu2:9400"}


def settings(rules, alertmanager_url=""):
    return {"server_group": "gpu_monitoring_server", "head_group": "head", "cluster_group_pattern": "^cluster_",
            "rack_group_pattern": "^rack_", "role_groups": ["head", "gpu_nodes"], "interval": "15",
            "node_exporter_port": "9100", "rules_file": str(rules), "alertmanager_url": alertmanager_url}


@pytest.mark.parametrize("alertmanager_url", ["", "https://alertmanager.example:9093/am"])
def test_the_written_configuration_passes_promtool(tmp_path, alertmanager_url, promtool):
    rules = tmp_path / "dlinfra-gpu.rules.yml"
    shutil.copy(RULES, rules)
    plan = gpu_monitoring_scrape_plan(["head1", "gpu1", "gpu2"], GROUPS, settings(rules, alertmanager_url))
    assert plan == {"servers": {"head1": ["head1", "gpu1", "gpu2"]}, "problems": {}}
    config = gpu_monitoring_prometheus_config("head1", plan, GROUPS, ADDRESSES, DCGM_TARGETS, settings(rules, alertmanager_url))
    assert [job["job_name"] for job in config["scrape_configs"]] == ["node", "dcgm"]
    assert config["scrape_configs"][0]["static_configs"][1]["targets"] == ["10.1.0.11:9100"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    checked = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rule files found" in checked.stdout + checked.stderr


def test_a_bad_retention_is_a_problem_on_the_server_only(tmp_path):
    plan = gpu_monitoring_scrape_plan(["head1", "gpu1", "gpu2"], GROUPS, dict(settings(tmp_path), retention="2weeks"))
    assert plan["problems"] == {"head1": (
        "head1: gpu_monitoring_retention='2weeks' is not a Prometheus duration above zero; set it like 15d, 8w, 1y or "
        "36h")}


def test_a_bad_alertmanager_url_is_a_problem_on_the_server_before_anything_changes(tmp_path):
    plan = gpu_monitoring_scrape_plan(["head1", "gpu1", "gpu2"], GROUPS, settings(tmp_path, "alertmanager:9093"))
    assert plan["problems"] == {"head1": (
        "head1: gpu_monitoring_alertmanager_url='alertmanager:9093' is not an http(s)://host:port URL; set it to "
        "Alertmanager's URL, for example http://alertmanager:9093, or empty")}
