# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's DDP check, private to the validate role (may change without notice).

What the train role's reference job wrote on each GPU staging target (raw["training"]: train_status.py --samples) ->
the checks training.ddp and training.samples_per_second, and one measurement per rank. The properties come from the
ranks' own output: the samples they read (SHARD/KEY lines), their steps, the all-reduce of a known tensor and whether
the replicas ended equal.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import check

_NOT_SET = ("validate_training_dataset is not set; set it to a small dataset staged on the cluster's GPU nodes to run "
            "a short DDP job over them")


def ranks_of(raw):
    """The progress of each rank that ran on a node, by global rank."""
    progress = ((raw.get("training") or {}).get("status") or {}).get("progress") or {}
    return {int(item.get("rank", name)): item for name, item in progress.items()}


def reads_of(raw):
    """global rank -> the SHARD/KEY lines it read (its first epoch)."""
    reads = {}
    for name, lines in (((raw.get("training") or {}).get("status") or {}).get("samples") or {}).items():
        if name.startswith("rank-") and name.endswith(".epoch-0.txt"):
            reads[int(name[5:9])] = lines
    return reads


def duplicates(reads):
    """{SHARD/KEY: [ranks]} of every sample read more than once among ``reads`` (rank -> lines)."""
    seen = {}
    for rank, lines in sorted(reads.items()):
        for line in lines:
            seen.setdefault(line, []).append(rank)
    return {key: ranks for key, ranks in seen.items() if len(ranks) > 1}


def coverage_problem(reads, scope):
    """A sentence when a sample was read twice within ``scope`` (the world, or a node for a replicated dataset)."""
    twice = duplicates(reads)
    if not twice:
        return None
    shown = "; ".join("%s by ranks %s" % (key, ", ".join(map(str, ranks))) for key, ranks in sorted(twice.items())[:3])
    return ("%d sample(s) were read more than once within %s in one epoch (%s): the ranks' lists overlap; re-run "
            "shard_staging on the cluster so that its hand-offs come from one plan" % (len(twice), scope, shown))


def rank_problems(ranks, reads, steps):
    problems = []
    for rank, item in sorted(ranks.items()):
        if item.get("state") != "done":
            problems.append("rank %d ended %s%s" % (rank, item.get("state"), (": " + item["error"]) if item.get("error") else ""))
            continue
        if not item.get("allreduce_ok"):
            problems.append("rank %d: the all-reduce of a known tensor was wrong" % rank)
        if not item.get("replicas_equal"):
            problems.append("rank %d: its weights differ from the other ranks' after training" % rank)
        if item.get("steps") != steps:
            problems.append("rank %d took %s steps, the world %s" % (rank, item.get("steps"), steps))
        wanted = (item.get("steps") or 0) * (item.get("batch_size") or 0)
        if len(reads.get(rank, [])) != wanted:
            problems.append("rank %d read %d samples, its %s steps of %s take %d"
                            % (rank, len(reads.get(rank, [])), item.get("steps"), item.get("batch_size"), wanted))
    return problems


def training_checks(host, raw, world, replicated):
    """(checks, measurements) of a GPU staging target. world: host -> raw over the node's cluster; replicated: the
    dataset is a full copy on each node, so each node reads it once, not the world."""
    dataset = raw["expected"].get("training_dataset") or ""
    floor = float(raw["expected"].get("training_min_samples_per_s") or 0)
    if not dataset:
        return [check("training.ddp", "skip", _NOT_SET), check("training.samples_per_second", "skip", _NOT_SET)], []
    training = raw.get("training") or {}
    ranks = ranks_of(raw)
    if training.get("error"):
        problem = "the DDP job over %s did not run to the end: %s" % (dataset, str(training["error"])[-600:])
    elif not ranks:
        reason = "no rank of the DDP job ran here: this node holds no hand-off of %s" % dataset
        return [check("training.ddp", "skip", reason), check("training.samples_per_second", "skip", reason)], []
    else:
        problem = None
    world_ranks = {rank: item for node in world.values() for rank, item in ranks_of(node).items()}
    steps = min((item.get("steps") or 0 for item in world_ranks.values()), default=0)
    reads = reads_of(raw)
    problems = rank_problems(ranks, reads, steps)
    if replicated:
        scope, scope_reads = "node " + host, reads
    else:
        scope, scope_reads = "the world", {rank: lines for node in world.values() for rank, lines in reads_of(node).items()}
    twice = coverage_problem(scope_reads, scope)
    problems += [twice] if twice else []
    measurements = [{"node": host, "rank": rank, "local_rank": item.get("local_rank"), "backend": item.get("backend"),
                     "steps": item.get("steps"), "samples_per_s": item.get("samples_per_s"),
                     "step_time_s": item.get("step_time_s"), "state": item.get("state")}
                    for rank, item in sorted(ranks.items())]
    expected = "every sample once per epoch within %s, equal steps, all-reduce right" % scope
    if problem or problems:
        message = "; ".join(([problem] if problem else []) + problems)
        return [check("training.ddp", "fail", message, expected, None),
                check("training.samples_per_second", "skip", "the DDP job failed (training.ddp)")], measurements
    read = sum(len(lines) for lines in scope_reads.values())
    backend = sorted({str(item.get("backend")) for item in ranks.values()})
    ddp = check("training.ddp", "pass", "%d rank(s) here of a world of %d (%s): %d steps each, %d samples read once "
                "each within %s, the all-reduce right, the replicas equal"
                % (len(ranks), len(world_ranks), "/".join(backend), steps, read, scope), expected, "%d samples" % read)
    slowest = min(ranks.values(), key=lambda item: item.get("samples_per_s") or 0)
    rate = slowest.get("samples_per_s") or 0
    shown = "slowest rank %s: %s samples/s, %s s a step" % (slowest.get("rank"), rate, slowest.get("step_time_s"))
    if floor and rate < floor:
        throughput = check("training.samples_per_second", "fail", "%s, below the floor validate_training_min_samples_per_s "
                           "%g; check the node's load, its staging disk (storage.read) and the fabric (nccl.busbw)"
                           % (shown, floor), ">= %g" % floor, rate)
    else:
        throughput = check("training.samples_per_second", "pass", shown + ("" if floor else " (no floor set)"),
                           ">= %g" % floor if floor else None, rate)
    return [ddp, throughput], measurements
