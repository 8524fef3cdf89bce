# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What anaconda's record (tasks/record.yml) takes in: the environment files' content on the controller is an input, so
an edited file makes the next run a full one; the managed paths cover the prefix and each environment."""

import pathlib

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import defaults, load

pytestmark = pytest.mark.usefixtures("ansible_plugin_loader")  # lookups in the role's templates

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "anaconda"


def render(name, tmp_path, **extra):
    variables = dict(defaults(ROLE), **load(ROLE / "vars" / "main.yml"))
    variables.update(inventory_dir=str(tmp_path), anaconda_environments=[{"name": "train", "file": "envs/train.yml"}],
                     ansible_check_mode=False, **extra)
    return Templar(loader=DataLoader(), variables=variables).template(variables[name])


def test_an_edited_environment_file_changes_the_inputs(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "train.yml").write_text("name: train\ndependencies: [python=3.12]\n")
    before = render("__anaconda_converged_inputs", tmp_path)
    assert render("__anaconda_converged_inputs", tmp_path) == before
    (tmp_path / "envs" / "train.yml").write_text("name: train\ndependencies: [python=3.13]\n")
    after = render("__anaconda_converged_inputs", tmp_path)
    assert len(after["environment_files"]) == 1 and after != before


def test_a_missing_environment_file_is_no_error_here(tmp_path):
    # preflight names the missing file, in the full run the changed inputs lead to
    assert render("__anaconda_converged_inputs", tmp_path) == {"environment_files": []}


def test_the_paths_cover_the_prefix_and_each_environment(tmp_path):
    paths = render("__anaconda_managed_paths", tmp_path)
    assert "/opt/anaconda3/conda-meta" in paths and "/etc/profile.d/dlinfra-conda.sh" in paths
    assert "/opt/anaconda3/envs/train/conda-meta" in paths
    assert "/opt/anaconda3/envs/train/conda-meta/dlinfra-environment.yml" in paths


def test_without_jupyter_users_the_record_holds_no_jupyter_item(tmp_path):
    assert not [path for path in render("__anaconda_managed_paths", tmp_path) if "jupyter" in path]
    assert render("__anaconda_managed_services", tmp_path) == []


def test_the_jupyter_servers_packages_settings_and_services_are_recorded(tmp_path):
    users = [{"name": "alice", "port": 8888, "token": "0123456789abcdef"}]
    paths = render("__anaconda_managed_paths", tmp_path, anaconda_jupyter_users=users)
    assert {"/opt/anaconda3/jupyter/bin", "/opt/anaconda3/jupyter/share/jupyter/kernels", "/etc/dlinfra-jupyter",
            "/etc/dlinfra-jupyter/alice", "/etc/dlinfra-jupyter/alice/jupyter_server_config.json",
            "/etc/systemd/system/dlinfra-jupyter@.service", "/opt/anaconda3/envs/train/bin"} <= set(paths)
    assert render("__anaconda_managed_services", tmp_path, anaconda_jupyter_users=users) == [
        "dlinfra-jupyter@alice.service"]
    assert render("__anaconda_jupyter_kernels", tmp_path) == {"train": "conda-env-train"}
