# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collector's files on the node: the role copies every collection module the collector imports (and no other),
and it reads the staging index where shard_staging writes it by default."""

from __future__ import annotations

import pathlib

import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.staging_metrics import DEFAULT_INDEX
from role_vars import imported_closure

ROOT = pathlib.Path(__file__).resolve().parents[4]


def test_the_role_copies_every_module_the_collector_imports():
    copied = yaml.safe_load((ROOT / "roles" / "gpu_monitoring" / "vars" / "main.yml").read_text())["__gpu_monitoring_module_utils"]
    assert len(copied) == len(set(copied))
    assert sorted(copied) == sorted(imported_closure("gpu_metrics.py"))


def test_the_collector_reads_the_index_where_shard_staging_writes_it():
    monitoring = yaml.safe_load((ROOT / "roles" / "gpu_monitoring" / "defaults" / "main.yml").read_text())
    staging = yaml.safe_load((ROOT / "roles" / "shard_staging" / "defaults" / "main.yml").read_text())
    assert monitoring["gpu_monitoring_staging_index"] == staging["shard_staging_index"] == DEFAULT_INDEX
