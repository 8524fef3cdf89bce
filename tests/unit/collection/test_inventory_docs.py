# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""inventories/README.md's precedence section says what Ansible really does with the example lab: the depth of each
group and the order a host's group_vars merge in, read from Ansible's own inventory and sort."""

import pathlib
import re

from ansible.inventory.helpers import sort_groups
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader

ROOT = pathlib.Path(__file__).resolve().parents[3]
README = (ROOT / "inventories" / "README.md").read_text()
INVENTORY = InventoryManager(loader=DataLoader(), sources=[str(ROOT / "inventories" / "lab")])


def test_the_depth_table_is_the_inventorys():
    documented = {int(depth): set(re.findall(r"`([a-z0-9_]+)`", groups.split(", which")[0]))  # not the why
                  for depth, groups in re.findall(r"^\| (\d) \| (.*) \|$", README, re.M)}
    real = {}
    for name, group in INVENTORY.groups.items():
        if name not in ("all", "ungrouped"):
            real.setdefault(group.depth, set()).add(name)
    assert documented == real


def test_the_merge_order_shown_is_the_one_ansible_uses():
    for host in ("dgx01", "head-a1"):
        order = [group.name for group in sort_groups(INVENTORY.get_host(host).get_groups())]
        assert "- `%s`: %s\n" % (host, ", ".join("`%s`" % name for name in order)) in README
    # The racks tie with gpu_nodes (a child of stage_targets too), so dgx01's rack merges after gpu_nodes by name only.
    assert INVENTORY.groups["rack_a1"].depth == INVENTORY.groups["gpu_nodes"].depth
    assert INVENTORY.groups["cluster_a"].depth == INVENTORY.groups["head"].depth < INVENTORY.groups["rack_a1"].depth
