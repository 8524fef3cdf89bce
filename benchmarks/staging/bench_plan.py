# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time the shard_staging planner: 100,000 shards on 8 nodes and on 1,000 nodes with 2 replicas.

    .venv/bin/python benchmarks/staging/bench_plan.py            # full run, prints the figures
    .venv/bin/python benchmarks/staging/bench_plan.py --quick    # small correctness-only run
    .venv/bin/python benchmarks/staging/bench_plan.py --pure-large --json   # also the pure-Python 1,000-node plan (a minute)

``run(quick)`` returns the same figures as a dict for a larger benchmark script.

Two figures have the 5 s target. ``plan_1000_nodes_2_replicas_numpy`` is ``make_plan`` alone. ``plan_task_1000_nodes_2_replicas``
(also ``plan_task_seconds``) is the role's whole plan task for that dataset as the shard_plan action runs it once the shards are
known: its own ``plan_dataset`` plans, writes the plan file, and writes every node's shard list and peer configuration (2,000
files, each fsynced) into a new temporary directory. Only ``learn_shards`` is left out (it reads the index or sends HEAD
requests, which depends on the store, not on the planner). Quick mode times the same at 50 nodes and 2,000 shards.
"""

from __future__ import annotations

import argparse
import json
import platform
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
    from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils import shard_plan  # pylint: disable=import-outside-toplevel

    return shard_plan


def _action():
    """The shard_plan action plugin (imports ansible, as the role's controller does)."""
    _planner()
    from ansible_collections.dlinfra.gpu_cluster.plugins.action import shard_plan  # pylint: disable=import-outside-toplevel

    return shard_plan


def _nodes(count, terabytes=(30, 31, 32)):
    """Node capacity figures: disks of slightly different sizes, as in a real rack."""
    return {f"gpu{number:04d}": {"free_bytes": terabytes[number % len(terabytes)] * 10 ** 12} for number in range(count)}


def _timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, round(time.perf_counter() - started, 3)


def _plan(shard_plan, shards, node_count, replicas, use_numpy):
    settings = {"name": "yt8m", "mode": "partition", "replicas": replicas, "headroom": 0.05}
    return _timed(shard_plan.make_plan, settings, shards, _nodes(node_count), use_numpy=use_numpy)


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


def _balance(shard_plan, shard_count, capacities):
    """Largest relative deviation of a node's shard count from its weighted share, in percent."""
    sizes = {f"chunks-{number:06d}.tar": 1 for number in range(shard_count)}
    counts = Counter(hosts[0] for hosts in shard_plan.place_shards(sizes, capacities, 1).values())
    total_weight = sum(shard_plan.node_weight(capacity) for capacity in capacities.values())
    deviations = [counts[host] / (shard_count * shard_plan.node_weight(capacity) / total_weight) - 1 for host, capacity in capacities.items()]
    return {"min_pct": round(100 * min(deviations), 2), "max_pct": round(100 * max(deviations), 2)}


def run(quick: bool, pure_large: bool = False) -> dict:
    """Run the benchmark; ``quick`` plans 2,000 shards only and checks that both placement paths agree."""
    shard_plan = _planner()
    urls, expand_s = _timed(shard_plan.expand_source, QUICK_SOURCE if quick else SOURCE)
    shards = shard_plan.shard_records(urls)
    for shard in shards:
        shard["size"] = SHARD_BYTES
    numpy_ok = shard_plan.numpy_available()
    result = {
        "benchmark": "shard_plan",
        "python": platform.python_version(),
        "numpy": numpy_ok,
        "shards": len(shards),
        "target_s": TARGET_SECONDS,
        "timings_s": {"expand_source": expand_s},
    }
    timings = result["timings_s"]
    small_nodes, large_nodes = (8, 50) if quick else (8, 1000)
    pure_small, timings[f"plan_{small_nodes}_nodes_pure"] = _plan(shard_plan, shards, small_nodes, 1, False)
    if numpy_ok:
        vectorised_small, timings[f"plan_{small_nodes}_nodes_numpy"] = _plan(shard_plan, shards, small_nodes, 1, True)
        result["paths_agree"] = vectorised_small["assignment"] == pure_small["assignment"]
    large = None
    if numpy_ok:
        large, timings[f"plan_{large_nodes}_nodes_2_replicas_numpy"] = _plan(shard_plan, shards, large_nodes, 2, True)
    if quick or pure_large or not numpy_ok:
        pure_large_plan, timings[f"plan_{large_nodes}_nodes_2_replicas_pure"] = _plan(shard_plan, shards, large_nodes, 2, False)
        if large is not None:
            result["paths_agree"] = result.get("paths_agree", True) and pure_large_plan["assignment"] == large["assignment"]
        large = pure_large_plan
    per_node = [info["shards"] for info in large["nodes"].values()]
    result["large_plan_shards_per_node"] = {"min": min(per_node), "max": max(per_node)}
    task, timings[f"plan_task_{large_nodes}_nodes_2_replicas"], result["plan_task_files"] = _plan_task(shards, large_nodes, 2)
    result["plan_task_seconds"] = timings[f"plan_task_{large_nodes}_nodes_2_replicas"]
    result["plan_task_agrees"] = task["nodes"] == large["nodes"]
    if not quick:
        equal = {f"gpu{number}": 10 ** 12 for number in range(8)}
        unequal = dict(equal, **{f"gpu{number}": 2 * 10 ** 12 for number in range(4)})
        result["balance_100k_over_8"] = {"equal": _balance(shard_plan, 100_000, equal), "weights_2_to_1": _balance(shard_plan, 100_000, unequal)}
        headline = timings.get(f"plan_{large_nodes}_nodes_2_replicas_numpy", timings.get(f"plan_{large_nodes}_nodes_2_replicas_pure"))
        result["target_met"] = headline <= TARGET_SECONDS
        result["plan_task_target_met"] = result["plan_task_seconds"] <= TARGET_SECONDS
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 shards only; checks that the numpy and pure-Python paths agree")
    parser.add_argument("--pure-large", action="store_true", help="also time the pure-Python path at 1,000 nodes (about a minute)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run(args.quick, pure_large=args.pure_large)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"shard_plan benchmark: {result['shards']} shards, Python {result['python']}, numpy {'yes' if result['numpy'] else 'no'}")
        for name, seconds in result["timings_s"].items():
            print(f"  {name:<40} {seconds:8.3f} s")
        for name in ("paths_agree", "large_plan_shards_per_node", "balance_100k_over_8", "target_met", "plan_task_agrees"):
            if name in result:
                print(f"  {name:<40} {result[name]}")
        task = f"  whole plan task: make_plan, the plan file and {result['plan_task_files']} list files in {result['plan_task_seconds']:.2f} s"
        if "plan_task_target_met" in result:
            task += f" (target <= {TARGET_SECONDS:.0f} s: {'met' if result['plan_task_target_met'] else 'MISSED'})"
        print(task)
    failed = ("paths_agree", "plan_task_agrees", "target_met", "plan_task_target_met")
    if any(result.get(name) is False for name in failed):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
