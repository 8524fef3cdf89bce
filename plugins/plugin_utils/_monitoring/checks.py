# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_monitoring role's preflight: its settings and the host's listening sockets, as one pure function."""

from __future__ import annotations

import re

MIN_INTERVAL_S = 5
# ss -Hltnpe: State Recv-Q Send-Q Local-Address:Port Peer-Address:Port Process, then uid:N ino:N ... The process
# column needs ptrace rights over the listener (root without CAP_SYS_PTRACE, in a container, sees none); the uid
# that owns the socket is always there.
_PROCESS = re.compile(r'\("([^"]*)",pid=(\d+)')
_UID = re.compile(r"\buid:(\d+)\b")


def listeners(ss_lines, port):
    """[(address, [(process name, pid), ...], uid or None)] of the TCP sockets listening on port, from `ss -Hltnpe`."""
    found = []
    for line in ss_lines:
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[3]:
            continue
        address, _sep, local_port = fields[3].rpartition(":")
        if local_port == str(port):
            uid = _UID.search(line)
            found.append((address, _PROCESS.findall(line), int(uid.group(1)) if uid else None))
    return found


def _seconds(value):
    """A positive number of seconds (15, 2.5, '15' from the command line), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def preflight_problems(settings, host, ss_lines=None, ss_error=None):
    """'HOST: WHAT; fix: HOW' for each problem with the role's settings on host; [] when there is none.

    settings: interval, nvidia_smi_command, nvidia_smi_timeout, textfile_directory, node_exporter_port,
    node_exporter_process_names (what the distribution's node exporter is called in ss' process column),
    node_exporter_uid (the uid its unit runs as, None before the package made the user: a listener ss cannot name
    that belongs to it is node exporter itself), supported (the platform has a vars file) and platform (for the
    message).
    """
    problems = []
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
