# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths a user owns come from the inventory's directory or the user's home, never from playbook_dir or role_path:
run as dlinfra.gpu_cluster.<role> from a Galaxy install, those point inside the installed collection, where a
kubeconfig with cluster-admin credentials or a user's environment file has no business being."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import defaults, load, trust

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
# What the role reads or writes: knobs (defaults), derived values (vars), tasks, handlers, templates, the argument specs.
SCANNED = sorted(path for part in ("defaults", "vars", "tasks", "handlers", "templates", "meta")
                 for path in ROLES.glob("*/%s/**/*" % part) if path.is_file())
# role_path is fine for the role's own files (its platform vars) and the collection's plugins (the collector's
# module_utils that gpu_monitoring copies to the node): those are meant to be inside the collection.
ROLE_OWN_FILES = re.compile(r"\{\{\s*role_path\s*\}\}/((vars|files|templates)\b|\.\./\.\./plugins/)")


def test_the_scan_sees_every_role():
    assert {path.relative_to(ROLES).parts[0] for path in SCANNED} == {p.name for p in ROLES.iterdir() if p.is_dir()}


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(ROLES)))
def test_no_role_path_comes_from_the_playbook_or_the_role_directory(path):
    text = path.read_text()
    assert "playbook_dir" not in text, "%s: a path from playbook_dir lands inside an installed collection" % path
    assert "role_path" not in ROLE_OWN_FILES.sub("", text), "%s: role_path only for the role's own files" % path


def templar(role, home, **variables):
    merged = {}
    merged.update(defaults(ROLES / role))
    if (ROLES / role / "vars" / "main.yml").exists():
        merged.update(load(ROLES / role / "vars" / "main.yml"))
    merged.update(trust(variables))
    return Templar(loader=DataLoader(), variables=merged)


def resolve(templar_, expression):
    return templar_.template(trust("{{ %s }}" % expression))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return str(tmp_path / "home")


ENVIRONMENTS = [{"name": "torch", "file": "envs/torch.yml"}, {"name": "abs", "file": "/srv/envs/abs.yml"},
                {"name": "mine", "file": "~/envs/mine.yml"}]


def test_anaconda_environment_files_start_at_the_inventory_directory(home):
    paths = resolve(templar("anaconda", home, inventory_dir="/work/lab", playbook_dir="/collection/playbooks",
                            anaconda_environments=ENVIRONMENTS), "__anaconda_env_paths")
    assert paths == ["/work/lab/envs/torch.yml", "/srv/envs/abs.yml", home + "/envs/mine.yml"]


def test_anaconda_environment_files_of_an_inline_inventory_start_at_home(home):
    # -i host1,host2, gives inventory_dir None: no directory to start from, and never the collection's.
    paths = resolve(templar("anaconda", home, inventory_dir=None, anaconda_environments=ENVIRONMENTS[:1]),
                    "__anaconda_env_paths")
    assert paths == [home + "/envs/torch.yml"]


def test_microk8s_offline_snaps_start_at_the_inventory_directory(home):
    snaps = [{"snap": "snaps/microk8s_8148.snap", "assert": "~/snaps/microk8s_8148.assert"}]
    assert resolve(templar("microk8s", home, inventory_dir="/work/lab", microk8s_offline_snaps=snaps),
                   "__microk8s_offline") == [["/work/lab/snaps/microk8s_8148.snap", home + "/snaps/microk8s_8148.assert"]]
    assert resolve(templar("microk8s", home, inventory_dir=None, microk8s_offline_snaps=snaps),
                   "__microk8s_offline")[0][0] == home + "/snaps/microk8s_8148.snap"


def test_the_kubeconfig_lands_in_the_users_kube_directory(home):
    """The default is ~/.kube, expanded on the controller for the user running Ansible by the tasks that write it."""
    assert load(ROLES / "microk8s" / "defaults" / "main.yml")["microk8s_kubeconfig_dir"] == "~/.kube"
    tasks = yaml.safe_load((ROLES / "microk8s" / "tasks" / "kubeconfig.yml").read_text())
    on_controller = [task for task in tasks if task.get("delegate_to") == "localhost"]
    assert len(on_controller) == 2
    rendered = templar("microk8s", home, __microk8s_cluster="cluster_a")
    directory = rendered.template(trust(on_controller[0]["ansible.builtin.file"]["path"]))
    dest = rendered.template(trust(on_controller[1]["ansible.builtin.copy"]["dest"]))
    assert (directory, dest) == (home + "/.kube", home + "/.kube/cluster_a.kubeconfig")


def test_shard_plans_land_next_to_the_inventory(home):
    assert resolve(templar("shard_staging", home, inventory_dir="/work/lab"), "shard_staging_plan_dir") \
        == "/work/lab/.shard_staging"
    # The shard_plan action expands ~ on the controller.
    assert resolve(templar("shard_staging", home, inventory_dir=None), "shard_staging_plan_dir") == "~/.shard_staging"
