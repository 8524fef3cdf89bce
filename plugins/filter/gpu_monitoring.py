# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_monitoring role's preflight and its Prometheus configuration: thin faces over plugin_utils'
gpu_monitoring_checks and gpu_monitoring_scrape."""

import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.checks import preflight_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.scrape import (
    alertmanagers, dcgm_targets_in, prometheus_config, retention_problem, scrape_servers)


def gpu_monitoring_problems(settings, host, ss_lines=None, ss_error=None):
    if not isinstance(settings, dict):
        raise AnsibleFilterError("gpu_monitoring_problems expects the role's settings as a mapping")
    return preflight_problems(settings, host, list(ss_lines or []), ss_error or None)


def _per_host(hostvars, hosts, name):
    """{host: value} of the variable ``name`` on each of ``hosts`` where it is set and not empty."""
    found = {}
    for host in hosts:
        value = hostvars[host].get(name) if host in hostvars else None
        if value:
            found[host] = str(value)
    return found


def gpu_monitoring_scrape_plan(hosts, groups, settings):
    """{"servers": {server: [hosts it scrapes]}, "problems": {host: problem}} (see scrape_servers)."""
    try:
        servers, problems = scrape_servers(list(hosts), dict(groups), settings)
    except (KeyError, TypeError) as error:
        raise AnsibleFilterError("gpu_monitoring_scrape_plan: %s" % error) from error
    found = [retention_problem(settings["retention"])] if "retention" in settings else []
    if settings.get("alertmanager_url"):
        try:
            alertmanagers(settings["alertmanager_url"])
        except ValueError as error:
            found.append("%s; set it to Alertmanager's URL, for example http://alertmanager:9093, or empty" % error)
    found = [problem for problem in found if problem]
    problems.update((server, "%s: %s" % (server, "; ".join(found))) for server in servers if found)
    return {"servers": servers, "problems": problems}


def _dcgm_targets(hostvars, hosts, in_place):
    """The dcgm-exporters the run found (__gpu_monitoring_dcgm_target); for a host the run left out, which has no such
    fact, the one the configuration in place (``in_place``, prometheus.yml's text) scrapes."""
    try:
        kept = dcgm_targets_in(yaml.safe_load(in_place or "") or {})
    except (yaml.YAMLError, AttributeError, TypeError):
        kept = {}  # not a file the role wrote: the run rewrites it whole
    left_out = [host for host in hosts if "__gpu_monitoring_dcgm_target" not in hostvars.get(host, {})]
    return dict({host: kept[host] for host in left_out if host in kept},
                **_per_host(hostvars, hosts, "__gpu_monitoring_dcgm_target"))


def gpu_monitoring_prometheus_config(server, plan, groups, hostvars, settings, in_place=""):
    """prometheus.yml for ``server`` as a mapping (see prometheus_config): the hosts' gpu_monitoring_scrape_address
    and the dcgm-exporters found (__gpu_monitoring_dcgm_target) come from hostvars, and from ``in_place`` for the
    hosts the run left out."""
    hosts = plan.get("servers", {}).get(server, [])
    settings = dict(settings, addresses=_per_host(hostvars, hosts, "gpu_monitoring_scrape_address"),
                    dcgm_targets=_dcgm_targets(hostvars, hosts, in_place))
    try:
        return prometheus_config(server, plan["servers"], dict(groups), settings)
    except (KeyError, TypeError, ValueError) as error:
        raise AnsibleFilterError("gpu_monitoring_prometheus_config: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"gpu_monitoring_problems": gpu_monitoring_problems, "gpu_monitoring_scrape_plan": gpu_monitoring_scrape_plan,
                "gpu_monitoring_prometheus_config": gpu_monitoring_prometheus_config}
