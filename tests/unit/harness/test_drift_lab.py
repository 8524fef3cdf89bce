# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/harness/lab/drift_lab.py's cases against the roles and the lab's inventory, without the lab: the stage finds each
role's check by its task name, a drift names a record item the way converged_state words its reason, and the microk8s
cases hold to what the docstring says check mode relies on."""

import importlib.util
import pathlib
import sys

import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import converged_state

ROOT = pathlib.Path(__file__).resolve().parents[3]
HARNESS = ROOT / "tests" / "harness" / "lab"
sys.path.insert(0, str(HARNESS))  # drift_lab imports lab, beside it
SPEC = importlib.util.spec_from_file_location("drift_lab", HARNESS / "drift_lab.py")
drift_lab = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(drift_lab)


def check_tasks(role):
    """The names of the role's tasks/main.yml tasks that read its record (converged_state without record)."""
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text())
    return [task["name"] for task in tasks
            if "dlinfra.gpu_cluster.converged_state" in task and not task["dlinfra.gpu_cluster.converged_state"].get("record")]


def test_the_stage_models_every_role_that_keeps_a_record():
    keeping = sorted(path.parent.parent.name for path in (ROOT / "roles").glob("*/tasks/main.yml")
                     if check_tasks(path.parent.parent.name))
    assert sorted(drift_lab.RECORDED_ROLES) == keeping


def test_each_role_names_its_check_as_the_stage_finds_it():
    for role in drift_lab.RECORDED_ROLES:
        assert check_tasks(role) == [drift_lab.CHECK_TASK], role


def test_each_drift_is_of_a_record_the_stage_checks():
    for drift in drift_lab.DRIFTS:
        assert (drift.role, drift.node) in drift_lab.RECORDS, drift
        assert drift.read and drift.change and drift.what, drift


def test_each_worker_has_a_microk8s_drift_of_its_own():
    # An addon's drift reaches the workers in check mode only (the heads' play repairs it in a real run): the roles that
    # drift are the same in both runs only while every worker drifts on its own.
    own = {drift.node for drift in drift_lab.DRIFTS if drift.role == "microk8s"}
    assert set(drift_lab.NODES) <= own


def test_the_microk8s_user_is_the_lab_inventorys():
    group_vars = yaml.safe_load((ROOT / "inventories" / "sim" / "group_vars" / "gpu_cluster.yml").read_text())
    assert group_vars["microk8s_users"] == [drift_lab.MICROK8S_USER]


def test_a_reason_names_the_items_converged_state_found_drifted():
    record = {"inputs_digest": "d", "items": {"snap microk8s": "v1.32 8148 1.32/stable classic,held",
                                              "member microk8s dlinfra-admin": "member",
                                              "observed k8s node": "worker Ready nvidia.com/gpu.present=true",
                                              "observed k8s addon hostpath-storage": "enabled"}}
    now = dict(record["items"], **{"member microk8s dlinfra-admin": "not member",
                                   "observed k8s node": "worker Ready nvidia.com/gpu.present=-"})
    converged, reason, dummy = converged_state.compare(record, "d", now)
    assert not converged
    cases = {drift.item: drift for drift in drift_lab.DRIFTS if drift.item}
    assert drift_lab.named(reason, cases["member microk8s dlinfra-admin"].item)
    assert drift_lab.named(reason, cases["observed k8s node"].item)
    assert not drift_lab.named(reason, cases["snap microk8s"].item)
    assert not drift_lab.named(reason, cases["observed k8s addon hostpath-storage"].item)
    assert drift_lab.named(reason, "")
