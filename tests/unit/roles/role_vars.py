# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's variables as Ansible loads them, for the role tests: YAML marked trusted so Templar renders it, and the
platform file that tasks/main.yml's first_found would include."""

from __future__ import annotations

import pathlib
import re

import yaml

from ansible.template import trust_as_template


def trust(value):
    """Strings (in lists and dicts too) marked as templates, as Ansible marks what it reads from a role."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trust(item) for item in value]
    if isinstance(value, dict):
        return {key: trust(item) for key, item in value.items()}
    return value


def load(path):
    return trust(yaml.safe_load(path.read_text()))


def defaults(role):
    """The role's defaults over those of the roles it depends on (meta/main.yml), as Ansible layers them."""
    variables = {}
    for dependency in yaml.safe_load((role / "meta" / "main.yml").read_text()).get("dependencies") or []:
        name = dependency["role"] if isinstance(dependency, dict) else dependency
        variables.update(defaults(role.parent / name.split(".")[-1]))
    variables.update(load(role / "defaults" / "main.yml"))
    return variables


def platform_file(role, distribution, major, os_family):
    """The vars file first_found picks in role, in its order: <distribution>_<major>, <distribution>, <os_family>."""
    for name in ("%s_%s.yml" % (distribution, major), "%s.yml" % distribution, "%s.yml" % os_family):
        if (role / "vars" / name).exists():
            return role / "vars" / name
    raise AssertionError("no vars file for %s %s in %s" % (distribution, major, role))


def role_vars(role, distribution, major, os_family):
    """The role's defaults, its vars/main.yml, then the platform file its tasks include on top."""
    variables = {}
    variables.update(defaults(role))
    variables.update(load(role / "vars" / "main.yml"))
    variables.update(load(platform_file(role, distribution, major, os_family)))
    return variables


MODULE_UTILS = pathlib.Path(__file__).resolve().parents[3] / "plugins" / "module_utils"
_MODULE_UTILS_IMPORT = re.compile(r"^from ansible_collections\.dlinfra\.gpu_cluster\.plugins\.module_utils\.([\w.]+) import",
                                  re.M)


def imported_closure(start):
    """module_utils files (paths relative to it) that start imports, directly or not, with the package files on the way:
    what a role copies to a node to run start there."""
    found, todo = set(), [start]
    while todo:
        relative = todo.pop()
        if relative in found:
            continue
        found.add(relative)
        for module in _MODULE_UTILS_IMPORT.findall((MODULE_UTILS / relative).read_text()):
            parts = module.split(".")
            todo.append("/".join(parts) + ".py")
            for depth in range(1, len(parts)):
                todo.append("/".join(parts[:depth]) + "/__init__.py")
    return found
