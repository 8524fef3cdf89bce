# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the nvidia_driver role records the driver it planned for a node, and what the record holds.

The nvidia_driver role writes the record; the nccl, validate and rolling_upgrade roles and the rolling_plan module read
it. This is the one definition of its place. The roles hold it in their vars (``__nvidia_driver_plan_file``,
``__nccl_driver_plan_file``, ``__validate_driver_plan_file``, ``__rolling_upgrade_driver_record``), because a role
cannot read another role's variables when it runs in a play of its own; tests/unit/plugins/module_utils/
test_nvidia_driver_plan.py fails when any of them, or rolling_plan's documented default, differs from this.

The record is JSON: ``{"branch": "580", "flavor": "open" | "proprietary", "architectures": ["Hopper", ...]}``.
"""

from __future__ import annotations

DRIVER_PLAN_FILE = "/var/lib/dlinfra/nvidia_driver.json"
