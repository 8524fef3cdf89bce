# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role that keeps a converged_state record must record what it manages, or a drift of it goes unseen on re-runs
(docs/re-runs.md): each file, repository, package and hold its tasks write names a variable that its record uses,
directly or through the variables that define it; the few it does not record are listed here with the reason."""

import pathlib
import re

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
RECORDING = ("preflight", "nvidia_driver", "nvidia_container_toolkit", "nccl", "anaconda", "gpu_monitoring",
             "microk8s")
# module -> the argument naming what it writes
WRITERS = {"ansible.builtin.template": "dest", "ansible.builtin.copy": "dest", "ansible.builtin.lineinfile": "path",
           "ansible.builtin.blockinfile": "path", "ansible.builtin.get_url": "dest", "ansible.builtin.file": "path",
           "ansible.builtin.deb822_repository": "name", "ansible.builtin.dpkg_selections": "name",
           "ansible.builtin.apt": "name", "ansible.builtin.systemd_service": "name"}
NAME = re.compile(r"\b(__[a-z0-9_]+|[a-z][a-z0-9_]+)\b")
# (role, what the task names) -> why the record leaves it out
NOT_RECORDED = {
    ("preflight", "{{ item.item }}.dlinfra.orig"): "the distribution's source files: recorded by name in vars/main.yml",
    ("preflight", "{{ item.item }}"): "the distribution's source files: recorded by name in vars/main.yml",
    ("preflight", "{{ item.source }}"): "copies of the distribution's source files: recorded by name",
    ("nvidia_driver", "{{ __nvidia_driver_headers_package }}"):
        "the running kernel's headers: a new kernel changes the inputs digest (the kernel fact)",
    ("nvidia_container_toolkit", "{{ __nvidia_container_toolkit_engine_install }}"):
        "the engine packages with their versions: __nvidia_container_toolkit_engine_names",
    ("nvidia_container_toolkit", "{{ __nvidia_container_toolkit_apt_repo.signed_by }}"):
        "the include's alias of the two repositories, recorded by their own variables",
    ("nvidia_container_toolkit", "{{ __nvidia_container_toolkit_apt_repo.name }}"):
        "the include's alias of the two repositories, recorded by their own variables",
    ("nvidia_container_toolkit", "{{ __nvidia_container_toolkit_key_download.path }}"): "a temporary download",
    ("nvidia_container_toolkit", "{{ __nvidia_container_toolkit_local_dir }}/{{ item | basename }}"):
        "the local packages' copies; the directory is recorded",
    ("nccl", "{{ __nccl_tests_archive }}"): "the nccl-tests source archive, a download the build reads once",
    ("nccl", "{{ item }}"): "nccl-tests' build directories",
    ("nccl", "{{ __nccl_rdma_packages }}"): "the RDMA packages with their versions: __nccl_rdma_package_names",
    ("anaconda", "{{ anaconda_download_dir }}"): "the download directory",
    ("anaconda", "{{ anaconda_download_dir }}/environment-{{ item.name }}.yml"): "an upload conda env reads once",
    ("anaconda", "{{ __anaconda_installer_dest }}"): "the installer, a download run once",
    ("anaconda", "{{ item }}"): "anaconda_pkgs_dirs, conda's caches",
    ("gpu_monitoring", "{{ gpu_monitoring_textfile_directory }}"):
        "its entries change every interval (the collector's temporary file); node exporter's ARGS naming it is recorded",
}


def tasks(items):
    for task in items or []:
        if isinstance(task, dict):
            for key in ("block", "rescue", "always"):
                yield from tasks(task.get(key))
            yield task


def written(role):
    """(what a task writes, the task's loop expression) for each writing task of the role, but its record's."""
    for path in sorted((ROLES / role / "tasks").glob("*.yml")):
        if path.name in ("main.yml", "converge.yml", "record.yml"):
            continue
        for task in tasks(yaml.safe_load(path.read_text())):
            for module, argument in WRITERS.items():
                if isinstance(task.get(module), dict) and task[module].get(argument):
                    yield str(task[module][argument]), str(task.get("loop", ""))


def recorded(role):
    """The variables the role's record uses and those that define them, to any depth (vars/main.yml), and the text of
    the record and of those definitions (where literal paths and names show)."""
    text = (ROLES / role / "tasks" / "record.yml").read_text()
    definitions = {name: str(value) for name, value in yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text()).items()}
    names, pending = set(), set(NAME.findall(text))
    while pending:
        name = pending.pop()
        if name not in names:
            names.add(name)
            pending |= set(NAME.findall(definitions.get(name, "")))
    return names, text + "".join(definitions.get(name, "") for name in names)


@pytest.mark.parametrize("role", RECORDING)
def test_each_item_the_role_writes_is_recorded_or_said_why_not(role):
    names, text = recorded(role)
    missing = []
    for what, loop in written(role):
        used = set(NAME.findall(what)) | (set(NAME.findall(loop)) if "item" in what else set())
        variables = {name for name in used if name.startswith(("__", role + "_", "gpu_cluster_"))}
        # What it writes is named by a recorded variable (a package list pinned to a version found at run time counts
        # by its list), or is a literal path or name the record holds.
        if (role, what) in NOT_RECORDED or variables & names or (not variables and "{{" not in what and what in text):
            continue
        missing.append(what)
    assert missing == [], "%s writes these without recording them (tasks/record.yml): %s" % (role, missing)


def test_each_reason_still_names_something_the_role_writes():
    stale = [key for key in NOT_RECORDED if key[1] not in {what for what, dummy in written(key[0])}]
    assert stale == []
