# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rank's read rate: the train role's reference job reading WebDataset shards (train_ddp.samples) from node-local
files, the same reader streaming the same shards from a store over HTTP, and a raw sequential read of the same files.

The three alternate within each round, on the same shards, in the same cache state: warm (every file read once before
the first round, so the page cache holds them; the store serves them from the same cache). Prints each method's median
samples/s and MB/s and the ratios: local to raw (the target: >= 0.9) and streamed to local (the seeds' claim: streamed
shards read "as good as local SSD").

The local read also runs in 2 and 4 worker processes per rank (--workers), each on every n-th shard as DataLoader
workers split an iterable dataset: how many a rank needs to come near the raw read.

    python3 benchmarks/training/run.py [--rounds 5] [--shards 32] [--samples 200] [--sample-kib 16] [--workers 2 4]
                                       [--json FILE]
"""

import argparse
import importlib.util
import io
import json
import multiprocessing
import os
import statistics
import sys
import tarfile
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("train_ddp", ROOT / "roles" / "train" / "files" / "train_ddp.py")
train_ddp = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(train_ddp)

LOCAL_TARGET = 0.9
CHUNK = 1 << 20


def make_shards(directory, shards, samples, sample_kib):
    """Shards like the lab's yt8m stand-in: per sample a text file of sample_kib KiB and a class file."""
    paths, payload = [], os.urandom(sample_kib * 1024)
    for shard in range(shards):
        path = directory / ("shard-%06d.tar" % shard)
        with tarfile.open(path, "w") as tar:
            for sample in range(samples):
                key = "sample%07d" % (shard * samples + sample)
                for extension, data in (("txt", payload), ("cls", b"%d" % (sample % 8))):
                    info = tarfile.TarInfo("%s.%s" % (key, extension))
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, "http://127.0.0.1:%d" % server.server_address[1]


def raw_read(paths):
    size = 0
    for path in paths:
        with open(path, "rb") as handle:
            while True:
                block = handle.read(CHUNK)
                if not block:
                    break
                size += len(block)
    return None, size


def reader(sources):
    count, size = 0, 0
    for _shard, _key, parts in train_ddp.samples(sources):
        count += 1
        size += sum(len(data) for data in parts.values())
    return count, size


def workers_reader(workers, sources):
    """The reader in `workers` processes, each on every workers-th shard, as DataLoader workers split an iterable
    dataset: what one rank reaches with that many workers."""
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.map(reader, [sources[index::workers] for index in range(workers)])
    return sum(count for count, _size in parts), sum(size for _count, size in parts)


def measure(method, sources):
    began = time.perf_counter()
    count, size = method(sources)
    return time.perf_counter() - began, count, size


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--samples", type=int, default=200, help="samples per shard")
    parser.add_argument("--sample-kib", type=int, default=16)
    parser.add_argument("--workers", type=int, nargs="*", default=[2, 4],
                        help="also the local read with this many worker processes per rank")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="dlinfra-training-bench-") as work:
        directory = Path(work)
        paths = make_shards(directory, args.shards, args.samples, args.sample_kib)
        server, base = serve(directory)
        urls = ["%s/%s" % (base, path.name) for path in paths]
        local = [str(p) for p in paths]
        methods = {"raw": (raw_read, local), "local": (reader, local), "streamed": (reader, urls)}
        for workers in args.workers:
            methods["local x%d workers" % workers] = (partial(workers_reader, workers), local)
        raw_read(paths)  # warm: the page cache holds every file for every method
        times = {name: [] for name in methods}
        counts = {}
        for _round in range(args.rounds):
            for name, (method, sources) in methods.items():  # alternating, in the same order each round
                seconds, count, size = measure(method, sources)
                times[name].append(seconds)
                counts[name] = (count, size)
        server.shutdown()

    total_bytes = counts["raw"][1]
    figures = {"shards": args.shards, "samples": args.shards * args.samples, "bytes": total_bytes,
               "rounds": args.rounds, "cache": "warm (page cache)", "methods": {}}
    for name, seconds in times.items():
        median = statistics.median(seconds)
        count = counts[name][0]
        figures["methods"][name] = {"seconds_median": round(median, 4),
                                    "mb_per_s": round(total_bytes / median / 1e6, 1),
                                    "samples_per_s": round(count / median, 1) if count is not None else None}
    rate = {name: figures["methods"][name]["mb_per_s"] for name in figures["methods"]}
    figures["local_to_raw"] = round(rate["local"] / rate["raw"], 3)
    figures["streamed_to_local"] = round(rate["streamed"] / rate["local"], 3)
    figures["workers_to_raw"] = {name: round(rate[name] / rate["raw"], 3) for name in rate if "workers" in name}

    print("%d shards, %d samples, %.1f MB; %d rounds alternating; cache %s"
          % (args.shards, figures["samples"], total_bytes / 1e6, args.rounds, figures["cache"]))
    print("%-20s %12s %12s %12s" % ("method", "MB/s", "samples/s", "median s"))
    for name, row in figures["methods"].items():
        print("%-20s %12.1f %12s %12.4f" % (name, row["mb_per_s"], row["samples_per_s"] or "-", row["seconds_median"]))
    print("local / raw: %.3f (target >= %.1f: %s)" % (figures["local_to_raw"], LOCAL_TARGET,
                                                      "met" if figures["local_to_raw"] >= LOCAL_TARGET else "NOT met"))
    for name, ratio in figures["workers_to_raw"].items():
        print("%s / raw: %.3f" % (name, ratio))
    print("streamed / local: %.3f (the machine has %d CPUs)" % (figures["streamed_to_local"], os.cpu_count()))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
