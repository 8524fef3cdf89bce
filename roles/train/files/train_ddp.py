# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's reference training job: DistributedDataParallel over a dataset's staged shards, one process per
rank, started by torchrun on every node of the dataset's cluster (dlinfra.gpu_cluster.train).

Each rank reads its own list of the node's hand-off (DLINFRA_HANDOFF/ranks/rank-NNNN.txt, LOCAL_RANK) and checks its
place against world.json before it joins the world. An epoch is the plan's length every rank can meet, so every rank
takes the same steps. Under DLINFRA_JOB_DIR each rank keeps:

- progress/rank-NNNN.json: state (running, done, failed), epoch, step, steps, samples/s, the step it resumed at;
- samples/rank-NNNN.epoch-E.txt: SHARD/KEY of every sample of a committed step (a resumed epoch keeps the lines up to
  its checkpoint), so that what was read can be checked from the ranks' own output.

Each node's local rank 0 writes a checkpoint every --checkpoint-every steps (atomically, the last two kept); a restart
resumes from the newest step that every node holds.
"""

import argparse
import json
import os
import sys
import tarfile
import time
import urllib.request
from datetime import timedelta

FEATURES = 64
CLASSES = 8


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--handoff", default=os.environ.get("DLINFRA_HANDOFF"),
                        help="the dataset's directory on this node (default: $DLINFRA_HANDOFF)")
    parser.add_argument("--job-dir", default=os.environ.get("DLINFRA_JOB_DIR"),
                        help="where the ranks write progress and what they read (default: $DLINFRA_JOB_DIR)")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("DLINFRA_CHECKPOINT_DIR"),
                        help="this node's checkpoints (default: $DLINFRA_CHECKPOINT_DIR, else JOB_DIR/checkpoints)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints (0: none)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="the least time a step takes (a stand-in for a model's compute)")
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                        help="auto: nccl where CUDA has a GPU for each local rank, else gloo")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a collective waits for the others")
    args = parser.parse_args(argv)
    for name in ("handoff", "job_dir"):
        if not getattr(args, name):
            parser.error("--%s is not set (nor $DLINFRA_%s)" % (name.replace("_", "-"), name.upper()))
    if args.epochs < 1 or args.batch_size < 1 or args.checkpoint_every < 0:
        parser.error("--epochs and --batch-size must be >= 1, --checkpoint-every >= 0")
    args.checkpoint_dir = args.checkpoint_dir or os.path.join(args.job_dir, "checkpoints")
    return args


def torchrun_place(env):
    """This process's place as torchrun gives it: rank, local rank, world size, node rank."""
    names = (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE"), ("node_rank", "GROUP_RANK"))
    try:
        return {key: int(env[name]) for key, name in names}
    except (KeyError, ValueError) as exc:
        raise SystemExit("train_ddp: %s is not set: start it with torchrun (dlinfra.gpu_cluster.train does)" % exc)


def world_problems(world, place):
    """What disagrees between the node's hand-off (world.json) and torchrun's place for this process."""
    problems = []
    if place["world_size"] != world["world_size"]:
        problems.append("torchrun's world has %d ranks, the plan's %d: start --nproc-per-node with each node's ranks "
                        "of its world.json" % (place["world_size"], world["world_size"]))
    if place["node_rank"] != world["node_rank"]:
        problems.append("torchrun's node rank is %d, the plan gives %s node rank %d: pass --node-rank %d"
                        % (place["node_rank"], world["node"], world["node_rank"], world["node_rank"]))
    entry = next((item for item in world["ranks"] if item["local_rank"] == place["local_rank"]), None)
    if entry is None:
        problems.append("local rank %d has no list in %s's world.json (%d lists): pass --nproc-per-node %d"
                        % (place["local_rank"], world["node"], len(world["ranks"]), len(world["ranks"])))
    elif entry["global_rank"] != place["rank"]:
        problems.append("torchrun's rank %d is the plan's global rank %d" % (place["rank"], entry["global_rank"]))
    return problems, entry


def open_shard(path):
    if "://" in path:  # a streamed shard stays at its source
        return urllib.request.urlopen(path, timeout=60)  # noqa: S310 (the plan's own URLs)
    return open(path, "rb")


def samples(paths):
    """(shard, key, {extension: bytes}) for each WebDataset sample of the shards, in the list's order: a sample's files
    share the name before the first dot and are adjacent in the tar."""
    for path in paths:
        shard = os.path.basename(path.rstrip("/"))
        with open_shard(path) as stream, tarfile.open(fileobj=stream, mode="r|*") as tar:
            key, parts = None, {}
            for member in tar:
                if not member.isfile():
                    continue
                directory, base = os.path.split(member.name)
                stem, _dot, extension = base.partition(".")
                name = os.path.join(directory, stem)
                if name != key and parts:
                    yield shard, key, parts
                    parts = {}
                key = name
                parts[extension] = tar.extractfile(member).read()
            if parts:
                yield shard, key, parts


def epoch_length(epoch, paths):
    """How many samples of this rank's list make the plan's epoch: its per_rank samples, or the samples that fit its
    per_rank bytes where the index had no sample counts."""
    if epoch["unit"] == "samples":
        return epoch["per_rank"]
    count, size = 0, 0
    for _shard, _key, parts in samples(paths):
        size += sum(len(data) for data in parts.values())
        if size > epoch["per_rank"]:
            break
        count += 1
    return count


def write_json(path, value):
    """Replace path with value, whole or not at all."""
    temporary = "%s.tmp" % path
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(value, handle, sort_keys=True)
    os.replace(temporary, path)


class Checkpoints:
    """A node's checkpoints: ckpt-STEP.pt, written by its local rank 0 only, replaced atomically, the last two kept."""

    def __init__(self, directory, writer):
        self.directory, self.writer = directory, writer
        if writer:
            os.makedirs(directory, exist_ok=True)

    def steps(self):
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(name[5:-3]) for name in names
                      if name.startswith("ckpt-") and name.endswith(".pt") and name[5:-3].isdigit())

    def path(self, step):
        return os.path.join(self.directory, "ckpt-%08d.pt" % step)

    def save(self, torch, step, state):
        if not self.writer:
            return
        temporary = self.path(step) + ".tmp"
        with open(temporary, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path(step))
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        for old in self.steps()[:-2]:
            os.unlink(self.path(old))


def features(torch, parts):
    """A sample's input: the histogram of its text's bytes; its label: the class file's number."""
    text = parts.get("txt") or b"".join(data for extension, data in sorted(parts.items()) if extension != "cls")
    values = torch.frombuffer(bytearray(text or b"\0"), dtype=torch.uint8).long() % FEATURES
    histogram = torch.bincount(values, minlength=FEATURES).float() / max(1, len(text))
    try:
        label = int(parts.get("cls", b"0").strip() or 0) % CLASSES
    except ValueError:
        label = 0
    return histogram, label


def keep_lines(path, count):
    """Keep the first count lines of path (a resumed epoch's record up to its checkpoint); create it if missing."""
    lines = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()[:count]
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    place = torchrun_place(os.environ)
    with open(os.path.join(args.handoff, "world.json"), encoding="utf-8") as handle:
        world = json.load(handle)
    problems, entry = world_problems(world, place)
    if problems:
        raise SystemExit("train_ddp on %s, dataset %s: %s" % (world["node"], world["dataset"], "; ".join(problems)))
    with open(os.path.join(args.handoff, entry["list"]), encoding="utf-8") as handle:
        paths = [line.strip() for line in handle if line.strip()]

    for sub in ("progress", "samples"):
        os.makedirs(os.path.join(args.job_dir, sub), exist_ok=True)
    rank = place["rank"]
    progress_path = os.path.join(args.job_dir, "progress", "rank-%04d.json" % rank)
    progress = {"rank": rank, "local_rank": place["local_rank"], "node": world["node"], "dataset": world["dataset"],
                "plan_digest": world["plan_digest"], "state": "starting", "pid": os.getpid()}
    write_json(progress_path, progress)
    try:
        run(args, place, world, paths, progress, progress_path)
    except BaseException as exc:
        progress.update(state="failed", error="%s: %s" % (type(exc).__name__, exc))
        write_json(progress_path, progress)
        raise


def run(args, place, world, paths, progress, progress_path):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > place["local_rank"] else "gloo"
    device = torch.device("cuda", place["local_rank"]) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    size, rank = dist.get_world_size(), dist.get_rank()

    # The all-reduce of a known tensor: 1 + 2 + ... + world size.
    check = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(check)
    progress["allreduce_ok"] = check.item() == size * (size + 1) / 2
    if not progress["allreduce_ok"]:
        raise RuntimeError("the all-reduce of 1..%d gave %s" % (size, check.item()))

    # Every rank takes the same steps: the fewest full batches any rank's epoch holds.
    steps = torch.tensor([epoch_length(world["epoch"], paths) // args.batch_size], device=device)
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    steps = int(steps.item())
    if steps < 1:
        raise RuntimeError("an epoch of %s %s per rank holds no batch of %d; fix: a smaller --batch-size"
                           % (world["epoch"]["per_rank"], world["epoch"]["unit"], args.batch_size))

    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, CLASSES).to(device)
    ddp = DistributedDataParallel(model, device_ids=[place["local_rank"]] if backend == "nccl" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)

    # Resume from the newest step that every node holds (a node killed while writing may lack the last one).
    checkpoints = Checkpoints(args.checkpoint_dir, writer=place["local_rank"] == 0)
    held = [None] * size
    dist.all_gather_object(held, checkpoints.steps())
    common = set.intersection(*(set(steps_held) for steps_held in held))
    start = max(common) if common else 0
    if start:
        state = torch.load(checkpoints.path(start), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    progress.update(state="running", steps=steps, epochs=args.epochs, resumed_at=start, backend=backend,
                    world_size=size, batch_size=args.batch_size)
    write_json(progress_path, progress)

    step, trained, began, step_time = start, 0, time.monotonic(), 0.0
    for epoch in range(start // steps, args.epochs):
        record = os.path.join(args.job_dir, "samples", "rank-%04d.epoch-%d.txt" % (rank, epoch))
        offset = step - epoch * steps
        keep_lines(record, offset * args.batch_size)
        stream = samples(paths)
        for _skip in range(offset * args.batch_size):
            next(stream)
        with open(record, "a", encoding="utf-8") as read:
            for _batch in range(offset, steps):
                tick = time.monotonic()
                batch = [next(stream) for _sample in range(args.batch_size)]
                inputs, labels = zip(*(features(torch, parts) for _shard, _key, parts in batch))
                loss = torch.nn.functional.cross_entropy(ddp(torch.stack(inputs).to(device)),
                                                         torch.tensor(labels, device=device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                read.write("".join("%s/%s\n" % (shard, key) for shard, key, _parts in batch))
                read.flush()
                step += 1
                trained += args.batch_size
                rest = args.step_seconds - (time.monotonic() - tick)
                if rest > 0:
                    time.sleep(rest)
                step_time += time.monotonic() - tick
                if args.checkpoint_every and step % args.checkpoint_every == 0:
                    checkpoints.save(torch, step, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                                   "step": step, "plan_digest": world["plan_digest"]})
                elapsed = time.monotonic() - began
                progress.update(epoch=epoch, step=step, loss=round(loss.item(), 4),
                                samples_per_s=round(trained / elapsed, 1) if elapsed else 0.0)
                write_json(progress_path, progress)
        stream.close()

    # DDP keeps the replicas equal: every rank ends with the same weights.
    total = sum(float(parameter.detach().double().sum()) for parameter in model.parameters())
    spread = torch.tensor([total, -total], dtype=torch.float64, device=device)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    progress["replicas_equal"] = abs(spread[0].item() + spread[1].item()) <= 1e-6 * max(1.0, abs(total))
    ran = step - start
    progress.update(state="done", step=step, step_time_s=round(step_time / ran, 4) if ran else None)
    write_json(progress_path, progress)
    # Every rank is past its last collective before any tears down (rank 0 holds the store the others still use).
    dist.barrier()
    dist.destroy_process_group()
    if not progress["replicas_equal"]:
        raise RuntimeError("the ranks' weights differ after training")


if __name__ == "__main__":
    main()
