"""rolling_plan's main() on a fake node: dpkg-query and snap stand-ins on PATH printing their real formats, a sysfs tree
with the nvidia module's version and users, a /boot with kernels and a reboot-required file."""

import json
import os

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import rolling_plan

PACKAGES = {"nvidia-smi": "hi  550.163.01-1", "nvidia-container-toolkit": "hi  1.17.8-1", "libnccl2": "ii  2.22.3-1",
            "nvidia-fabricmanager-550": "rc  550.127.05-1"}  # rc: removed, its configuration left: not installed


class FakeNode:
    def __init__(self, root, loaded=None, refcnt=0, holders=(), kernels=(), reboot_pkgs=None, loaded_open=False, recorded=None):
        self.root = root
        self.bin, self.sysfs, self.boot, self.run, self.proc = (root / name for name in ("bin", "sys", "boot", "run", "proc"))
        for directory in (self.bin, self.sysfs, self.boot, self.run, self.proc):
            directory.mkdir()
        self.plan_file = root / "nvidia_driver.json"
        if recorded:
            self.plan_file.write_text(json.dumps({"branch": "550", "flavor": recorded, "architectures": ["Hopper"]}))
        # dpkg-query -W -f '${db:Status-Abbrev} ${Version}' NAME: the status letters, a space, the version.
        cases = "\n".join("  %s) printf '%%s' '%s' ;;" % (name, line) for name, line in PACKAGES.items())
        self._script("dpkg-query", 'case "$4" in\n%s\n  *) echo "dpkg-query: no packages found matching $4" >&2; exit 1 ;;\nesac' % cases)
        self._script("snap", "printf 'Name      Version  Rev    Tracking     Publisher   Notes\\n"
                             "microk8s  v1.32.3  8148   1.32/stable  canonical\\u2713  classic,held\\n'")
        if loaded:
            module = self.sysfs / "module" / "nvidia"
            (module / "holders").mkdir(parents=True)
            (module / "version").write_text(loaded + "\n")
            (module / "refcnt").write_text("%d\n" % refcnt)
            for name in holders:
                (module / "holders" / name).mkdir()
            # /proc/driver/nvidia/version's first line, as each flavour's module writes it.
            (self.proc / "driver" / "nvidia").mkdir(parents=True)
            (self.proc / "driver" / "nvidia" / "version").write_text(
                "NVRM version: NVIDIA UNIX %s  %s  Release Build  (dvs-builder@U22)  Mon Jan  1 00:00:00 UTC 2026\n"
                % ("Open Kernel Module for x86_64" if loaded_open else "x86_64 Kernel Module", loaded))
        for kernel in kernels:
            (self.boot / ("vmlinuz-" + kernel)).write_text("")
        if reboot_pkgs is not None:
            (self.run / "reboot-required").write_text("*** System restart required ***\n")
            (self.run / "reboot-required.pkgs").write_text(reboot_pkgs)

    def _script(self, name, body):
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)

    def args(self, target, **extra):
        return dict({"target": target, "sysfs_root": str(self.sysfs), "boot_dir": str(self.boot), "procfs_root": str(self.proc),
                     "driver_plan_file": str(self.plan_file),
                     "reboot_required_file": str(self.run / "reboot-required")}, **extra)


@pytest.fixture
def node(tmp_path, monkeypatch):
    def make(**kwargs):
        fake = FakeNode(tmp_path, **kwargs)
        monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % fake.bin)
        return fake
    return make


@pytest.fixture
def run_module(module_result):
    """run_module(args): rolling_plan.main()'s result (conftest.py)."""
    return lambda args: module_result(rolling_plan.main, args)


def test_a_node_at_its_pins_needs_nothing(node, run_module):
    fake = node(loaded="550.163.01", refcnt=2, holders=("nvidia_uvm", "nvidia_modeset"), kernels=[os.uname().release])
    result = run_module(fake.args({"driver": "550", "toolkit": "1.17.8", "nccl": "2.22.3", "microk8s": "1.32/stable"}))
    assert result["_exit_code"] == 0 and result["changed"] is False
    assert result["installed"]["toolkit"] == "1.17.8-1" and result["installed"]["driver"] == "550.163.01-1"
    assert result["installed"]["microk8s"] == "1.32/stable" and result["installed"]["module_holders"] == 0
    assert result["plan"] == {"change": [], "drain": False, "reboot": False, "reload": False, "reasons": []}


def test_a_moved_toolkit_pin_drains_without_a_reboot(node, run_module):
    result = run_module(node().args({"toolkit": "1.17.9"}))
    assert result["plan"]["change"] == ["toolkit"]
    assert (result["plan"]["drain"], result["plan"]["reboot"], result["plan"]["reload"]) == (True, False, False)
    assert result["plan"]["reasons"] == ["toolkit 1.17.8-1 -> 1.17.9"]


def test_a_component_the_node_lacks_is_left_to_site(node, run_module):
    result = run_module(node().args({"nccl": "2.23.4"}, packages={"nccl": "libnccl-missing"}))
    assert result["not_installed"] == ["nccl"] and result["plan"]["drain"] is False


def test_a_removed_package_is_not_installed(node, run_module):
    result = run_module(node().args({"toolkit": "1.17.8"}, packages={"fabric_manager": "nvidia-fabricmanager-550"}))
    assert result["installed"]["fabric_manager"] is None


def test_a_pending_reboot_and_a_newer_kernel_reboot(node, run_module):
    fake = node(kernels=["6.12.9+deb13-amd64", "6.12.48+deb13-amd64"], reboot_pkgs="linux-image-amd64\n")
    result = run_module(fake.args({"toolkit": "1.17.8"}))
    assert result["installed"]["kernel_newest"] == "6.12.48+deb13-amd64"  # by version, not by string
    assert result["installed"]["reboot_required"] == "linux-image-amd64"
    assert result["plan"]["reboot"] is True and result["plan"]["drain"] is True


def test_a_driver_module_held_by_persistenced_reboots_instead_of_reloading(node, run_module):
    fake = node(loaded="550.127.05", refcnt=3, holders=("nvidia_uvm",))
    result = run_module(fake.args({"driver": "550"}))
    assert result["installed"]["module_holders"] == 2
    assert (result["plan"]["reboot"], result["plan"]["reload"]) == (True, False)


def test_an_unknown_component_is_refused(node, run_module):
    result = run_module(node().args({"cuda": "12.6"}))
    assert result["_exit_code"] == 1 and "unknown component(s) cuda" in result["msg"]


def test_a_proprietary_node_moved_to_the_open_modules_swaps_its_driver(node, run_module):
    fake = node(loaded="550.163.01", refcnt=0, kernels=[os.uname().release])
    result = run_module(fake.args({"driver": "550", "driver_flavor": "open"}))
    assert (result["installed"]["driver_flavor"], result["installed"]["driver_flavor_loaded"]) == ("proprietary", "proprietary")
    assert result["plan"]["change"] == ["driver"] and result["plan"]["reload"] is True
    assert "driver kernel modules proprietary -> open" in result["plan"]["reasons"]


def test_the_recorded_flavour_stands_for_the_installed_one(node, run_module):
    fake = node(loaded="550.163.01", loaded_open=True, recorded="proprietary", kernels=[os.uname().release])
    result = run_module(fake.args({"driver": "550", "driver_flavor": "open"}))
    assert (result["installed"]["driver_flavor"], result["installed"]["driver_flavor_loaded"]) == ("proprietary", "open")
    assert result["plan"]["change"] == ["driver"]


def test_an_open_node_at_its_pins_needs_nothing(node, run_module):
    fake = node(loaded="550.163.01", loaded_open=True, recorded="open", kernels=[os.uname().release])
    result = run_module(fake.args({"driver": "550", "driver_flavor": "open"}))
    assert result["plan"]["drain"] is False


def test_an_unknown_flavour_is_refused(node, run_module):
    result = run_module(node().args({"driver_flavor": "nouveau"}))
    assert result["_exit_code"] == 1 and "driver_flavor is 'nouveau'; use open or proprietary" in result["msg"]


def test_the_record_and_a_state_file_are_returned_and_missing_ones_are_empty(node, run_module, tmp_path):
    fake = node(recorded="open", kernels=[os.uname().release])
    state = tmp_path / "rolling_upgrade.json"
    state.write_text(json.dumps({"toolkit": "1.17.8-1"}))
    result = run_module(fake.args({"toolkit": "1.17.8"}, state_file=str(state)))
    assert result["recorded"] == {"branch": "550", "flavor": "open"} and result["resume"] == {"toolkit": "1.17.8-1"}
    assert result["target"] == {"toolkit": "1.17.8"}
    state.write_text("not json")
    result = run_module(fake.args({"toolkit": "1.17.8"}, state_file=str(state), driver_plan_file=str(tmp_path / "none")))
    assert result["recorded"] == {} and result["resume"] == {}
    assert run_module(fake.args({"toolkit": "1.17.8"}))["resume"] == {}
