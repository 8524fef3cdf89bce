# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which hosts run Prometheus for the gpu_monitoring role, and the scrape jobs each one gets, from the inventory.

A host in the server group (``gpu_monitoring_server``) scrapes every monitored host. Without one, each cluster group
(``cluster_*``) is scraped by its first head (the first of its hosts in the head group). Every target carries the
labels the alerts and the dashboard group by: ``cluster`` and ``rack`` (its groups that match the patterns) and
``role`` (the first functional group it is in), with ``node``, its inventory name.
"""

from __future__ import annotations

import re


def _first_match(pattern, host, groups):
    return next((group for group in sorted(groups) if pattern.search(group) and host in groups[group]), "")


# Prometheus' durations (prometheus/common model.ParseDuration): units from years to milliseconds, largest first.
DURATION = re.compile(r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?")


def retention_problem(retention):
    """Why ``retention`` is no --storage.tsdb.retention.time Prometheus takes (a positive duration), or ''."""
    text = str(retention)
    if text and DURATION.fullmatch(text) and any(digit != "0" for digit in re.findall(r"[0-9]", text)):
        return ""
    return ("gpu_monitoring_retention=%r is not a Prometheus duration above zero; set it like 15d, 8w, 1y or 36h"
            % text)


def scrape_servers(hosts, groups, settings):
    """({server: [the hosts it scrapes, in ``hosts`` order]}, {host: problem} for the hosts of a cluster that nothing
    would scrape). A server group the inventory defines with no hosts is a problem on every host: the admin meant
    servers, and the heads would run Prometheus instead."""
    monitored = list(hosts)
    if settings["server_group"] in groups and not groups[settings["server_group"]]:
        return {}, {host: "%s: group %s (gpu_monitoring_server_group) has no hosts; put the monitoring servers in it, "
                          "or remove the group so that each cluster's first head runs Prometheus"
                          % (host, settings["server_group"]) for host in monitored}
    servers = [host for host in groups.get(settings["server_group"], []) if host in monitored]
    if servers:
        return {server: monitored for server in servers}, {}
    pattern, heads = re.compile(settings["cluster_group_pattern"]), groups.get(settings["head_group"], [])
    plan, problems = {}, {}
    for cluster in sorted(group for group in groups if pattern.search(group)):
        members = [host for host in monitored if host in groups[cluster]]
        if not members:
            continue
        head = next((host for host in heads if host in members), None)
        if head is None:
            for host in members:
                problems[host] = (
                    "%s: no Prometheus would scrape it: none of %s's hosts (%s) is in group %s, and group %s is empty; "
                    "add a head to the cluster, put a server in group %s, or set gpu_monitoring_prometheus: false "
                    "where another Prometheus scrapes these hosts"
                    % (host, cluster, ", ".join(members), settings["head_group"], settings["server_group"],
                       settings["server_group"]))
            continue
        plan.setdefault(head, []).extend(host for host in members if host not in plan.get(head, []))
    return plan, problems


def scrape_jobs(server, plan, groups, settings):
    """Prometheus scrape_configs for ``server``: node exporter on every host it scrapes, over HTTPS with basic auth where
    settings["node_exporter_auth"] gives username, password_file and ca_file, and dcgm-exporter where a host has one
    (settings["dcgm_targets"]: {host: "address:port"})."""
    cluster, rack = re.compile(settings["cluster_group_pattern"]), re.compile(settings["rack_group_pattern"])
    addresses, dcgm = settings.get("addresses") or {}, settings.get("dcgm_targets") or {}

    def labels(host):
        role = next((group for group in settings["role_groups"] if host in groups.get(group, [])), "")
        return {"node": host, "cluster": _first_match(cluster, host, groups), "rack": _first_match(rack, host, groups),
                "role": role}

    interval = "%ds" % int(settings["interval"])
    node = {"job_name": "node", "scrape_interval": interval}
    auth = settings.get("node_exporter_auth")
    if auth:
        node.update(scheme="https", basic_auth={"username": auth["username"], "password_file": auth["password_file"]},
                    tls_config={"ca_file": auth["ca_file"]})
    node["static_configs"] = [{"targets": ["%s:%d" % (addresses.get(host) or host, int(settings["node_exporter_port"]))],
                               "labels": labels(host)} for host in plan.get(server, [])]
    jobs = [node]
    dcgm_hosts = [host for host in plan.get(server, []) if dcgm.get(host)]
    if dcgm_hosts:
        jobs.append({"job_name": "dcgm", "scrape_interval": interval,
                     "static_configs": [{"targets": [dcgm[host]], "labels": labels(host)} for host in dcgm_hosts]})
    return jobs


def dcgm_targets_in(config):
    """{host: "address:port"} of the dcgm job in a prometheus.yml (as a mapping) that scrape_jobs wrote."""
    found = {}
    for job in (config or {}).get("scrape_configs") or []:
        if job.get("job_name") != "dcgm":
            continue
        for static in job.get("static_configs") or []:
            node, targets = (static.get("labels") or {}).get("node"), static.get("targets") or []
            if node and targets:
                found[node] = targets[0]
    return found


def alertmanagers(url):
    """Prometheus' alerting.alertmanagers entry for an Alertmanager URL (http[s]://host:port[/prefix])."""
    scheme, _sep, rest = url.partition("://")
    target, _sep, prefix = rest.partition("/")
    if scheme not in ("http", "https") or not target:
        raise ValueError("gpu_monitoring_alertmanager_url=%r is not an http(s)://host:port URL" % url)
    entry = {"scheme": scheme, "static_configs": [{"targets": [target]}]}
    if prefix.strip("/"):
        entry["path_prefix"] = "/" + prefix.strip("/")
    return [entry]


def prometheus_config(server, plan, groups, settings):
    """The whole prometheus.yml of ``server``: the interval, the rules file, Alertmanager where one is set, the jobs."""
    interval = "%ds" % int(settings["interval"])
    config = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
              "rule_files": [settings["rules_file"]]}
    if settings.get("alertmanager_url"):
        config["alerting"] = {"alertmanagers": alertmanagers(settings["alertmanager_url"])}
    config["scrape_configs"] = scrape_jobs(server, plan, groups, settings)
    return config
