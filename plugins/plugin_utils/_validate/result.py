# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every validate check is made of: the check record, and the version comparisons several checks share."""

import re

_VERSION_IN_NAME = re.compile(r"\.so\.(\d+(?:\.\d+)+)$")


def check(name, status, message, expected=None, measured=None):
    return {"check": name, "status": status, "expected": None if expected is None else str(expected),
            "measured": None if measured is None else str(measured), "message": message}


def ran(result):
    """A registered command result that ran (not skipped, not absent)."""
    return isinstance(result, dict) and result and not result.get("skipped")


def versions_in_names(paths):
    return sorted({m.group(1) for m in (_VERSION_IN_NAME.search(p) for p in paths) if m})


def version_matches(expected, measured):
    """'550' matches '550.163.01'; '2.22.3' matches '2.22.3'."""
    return measured is not None and (measured == expected or measured.startswith(expected + "."))


def consistency(name, what, host, measured, versions):
    """versions: host -> version over the cluster's GPU nodes."""
    known = {h: v for h, v in versions.items() if v}
    if measured is None:
        return check(name, "skip", "no %s version on this node" % what)
    others = sorted("%s (%s)" % (h, v) for h, v in known.items() if v != measured)
    if others:
        return check(name, "fail", "%s %s here differs within the cluster: %s; install one version on every node"
                     % (what, measured, ", ".join(others)), "the same on every node", measured)
    return check(name, "pass", "%s %s on all %d node(s) of the cluster that have one" % (what, measured, len(known)),
                 measured, measured)


def gpu_reason(raw):
    """Why GPU exercises cannot run here, or None when the GPUs answer."""
    gpu = raw.get("gpu") or {}
    if gpu.get("driver_state") == "ok" and gpu.get("gpu_count"):
        return None
    if gpu.get("driver_state") == "no_gpu" or not gpu.get("gpu_count"):
        return "no NVIDIA GPU on this node"
    return "the driver does not answer (%s)" % gpu.get("driver_state")
