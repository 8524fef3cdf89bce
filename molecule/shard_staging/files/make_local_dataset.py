"""Test fixture: write COUNT shards of SIZE bytes (deterministic bytes, so every node's copy is the same) into DIR,
and DIR/index.json, a wids-shard-index-v1 giving each one's size and sha256."""
import hashlib
import json
import pathlib
import sys


def main(directory, count, size):
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for number in range(count):
        name = "s-%02d.tar" % number
        seed = hashlib.sha256(name.encode()).digest()
        data = (seed * (size // len(seed) + 1))[:size]
        (directory / name).write_bytes(data)
        entries.append({"url": name, "nsamples": 1, "filesize": size, "sha256": hashlib.sha256(data).hexdigest()})
    index = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": entries}
    (directory / "index.json").write_text(json.dumps(index))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
