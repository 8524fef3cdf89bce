# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who joins a MicroK8s cluster and which of its nodes are Ready."""

import json

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.microk8s import microk8s_joins, microk8s_ready_names
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._microk8s.members import joins, ready_names


def node(name, ready, address):
    return {"metadata": {"name": name},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}],
                       "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": address}]}}


NODES = json.dumps({"items": [node("head-a1", "True", "10.0.0.1"), node("dgx01", "False", "10.0.0.21"),
                              node("dgx010", "True", "10.0.0.30")]})


@pytest.mark.parametrize("host, node_name, node_address, expected", [
    pytest.param("head-a1", "head-a1-new", "10.0.0.99", False, id="first-head-never"),
    pytest.param("dgx01", "dgx01", "10.0.0.21", False, id="member-by-name-and-address"),
    pytest.param("dgx01", "dgx01-renamed", "10.0.0.21", False, id="member-by-address"),
    pytest.param("dgx01", "dgx01", "10.0.0.77", False, id="member-by-name"),
    pytest.param("dgx02", "dgx02", "10.0.0.22", True, id="new-node"),
    pytest.param("dgx02", "dgx0", "10.0.0.2", True, id="a-prefix-is-not-a-name-nor-an-address"),
    pytest.param("dgx02", "dgx02", "dgx01", True, id="hostname-addresses-do-not-count"),
])
def test_joins(host, node_name, node_address, expected):
    assert joins(NODES, host, "head-a1", node_name, node_address) is expected


def test_an_empty_node_list_is_an_error_for_joins():
    with pytest.raises(ValueError):
        joins("", "dgx01", "head-a1", "dgx01", "10.0.0.21")


@pytest.mark.parametrize("text, expected", [
    pytest.param(NODES, ["head-a1", "dgx010"], id="ready-in-order"),
    pytest.param(json.dumps({"items": []}), [], id="no-nodes"),
    pytest.param("", [], id="no-output"),
    pytest.param(None, [], id="no-read"),
])
def test_ready_names(text, expected):
    assert ready_names(text) == expected


def test_the_filters():
    assert microk8s_joins(NODES, "dgx02", "head-a1", "dgx02", "10.0.0.22") is True
    assert microk8s_ready_names(NODES) == ["head-a1", "dgx010"]
