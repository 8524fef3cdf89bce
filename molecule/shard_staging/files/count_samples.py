"""Verify helper: iterate shards with the real WebDataset reader and print {shard list file: samples read} as JSON.

  count_samples.py LIST_FILE...   each LIST_FILE holds one local shard path per line (a node's shards.txt, fetched)
"""
import json
import sys

import webdataset


def count(list_file):
    with open(list_file) as handle:
        paths = [line.strip() for line in handle if line.strip()]
    if not paths:
        return 0
    return sum(1 for _sample in webdataset.WebDataset(paths, shardshuffle=False, empty_check=False))


if __name__ == "__main__":
    print(json.dumps({list_file: count(list_file) for list_file in sys.argv[1:]}))
