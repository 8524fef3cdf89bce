# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The train role's decisions: from each node's hand-off (world.json) of a dataset, the ranks each node starts and their
environment, or every reason not to start, each naming the host, the dataset and the fix; then each rank's figures
and why a node's part of the job failed.

Ranks get the environment torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT), so a script written for torchrun runs unchanged, plus the hand-off's variables a Kubernetes
job's ranks get too (module_utils/k8s_training_jobs.handoff_env) and the job's directories.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_training_jobs import handoff_env

JOB_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


def unit_name(job, rank):
    """The systemd unit of a global rank of a job."""
    return "dlinfra-train-%s-rank-%04d.service" % (job, rank)


def worlds_problems(dataset, worlds, play_hosts):
    """Problems with the hand-offs of ``dataset`` on ``play_hosts`` (``worlds``: host -> its world.json, None where
    the host holds no hand-off). A world is the nodes that hold one plan digest; each must be whole in the play."""
    problems = []
    held = {host: world for host, world in worlds.items() if world}
    if not held:
        return ["dataset %s: no host of the play (%s) holds its hand-off (world.json); fix: stage it first "
                "(site.yml --tags shard_staging) and run train.yml on the dataset's nodes"
                % (dataset, ", ".join(sorted(play_hosts)) or "none")]
    for digest, hosts in sorted(by_digest(held).items()):
        world = held[hosts[0]]
        expected = set(range(world["nodes"]))
        present = {held[host]["node_rank"]: host for host in hosts}
        missing = sorted(expected - set(present))
        if missing or len(present) != len(hosts):
            problems.append(
                "dataset %s: hosts %s hold plan %s of %d nodes, but the play lacks node rank(s) %s; fix: run train.yml "
                "on every node of the dataset's cluster (no --limit that leaves one out); a node whose plan differs "
                "from its cluster's needs shard_staging re-run on the whole cluster"
                % (dataset, ", ".join(sorted(hosts)), digest[:19], world["nodes"],
                   ", ".join(str(rank) for rank in missing) or "(duplicated)"))
        elif sum(len(held[host]["ranks"]) for host in hosts) != world["world_size"]:
            problems.append("dataset %s: the rank lists of %s add up to %d, the plan's world has %d; fix: re-run "
                            "shard_staging on the dataset's cluster"
                            % (dataset, ", ".join(sorted(hosts)), sum(len(held[h]["ranks"]) for h in hosts),
                               world["world_size"]))
    return problems


def by_digest(held):
    groups = {}
    for host in sorted(held):
        groups.setdefault(held[host]["plan_digest"], []).append(host)
    return groups


def host_problems(dataset, host, world, found, settings):
    """Problems of one host that holds the hand-off: its ranks against train_nproc_per_node and its GPUs, a staging run
    still writing the dataset, a job of the same name still running."""
    problems = []
    ranks = len(world["ranks"])
    nproc = settings.get("nproc_per_node") or 0
    if nproc and nproc != ranks:
        problems.append("%s, dataset %s: train_nproc_per_node is %d, but its hand-off has %d rank lists; fix: leave "
                        "train_nproc_per_node at 0 (the hand-off's), or re-stage with shard_staging_ranks_per_node=%d"
                        % (host, dataset, nproc, ranks, nproc))
    gpus = found.get("gpus")
    if settings.get("require_gpus") and gpus is not None and ranks > gpus:
        problems.append("%s, dataset %s: %d ranks but %d GPU(s); fix: re-stage with shard_staging_ranks_per_node=%d, "
                        "or set train_require_gpus=false to run ranks on the CPU (gloo)"
                        % (host, dataset, ranks, gpus, gpus))
    if found.get("staging"):
        problems.append("%s, dataset %s: a shard_staging run is still writing %s (its lock is held); fix: wait for it "
                        "to finish, then start the job" % (host, dataset, settings["dest"]))
    running = found.get("running") or []
    if running:
        problems.append("%s: job %s is still running (%s); fix: wait for it, or stop it with ansible-playbook "
                        "dlinfra.gpu_cluster.train -e train_dataset=%s -e train_job=%s -e train_stop=true"
                        % (host, settings["job"], ", ".join(running), dataset, settings["job"]))
    return problems


def settings_problems(settings):
    problems = []
    if not JOB_NAME.match(settings["job"] or ""):
        problems.append("train_job=%r is not a job name (lower-case letters, digits, '.', '_', '-'; at most 63); fix: "
                        "e.g. train_job=yt8m-resnet" % (settings["job"],))
    command = settings.get("command") or []
    if command and not str(command[0]).strip():
        problems.append("train_command starts with an empty word; fix: give the program first, e.g. "
                        "train_command=['/opt/anaconda3/envs/train/bin/python', 'train.py']")
    return problems


def rank_units(host, world, settings, address):
    """The units a host starts: one per local rank, with its name, its command and its environment."""
    job_dir = os.path.join(settings["job_root"], settings["job"])
    local_world = len(world["ranks"])
    units = []
    for entry in world["ranks"]:
        env = dict(handoff_env(settings["dest"], world))
        env.update({
            "RANK": entry["global_rank"], "LOCAL_RANK": entry["local_rank"], "WORLD_SIZE": world["world_size"],
            "LOCAL_WORLD_SIZE": local_world, "GROUP_RANK": world["node_rank"], "NODE_RANK": world["node_rank"],
            "MASTER_ADDR": address, "MASTER_PORT": settings["master_port"],
            "DLINFRA_JOB_DIR": job_dir,
            "DLINFRA_CHECKPOINT_DIR": settings.get("checkpoint_dir") or os.path.join(job_dir, "checkpoints"),
        })
        env.update(settings.get("environment") or {})
        unit = unit_name(settings["job"], entry["global_rank"])
        env = {key: str(value) for key, value in sorted(env.items())}
        units.append({"unit": unit, "rank": entry["global_rank"], "local_rank": entry["local_rank"], "node": host,
                      "env": env,
                      # RemainAfterExit: a rank that ended well stays listed (active, exited) until the next run.
                      "systemd_run": ["systemd-run", "--unit", unit, "--property", "RemainAfterExit=yes",
                                      "--working-directory", job_dir,
                                      "--description", "dlinfra train %s rank %d" % (settings["job"], entry["global_rank"])]
                      + ["--setenv=%s=%s" % item for item in env.items()]})
    return units


def probe_found(lines):
    """What the role's probe printed on a node: "staging" (a staging run holds the dataset's lock), "gpus N", and
    "running UNIT" per unit of the job still running."""
    found = {"staging": False, "gpus": None, "running": []}
    for line in lines or []:
        word, _sep, rest = line.strip().partition(" ")
        if word == "staging":
            found["staging"] = True
        elif word == "gpus" and rest.isdigit():
            found["gpus"] = int(rest)
        elif word == "running" and rest:
            found["running"].append(rest)
    return found


def launch(dataset, nodes, settings):
    """{"problems": [...], "units": {host: [...]}}. ``nodes``: host -> {"world": its world.json or None, "probe": the
    probe's lines, "address": where its peers reach it}; ``settings``: the role's (job, job_root, dest, checkpoint_dir,
    command, nproc_per_node, require_gpus, master_addr, master_port, environment). Nothing is started unless
    "problems" is empty."""
    worlds = {host: node.get("world") for host, node in nodes.items()}
    problems = settings_problems(settings)
    problems += worlds_problems(dataset, worlds, list(nodes))
    for host in sorted(host for host, world in worlds.items() if world):
        problems += host_problems(dataset, host, worlds[host], probe_found(nodes[host].get("probe")), settings)
    if problems:
        return {"problems": problems, "units": {}}
    units = {}
    for host, world in sorted(worlds.items()):
        if world:
            address = settings.get("master_addr") or nodes[world["rendezvous"]]["address"]
            units[host] = rank_units(host, world, settings, address)
    return {"problems": [], "units": units}


def rank_line(progress):
    """One line of a rank's figures from its progress file."""
    line = "rank %s on %s: %s" % (progress.get("rank"), progress.get("node"), progress.get("state"))
    if progress.get("steps"):
        line += ", step %s of %s an epoch" % (progress.get("step", 0), progress["steps"])
    if progress.get("resumed_at"):
        line += ", resumed at step %s" % progress["resumed_at"]
    if progress.get("samples_per_s") is not None:
        line += ", %s samples/s" % progress["samples_per_s"]
    if progress.get("step_time_s") is not None:
        line += ", %s s a step" % progress["step_time_s"]
    if progress.get("error"):
        line += ": " + progress["error"]
    return line


def outcome(status, timeout):
    """Why a node's part of the job failed ("" when it did not), from the wait's last status (train_status.py's)."""
    if status.get("rc", 0) != 0:
        return "its status could not be read: %s" % (status.get("stderr") or status.get("msg") or "")
    state = json.loads(status.get("stdout") or "{}")
    if state.get("failed"):
        return "rank unit(s) failed: %s" % ", ".join(state["failed"])
    if state.get("running"):
        return "still running after train_timeout=%s s, now stopped" % timeout
    unfinished = [rank_line(progress) for progress in state.get("progress", {}).values() if progress.get("state") != "done"]
    if unfinished:
        return "rank(s) ended without finishing: %s" % "; ".join(unfinished)
    return ""
