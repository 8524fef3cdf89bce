# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/lab/airgap_lab.py's inventory of the air-gapped lab, without the lab: inventories/sim less one GPU node,
read by ansible-inventory with the second cluster beside it."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
HARNESS = ROOT / "tests" / "harness" / "lab"
sys.path.insert(0, str(HARNESS))  # airgap_lab imports lab, beside it
SPEC = importlib.util.spec_from_file_location("airgap_lab", HARNESS / "airgap_lab.py")
airgap_lab = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(airgap_lab)


def test_a_host_leaves_every_group_and_keeps_the_others_vars():
    tree = yaml.safe_load((ROOT / "inventories" / "sim" / "hosts.yml").read_text())
    left = airgap_lab.without_host(tree, "sim-gpu2")
    assert "sim-gpu2" not in json.dumps(left)
    assert "sim-gpu2" in json.dumps(tree)  # the original is not changed
    assert left["gpu_cluster"]["children"]["cluster_sim"]["children"]["rack_sim1"]["hosts"]["sim-gpu1"] == {
        "demo_image": "dlinfra-test/debian:trixie"}


def test_the_lab_inventory_has_one_gpu_node_in_each_cluster_and_the_store(tmp_path, monkeypatch):
    monkeypatch.setattr(airgap_lab, "LAB_INVENTORY", tmp_path / "cache" / "airgap-inventory")
    airgap_lab.write_lab_inventory()
    listed = json.loads(subprocess.run(
        [str(pathlib.Path(sys.executable).with_name("ansible-inventory")), "--list", "-i", str(airgap_lab.LAB_INVENTORY),
         "-i", str(ROOT / "tests" / "fixtures" / "airgap_hosts.yml")],
        capture_output=True, text=True, check=True).stdout)
    assert sorted(listed["_meta"]["hostvars"]) == ["sim-gpu1", "sim-head", "sim-store", "sim2-head"]
    assert listed["gpu_nodes"]["hosts"] == ["sim-gpu1"]
    assert sorted(listed["cluster_sim"]["children"]) == ["rack_sim1"]
    # group_vars came along: the variables every node of the lab takes
    assert listed["_meta"]["hostvars"]["sim-gpu1"]["demo_image"] == "dlinfra-test/debian:trixie"
    assert "preflight_apt_proxy" in listed["_meta"]["hostvars"]["sim-gpu1"]
