# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""site.yml stops when the inventory gives it no hosts (instead of matching nothing and exiting 0), and
init_inventory writes the example lab for a user who has no clone. Real ansible-playbook runs on localhost only."""

import filecmp
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PLAYBOOK = pathlib.Path(sys.executable).with_name("ansible-playbook")


def run(*args, cwd):
    # This checkout's collection (the plays call its filters), not whatever copy an earlier run left in ~/.ansible.
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PWD=str(cwd),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"))
    return subprocess.run([str(PLAYBOOK), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("inventory, missing", [
    (None, "gpu_cluster, head, gpu_nodes, cpu_nodes, stage_targets"),
    ("all:\n  hosts:\n    node1:\n", "gpu_cluster, head, gpu_nodes, cpu_nodes, stage_targets"),
    ("gpu_cluster:\n  children:\n    rack_x:\n      hosts:\n        node1:\n", "head, gpu_nodes, cpu_nodes, stage_targets"),
])
def test_site_without_managed_hosts_fails_naming_the_groups(tmp_path, inventory, missing):
    source = tmp_path / "does-not-exist"
    if inventory is not None:
        source = tmp_path / "hosts.yml"
        source.write_text(inventory)
    result = run(str(ROOT / "site.yml"), "-i", str(source), cwd=tmp_path)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, output
    assert "empty or missing here: %s." % missing in output
    assert "dlinfra.gpu_cluster.init_inventory" in output


def test_the_example_lab_passes_the_check(tmp_path):
    result = run(str(ROOT / "playbooks" / "inventory_check.yml"), "-i", str(ROOT / "inventories" / "lab"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_init_inventory_copies_the_example_lab_and_never_overwrites(tmp_path):
    dest = tmp_path / "inventories" / "mylab"
    # Relative, as the README writes it: relative to where the command runs.
    first = run(str(ROOT / "playbooks" / "init_inventory.yml"), "-e", "dest=inventories/mylab", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    example = ROOT / "inventories" / "lab"
    files = sorted(str(path.relative_to(example)) for path in example.rglob("*") if path.is_file())
    assert files == sorted(str(path.relative_to(dest)) for path in dest.rglob("*") if path.is_file())
    assert all(filecmp.cmp(example / name, dest / name, shallow=False) for name in files)
    (dest / "hosts.yml").write_text("# mine\n")
    again = run(str(ROOT / "playbooks" / "init_inventory.yml"), "-e", "dest=%s" % dest, cwd=tmp_path)
    assert again.returncode != 0
    assert "is not empty; nothing was written" in again.stdout + again.stderr
    assert (dest / "hosts.yml").read_text() == "# mine\n"


def test_init_inventory_needs_a_destination(tmp_path):
    result = run(str(ROOT / "playbooks" / "init_inventory.yml"), cwd=tmp_path)
    assert result.returncode != 0
    assert "-e dest=" in result.stdout + result.stderr


@pytest.mark.parametrize("limit, refused", [
    ("sim-gpu1", True),
    ("sim-gpu1,sim-head", False),
    ("cluster_sim", False),
    ("sim-store", False),
])
def test_a_limit_without_the_cluster_head_is_refused(tmp_path, limit, refused):
    result = run(str(ROOT / "playbooks" / "inventory_check.yml"), "-i", str(ROOT / "inventories" / "sim"), "--limit", limit,
                 cwd=tmp_path)
    output = " ".join((result.stdout + result.stderr).split())
    assert (result.returncode != 0) == refused, output
    assert ("fix: add the head (--limit sim-gpu1,sim-head) or slice by cluster (--limit cluster_sim)" in output) == refused
