# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 17, 1b: kill -9 a staging run at five random moments, re-run, then run again. Each re-run is planned again
from what shard_space measures, as the role does (probe, plan, fetch), and must plan exactly what the uninterrupted
run planned: no shard moves, none is fetched whole twice, and the last run changes nothing.

How free space is measured, and why: the real filesystem under tmp_path is shared with every other process on the
machine (other tests, other engineers' runs), so its f_bavail moves by megabytes while this test runs, and a
megabyte moves a node's weight. Each node instead gets a filesystem of its own, modelled: ``statvfs`` handed to
shard_space's ``measure`` reports a fixed size, and as free that size less a fixed amount that is not the dataset's
less what the node's directory really takes up (st_blocks x 512 of every file and directory under it, walked here
independently of shard_space). That is how a filesystem counts free space (in allocated blocks, which is also why the
512-byte fragment size: no rounding). The engines themselves run unmodified in their own processes on the real
filesystem, so what a killed run leaves (shards renamed before the journal lists them, partial files, states,
journal temporaries) is real; only the free-space figure is derived. Under the old weights (free + journaled bytes)
this test fails: a killed run's unjournaled shards and partial files are in neither figure.

The random moments: both engines are killed once the faster node's dest has grown by a random 0.15 to 0.5 MiB during
that run, plus 0 to 0.08 s (the seed is in every failure message). At the bandwidth limits below neither engine can
finish its share in five such runs, so every kill lands mid-run (checked). As a control, each re-plan is also made
on the old weights, and at least one of them must have moved shards: the kills left enough behind for the test to
tell. "Fetched whole twice" is judged on the nodes: a shard a killed run left whole must still be that same file
(inode, mtime) at the end, on that node only, and the completing run must fetch exactly the shards no killed run had left whole.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
import types

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import transfer
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.journal import PART_SUFFIX
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import host_shards, make_plan
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.modules.shard_space import measure

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
KIB = 1024
MIB = 1024 * 1024
FRAGMENT = 512
# Each node's modelled filesystem: its size, and what on it is not the dataset's (the OS, logs, other datasets).
# node-a cannot hold its even share (6.5 MiB of 13): capped by its room, so the room decides the plan.
FILESYSTEMS = {"node-a": (12 * MIB, 6 * MIB), "node-b": (18 * MIB, 6 * MIB)}
DATASET = {"name": "ds", "mode": "partition", "replicas": 1, "headroom": 0.05}
KILLS = 5
# The journal is saved every journal_interval (10 s by default): a killed run of a few seconds leaves every shard it
# staged unjournaled, as a long run does with the shards of its last ten seconds.
ENGINE = dict(concurrency=4, retries=1, timeout=10, backoff=0.001, backoff_max=0.01, checkpoint_bytes=256 * KIB, commit_interval=0.1)
# The runs that are killed: the nodes' links differ, so one gets further than the other before each kill, as in the
# issue (the old weights then fell unevenly; equal falls would have kept their ratio, and HRW with it).
BANDWIDTH = {"node-a": 4 * MIB, "node-b": 3 * MIB // 2}


def allocated(root):
    """st_blocks x 512 of root and everything under it, each inode once (what the filesystem has given it)."""
    seen, total = set(), 0
    for directory, names, files in os.walk(root):
        for path in [directory] + [os.path.join(directory, name) for name in files]:
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


class ModelledFilesystems(object):
    """One filesystem per node root: statvfs(path under a root) reports that node's size and free bytes."""

    def __init__(self, roots):
        self.roots = roots

    def statvfs(self, path):
        for host, root in self.roots.items():
            if path == root or path.startswith(root + os.sep):
                size, not_ours = FILESYSTEMS[host]
                free = size - not_ours - allocated(root)
                assert free > 0, "the modelled filesystem of %s is full" % host
                return types.SimpleNamespace(f_frsize=FRAGMENT, f_blocks=size // FRAGMENT, f_bavail=free // FRAGMENT)
        raise AssertionError("%s is on no modelled filesystem" % path)


def dataset_sizes():
    """200 small shards (batched by group commit) and 4 large ones (partial files with checkpoints): 13 MiB."""
    sizes = {"s-%03d.tar" % index: (16 + index * 7919 % 65) * KIB + index for index in range(200)}
    sizes.update({"big-%d.tar" % index: MIB + index * 4099 for index in range(4)})
    return sizes


def plan_now(shards, dests, filesystems, previous):
    nodes = {host: measure(dest, statvfs=filesystems.statvfs) for host, dest in dests.items()}
    return make_plan(DATASET, shards, nodes, previous), nodes


def start_engine(tmp_path, host, shards, dest, round_number, **settings):
    config = dict(ENGINE, shards=shards, dest=dest, **settings)
    path = tmp_path / ("%s-%d.json" % (host, round_number))
    path.write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "collections"))
    return subprocess.Popen([sys.executable, "-m", transfer.__name__, str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def whole_shards(dest, sizes):
    """{shard: (inode, mtime_ns)} of the shards that lie whole, under their own names, in dest."""
    found = {}
    for name in os.listdir(dest) if os.path.isdir(dest) else ():
        if name in sizes:
            info = os.lstat(os.path.join(dest, name))
            if info.st_size == sizes[name]:
                found[name] = (info.st_ino, info.st_mtime_ns)
    return found


def kill_at_a_random_moment(rng, children, dests, context):
    """SIGKILL both engines at one random moment of the run, as a kill of the whole run does: once the faster node's
    dest has grown by a random 0.15 to 0.5 MiB in this run (shards, partial files, whatever it writes), and a random
    0 to 0.08 s more. Returns when both are dead.

    Progress in bytes rather than in time or in whole shards: on a busy machine the engine's start and its group
    commit's syncfs(2) take as long as they take, but it writes no faster than its bandwidth limit."""
    faster = max(BANDWIDTH, key=BANDWIDTH.get)
    start = allocated(dests[faster])
    wanted = rng.randint(150 * KIB, 512 * KIB)
    deadline = time.monotonic() + 60
    while allocated(dests[faster]) - start < wanted:
        assert time.monotonic() < deadline, "the engines made no progress (%s)" % context
        for host, child in children.items():
            if child.poll() is not None:
                raise AssertionError("%s ended before its kill: %r (%s)" % (host, child.communicate(), context))
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.08))
    for host, child in children.items():
        assert child.poll() is None, "%s finished before its kill (%s)" % (host, context)
        child.send_signal(signal.SIGKILL)
    for child in children.values():
        child.communicate()


def run_to_completion(tmp_path, lists, dests, round_number):
    results = {}
    children = {host: start_engine(tmp_path, host, lists[host], dests[host], round_number) for host in dests}
    for host, child in children.items():
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, (host, out, err)
        results[host] = json.loads(out)
    return results


def test_kill_minus_9_five_times_then_rerun_plans_what_an_uninterrupted_run_plans(tmp_path, make_shards):
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    sizes = dataset_sizes()
    shards, contents = make_shards(sizes)
    roots = {host: str(tmp_path / host) for host in FILESYSTEMS}
    for root in roots.values():
        os.mkdir(root)
    dests = {host: os.path.join(root, "ds") for host, root in roots.items()}
    filesystems = ModelledFilesystems(roots)
    by_name = {shard["name"]: shard for shard in shards}

    uninterrupted, measured = plan_now(shards, dests, filesystems, None)
    assert uninterrupted["mode"] == "partition" and all(info["shards"] for info in uninterrupted["nodes"].values())
    first_room = {host: info["free_bytes"] + info["ours_bytes"] for host, info in measured.items()}

    previous = uninterrupted
    seen_whole = {host: {} for host in dests}
    partials = moved_by_old_weights = 0
    for round_number in range(KILLS):
        plan, measured = plan_now(shards, dests, filesystems, previous)
        context = "seed %d, before run %d: %s" % (seed, round_number + 1, json.dumps(measured, sort_keys=True))
        assert plan["assignment"] == uninterrupted["assignment"], context
        assert {host: info["free_bytes"] + info["ours_bytes"] for host, info in measured.items()} == first_room, context
        assert plan["changes"]["fetch_copies"] == plan["changes"]["remove_copies"] == 0, context
        journaled_only = {host: dict(info, ours_bytes=None) for host, info in measured.items()}
        try:
            moved_by_old_weights += make_plan(DATASET, shards, journaled_only)["assignment"] != uninterrupted["assignment"]
        except ShardPlanError:
            # Under the old weights the unjournaled bytes a kill left are lost room: the dataset no longer even fits.
            # A busy machine's later kills leave more of them.
            moved_by_old_weights += 1
        lists = {host: [by_name[name] for name in names] for host, names in host_shards(plan).items()}
        children = {host: start_engine(tmp_path, host, lists[host], dests[host], round_number, bandwidth_limit=BANDWIDTH[host])
                    for host in dests}
        kill_at_a_random_moment(rng, children, dests, context)
        for host, dest in dests.items():
            if not os.path.isdir(dest):  # killed before it made its destination (a busy machine): nothing of it to count
                continue
            partials += sum(name.endswith(PART_SUFFIX) for name in os.listdir(dest))
            for name, identity in whole_shards(dest, sizes).items():
                assert seen_whole[host].setdefault(name, identity) == identity, "%s was fetched again on %s (%s)" % (name, host, context)
        previous = plan

    interrupted = sum(len(found) for found in seen_whole.values())
    assert interrupted < len(sizes) and partials, "the kills did not land mid-run (seed %d)" % seed
    # The control: planned on free + journaled bytes (the old weights), some re-run would have moved shards.
    assert moved_by_old_weights, "the kills left too little behind to tell the weights apart (seed %d)" % seed

    plan, measured = plan_now(shards, dests, filesystems, previous)
    assert plan["assignment"] == uninterrupted["assignment"], "seed %d, before completing" % seed
    lists = {host: [by_name[name] for name in names] for host, names in host_shards(plan).items()}
    completed = run_to_completion(tmp_path, lists, dests, KILLS)
    assert sum(result["fetched"] for result in completed.values()) == len(sizes) - interrupted, (seed, completed)

    final, measured = plan_now(shards, dests, filesystems, plan)
    assert final["assignment"] == uninterrupted["assignment"], "seed %d, after completing" % seed
    assert {host: info["free_bytes"] + info["ours_bytes"] for host, info in measured.items()} == first_room, seed
    assert final["changes"]["fetch_copies"] == final["changes"]["remove_copies"] == 0
    again = run_to_completion(tmp_path, lists, dests, KILLS + 1)
    assert [result["changed"] for result in again.values()] == [False, False], again
    assert sum(result["fetched"] for result in again.values()) == 0

    # Every shard lies whole on the node the uninterrupted plan gave it and nowhere else (no stale copy), and a shard
    # a killed run had left whole is the very file it left (it was not fetched again).
    for host, dest in dests.items():
        now = whole_shards(dest, sizes)
        assert sorted(now) == sorted(host_shards(uninterrupted)[host]), host
        for name, identity in seen_whole[host].items():
            assert now[name] == identity, "%s was fetched again on %s (seed %d)" % (name, host, seed)
        for name in now:
            with open(os.path.join(dest, name), "rb") as handle:
                assert handle.read() == contents[name], name
