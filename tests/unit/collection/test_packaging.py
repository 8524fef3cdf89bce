# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a user gets from Galaxy: the built tarball holds the collection and nothing that only makes sense in a clone,
galaxy.yml declares exactly the collections the shipped code calls, and the execution-environment metadata names
exactly the controller-side Python packages the plugins import (tests/harness/packaging/ee_check.sh runs ansible-builder on it).
Builds the real tarball once (under a second)."""

import ast
import importlib.util
import pathlib
import re
import subprocess
import sys
import tarfile

import ansible_collections
import pytest
import yaml
from ansible_builder.ee_schema import validate_schema
from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[3]
GALAXY = pathlib.Path(sys.executable).with_name("ansible-galaxy")
SELF = "dlinfra.gpu_cluster"
FQCN = re.compile(r"\b([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z_][a-z0-9_]*")
PLUGIN_DOCS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run([str(GALAXY), "collection", "build", "--output-path", str(out), str(ROOT)],
                            cwd=out, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    (path,) = out.glob("dlinfra-gpu_cluster-*.tar.gz")
    with tarfile.open(path) as archive:
        return {member.name: member for member in archive.getmembers()}, path


# What an installed collection is made of. Anything else (a new top-level file, a test helper next to a role, a
# plan or kubeconfig a run from the clone wrote) fails here until it is either shipped on purpose or build-ignored.
SHIPPED_TOP = {"MANIFEST.json", "FILES.json", "README.md", "COPYING", "CHANGELOG.rst", "site.yml",
               "meta", "playbooks", "plugins", "roles", "inventories", "changelogs",
               "docs"}  # docs/validate_report.schema.json: the format of validate's report.json, for tools that read it
SHIPPED_UNDER = {
    "inventories": {"README.md", "lab"},  # the example lab init_inventory copies out; never the simulated lab
    "changelogs": {"changelog.yaml", "config.yaml"},  # released history; fragments are the clone's work in progress
}


def test_the_tarball_ships_nothing_that_only_makes_sense_in_a_clone(tarball):
    members = tarball[0]
    names = set(members)
    assert "ansible.cfg" not in names  # its collections_path = ./collections points at a link the build leaves out
    unexpected = sorted(
        name for name in names
        if name.split("/")[0] not in SHIPPED_TOP
        or (name.split("/")[0] in SHIPPED_UNDER and "/" in name and name.split("/")[1] not in SHIPPED_UNDER[name.split("/")[0]])
        or any(part.startswith(".") or part == "__pycache__" for part in name.split("/"))
    )
    assert unexpected == []
    for name, member in members.items():
        assert not member.issym() and not member.islnk(), "%s is a link" % name


def test_the_tarball_ships_what_users_run(tarball):
    names = set(tarball[0])
    roles = {path.name for path in (ROOT / "roles").iterdir() if path.is_dir()}
    assert {name.split("/")[1] for name in names if name.startswith("roles/") and name.count("/") >= 2} == roles
    for needed in ("site.yml", "playbooks/site.yml", "playbooks/init_inventory.yml", "inventories/lab/hosts.yml",
                   "meta/runtime.yml", "meta/execution-environment.yml", "meta/ee-requirements.txt",
                   "CHANGELOG.rst", "changelogs/changelog.yaml", "changelogs/config.yaml",
                   # what docs/grafana.md copies out of the installed collection
                   "docs/grafana.md", "roles/gpu_monitoring/files/grafana/dlinfra-gpu-cluster.json",
                   "roles/gpu_monitoring/files/grafana/provisioning/dashboards/dlinfra.yml",
                   "roles/gpu_monitoring/files/grafana/provisioning/datasources/dlinfra-prometheus.yml"):
        assert needed in names


def installed_collections():
    """ns.name of every collection the venv's ansible package carries: a dotted triple counts as a collection
    reference only when its first two parts name a real collection (not app.kubernetes.io or os.path.join)."""
    found = set()
    for base in ansible_collections.__path__:
        for namespace in pathlib.Path(base).iterdir():
            if namespace.is_dir():
                found.update("%s.%s" % (namespace.name, name.name) for name in namespace.iterdir()
                             if (name / "MANIFEST.json").is_file() or (name / "galaxy.yml").is_file())
    return found


class _AnyTagLoader(yaml.SafeLoader):
    """Ansible YAML (!unsafe, !vault) read as plain data."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                                    if isinstance(node, yaml.ScalarNode) else None)


def _yaml_strings(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "collections" and isinstance(value, list):  # the play/role keyword names collections bare
                yield from ("%s.x" % item for item in value if isinstance(item, str))
            yield from _yaml_strings(key)
            yield from _yaml_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _yaml_strings(item)
    elif isinstance(node, str):
        yield node


def _python_strings(source):
    """Imports and string constants, without docstrings and the DOCUMENTATION / EXAMPLES / RETURN blocks."""
    tree = ast.parse(source)
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            skipped.add(id(node.body[0].value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in PLUGIN_DOCS for t in node.targets):
            skipped.update(id(sub) for sub in ast.walk(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible_collections."):
            yield node.module.replace("ansible_collections.", "", 1)
        elif isinstance(node, ast.Import):
            yield from (alias.name.replace("ansible_collections.", "", 1) for alias in node.names
                        if alias.name.startswith("ansible_collections."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            yield node.value


def used_collections():
    """Collections the shipped code calls by FQCN: roles (tasks, handlers, vars, defaults, meta, templates), plugins
    (code, not their documentation), playbooks/ and site.yml. Test inventories and molecule are not shipped code."""
    known = installed_collections()
    strings = []
    yaml_files = sorted((ROOT / "roles").rglob("*.yml")) + sorted((ROOT / "playbooks").glob("*.yml")) + [ROOT / "site.yml"]
    for path in yaml_files:
        strings.extend(_yaml_strings(yaml.load(path.read_text(), Loader=_AnyTagLoader)))  # noqa: S506 (SafeLoader)
    strings.extend(path.read_text() for path in sorted((ROOT / "roles").rglob("*.j2")))
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        strings.extend(_python_strings(path.read_text()))
    used = {}
    for text in strings:
        for namespace, name in FQCN.findall(text):
            fqcn = "%s.%s" % (namespace, name)
            if fqcn in known and fqcn not in ("ansible.builtin", "ansible.legacy", SELF):
                used.setdefault(fqcn, text.strip()[:80])
    return used


def test_the_scan_finds_what_a_task_calls():
    assert "community.general" in used_collections()  # community.general.snap in the microk8s role
    assert list(_python_strings('"""kubernetes.core.k8s"""\nDOCUMENTATION = "a.b.c"\nx = "ansible.posix.sysctl"\n')) \
        == ["ansible.posix.sysctl"]


def test_galaxy_declares_exactly_the_collections_the_shipped_code_uses():
    declared = set(yaml.safe_load((ROOT / "galaxy.yml").read_text()).get("dependencies") or {})
    used = used_collections()
    assert sorted(declared - set(used)) == [], "declared in galaxy.yml but not used by roles, plugins or playbooks"
    assert sorted(set(used) - declared) == [], "used but not declared: %s" % used


def test_the_readme_names_the_declared_collections():
    declared = sorted(yaml.safe_load((ROOT / "galaxy.yml").read_text()).get("dependencies") or {})
    readme = " ".join((ROOT / "README.md").read_text().split())
    sentence = re.search(r"Requires ansible-core.*?\.(?=\s|$)", readme)
    assert sentence, "README's 'Use it' says which ansible-core and collections the collection needs"
    named = set(re.findall(r"`([a-z0-9_]+\.[a-z0-9_]+)`", sentence.group(0)))
    assert named == set(declared), sentence.group(0)


def _harness(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "harness" / "packaging" / ("%s.py" % name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_execution_environment_metadata_is_shipped_and_valid(tarball):
    names = set(tarball[0])
    definition = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    validate_schema(definition)  # ansible-builder's own schema check (version 3)
    assert definition["version"] == 3
    dependencies = definition["dependencies"]
    # ansible-builder's introspection reads these as files relative to the collection's root, in the installed copy.
    assert set(dependencies) <= {"python", "system"}
    for path in dependencies.values():
        assert not pathlib.PurePath(path).is_absolute() and (ROOT / path).is_file() and path in names
    assert "meta/execution-environment.yml" in names
    assert "requirements.txt" not in names  # the dev venv's pins; introspection would read it without the metadata


def test_the_execution_environment_python_requirements_are_what_the_controller_side_imports():
    definition = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    lines = [line.split("#", 1)[0].strip() for line in (ROOT / definition["dependencies"]["python"]).read_text().splitlines()]
    declared = sorted(Requirement(line).name.lower() for line in lines if line)
    assert declared == _harness("controller_deps").controller_distributions()
    # No system packages: the controller runs no command of its own, so no bindep.txt.
    assert "system" not in definition["dependencies"] and not (ROOT / "bindep.txt").exists()
