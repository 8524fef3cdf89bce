# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_monitoring role's preflight and its Prometheus configuration: thin faces over plugin_utils'
gpu_monitoring_checks and gpu_monitoring_scrape."""

import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring import listen
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.checks import preflight_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.scrape import (
    alertmanagers, dcgm_targets_in, prometheus_config, retention_problem, scrape_servers)


def gpu_monitoring_problems(settings, host, ss_lines=None, ss_error=None, tls_found=None):
    if not isinstance(settings, dict):
        raise AnsibleFilterError("gpu_monitoring_problems expects the role's settings as a mapping")
    return preflight_problems(settings, host, list(ss_lines or []), ss_error or None, dict(tls_found or {}))


def gpu_monitoring_listen(setting, host, port, ip_addr, ip_route):
    """{"address", "problem" ('HOST: ...', '' for none), "flags"}: where node exporter listens (see
    plugin_utils/_monitoring/listen)."""
    try:
        address, problem = listen.listen_address(setting, listen.host_addresses(ip_addr), listen.route_source(ip_route))
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise AnsibleFilterError("gpu_monitoring_listen: ip's output is not what it should be: %s" % error) from error
    return {"address": address, "problem": "%s: %s" % (host, problem) if problem else "",
            "flags": listen.listen_flags(address, port) if address else ""}


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


def _dcgm_targets(found, in_place):
    """The dcgm-exporters the run found (``found``: {host: target, '' for none}); for a host the run did not look at
    (false there), the one the configuration in place (``in_place``, prometheus.yml's text) scrapes."""
    try:
        kept = dcgm_targets_in(yaml.safe_load(in_place or "") or {})
    except (yaml.YAMLError, AttributeError, TypeError):
        kept = {}  # not a file the role wrote: the run rewrites it whole
    left_out = [host for host, target in found.items() if target is False or target is None]
    return dict({host: kept[host] for host in left_out if host in kept},
                **{host: str(target) for host, target in found.items() if target})


def gpu_monitoring_prometheus_config(server, plan, groups, addresses, dcgm_targets, settings, in_place=""):
    """prometheus.yml for ``server`` as a mapping (see prometheus_config). ``addresses``: {host: the address to scrape
    it at, '' for its name}; ``dcgm_targets``: {host: its dcgm-exporter, '' for none, false where the run did not look,
    which keeps the one ``in_place`` (prometheus.yml's text) has}."""
    hosts = plan.get("servers", {}).get(server, [])
    settings = dict(settings, addresses={host: str(address) for host, address in (addresses or {}).items()
                                         if host in hosts and address},
                    dcgm_targets=_dcgm_targets({host: (dcgm_targets or {}).get(host, False) for host in hosts}, in_place))
    try:
        return prometheus_config(server, plan["servers"], dict(groups), settings)
    except (KeyError, TypeError, ValueError) as error:
        raise AnsibleFilterError("gpu_monitoring_prometheus_config: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"gpu_monitoring_problems": gpu_monitoring_problems, "gpu_monitoring_scrape_plan": gpu_monitoring_scrape_plan,
                "gpu_monitoring_prometheus_config": gpu_monitoring_prometheus_config,
                "gpu_monitoring_listen": gpu_monitoring_listen}
