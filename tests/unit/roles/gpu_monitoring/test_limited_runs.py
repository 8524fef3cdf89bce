# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run limited to some hosts (--limit) writes the same prometheus.yml as a whole one: the scrape plan comes from the
inventory (the role's __gpu_monitoring_scrape_plan), and a host the run did not look at keeps its dcgm-exporter."""

import pathlib

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.gpu_monitoring import (
    gpu_monitoring_prometheus_config, gpu_monitoring_scrape_plan)
from role_vars import role_vars

pytestmark = pytest.mark.usefixtures("ansible_plugin_loader")  # lookups in the role's templates

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "gpu_monitoring"
GROUPS = {"all": ["head1", "gpu1", "gpu2", "bastion"], "ungrouped": ["bastion"],
          "gpu_cluster": ["head1", "gpu1", "gpu2"], "cluster_lab": ["head1", "gpu1", "gpu2"],
          "rack_r1": ["head1", "gpu1", "gpu2"], "head": ["head1"], "gpu_nodes": ["gpu1", "gpu2"]}


def plan(play_hosts, groups=None, **extra):
    """The role's plan: the hosts as its vars give them, to the filter (as __gpu_monitoring_scrape_plan hands them)."""
    variables = role_vars(ROLE, "Debian", "12", "Debian")
    variables.update(groups=groups or GROUPS, ansible_play_hosts_all=play_hosts, **extra)
    assert variables["__gpu_monitoring_scrape_plan"].split("|")[0].split() == ["{{", "__gpu_monitoring_scrape_hosts"]
    templar = Templar(loader=DataLoader(), variables=variables)
    hosts = templar.template(variables["__gpu_monitoring_scrape_hosts"])
    return gpu_monitoring_scrape_plan(hosts, groups or GROUPS, templar.template(variables["__gpu_monitoring_scrape_settings"]))


def test_a_limited_run_plans_every_host_of_the_inventory_in_name_order():
    whole = plan(["head1", "gpu1", "gpu2"])
    assert whole["servers"] == {"head1": ["gpu1", "gpu2", "head1"]}
    assert plan(["head1", "gpu1"]) == whole
    assert plan(["head1"]) == whole


def test_a_play_host_outside_the_pattern_is_scraped_too():
    groups = dict(GROUPS, gpu_monitoring_server=["bastion"])
    assert plan(["gpu1", "bastion"], groups)["servers"] == {"bastion": ["bastion", "gpu1", "gpu2", "head1"]}
    assert plan(["gpu1", "bastion"], groups, gpu_monitoring_scrape_pattern="head")["servers"] == {
        "bastion": ["bastion", "gpu1", "head1"]}


def test_the_order_does_not_follow_groups_all_which_a_group_by_moves():
    moved = dict(GROUPS, all=list(reversed(GROUPS["all"])))
    assert plan(["head1", "gpu1", "gpu2"], moved) == plan(["head1", "gpu1", "gpu2"])


SETTINGS = {"cluster_group_pattern": "^cluster_", "rack_group_pattern": "^rack_", "role_groups": ["head", "gpu_nodes"],
            "interval": "15", "node_exporter_port": "9100", "rules_file": "/etc/prometheus/dlinfra-gpu.rules.yml",
            "alertmanager_url": ""}
PLAN = {"servers": {"head1": ["head1", "gpu1", "gpu2"]}, "problems": {}}


def dcgm(config):
    jobs = [job for job in config["scrape_configs"] if job["job_name"] == "dcgm"]
    return {static["labels"]["node"]: static["targets"][0] for job in jobs for static in job["static_configs"]}


def test_a_host_the_run_did_not_look_at_keeps_its_dcgm_exporter():
    before = gpu_monitoring_prometheus_config("head1", PLAN, GROUPS, {}, {
        "head1": "", "gpu1": "gpu1:9400", "gpu2": "gpu2:9400"}, SETTINGS)
    in_place = yaml.safe_dump(before, sort_keys=False)
    # --limit head1,gpu2: gpu1 has no fact; gpu2 stopped its exporter
    after = gpu_monitoring_prometheus_config("head1", PLAN, GROUPS, {}, {"head1": "", "gpu1": False, "gpu2": ""},
                                             SETTINGS, in_place)
    assert dcgm(before) == {"gpu1": "gpu1:9400", "gpu2": "gpu2:9400"}
    assert dcgm(after) == {"gpu1": "gpu1:9400"}
    assert [static["labels"]["node"] for static in after["scrape_configs"][0]["static_configs"]] == PLAN["servers"]["head1"]


def test_a_configuration_in_place_the_role_did_not_write_is_replaced_whole():
    for in_place in ("", "not: [yaml", "just text", "scrape_configs: 3"):
        config = gpu_monitoring_prometheus_config("head1", PLAN, GROUPS, {}, {"gpu1": False}, SETTINGS, in_place)
        assert dcgm(config) == {}
