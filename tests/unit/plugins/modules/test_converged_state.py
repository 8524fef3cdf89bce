"""converged_state's main() on a fake node: dpkg-query and systemctl stand-ins on PATH print their real formats from
files the tests edit, so each kind of drift (a version, a hold, a file's content or mode, a directory's entries, a
service's state) is made the way an admin or a package upgrade would make it."""

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import converged_state

DIGEST = "d" * 64


class FakeNode:
    def __init__(self, root):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.records = root / "records"
        self.packages = {"libnccl2": ("hi", "2.21.5-1"), "libnccl-dev": ("hi", "2.21.5-1"), "curl": ("ii", "8.14.1-2")}
        self.units = {"nvidia-persistenced.service": ("enabled", "active")}
        self.conf = root / "nccl.conf"
        self.conf.write_text("NCCL_DEBUG=WARN\n")
        self.envs = root / "envs"
        (self.envs / "base").mkdir(parents=True)
        # dpkg-query -W -f '${Package}\t${db:Status-Abbrev}\t${Version}\n' NAME...: one line per installed name; a
        # name it does not know goes to stderr and makes the exit status 1.
        self._script("dpkg-query", 'rc=0; shift 3; for name in "$@"; do line=$(grep "^$name\t" %s) '
                                   '|| { echo "dpkg-query: no packages found matching $name" >&2; rc=1; continue; }; '
                                   'printf "%%s\\n" "$line"; done; exit $rc' % (root / "packages.tsv"))
        # systemctl show --property=Id,UnitFileState,ActiveState UNIT...: a block per unit, blank lines between.
        self._script("systemctl", 'shift 2; first=1; for unit in "$@"; do [ $first = 1 ] || echo; first=0; '
                                  'line=$(grep "^$unit " %s) || line="$unit - inactive"; set -- $line; '
                                  'printf "Id=%%s\\nUnitFileState=%%s\\nActiveState=%%s\\n" "$unit" "$2" "$3"; done'
                                  % (root / "units.txt"))
        self.write()

    def _script(self, name, body):
        path = self.bin / name
        path.write_text("#!/bin/bash\n" + body + "\n")
        path.chmod(0o755)

    def write(self):
        (self.root / "packages.tsv").write_text("".join("%s\t%s \t%s\n" % (name, status, version)
                                                        for name, (status, version) in self.packages.items()))
        (self.root / "units.txt").write_text("".join("%s %s %s\n" % (unit, enabled, active)
                                                     for unit, (enabled, active) in self.units.items()))

    def args(self, record=False, digest=DIGEST, **extra):
        return dict({"role": "nccl", "inputs_digest": digest, "record": record, "record_dir": str(self.records),
                     "packages": ["libnccl-dev", "libnccl2"], "installed_packages": ["curl"],
                     "paths": [str(self.conf), str(self.envs), str(self.root / "absent.conf")],
                     "services": sorted(self.units)}, **extra)


@pytest.fixture
def node(tmp_path, monkeypatch):
    fake = FakeNode(tmp_path)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % fake.bin)
    return fake


@pytest.fixture
def run_module(module_result):
    """run_module(args, check_mode=False): converged_state.main()'s result (conftest.py)."""
    return lambda args, check_mode=False: module_result(converged_state.main, args, check_mode)


def recorded(run_module, node):
    result = run_module(node.args(record=True))
    assert result["changed"] is True and result["_exit_code"] == 0
    return result


def test_no_record_is_not_converged(node, run_module):
    result = run_module(node.args())
    assert result["converged"] is False and result["changed"] is False
    assert result["reason"] == "no record of a full run of the role"


def test_a_record_then_nothing_moved_is_converged(node, run_module):
    recorded(run_module, node)
    result = run_module(node.args())
    assert (result["converged"], result["reason"], result["drift"]) == (True, "", [])


def test_recording_the_same_state_again_changes_nothing(node, run_module):
    recorded(run_module, node)
    assert run_module(node.args(record=True))["changed"] is False


def test_the_record_holds_each_kind_of_item(node, run_module):
    recorded(run_module, node)
    items = json.loads((node.records / "nccl.json").read_text())["items"]
    assert items["package libnccl2"] == "hi 2.21.5-1"
    assert items["service nvidia-persistenced.service"] == "enabled active"
    assert items["path %s" % (node.root / "absent.conf")] == "absent"
    assert items["path %s" % node.conf].startswith("file 644 ")
    assert items["path %s" % node.envs].startswith("dir ")


def test_other_inputs_are_not_converged(node, run_module):
    recorded(run_module, node)
    result = run_module(node.args(digest="e" * 64))
    assert result["converged"] is False and result["reason"].startswith("the role's inputs changed")


def drift_version(node):
    node.packages["libnccl2"] = ("hi", "2.23.4-1")


def drift_hold(node):
    node.packages["libnccl2"] = ("ii", "2.21.5-1")


def drift_removed(node):
    del node.packages["libnccl-dev"]


def drift_content(node):
    node.conf.write_text("NCCL_DEBUG=INFO\n")


def drift_mode(node):
    node.conf.chmod(0o600)


def drift_deleted(node):
    node.conf.unlink()


def drift_created(node):
    (node.root / "absent.conf").write_text("options nouveau modeset=1\n")


def drift_directory(node):
    (node.envs / "stray").mkdir()


def drift_uninstalled(node):
    del node.packages["curl"]


def drift_stopped(node):
    node.units["nvidia-persistenced.service"] = ("enabled", "inactive")


def drift_disabled(node):
    node.units["nvidia-persistenced.service"] = ("disabled", "active")


@pytest.mark.parametrize("change, item", [
    (drift_version, "package libnccl2: recorded hi 2.21.5-1, now hi 2.23.4-1"),
    (drift_hold, "package libnccl2: recorded hi 2.21.5-1, now ii 2.21.5-1"),
    (drift_removed, "package libnccl-dev: recorded hi 2.21.5-1, now absent"),
    (drift_content, "path {conf}: recorded file 644"),
    (drift_mode, "path {conf}: recorded file 644"),
    (drift_deleted, "path {conf}: recorded file 644"),
    (drift_created, "path {root}/absent.conf: recorded absent, now file"),
    (drift_directory, "path {root}/envs: recorded dir"),
    (drift_uninstalled, "installed curl: recorded installed, now absent"),
    (drift_stopped, "service nvidia-persistenced.service: recorded enabled active, now enabled inactive"),
    (drift_disabled, "service nvidia-persistenced.service: recorded enabled active, now disabled active"),
])
def test_each_kind_of_drift_is_found_and_named(node, run_module, change, item):
    recorded(run_module, node)
    change(node)
    node.write()
    result = run_module(node.args())
    assert result["converged"] is False
    assert len(result["drift"]) == 1 and result["drift"][0].startswith(item.format(conf=node.conf, root=node.root))
    assert result["reason"] == "drift: " + result["drift"][0]


def test_check_mode_reports_the_record_it_would_write_and_writes_nothing(node, run_module):
    result = run_module(node.args(record=True), check_mode=True)
    assert result["changed"] is True and not (node.records / "nccl.json").exists()


def test_a_torn_record_counts_as_none(node, run_module):
    recorded(run_module, node)
    (node.records / "nccl.json").write_text('{"format": 1, "inputs_dig')
    assert run_module(node.args())["reason"] == "no record of a full run of the role"


def test_the_record_is_replaced_in_one_step(node, run_module, monkeypatch):
    recorded(run_module, node)
    before = (node.records / "nccl.json").read_text()
    drift_content(node)

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(converged_state.os, "replace", killed)
    with patch_module_args(node.args(record=True)):
        with pytest.raises(KeyboardInterrupt):
            converged_state.main()
    assert (node.records / "nccl.json").read_text() == before
    assert os.listdir(node.records) == ["nccl.json"]


def test_without_dpkg_a_node_is_never_converged(node, run_module, monkeypatch):
    recorded(run_module, node)
    monkeypatch.setattr(converged_state.shutil, "which", lambda name: None)
    result = run_module(node.args())
    assert result["converged"] is False and "apt systems only" in result["reason"]


@pytest.mark.parametrize("args, words", [
    ({"inputs_digest": ""}, "call the module through its action plugin"),
    ({"role": "../etc"}, "is not a role name"),
])
def test_bad_input_fails_naming_it(node, run_module, args, words):
    result = run_module(dict(node.args(), **args))
    assert result["failed"] is True and words in result["msg"]


def test_an_updated_package_the_role_only_keeps_installed_is_no_drift(node, run_module):
    recorded(run_module, node)
    node.packages["curl"] = ("ii", "8.14.1-3")
    node.write()
    assert run_module(node.args())["converged"] is True


# ---- snaps, group members and items read elsewhere (the microk8s role) ----

SNAP_LIST = """Name      Version   Rev    Tracking       Publisher   Notes
core20    20250213  2501   latest/stable  canonical\u2713  base
microk8s  v1.32.3   8148   1.32/stable    canonical\u2713  held,classic
"""


class FakeGroups:
    """grp and pwd for the module: the microk8s group and the users that exist."""
    def __init__(self):
        self.members = {"microk8s": ["alice"]}
        self.users = {"alice", "bob"}

    def getgrnam(self, name):
        if name not in self.members:
            raise KeyError(name)
        return type("group", (), {"gr_mem": list(self.members[name])})

    def getpwnam(self, name):
        if name not in self.users:
            raise KeyError(name)
        return name


@pytest.fixture
def snap_node(node, monkeypatch):
    """The fake node with `snap list` (from snaps.txt) and the fake group database."""
    (node.root / "snaps.txt").write_text(SNAP_LIST)
    node._script("snap", 'cat %s' % (node.root / "snaps.txt"))
    groups = FakeGroups()
    monkeypatch.setattr(converged_state, "grp", groups)
    monkeypatch.setattr(converged_state, "pwd", groups)
    node.groups = groups
    node.observed = {"k8s addon dns": "enabled", "k8s node": "worker Ready nvidia.com/gpu.present=true"}
    return node


def snap_args(node, record=False, **extra):
    return dict(node.args(record=record), role="microk8s", packages=[], installed_packages=[], services=[],
                snaps=["microk8s"], group_members={"microk8s": ["alice"]}, observed=dict(node.observed), **extra)


def test_the_record_holds_the_snap_the_members_and_the_observed_items(snap_node, run_module):
    assert run_module(snap_args(snap_node, record=True))["changed"] is True
    items = json.loads((snap_node.records / "microk8s.json").read_text())["items"]
    assert items["snap microk8s"] == "v1.32.3 8148 1.32/stable classic,held"
    assert items["member microk8s alice"] == "member"
    assert items["observed k8s addon dns"] == "enabled"
    # The read needs only the observed items: the snaps and members come from the record.
    read = dict(snap_args(snap_node), snaps=[], group_members={})
    assert run_module(read)["converged"] is True


def snap_unheld(node):
    (node.root / "snaps.txt").write_text(SNAP_LIST.replace("held,classic", "classic"))


def snap_channel(node):
    (node.root / "snaps.txt").write_text(SNAP_LIST.replace("v1.32.3   8148   1.32/stable", "v1.33.4   8373   1.33/stable"))


def snap_removed(node):
    (node.root / "snaps.txt").write_text(SNAP_LIST.splitlines()[0] + "\n" + SNAP_LIST.splitlines()[1] + "\n")


def member_removed(node):
    node.groups.members["microk8s"] = []


def user_removed(node):
    node.groups.users.discard("alice")


def addon_disabled(node):
    node.observed["k8s addon dns"] = "disabled"


def node_unreadable(node):
    node.observed = {"k8s cluster": "unreadable: microk8s status: microk8s is not running"}


@pytest.mark.parametrize("change, item", [
    (snap_unheld, "snap microk8s: recorded v1.32.3 8148 1.32/stable classic,held, now v1.32.3 8148 1.32/stable classic"),
    (snap_channel, "snap microk8s: recorded v1.32.3 8148 1.32/stable classic,held, now v1.33.4 8373 1.33/stable"),
    (snap_removed, "snap microk8s: recorded v1.32.3 8148 1.32/stable classic,held, now absent"),
    (member_removed, "member microk8s alice: recorded member, now not member"),
    (user_removed, "member microk8s alice: recorded member, now no user"),
    (addon_disabled, "observed k8s addon dns: recorded enabled, now disabled"),
    (node_unreadable, "observed k8s addon dns: recorded enabled, now None"),
])
def test_each_snap_member_and_observed_drift_is_found_and_named(snap_node, run_module, change, item):
    run_module(snap_args(snap_node, record=True))
    change(snap_node)
    result = run_module(snap_args(snap_node))
    assert result["converged"] is False and result["drift"][0].startswith(item)


def test_an_item_recorded_unreadable_never_reads_the_same(snap_node, run_module):
    node_unreadable(snap_node)
    run_module(snap_args(snap_node, record=True))
    result = run_module(snap_args(snap_node))
    assert result["converged"] is False
    assert result["drift"] == ["observed k8s cluster: recorded unreadable: microk8s status: microk8s is not running, "
                               "now unreadable: microk8s status: microk8s is not running"]


def test_without_the_snap_command_a_snap_reads_absent(snap_node, run_module):
    (snap_node.bin / "snap").unlink()
    run_module(snap_args(snap_node, record=True))
    items = json.loads((snap_node.records / "microk8s.json").read_text())["items"]
    assert items["snap microk8s"] == "absent"
