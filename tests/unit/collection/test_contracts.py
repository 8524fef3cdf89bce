# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The contracts between the parts (docs/maintaining.md): plugins take what roles hand them as arguments, never a role's
private variable by name; the values several roles share are defined once, in the gpu_cluster role."""
import ast
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
PRIVATE_NAME = re.compile(r"^__[a-z][a-z0-9_]*[a-z0-9]$")  # __nvidia_driver_node, not __main__
SHARED = {"gpu_cluster_group_pattern": '"^cluster_"', "gpu_cluster_driver_plan_file": "/var/lib/dlinfra/nvidia_driver.json"}


def private_names(path):
    return sorted({node.value for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str) and PRIVATE_NAME.match(node.value)})


def test_no_plugin_names_a_roles_private_variable():
    named = {str(path.relative_to(ROOT)): private_names(path) for path in sorted((ROOT / "plugins").rglob("*.py"))}
    assert {path: names for path, names in named.items() if names} == {}


def test_the_check_sees_a_private_name_in_code(tmp_path):
    planted = tmp_path / "plugin.py"
    planted.write_text('ROOM = hostvars[host]["__shard_staging_room"]\nif __name__ == "__main__":\n    pass\n')
    assert private_names(planted) == ["__shard_staging_room"]


def role_files():
    paths = list(ROOT.glob("roles/*/**/*.yml")) + list(ROOT.glob("roles/*/**/*.j2")) + list(ROOT.glob("playbooks/*.yml"))
    return sorted(path for path in paths if not path.is_relative_to(ROOT / "roles" / "gpu_cluster"))


def test_each_shared_value_is_defined_once_in_the_gpu_cluster_role():
    defaults = (ROOT / "roles" / "gpu_cluster" / "defaults" / "main.yml").read_text()
    for name, value in SHARED.items():
        assert "\n%s: %s\n" % (name, value) in defaults
    copies = {str(path.relative_to(ROOT)): [value for value in SHARED.values() if value.strip('"') in path.read_text()]
              for path in role_files()}
    assert {path: values for path, values in copies.items() if values} == {}


def test_a_role_that_reads_a_shared_value_depends_on_the_gpu_cluster_role():
    for role in sorted(path for path in (ROOT / "roles").iterdir() if path.name != "gpu_cluster"):
        reads = any("gpu_cluster_" in path.read_text() for path in role.rglob("*") if path.suffix in (".yml", ".j2")
                    and path.parts[-2] != "meta")
        dependencies = yaml.safe_load((role / "meta" / "main.yml").read_text()).get("dependencies") or []
        names = [item["role"] if isinstance(item, dict) else item for item in dependencies]
        assert not reads or "dlinfra.gpu_cluster.gpu_cluster" in names, role.name


def lines(path):
    return len(path.read_text().splitlines())


def test_actions_are_thin_and_each_util_file_is_read_in_a_sitting():
    """An action is argument handling and a call (150 lines at most); a util file holds one concern (500 at most)."""
    actions = {path.name: lines(path) for path in (ROOT / "plugins" / "action").glob("*.py") if lines(path) > 150}
    utils = {str(path.relative_to(ROOT)): lines(path) for folder in ("plugin_utils", "module_utils")
             for path in (ROOT / "plugins" / folder).rglob("*.py") if lines(path) > 500}
    assert (actions, utils) == ({}, {})


def test_plugin_utils_holds_private_packages_only():
    folder = ROOT / "plugins" / "plugin_utils"
    loose = sorted(path.name for path in folder.glob("*.py") if path.name != "__init__.py")
    packages = [path for path in folder.iterdir() if path.is_dir() and path.name != "__pycache__"]
    assert loose == [] and packages
    assert [path.name for path in packages if not path.name.startswith("_") or not (path / "__init__.py").exists()] == []
    assert [path.name for path in packages if "Private" not in (path / "__init__.py").read_text()] == []
