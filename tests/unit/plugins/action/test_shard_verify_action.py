"""shard_verify's controller half: which shards a plan puts on a host, in both modes."""
from __future__ import annotations

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.action.shard_verify import planned_shards
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan

SHARDS = [{"name": "s-%02d.tar" % i, "url": "http://store/s-%02d.tar" % i, "size": 100 + i, "sha256": "%064x" % i}
          for i in range(20)]
NODES = {"a": {"free_bytes": 10 ** 6}, "b": {"free_bytes": 10 ** 6}, "c": {"free_bytes": 10 ** 6}}


def plan_for(mode, replicas=1):
    plan = make_plan({"name": "ds", "mode": mode, "replicas": replicas}, SHARDS, NODES)
    plan["sources"] = {s["name"]: {"url": s["url"], "sha256": s["sha256"]} for s in SHARDS}  # as shard_plan writes it
    return plan


def test_a_replicated_plan_puts_every_shard_on_every_node():
    plan = plan_for("replicate")
    for host in NODES:
        assert [s["name"] for s in planned_shards(plan, host)] == [s["name"] for s in SHARDS]
    assert planned_shards(plan, "a")[3] == {"name": "s-03.tar", "size": 103, "sha256": "%064x" % 3}


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_partitioned_plan_gives_each_shard_to_its_replicas(replicas):
    plan = plan_for("partition", replicas)
    held = [s["name"] for host in NODES for s in planned_shards(plan, host)]
    assert sorted(held) == sorted([s["name"] for s in SHARDS] * replicas)
    assert planned_shards(plan, "nobody") == []
