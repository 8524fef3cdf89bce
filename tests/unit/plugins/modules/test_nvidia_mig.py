"""nvidia_mig's main() against the stateful nvidia-smi test double (tests/test_doubles/nvidia_smi): the commands it
runs, what they leave, check mode and diff, the reset and the reboot a pending mode needs, bad input."""

import os
import pathlib
import shutil
import sys

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import nvidia_mig

ROOT = pathlib.Path(__file__).parents[4]
DOUBLE = ROOT / "tests" / "test_doubles" / "nvidia_smi" / "nvidia_smi_mig.py"
REPORTS = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia_smi"
H100_3G_X2 = [{"profile": "3g.40gb", "profile_id": 9, "start": 0}, {"profile": "3g.40gb", "profile_id": 9, "start": 4}]
H100_1G_X7 = [{"profile": "1g.10gb", "profile_id": 19, "start": start} for start in range(7)]


class Node:
    """The double's state and run directories; boot() is a reboot (the run directory, a tmpfs on a node, emptied).
    ``smi``: the double's wrapper, as a node has it on PATH."""

    def __init__(self, root, report, monkeypatch):
        self.state, self.run = root / "state", root / "run"
        self.state.mkdir()
        self.smi = root / "nvidia-smi"
        self.smi.write_text('#!/bin/sh\nexec %s %s "$@"\n' % (sys.executable, DOUBLE))
        self.smi.chmod(0o755)
        shutil.copy(REPORTS / report, self.state / "report.xml")
        # The double asks systemctl whether a client service is active: here every one named is.
        (root / "bin").mkdir()
        (root / "bin" / "systemctl").write_text("#!/bin/sh\nexit 0\n")
        (root / "bin" / "systemctl").chmod(0o755)
        monkeypatch.setenv("PATH", "%s:%s" % (root / "bin", os.environ["PATH"]))
        monkeypatch.setenv("NVIDIA_SMI_DOUBLE_STATE_DIR", str(self.state))
        monkeypatch.setenv("NVIDIA_SMI_DOUBLE_RUN_DIR", str(self.run))

    def hold(self):
        """A client (an active nvidia-persistenced) holds the GPUs: a new mode stays pending, a reset is refused."""
        (self.state / "clients").write_text("nvidia-persistenced\n")

    def boot(self):
        shutil.rmtree(self.run, ignore_errors=True)
        (self.state / "clients").unlink(missing_ok=True)


@pytest.fixture
def h100x2(tmp_path, monkeypatch):
    """Two H100 80GB GPUs (an HGX capture) with MIG off and no instances."""
    node = Node(tmp_path, "hgx_h100_2x_h100_80gb_hbm3_mig.xml", monkeypatch)
    (node.state / "mode.json").write_text('{"0": {"current": false, "pending": false}, '
                                          '"1": {"current": false, "pending": false}}')
    return node


def apply(module_result, layout, check_mode=False, diff=False, **options):
    args = dict(layout=layout, nvidia_smi_path=str(pathlib.Path(os.environ["NVIDIA_SMI_DOUBLE_STATE_DIR"]).parent
                                                   / "nvidia-smi"), **options)
    if diff:
        args["_ansible_diff"] = True
    return module_result(nvidia_mig.main, args, check_mode=check_mode)


def test_a_layout_is_made_and_a_second_run_changes_nothing(h100x2, module_result):
    result = apply(module_result, {"0": H100_3G_X2, "1": H100_1G_X7})
    assert result["changed"] and not result["reboot_required"], result
    assert [argv[1:] for argv in result["commands"]] == [
        ["-i", "0", "-mig", "1"], ["-i", "1", "-mig", "1"],
        ["mig", "-cgi", "9:0,9:4", "-C", "-i", "0"], ["mig", "-cgi", ",".join("19:%d" % s for s in range(7)), "-C", "-i", "1"]]
    assert result["gpus"][0] == {"index": 0, "mig": True, "mig_pending": True, "instances": ["3g.40gb@0", "3g.40gb@4"]}
    assert len(result["gpus"][1]["instances"]) == 7
    again = apply(module_result, {"0": H100_3G_X2, "1": H100_1G_X7})
    assert not again["changed"] and again["commands"] == [], again


def test_check_mode_says_what_it_would_do_and_does_nothing(h100x2, module_result):
    result = apply(module_result, {"0": H100_3G_X2}, check_mode=True, diff=True)
    assert result["changed"] and [argv[1:] for argv in result["commands"]] == [["-i", "0", "-mig", "1"]]
    assert result["diff"]["after"]["gpus"][0]["instances"] == ["3g.40gb@0", "3g.40gb@4"]
    assert result["diff"]["before"]["gpus"][0] == {"index": 0, "mig": False, "mig_pending": False, "instances": []}
    assert not apply(module_result, {}, check_mode=True)["changed"]  # the double's state did not move


def test_a_new_layout_replaces_the_instances_and_no_layout_turns_mig_off(h100x2, module_result):
    apply(module_result, {"0": H100_3G_X2})
    result = apply(module_result, {"0": H100_1G_X7[:3]}, diff=True)
    assert [argv[1:3] for argv in result["commands"]] == [["mig", "-dci"], ["mig", "-dgi"], ["mig", "-cgi"]]
    assert result["diff"]["before"]["gpus"][0]["instances"] == ["3g.40gb@0", "3g.40gb@4"]
    assert result["gpus"][0]["instances"] == ["1g.10gb@0", "1g.10gb@1", "1g.10gb@2"]
    off = apply(module_result, {})
    assert [argv[1:3] for argv in off["commands"]] == [["mig", "-dci"], ["mig", "-dgi"], ["-i", "0"]]
    assert off["gpus"][0] == {"index": 0, "mig": False, "mig_pending": False, "instances": []}


def test_a_held_gpu_is_reset_when_the_client_lets_go(h100x2, module_result, monkeypatch):
    h100x2.hold()
    resets = []
    real_run = nvidia_mig.NvidiaSmi.run

    def run(self, argv, change=False):
        if argv[1:2] == ["-r"]:
            resets.append(argv)
            (h100x2.state / "clients").unlink()  # the reset is tried once the client has stopped
        return real_run(self, argv, change)
    monkeypatch.setattr(nvidia_mig.NvidiaSmi, "run", run)
    result = apply(module_result, {"0": H100_3G_X2})
    assert resets and not result["reboot_required"] and result["gpus"][0]["instances"] == ["3g.40gb@0", "3g.40gb@4"]


def test_a_mode_the_reset_cannot_apply_waits_for_the_reboot_then_the_layout_is_made(h100x2, module_result):
    h100x2.hold()
    result = apply(module_result, {"0": H100_3G_X2})
    assert result["changed"] and result["reboot_required"] and result["pending"] == [0], result
    assert result["gpus"][0] == {"index": 0, "mig": False, "mig_pending": True, "instances": []}
    h100x2.boot()
    after = apply(module_result, {"0": H100_3G_X2})
    assert [argv[1:3] for argv in after["commands"]] == [["mig", "-cgi"]] and not after["reboot_required"]
    assert after["create_commands"] == [[str(h100x2.smi), "mig", "-cgi", "9:0,9:4", "-C", "-i", "0"]]


def test_without_reset_the_mode_waits_for_the_reboot(h100x2, module_result):
    h100x2.hold()
    assert apply(module_result, {"0": H100_3G_X2}, reset=False)["reboot_required"]


def test_instances_are_lost_at_boot_and_made_again(h100x2, module_result):
    apply(module_result, {"1": H100_1G_X7})
    h100x2.boot()
    result = apply(module_result, {"1": H100_1G_X7})
    assert [argv[1:3] for argv in result["commands"]] == [["mig", "-cgi"]] and len(result["gpus"][1]["instances"]) == 7


@pytest.mark.parametrize("layout, message", [
    ({"2": H100_3G_X2}, "layout names GPU 2, and this node's GPUs are [0, 1]"),
    ({"0": [{"profile": "3g.40gb"}]}, "each instance needs profile, profile_id and start"),
])
def test_bad_input_is_refused_before_any_change(h100x2, module_result, layout, message):
    result = apply(module_result, layout)
    assert result["failed"] and message in result["msg"]
    assert not apply(module_result, {}, check_mode=True)["changed"]


def test_a_command_the_gpu_refuses_stops_with_its_output(h100x2, module_result):
    result = apply(module_result, {"0": [{"profile": "3g.40gb", "profile_id": 9, "start": 2}]})
    assert result["failed"] and "Insufficient Resources" in result["msg"] and "-cgi 9:2" in result["msg"]


def test_the_reasons_and_the_layout_a_rollback_applies(h100x2, module_result):
    first = apply(module_result, {"0": H100_3G_X2}, check_mode=True)
    assert first["reasons"] == ["GPU 0 MIG off -> 3g.40gb@0, 3g.40gb@4"] and first["layout"] == {}
    apply(module_result, {"0": H100_3G_X2})
    second = apply(module_result, {"0": H100_1G_X7[:1]}, check_mode=True)
    assert second["reasons"] == ["GPU 0 3g.40gb@0, 3g.40gb@4 -> 1g.10gb@0"]
    assert second["layout"] == {"0": H100_3G_X2}
    assert not apply(module_result, second["layout"], check_mode=True)["changed"]
