"""The Python distributions the collection's controller side imports beyond ansible-core and the standard library:
what an execution environment must be able to install for it (meta/ee-requirements.txt). The controller side is every
plugin but the modules, which run on the nodes (stdlib only), plus the module_utils the plugins share. Imports inside
try/except ImportError count too: an optional package is still one the execution environment should offer. The
distributions ansible-core itself requires (PyYAML, Jinja2, ...) come with it, so they are not counted.

  controller_deps.py     one distribution name a line (what ee_check.sh compares ansible-builder's result with)
"""
import ast
import importlib.metadata
import pathlib
import sys

from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[3]
PROVIDED = {"__future__", "ansible", "ansible_collections"}


def imported_modules(source):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def controller_distributions(root=ROOT):
    modules = set()
    for path in sorted((root / "plugins").rglob("*.py")):
        if "modules" not in path.relative_to(root / "plugins").parts[:1]:
            modules.update(imported_modules(path.read_text()))
    third_party = sorted(modules - PROVIDED - set(sys.stdlib_module_names))
    distributions = importlib.metadata.packages_distributions()
    core = {Requirement(line).name.lower() for line in importlib.metadata.requires("ansible-core") or []}
    return sorted({(distributions.get(name) or [name])[0].lower() for name in third_party} - core)


if __name__ == "__main__":
    print("\n".join(controller_distributions()))
