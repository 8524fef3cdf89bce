# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_monitoring role's preflight: its settings and the host's listening sockets, as one pure function."""

from __future__ import annotations

import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.sockets import listening
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.tls import certificate_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._fabric.ports import expected_rate

MIN_INTERVAL_S = 5
# What node exporter's and Prometheus' web configuration takes in basic_auth_users (exporter-toolkit: bcrypt only).
BCRYPT = re.compile(r"^\$2[aby]?\$\d{2}\$[./A-Za-z0-9]{53}$")
TLS_NAMES = {"cert": "gpu_monitoring_tls_certfile", "key": "gpu_monitoring_tls_keyfile", "ca": "gpu_monitoring_tls_cafile"}
HASH_HOW = "htpasswd -nbBC 10 \"\" 'PASSWORD' | tr -d ':\\n'"


def listeners(ss_lines, port):
    """[(address, [(process name, pid), ...], uid or None)] of the TCP sockets listening on port, from `ss -Hltnpe`.
    The process column needs ptrace rights over the listener (root without CAP_SYS_PTRACE, in a container, sees none);
    the uid that owns the socket is always there (ss leaves out 0)."""
    return [(socket["address"], [(name, str(pid)) for name, pid in socket["processes"]], socket["uid"] or None)
            for socket in listening(ss_lines) if socket["port"] == int(port)]


def _seconds(value):
    """A positive number of seconds (15, 2.5, '15' from the command line), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def web_problems(settings, host, tls_found=None):
    """'HOST: WHAT; fix: HOW' for the settings of who may read node exporter and Prometheus; [] when web_open.

    settings: web_open, tls_certfile, tls_keyfile, tls_cafile, web_username, web_password, web_password_hash.
    tls_found: what preflight read of the three files (plugin_utils/_common/tls.py), when all three are set.
    """
    if settings.get("web_open"):
        return []
    problems = []
    names = ("tls_certfile", "tls_keyfile", "tls_cafile", "web_username", "web_password", "web_password_hash")
    unset = ["gpu_monitoring_" + name for name in names if not str(settings.get(name) or "").strip()]
    if unset:
        problems.append("%s: %s not set, and node exporter and Prometheus answer only over TLS with a password; fix: "
                        "set them (the password from a vault, its hash from %s), or set gpu_monitoring_web_open: true "
                        "where nothing but the cluster reaches their ports" % (host, ", ".join(unset) + (
                            " is" if len(unset) == 1 else " are"), HASH_HOW))
    password, password_hash = str(settings.get("web_password") or ""), str(settings.get("web_password_hash") or "")
    if password and BCRYPT.match(password):
        problems.append("%s: gpu_monitoring_web_password is a bcrypt hash; fix: give the password itself there (Prometheus "
                        "scrapes with it) and its hash in gpu_monitoring_web_password_hash" % host)
    if password_hash and not BCRYPT.match(password_hash):
        problems.append("%s: gpu_monitoring_web_password_hash is not a bcrypt hash (node exporter and Prometheus take no "
                        "other)%s; fix: give the output of %s" % (
                            host, ", it looks like the password itself" if password_hash == password else "", HASH_HOW))
    if ":" in str(settings.get("web_username") or ""):
        problems.append("%s: gpu_monitoring_web_username %r has a colon, which basic auth cannot carry; fix: choose a "
                        "name without one" % (host, settings["web_username"]))
    paths = {"cert": settings.get("tls_certfile"), "key": settings.get("tls_keyfile"), "ca": settings.get("tls_cafile")}
    if all(paths.values()):
        problems.extend("%s: %s" % (host, problem)
                        for problem in certificate_problems(TLS_NAMES, paths, tls_found or {}))
    return problems


def preflight_problems(settings, host, ss_lines=None, ss_error=None, tls_found=None):
    """'HOST: WHAT; fix: HOW' for each problem with the role's settings on host; [] when there is none.

    settings: interval, nvidia_smi_command, nvidia_smi_timeout, textfile_directory, fabric_expected_rate_gbps,
    node_exporter_port, node_exporter_process_names (what the distribution's node exporter is called in ss' process
    column), node_exporter_uid (the uid its unit runs as, None before the package made the user: a listener ss cannot name
    that belongs to it is node exporter itself), supported (the platform has a vars file) and platform (for the
    message), and those of web_problems, with tls_found.
    """
    problems = web_problems(settings, host, tls_found)
    if not settings.get("supported", True):
        problems.append("%s: %s is not supported by gpu_monitoring yet (Debian and Ubuntu are); fix: run the role on "
                        "Debian or Ubuntu hosts, or leave this host out of its play" % (host, settings.get("platform")))
    interval, timeout = _seconds(settings.get("interval")), _seconds(settings.get("nvidia_smi_timeout"))
    if interval is None or interval < MIN_INTERVAL_S:
        problems.append("%s: gpu_monitoring_interval=%s is below %d s, the shortest interval the collector runs at "
                        "(each run starts nvidia-smi); fix: set it to %d or more (default 15)"
                        % (host, settings.get("interval"), MIN_INTERVAL_S, MIN_INTERVAL_S))
    if timeout is None:
        problems.append("%s: gpu_monitoring_nvidia_smi_timeout=%s is not a positive number of seconds; fix: set it "
                        "below gpu_monitoring_interval (default 10)" % (host, settings.get("nvidia_smi_timeout")))
    elif interval is not None and timeout >= interval:
        problems.append("%s: gpu_monitoring_nvidia_smi_timeout=%s is not below gpu_monitoring_interval=%s, so a hung "
                        "nvidia-smi would take every run; fix: set the timeout below the interval"
                        % (host, settings.get("nvidia_smi_timeout"), settings.get("interval")))
    try:
        expected_rate(settings.get("fabric_expected_rate_gbps"))
    except (TypeError, ValueError):
        problems.append("%s: gpu_monitoring_fabric_expected_rate_gbps=%r is not a rate in Gb/s; fix: give the rate "
                        "every RDMA port should run at as a positive number (400 for NDR, 200 for HDR), or leave it "
                        "empty" % (host, settings.get("fabric_expected_rate_gbps")))
    if not str(settings.get("nvidia_smi_command") or "").strip():
        problems.append("%s: gpu_monitoring_nvidia_smi_command is empty; fix: leave it at 'nvidia-smi -q -x' or give "
                        "a command that prints that report" % host)
    directory = str(settings.get("textfile_directory") or "")
    if not directory.startswith("/"):
        problems.append("%s: gpu_monitoring_textfile_directory=%r is not an absolute path; fix: give the directory "
                        "node exporter's --collector.textfile.directory reads" % (host, directory))
    port = settings.get("node_exporter_port")
    if ss_error:
        problems.append("%s: could not list the listening sockets to check port %s (%s); fix: install iproute2 (ss)"
                        % (host, port, ss_error))
    names = set(settings.get("node_exporter_process_names") or ())
    uid = settings.get("node_exporter_uid")
    for address, processes, owner_uid in listeners(ss_lines or [], port):
        strangers = [(name, pid) for name, pid in processes if name not in names]
        if strangers or not (processes or (uid is not None and owner_uid == int(uid))):
            owner = (", ".join("%s (pid %s)" % process for process in strangers)
                     or "a process ss cannot name" + ("" if owner_uid is None else " (uid %d)" % owner_uid))
            problems.append("%s: port %s (gpu_monitoring_node_exporter_port) is taken: %s listens on %s:%s; fix: stop "
                            "it or set gpu_monitoring_node_exporter_port to a free port" % (host, port, owner, address, port))
    return problems
