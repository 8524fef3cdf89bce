"""Test fixture: write a small WebDataset dataset (tar shards of samples) plus its SHA256SUMS and wids index.

  make_dataset.py ROOT NAME SHARDS SAMPLES_PER_SHARD [EXTRA_NAME ...]

Shards are ROOT/NAME/chunks-000000.tar ... and, for each EXTRA_NAME, ROOT/NAME/EXTRA_NAME.tar; each sample is
a .txt and a .cls member sharing its key, as WebDataset groups them. The content is deterministic.
"""
import hashlib
import io
import json
import os
import sys
import tarfile


def write_shard(path, first_sample, samples):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for number in range(first_sample, first_sample + samples):
            key = "sample%07d" % number
            for extension, text in (("txt", "caption of sample %d " % number * 20), ("cls", str(number % 10))):
                data = text.encode()
                member = tarfile.TarInfo("%s.%s" % (key, extension))
                member.size, member.mtime = len(data), 1700000000
                tar.addfile(member, io.BytesIO(data))


def main(root, name, shards, samples, *extra):
    directory = os.path.join(root, name)
    os.makedirs(directory, exist_ok=True)
    names = ["chunks-%06d.tar" % i for i in range(int(shards))] + ["%s.tar" % e for e in extra]
    entries = []
    for position, shard in enumerate(names):
        path = os.path.join(directory, shard)
        write_shard(path, position * int(samples), int(samples))
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        entries.append({"url": shard, "nsamples": int(samples), "filesize": os.path.getsize(path), "sha256": digest})
    with open(os.path.join(directory, "SHA256SUMS"), "w") as handle:
        handle.writelines("%s  %s\n" % (entry["sha256"], entry["url"]) for entry in entries)
    with open(os.path.join(directory, "index.json"), "w") as handle:
        json.dump({"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": name, "shardlist": entries}, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
