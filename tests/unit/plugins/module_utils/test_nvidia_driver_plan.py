# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver plan's place is defined once (module_utils/nvidia_driver_plan.py): the roles' copies of it, which they
need because a role cannot read another role's variables, and rolling_plan's documented default all equal it."""

import pathlib

import pytest
import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_driver_plan import DRIVER_PLAN_FILE
from ansible_collections.dlinfra.gpu_cluster.plugins.modules import rolling_plan

ROLES = pathlib.Path(__file__).resolve().parents[4] / "roles"
COPIES = [("nvidia_driver", "__nvidia_driver_plan_file"), ("nccl", "__nccl_driver_plan_file"),
          ("validate", "__validate_driver_plan_file"), ("rolling_upgrade", "__rolling_upgrade_driver_record")]


@pytest.mark.parametrize("role, variable", COPIES)
def test_each_role_reads_and_writes_the_one_plan_file(role, variable):
    assert yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())[variable] == DRIVER_PLAN_FILE


def test_no_other_role_file_names_the_plan_file():
    """A new reader takes one of the copies above (or adds its own to COPIES), not a literal in its tasks."""
    named = sorted(str(path.relative_to(ROLES)) for path in ROLES.glob("*/*/*.yml")
                   if DRIVER_PLAN_FILE in path.read_text())
    assert named == sorted("%s/vars/main.yml" % role for role, _variable in COPIES)


def test_rolling_plan_documents_the_same_default():
    documented = yaml.safe_load(rolling_plan.DOCUMENTATION)["options"]["driver_plan_file"]["default"]
    assert documented == DRIVER_PLAN_FILE
