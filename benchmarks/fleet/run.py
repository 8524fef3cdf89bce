"""What a converged node costs the controller in a no-op site.yml, and what that means for 1,000 nodes (issue 36).

Runs site.yml on the simulated lab of `make demo` (already up; the first run converges it and is not counted), then,
alternating for --rounds rounds, on the whole lab (the head and two GPU nodes) and on the head and one GPU node
(--limit), each size twice: as a user re-runs it (the roles' records let a converged role skip as one include,
docs/re-runs.md) and with -e gpu_cluster_full_run=true (every role in full, as before the records: what the records
save). For each run: wall seconds, the controller's CPU seconds (ansible-playbook and everything it ran: its forks
and the docker CLI of the lab's connection, as ssh would be on a real cluster) and, from PLAY RECAP, the tasks each host
ran (ok + failed + skipped; changed must be 0). The difference between the two sizes is the cost of one more GPU node.

    .venv/bin/python benchmarks/fleet/run.py [--rounds 3] [--json results/fleet.json]
"""
import argparse
import json
import math
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventories" / "sim"
sys.path.insert(0, str(ROOT / "tests" / "harness" / "lab"))
import play_recap  # noqa: E402  (tests/harness/lab/play_recap.py: the PLAY RECAP reader the lab stages share)
TARGETS = {"cpu_per_gpu_node_s": 3.0, "tasks_per_gpu_node": 40, "wall_3_nodes_s": 30.0, "fleet_minutes": 15.0}


def recap(output):
    """{host: {"tasks": ok + failed + skipped, "changed", "unreachable", "failed"}} from ansible-playbook's PLAY RECAP."""
    return {host: {"tasks": counts["ok"] + counts["failed"] + counts["skipped"], "changed": counts["changed"],
                   "unreachable": counts["unreachable"], "failed": counts["failed"]}
            for host, counts in play_recap.recap(output).items()}


TASK_HEADER = re.compile(r"^TASK \[(?:(?P<role>[\w.]+) : )?.*\] \**$")
HOST_RESULT = re.compile(r"^(?:ok|changed|skipping|fatal|included|failed): \[(?P<host>[^\]]+)\]")


def role_tasks(output, host):
    """{role: tasks} that ``host`` ran, from the default callback's output (a task counts once, loops too); tasks outside
    roles count under 'play'."""
    counts, role, seen = {}, None, False
    for line in output.splitlines():
        header = TASK_HEADER.match(line)
        if header:
            role, seen = (header.group("role") or "play").split(".")[-1], False
            continue
        result = HOST_RESULT.match(line)
        if role and result and result.group("host") == host and not seen:
            counts[role] = counts.get(role, 0) + 1
            seen = True
    return counts


MODES = (("records", []), ("full run", ["-e", "gpu_cluster_full_run=true"]))


def run_site(limit=None, skip_staging=False, extra=()):
    """One site.yml run: wall and controller CPU seconds, the recap, the return code."""
    command = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "site.yml", "-i", str(INVENTORY)] + list(extra)
    if limit:
        command += ["--limit", ",".join(limit)]
    if skip_staging:
        command += ["--skip-tags", "shard_staging"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1", PATH="%s:%s" % (ROOT / ".venv" / "bin", os.environ["PATH"])))
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "hosts": recap(done.stdout), "rc": done.returncode,
            "gpu_node_roles": role_tasks(done.stdout, "sim-gpu1"),
            "tail": done.stdout[-3000:] + done.stderr[-2000:]}


def extrapolate(small, large, full=None, nodes=1000, cores=16, forks=20):
    """The 1,000-node estimates from the medians of the two sizes without staging (see the assumptions printed with
    them), plus each GPU node's share of the staging play from the full run of the large size."""
    staging_share = (full["cpu_s"] - large["cpu_s"]) / 2 if full else 0.0
    per_node_cpu = large["cpu_s"] - small["cpu_s"] + staging_share
    fixed_cpu = max(small["cpu_s"] - (large["cpu_s"] - small["cpu_s"]), 0.0)  # the head and the run's own start-up
    tasks = (full or large)["gpu_tasks"]
    large = full or large
    # Linear strategy: every task waits for its slowest host, in ceil(hosts / forks) batches; a batch costs what one
    # task cost the lab, whose hosts all fit in one batch.
    per_task_s = large["wall_s"] / max(large["max_tasks"], 1)
    return {"cpu_per_gpu_node_s": round(per_node_cpu, 2),
            "fleet_cpu_h": round((fixed_cpu + nodes * per_node_cpu) / 3600, 2),
            "fleet_minutes_cpu_bound": round((fixed_cpu + nodes * per_node_cpu) / cores / 60, 1),
            "fleet_minutes_linear": round(tasks * math.ceil(nodes / forks) * per_task_s / 60, 1),
            "per_task_batch_s": round(per_task_s, 2), "nodes": nodes, "cores": cores, "forks": forks}


def summarise(runs):
    """Medians of the runs of one size, with the GPU nodes' and the busiest host's task counts."""
    gpu = [count["tasks"] for run in runs for host, count in run["hosts"].items() if host.startswith("sim-gpu")]
    return {"wall_s": statistics.median(run["wall_s"] for run in runs), "cpu_s": statistics.median(run["cpu_s"] for run in runs),
            "gpu_tasks": max(gpu) if gpu else 0, "max_tasks": max(max(c["tasks"] for c in run["hosts"].values()) for run in runs),
            "changed": sum(c["changed"] for run in runs for c in run["hosts"].values())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    options = parser.parse_args(argv)
    hosts = subprocess.run(["docker", "ps", "--filter", "label=org.dlinfra.demo=1", "--format", "{{.Names}}"],
                           capture_output=True, text=True, check=False).stdout.split()
    if not {"sim-head", "sim-gpu1", "sim-gpu2"} <= set(hosts):
        print("fleet: the simulated lab is not up (docker ps shows %s); run make demo first" % (hosts or "none"), file=sys.stderr)
        return 2
    print("fleet: converging the lab first (not counted)", flush=True)
    first = run_site()
    if first["rc"] != 0:
        print("fleet: site.yml failed:\n" + first["tail"], file=sys.stderr)
        return 2
    # --limit cannot leave out a stage target (shard_staging refuses, rightly): the two sizes compare without the
    # staging play, and the full run of the whole lab adds each GPU node's share of it.
    sizes = (("3 nodes", None, False), ("3 nodes, no staging", None, True), ("2 nodes, no staging", ["sim-head", "sim-gpu1"], True))
    runs = {(mode, sizing[0]): [] for mode, dummy in MODES for sizing in sizes}
    for round_number in range(1, options.rounds + 1):
        for size, limit, skip_staging in sizes:
            for mode, extra in MODES:
                run = run_site(limit, skip_staging, extra)
                if run["rc"] != 0:
                    print("fleet: site.yml (%s, %s) failed:\n%s" % (size, mode, run["tail"]), file=sys.stderr)
                    return 2
                runs[(mode, size)].append(run)
                print("fleet: round %d, %s, %s: %.1f s wall, %.1f s CPU, tasks %s" % (
                    round_number, size, mode, run["wall_s"], run["cpu_s"],
                    ", ".join("%s %d" % (host, count["tasks"]) for host, count in sorted(run["hosts"].items()))), flush=True)
    estimates = {}
    print("\n| mode | lab | wall s | controller CPU s | tasks per GPU node | changed |\n|---|---|---|---|---|---|")
    for mode, dummy in MODES:
        full, large, small = (summarise(runs[(mode, sizing[0])]) for sizing in sizes)
        estimates[mode] = dict(extrapolate(small, large, full), gpu_tasks=full["gpu_tasks"])
        for size, row in zip([sizing[0] for sizing in sizes], (full, large, small)):
            print("| %s | %s | %.1f | %.1f | %d | %d |"
                  % (mode, size, row["wall_s"], row["cpu_s"], row["gpu_tasks"], row["changed"]))
    for mode, dummy in MODES:
        estimate = estimates[mode]
        roles = runs[(mode, "3 nodes")][-1]["gpu_node_roles"]
        print("\n%s: tasks a converged GPU node (sim-gpu1) ran, by role: %s" % (mode, ", ".join(
            "%s %d" % (role, count) for role, count in sorted(roles.items(), key=lambda item: -item[1]))))
        print("%s: one more converged GPU node: %.2f s of controller CPU (target <= %.0f); %d tasks (target <= %d)"
              % (mode, estimate["cpu_per_gpu_node_s"], TARGETS["cpu_per_gpu_node_s"], estimate["gpu_tasks"],
                 TARGETS["tasks_per_gpu_node"]))
        print("%s: 1,000 converged GPU nodes: %.1f CPU-hours; >= %.0f min on %d cores if CPU were the only limit; ~%.0f min "
              "with the linear strategy and forks=%d (%d tasks x %d batches x %.2f s per task and batch, as measured on "
              "the lab); target <= %.0f min"
              % (mode, estimate["fleet_cpu_h"], estimate["fleet_minutes_cpu_bound"], estimate["cores"],
                 estimate["fleet_minutes_linear"], estimate["forks"], estimate["gpu_tasks"],
                 math.ceil(estimate["nodes"] / estimate["forks"]), estimate["per_task_batch_s"], TARGETS["fleet_minutes"]))
    before, recorded = summarise(runs[("full run", "3 nodes")]), summarise(runs[("records", "3 nodes")])
    print("\nfull run / records, 3 nodes: wall %.2fx, controller CPU %.2fx, tasks per GPU node %.2fx; per GPU node CPU %.2fx"
          % (before["wall_s"] / max(recorded["wall_s"], 0.1), before["cpu_s"] / max(recorded["cpu_s"], 0.1),
             before["gpu_tasks"] / max(recorded["gpu_tasks"], 1),
             estimates["full run"]["cpu_per_gpu_node_s"] / max(estimates["records"]["cpu_per_gpu_node_s"], 0.01)))
    print("assumes: the controller's CPU per node is constant (no per-host growth in inventory or fact handling), a batch "
          "of 20 hosts takes as long per task as the lab's 3, and one head per cluster is not counted")
    if options.json:
        pathlib.Path(options.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(options.json).write_text(json.dumps(
            {"runs": {"%s, %s" % key: rows for key, rows in runs.items()},
             "summary": {"%s, %s" % key: summarise(rows) for key, rows in runs.items()},
             "estimates": estimates, "targets": TARGETS}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
