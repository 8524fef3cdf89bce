# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Measure the shard_staging planner: time, balance and churn.

    .venv/bin/python benchmarks/staging/bench_plan.py            # full run: 100,000 shards on 1,000 nodes, 2 replicas
    .venv/bin/python benchmarks/staging/bench_plan.py --quick    # 2,000 shards on 50 nodes, small layouts (make test)

``run(quick)`` returns the same figures as a dict for a larger benchmark script.

Two figures have the 5 s target: ``plan_1000_nodes_2_replicas_pure`` is ``make_plan`` alone, ``plan_task_seconds`` the
role's whole plan task once the shards are known (plan, plan file, every node's list and peer configuration, each
fsynced). Balance: max / average bytes per node of 8 ranks for 8, 64 and 1,000 nodes, equal and 0.5x-2x shard sizes,
1 and 2 copies (target <= 1.02, or every node within one shard of its share). Churn: copies moved when one node joins
100 (over the ideal 1/101) or leaves (over its own copies), target <= 2; a re-run moves nothing. Shares: equal GPUs on
7 / 15 / 30 / 60 TB disks, and 8- and 4-GPU nodes per rank, largest over smallest (target <= 1.02).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TARGET_SECONDS = 5.0
SOURCE = "http://store/yt8m/chunks-{000000..099999}.tar"
QUICK_SOURCE = "http://store/yt8m/chunks-{000000..001999}.tar"
SHARD_BYTES = 1_000_000_000


def _planner():
    collections = Path(__file__).resolve().parents[2] / "collections"
    if str(collections) not in sys.path:
        sys.path.insert(0, str(collections))
    from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan import plan as shard_plan  # pylint: disable=import-outside-toplevel

    return shard_plan


def _placement():
    _planner()
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan import placement as shard_placement

    return shard_placement


def _sources():
    _planner()
    from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan import sources as shard_sources  # pylint: disable=import-outside-toplevel

    return shard_sources


def _action():
    """The shard_plan action's planner (imports ansible, as the role's controller does)."""
    _planner()
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan import cluster_plans

    return cluster_plans


def _nodes(count, terabytes=(30, 31, 32)):
    """Node capacity figures: disks of slightly different sizes, as in a real rack."""
    return {f"gpu{number:04d}": {"free_bytes": terabytes[number % len(terabytes)] * 10 ** 12} for number in range(count)}


def _timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, round(time.perf_counter() - started, 3)


def _plan(shard_plan, shards, node_count, replicas):
    settings = {"name": "yt8m", "mode": "partition", "replicas": replicas, "headroom": 0.05}
    return _timed(shard_plan.make_plan, settings, shards, _nodes(node_count))


def _plan_task(shards, node_count, replicas):
    """The action's plan_dataset on a fresh plan directory: plan, plan file, every node's list and peer configuration."""
    action = _action()
    nodes = _nodes(node_count)
    endpoints = {host: {"address": f"10.1.{number // 250}.{number % 250 + 1}", "port": 8473} for number, host in enumerate(sorted(nodes))}
    settings = {"name": "yt8m", "mode": "partition", "replicas": replicas, "headroom": 0.05}
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as plan_dir:
        planned, seconds = _timed(action.plan_dataset, settings, shards, nodes, plan_dir, endpoints, False)
        files = sum(1 for _path in Path(plan_dir, "lists").iterdir())
    return planned, seconds, files


def _sizes(count, unequal, seed=11):
    rng = random.Random(seed)
    return {f"chunks-{number:06d}.tar": rng.randint(SHARD_BYTES // 2, 2 * SHARD_BYTES) if unequal else SHARD_BYTES
            for number in range(count)}


def _loads(assignment, sizes):
    held = Counter()
    for name, hosts in assignment.items():
        for host in hosts:
            held[host] += sizes[name]
    return held


def _balance(placement, nodes, shards, unequal, copies):
    """max / average bytes per rank, and whether every node is within one shard of its share."""
    sizes = _sizes(shards, unequal)
    ranks = {f"n{number:04d}": 8 for number in range(nodes)}
    assignment, shares, _capped = placement.place_shards(sizes, ranks, dict.fromkeys(ranks, 1 << 62), copies)
    held = _loads(assignment, sizes)
    ratio = max(held.values()) / (copies * sum(sizes.values()) / nodes)
    within_one = all(held[host] <= shares[host] + max(sizes.values()) for host in ranks)
    return {"max_over_average": round(ratio, 4), "within_one_shard": within_one}


def _churn(placement, unequal, copies):
    """Copies moved when one node joins 100 (over the ideal 1/101) and when one leaves (over its own copies)."""
    sizes = _sizes(10_000, unequal)
    ranks = {f"n{number:03d}": 8 for number in range(100)}
    unlimited = dict.fromkeys(list(ranks) + ["n100"], 1 << 62)
    before = placement.place_shards(sizes, ranks, unlimited, copies)[0]
    grown = placement.place_shards(sizes, dict(ranks, n100=8), unlimited, copies, previous=before)[0]
    shrunk_ranks = {host: count for host, count in ranks.items() if host != "n050"}
    shrunk = placement.place_shards(sizes, shrunk_ranks, unlimited, copies, previous=before)[0]
    again = placement.place_shards(sizes, ranks, unlimited, copies, previous=before)[0]

    def moved(after):
        return sum(len(set(after[name]) - set(before[name])) for name in after)
    own = sum("n050" in hosts for hosts in before.values())
    return {"add_one_of_100": round(moved(grown) / (copies * len(sizes) / 101), 3), "remove_one_of_100": round(moved(shrunk) / own, 3),
            "rerun_moved": moved(again)}


def _disks(placement):
    """Equal GPUs, disks of 7 / 15 / 30 / 60 TB, an 8 TB dataset that fits partitioned: largest over smallest node."""
    sizes = {f"s-{number:05d}.tar": size for number, size in enumerate(_sizes(8_000, True).values())}
    disks = {f"n{number:02d}": (7, 15, 30, 60)[number % 4] * 10 ** 12 for number in range(16)}
    held = _loads(placement.place_shards(sizes, dict.fromkeys(disks, 8), disks, 1)[0], sizes)
    mixed = {f"m{number:02d}": (8, 4)[number % 2] for number in range(16)}
    by_gpus = _loads(placement.place_shards(sizes, mixed, dict.fromkeys(mixed, 1 << 62), 1)[0], sizes)
    per_rank = [by_gpus[host] / mixed[host] for host in mixed]
    return {"disks_7_to_60_tb": round(max(held.values()) / min(held.values()), 4),
            "gpus_8_and_4_per_rank": round(max(per_rank) / min(per_rank), 4)}


PLAYBOOK = """
- name: The role's plan tasks, as a user's play runs them (each runs once, for all hosts)
  hosts: stage_targets
  gather_facts: false
  tasks:
    - name: Plan
      ansible.builtin.import_role:
        name: shard_staging
        tasks_from: plan
"""
# The same play without the plan: what 1,000 hosts cost Ansible before any plan task (inventory, variables, a task).
BASELINE = """
- name: The baseline
  hosts: stage_targets
  gather_facts: false
  tasks:
    - name: One task, once
      ansible.builtin.debug:
        msg: baseline
      run_once: true
"""


def _through_ansible(host_count, shard_count, rounds):
    """Seconds of the role's plan tasks through ansible-playbook over ``host_count`` hosts and ``shard_count`` shards x 2
    replicas (sizes and samples from a wids index), less the same play without them, best of ``rounds`` alternating."""
    root = Path(__file__).resolve().parents[2]
    playbook_bin = Path(sys.executable).parent / "ansible-playbook"
    with tempfile.TemporaryDirectory(prefix="bench-plan-play-") as work:
        work = Path(work)
        index = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "yt8m", "shardlist": [
            {"url": f"chunks-{number:06d}.tar", "filesize": SHARD_BYTES + number % 977, "nsamples": 1000 + number % 7}
            for number in range(shard_count)]}
        (work / "index.json").write_text(json.dumps(index))
        hosts = {}
        for number, (host, info) in enumerate(_nodes(host_count).items()):
            hosts[host] = {"__shard_staging_report": {"room": {"reserve_bytes": 0, "results": [
                {"item": {"name": "yt8m"}, "free_bytes": info["free_bytes"], "held_bytes": 0, "ours_bytes": 0,
                 "total_bytes": info["free_bytes"]}]},
                "ranks": {"set": 8, "gpus": None, "gpu_group": False},
                "peer_endpoint": {"address": f"10.1.{number // 250}.{number % 250 + 1}", "port": 8473}}}
        inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                      "shard_staging_plan_dir": str(work / "plans"),
                                      "shard_staging_datasets": [{"name": "yt8m", "mode": "partition", "replicas": 2,
                                                                  "source": SOURCE.replace("099999", f"{shard_count - 1:06d}"),
                                                                  "index": str(work / "index.json")}]},
                             "children": {"stage_targets": {"hosts": hosts}}}}
        (work / "hosts.json").write_text(json.dumps(inventory))
        seconds = {True: [], False: []}
        for _round in range(rounds):
            for plan in (True, False):
                shutil.rmtree(work / "plans", ignore_errors=True)
                (work / "play.yml").write_text(PLAYBOOK if plan else BASELINE)
                started = time.perf_counter()
                done = subprocess.run([str(playbook_bin), "-i", str(work / "hosts.json"), str(work / "play.yml")], cwd=root,
                                      capture_output=True, text=True, check=False,
                                      env=dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg")))
                seconds[plan].append(time.perf_counter() - started)
                if done.returncode != 0:
                    raise RuntimeError("the plan play failed:\n" + done.stdout[-3000:] + done.stderr[-2000:])
    best = {plan: min(values) for plan, values in seconds.items()}
    return {"hosts": host_count, "shards": shard_count, "play_with_plan_s": round(best[True], 2),
            "play_without_plan_s": round(best[False], 2), "plan_tasks_s": round(best[True] - best[False], 2)}


def run(quick: bool) -> dict:
    """Run the benchmark; ``quick`` plans 2,000 shards on 50 nodes and measures balance and churn on smaller layouts."""
    shard_plan, placement, sources = _planner(), _placement(), _sources()
    urls, expand_s = _timed(sources.expand_source, QUICK_SOURCE if quick else SOURCE)
    shards = sources.shard_records(urls)
    for shard in shards:
        shard["size"] = SHARD_BYTES
    result = {
        "benchmark": "shard_plan",
        "python": platform.python_version(),
        "shards": len(shards),
        "target_s": TARGET_SECONDS,
        "timings_s": {"expand_source": expand_s},
    }
    timings = result["timings_s"]
    small_nodes, large_nodes = (8, 50) if quick else (8, 1000)
    _small, timings[f"plan_{small_nodes}_nodes_pure"] = _plan(shard_plan, shards, small_nodes, 1)
    large, timings[f"plan_{large_nodes}_nodes_2_replicas_pure"] = _plan(shard_plan, shards, large_nodes, 2)
    again = shard_plan.make_plan({"name": "yt8m", "mode": "partition", "replicas": 2, "headroom": 0.05}, shards,
                                 _nodes(large_nodes), previous=large)
    result["rerun_moves_nothing"] = again["changes"]["fetch_copies"] == 0 and again["assignment"] == large["assignment"]
    per_node = [info["shards"] for info in large["nodes"].values()]
    result["large_plan_shards_per_node"] = {"min": min(per_node), "max": max(per_node)}
    result["large_plan_balance"] = large["balance"]
    task, timings[f"plan_task_{large_nodes}_nodes_2_replicas"], result["plan_task_files"] = _plan_task(shards, large_nodes, 2)
    result["plan_task_seconds"] = timings[f"plan_task_{large_nodes}_nodes_2_replicas"]
    result["plan_task_agrees"] = task["nodes"] == large["nodes"]
    layouts = [(8, 64), (64, 6_400)] + ([] if quick else [(1_000, 100_000)])
    result["balance"] = {f"{nodes}_nodes_{'unequal' if unequal else 'equal'}_{copies}_cop{'y' if copies == 1 else 'ies'}":
                         _balance(placement, nodes, shards_count, unequal, copies)
                         for nodes, shards_count in layouts for unequal in (False, True) for copies in (1, 2)}
    result["churn"] = {f"{'unequal' if unequal else 'equal'}_{copies}": _churn(placement, unequal, copies)
                       for unequal in (False, True) for copies in (1, 2)}
    result["shares"] = _disks(placement)
    result["balance_met"] = all(row["max_over_average"] <= 1.02 or row["within_one_shard"] for row in result["balance"].values())
    result["churn_met"] = all(row["add_one_of_100"] <= 2 and row["remove_one_of_100"] <= 2 and row["rerun_moved"] == 0
                              for row in result["churn"].values())
    result["shares_met"] = all(value <= 1.02 for value in result["shares"].values())
    result["through_ansible"] = _through_ansible(*((50, 2_000, 1) if quick else (1_000, 100_000, 2)))
    if not quick:
        result["target_met"] = timings[f"plan_{large_nodes}_nodes_2_replicas_pure"] <= TARGET_SECONDS
        result["plan_task_target_met"] = result["plan_task_seconds"] <= TARGET_SECONDS
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 shards on 50 nodes; balance and churn on small layouts")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run(args.quick)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"shard_plan benchmark: {result['shards']} shards, Python {result['python']}")
        for name, seconds in result["timings_s"].items():
            print(f"  {name:<40} {seconds:8.3f} s")
        for name in ("rerun_moves_nothing", "large_plan_shards_per_node", "large_plan_balance", "balance", "churn", "shares",
                     "balance_met", "churn_met", "shares_met", "through_ansible", "target_met", "plan_task_agrees"):
            if name in result:
                print(f"  {name:<40} {result[name]}")
        task = f"  whole plan task: make_plan, the plan file and {result['plan_task_files']} list files in {result['plan_task_seconds']:.2f} s"
        if "plan_task_target_met" in result:
            task += f" (target <= {TARGET_SECONDS:.0f} s: {'met' if result['plan_task_target_met'] else 'MISSED'})"
        print(task)
    failed = ("rerun_moves_nothing", "plan_task_agrees", "balance_met", "churn_met", "shares_met", "target_met", "plan_task_target_met")
    if any(result.get(name) is False for name in failed):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
