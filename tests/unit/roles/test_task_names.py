# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every name a role's task creates carries the role's prefix: `__<role>_<name>`.

A registered result or a set_fact lives on the host for the rest of the playbook run, and it outranks task vars and
role defaults. A short name (`__installed`, `__expected`) therefore meets a variable of the same name from the calling
play or another role, and the one that wins is the wrong one. The names checked: `register:`, set_fact keys,
include_vars' `name:`, task- and block-level `vars:` (include_role and include_tasks included) and
`loop_control.loop_var`/`index_var`. Allowed besides the prefix: the collection's public role variables (a role's
defaults and argument specs, which a role may hand to another role it includes), the facts listed in OUTPUT_FACTS,
`item`, and Ansible's own variables."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
ROLE_NAMES = sorted(path.name for path in ROLES.iterdir() if path.is_dir())
TASK_FILES = sorted(path for role in ROLE_NAMES for part in ("tasks", "handlers")
                    for path in (ROLES / role / part).rglob("*") if path.suffix in (".yml", ".yaml"))

# Facts a role sets for playbooks to read, public by name (role-prefixed, no leading underscores).
OUTPUT_FACTS = {
    "rolling_upgrade": {"rolling_upgrade_outcome"},  # the node's result; playbooks/upgrade.yml prints the summary
}
# Ansible's own: the default loop variable, connection and behaviour variables (ansible_become, ansible_python_...)
# and the special variables a task may shadow.
ANSIBLE_OWN = re.compile(r"^(item|ansible_\w+|inventory_hostname|inventory_hostname_short|hostvars|groups|group_names"
                         r"|play_hosts|playbook_dir|role_path|role_name|omit)$")
SET_FACT = {"set_fact", "ansible.builtin.set_fact", "ansible.legacy.set_fact"}
INCLUDE_VARS = {"include_vars", "ansible.builtin.include_vars", "ansible.legacy.include_vars"}
NESTED = ("block", "rescue", "always")


def created_names(tasks):
    """(kind, name) for each name the tasks create, blocks descended into."""
    found = []
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        if "register" in task:
            found.append(("register", task["register"]))
        for key in SET_FACT & task.keys():
            if isinstance(task[key], dict):
                found.extend(("set_fact", name) for name in task[key] if name != "cacheable")
        for key in INCLUDE_VARS & task.keys():
            if isinstance(task[key], dict) and "name" in task[key]:
                found.append(("include_vars", task[key]["name"]))
        if isinstance(task.get("vars"), dict):
            found.extend(("vars", name) for name in task["vars"])
        for key in ("loop_var", "index_var"):
            if isinstance(task.get("loop_control"), dict) and key in task["loop_control"]:
                found.append((key, task["loop_control"][key]))
        for key in NESTED:
            found.extend(created_names(task.get(key)))
    return found


def public_variables():
    """Every role's public variables: the keys of its defaults and the options of its argument specs."""
    names = set()
    for role in ROLE_NAMES:
        defaults = ROLES / role / "defaults" / "main.yml"
        if defaults.exists():
            names.update(yaml.safe_load(defaults.read_text()) or {})
        specs = ROLES / role / "meta" / "argument_specs.yml"
        if specs.exists():
            for entry in (yaml.safe_load(specs.read_text()) or {}).get("argument_specs", {}).values():
                names.update(entry.get("options", {}))
    return names


PUBLIC = public_variables()


def unprefixed(role, tasks):
    """The names of `tasks` (of role `role`) that are neither `__<role>_...` nor allowed otherwise."""
    return [(kind, name) for kind, name in created_names(tasks)
            if not str(name).startswith("__%s_" % role) and name not in PUBLIC
            and name not in OUTPUT_FACTS.get(role, ()) and not ANSIBLE_OWN.match(str(name))]


def test_the_walk_sees_every_role_and_finds_names():
    # gpu_cluster has no tasks: it only defines the values several roles share
    assert {path.relative_to(ROLES).parts[0] for path in TASK_FILES} == set(ROLE_NAMES) - {"gpu_cluster"}
    total = sum(len(created_names(yaml.safe_load(path.read_text()))) for path in TASK_FILES)
    assert total > 300, "the walk found only %d names: it misses some task structure" % total


def test_the_check_catches_short_and_foreign_names():
    tasks = [{"name": "a", "ansible.builtin.command": "true", "register": "__installed"},
             {"name": "b", "block": [{"name": "c", "ansible.builtin.set_fact": {"__nccl_x": 1, "cacheable": True}},
                                     {"name": "d", "ansible.builtin.debug": {}, "vars": {"__expected": 1},
                                      "loop_control": {"loop_var": "__engine"}}],
              "always": [{"name": "e", "ansible.builtin.include_vars": {"file": "x.yml", "name": "loaded"}}]},
             {"name": "f", "ansible.builtin.debug": {}, "vars": {"__nvidia_driver_ok": 1, "nvidia_driver_version": "1"},
              "loop_control": {"loop_var": "item"}}]
    assert unprefixed("nvidia_driver", tasks) == [("register", "__installed"), ("set_fact", "__nccl_x"),
                                                  ("vars", "__expected"), ("loop_var", "__engine"),
                                                  ("include_vars", "loaded")]


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: str(p.relative_to(ROLES)))
def test_task_level_names_carry_the_role_prefix(path):
    role = path.relative_to(ROLES).parts[0]
    bad = unprefixed(role, yaml.safe_load(path.read_text()))
    assert not bad, "roles/%s: %s; name them __%s_<name>" % (
        path.relative_to(ROLES), ", ".join("%s %s" % (kind, name) for kind, name in bad), role)
