# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's monitoring.up: each node's exporter is scraped by a Prometheus of the run, and nvidia_smi_up is 1 where
the node's GPUs answer.

The data come from the Prometheus servers among the run's nodes (each cluster's first head, or the
gpu_monitoring_server hosts, where the gpu_monitoring role put them): every node asks 127.0.0.1 on
validate_prometheus_port, and where one answers its raw data hold the active targets, the nvidia_smi_up series and
max_over_time(up{job="node"}[validate_prometheus_window]): a target whose last scrape failed is down only where no
scrape of that window succeeded, so that one slow scrape on a busy node is not reported as an outage.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import check

NAME = "monitoring.up"
UNIT = "dlinfra-gpu-metrics"


def servers(nodes):
    """The nodes whose Prometheus answered, in name order."""
    return sorted(host for host, raw in nodes.items() if ((raw or {}).get("monitoring") or {}).get("answered"))


def refusing(nodes):
    """The nodes whose Prometheus refused validate's credentials (HTTP 401), in name order."""
    return sorted(host for host, raw in nodes.items() if ((raw or {}).get("monitoring") or {}).get("refused"))


def scraped(nodes):
    """node -> {server, health, error, smi_up, up_window} for every node exporter target a server of the run scrapes
    (smi_up and up_window: the samples' values, None where the server has none)."""
    found = {}
    for server in servers(nodes):
        monitoring = nodes[server]["monitoring"]
        for target in monitoring.get("targets") or []:
            labels = target.get("labels") or {}
            if labels.get("job") == "node" and labels.get("node"):
                found.setdefault(labels["node"], {"server": server, "health": target.get("health"),
                                                  "error": target.get("lastError") or "", "smi_up": None,
                                                  "up_window": None})
        for key in ("smi_up", "up_window"):
            for sample in monitoring.get(key) or []:
                node = (sample.get("metric") or {}).get("node")
                if node in found and found[node]["server"] == server:
                    found[node][key] = (sample.get("value") or [None, None])[1]
    return found


def monitoring_check(host, raw, found, answering, gpus_answer, port, window="1m", refused=()):
    """monitoring.up for one node. found: scraped(nodes); answering: servers(nodes); gpus_answer: the node's GPUs
    answered validate's own nvidia-smi (None where the GPU phase was not read); window: validate_prometheus_window;
    refused: refusing(nodes)."""
    if not answering and refused:
        return check(NAME, "fail", "Prometheus on %s refused validate's user and password (HTTP 401); set "
                                   "validate_prometheus_username and validate_prometheus_password to gpu_monitoring's "
                                   "web user and password (their defaults)" % ", ".join(refused),
                     "answers", "HTTP 401")
    if not answering:
        return check(NAME, "skip", "no Prometheus answered on port %s on any node of this run: gpu_monitoring is not "
                                   "deployed, or its server is not in this run" % port)
    entry = found.get(host)
    if entry is None:
        return check(NAME, "fail", "no Prometheus of this run (%s) scrapes %s's node exporter; run site.yml with the "
                                   "gpu_monitoring role so that its server's scrape jobs include the host"
                     % (", ".join(answering), host), "scraped", "not a target")
    where = "Prometheus on %s" % entry["server"]
    if entry["health"] != "up" and str(entry["up_window"]) == "1":
        # The series of a target whose last scrape failed are stale: nvidia_smi_up cannot be read until the next.
        return check(NAME, "pass", "scraped by %s, up within the last %s; its last scrape failed (%s: %s)"
                     % (where, window, entry["health"], entry["error"] or "no error given"), "up", "up within %s" % window)
    if entry["health"] != "up":
        return check(NAME, "fail", "%s cannot scrape %s's node exporter (%s: %s), and no scrape of the last %s "
                                   "succeeded; check `systemctl status prometheus-node-exporter` there and that its "
                                   "port is reachable from %s"
                     % (where, host, entry["health"], entry["error"] or "no error given", window, entry["server"]),
                     "up", entry["health"])
    if raw.get("gpu_node") and gpus_answer:
        if entry["smi_up"] is None:
            return check(NAME, "fail", "%s has no nvidia_smi_up from %s: the GPU metrics collector has not written it; "
                                       "see `systemctl status %s.timer` and `journalctl -u %s` there"
                         % (where, host, UNIT, UNIT), "nvidia_smi_up 1", "absent")
        if str(entry["smi_up"]) != "1":
            return check(NAME, "fail", "nvidia_smi_up is %s on %s while its GPUs answer validate's nvidia-smi: the "
                                       "collector's nvidia-smi fails or times out; see `journalctl -u %s` there"
                         % (entry["smi_up"], host, UNIT), "nvidia_smi_up 1", "nvidia_smi_up %s" % entry["smi_up"])
        return check(NAME, "pass", "scraped by %s, up; nvidia_smi_up 1" % where, "up, nvidia_smi_up 1",
                     "up, nvidia_smi_up 1")
    return check(NAME, "pass", "scraped by %s, up" % where, "up", "up")
