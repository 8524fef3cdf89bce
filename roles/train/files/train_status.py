# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A training job's state on this node, as JSON: each rank unit's systemd state and each rank's progress file.

    train_status.py [--samples] JOB JOB_DIR

"running" lists the units still running, "failed" those that failed; "progress" is each rank's progress file
(JOB_DIR/progress/rank-NNNN.json) as the rank last wrote it. With --samples, "samples" holds what each rank read
(JOB_DIR/samples/rank-NNNN.epoch-E.txt: one SHARD/KEY a line) by file name.
"""

import json
import os
import subprocess
import sys


def units(job):
    listed = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager",
                             "dlinfra-train-%s-rank-*.service" % job],
                            check=True, capture_output=True, text=True).stdout
    found = {}
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            found[fields[0]] = {"load": fields[1], "active": fields[2], "sub": fields[3]}
    for name, state in found.items():
        shown = subprocess.run(["systemctl", "show", "-p", "Result,ExecMainStatus,ExecMainPID", name],
                               check=True, capture_output=True, text=True).stdout
        for line in shown.splitlines():
            key, _sep, value = line.partition("=")
            state[key] = value
    return found


def progress(job_dir):
    directory = os.path.join(job_dir, "progress")
    ranks = {}
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if name.startswith("rank-") and name.endswith(".json"):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as handle:
                    ranks[name[5:-5]] = json.load(handle)
            except (OSError, ValueError):
                continue  # being replaced: the next look reads it
    return ranks


def samples(job_dir):
    directory = os.path.join(job_dir, "samples")
    read = {}
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            read[name] = handle.read().split()
    return read


def main(argv):
    with_samples = "--samples" in argv[1:]
    args = [arg for arg in argv[1:] if arg != "--samples"]
    if len(args) != 2:
        sys.exit(__doc__)
    found = units(args[0])
    state = {
        "units": found,
        "running": sorted(name for name, state in found.items() if state["sub"] in ("running", "start", "start-pre")),
        "failed": sorted(name for name, state in found.items() if state["active"] == "failed"),
        "progress": progress(args[1]),
    }
    if with_samples:
        state["samples"] = samples(args[1])
    print(json.dumps(state, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv)
