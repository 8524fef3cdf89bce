"""The nvidia-smi MIG test double keeps state as a GPU does and prints what the real commands print (the formats of
tests/unit/plugins/module_utils/fixtures/mig, read by mig_state's parsers)."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.mig_state import (
    parse_compute_instances, parse_gpu_instances)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import parse_nvidia_smi_xml

ROOT = pathlib.Path(__file__).parents[3]
DOUBLE = ROOT / "tests" / "test_doubles" / "nvidia_smi" / "nvidia_smi_mig.py"
H200 = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia_smi" / "h200_580_capture.xml"


@pytest.fixture
def smi(tmp_path):
    (tmp_path / "state").mkdir()
    shutil.copy(H200, tmp_path / "state" / "report.xml")
    # systemctl is-active --quiet NAME: NAME is active while bin/active/NAME exists.
    (tmp_path / "bin" / "active").mkdir(parents=True)
    (tmp_path / "bin" / "systemctl").write_text('#!/bin/sh\ntest -e "$(dirname "$0")/active/$3"\n')
    (tmp_path / "bin" / "systemctl").chmod(0o755)
    env = dict(os.environ, NVIDIA_SMI_DOUBLE_STATE_DIR=str(tmp_path / "state"),
               NVIDIA_SMI_DOUBLE_RUN_DIR=str(tmp_path / "run"),
               PATH="%s:%s" % (tmp_path / "bin", os.environ["PATH"]))

    def run(*args):
        done = subprocess.run([sys.executable, str(DOUBLE)] + list(args), env=env, capture_output=True, text=True,
                              check=False)
        return done.returncode, done.stdout
    run.root = tmp_path
    return run


def test_mig_mode_instances_and_the_report(smi):
    assert smi("mig", "-lgi") == (6, "No MIG-enabled devices found.\n")
    code, out = smi("-i", "0", "-mig", "1")
    assert code == 0 and out.startswith("Enabled MIG Mode for GPU 00000000:")
    code, out = smi("mig", "-cgi", "9:4,14:0", "-C", "-i", "0")
    assert code == 0 and "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.71gb (ID  9)" in out
    assert [(i["profile"], i["start"], i["size"]) for i in parse_gpu_instances(smi("mig", "-lgi")[1])] == [
        ("2g.35gb", 0, 2), ("3g.71gb", 4, 4)]
    assert len(parse_compute_instances(smi("mig", "-lci")[1])) == 2
    gpu = parse_nvidia_smi_xml(smi("-q", "-x")[1])["gpus"][0]
    assert gpu["mig_mode_current"] and gpu["mig_device_count"] == 2
    assert "|   0  MIG 1g.18gb          19     2/7" in smi("mig", "-lgip")[1]


def test_what_the_gpu_refuses(smi):
    assert smi("mig", "-cgi", "9", "-C")[0] != 0  # MIG off
    smi("-mig", "1")
    smi("mig", "-cgi", "0", "-C")
    code, out = smi("mig", "-cgi", "19", "-C")
    assert code != 0 and "Insufficient Resources" in out
    code, out = smi("mig", "-dgi")
    assert code != 0 and "In use by another client" in out  # compute instances first
    assert smi("mig", "-cgi", "7g.999gb")[1].endswith("Invalid Argument\n")


def test_a_held_gpu_keeps_its_mode_pending_until_a_boot_which_drops_the_instances(smi):
    (smi.root / "state" / "clients").write_text("nvidia-persistenced\n")
    (smi.root / "bin" / "active" / "nvidia-persistenced").touch()
    code, out = smi("-mig", "1")
    assert code == 0 and "pending enable state" in out
    assert smi("-r", "-i", "0")[0] == 255
    gpu = parse_nvidia_smi_xml(smi("-q", "-x")[1])["gpus"][0]
    assert (gpu["mig_mode_current"], gpu["mig_mode_pending"]) == (False, True)
    shutil.rmtree(smi.root / "run")  # a reboot empties /run
    smi("mig", "-cgi", "19", "-C")
    assert len(parse_gpu_instances(smi("mig", "-lgi")[1])) == 1
    shutil.rmtree(smi.root / "run")
    assert smi("mig", "-lgi") == (6, "No GPU instances found: Not Found\n")
    calls = [json.loads(line) for line in (smi.root / "state" / "calls.log").read_text().splitlines()]
    assert [(call["argv"], call["clients"]) for call in calls] == [  # what changes, in order, and who held the GPU
        (["-mig", "1"], ["nvidia-persistenced"]), (["-r", "-i", "0"], ["nvidia-persistenced"]),
        (["mig", "-cgi", "19", "-C"], ["nvidia-persistenced"])]


def test_a_client_service_that_is_stopped_holds_nothing(smi):
    (smi.root / "state" / "clients").write_text("nvidia-persistenced\nnvidia-fabricmanager\n")
    (smi.root / "bin" / "active" / "nvidia-fabricmanager").touch()
    assert "pending enable state" in smi("-i", "0", "-mig", "1")[1]
    (smi.root / "bin" / "active" / "nvidia-fabricmanager").unlink()
    assert smi("-r", "-i", "0") == (0, "GPU 00000000:00:06.0 was successfully reset.\nAll done.\n")
    assert parse_nvidia_smi_xml(smi("-q", "-x")[1])["gpus"][0]["mig_mode_current"]
    calls = [json.loads(line) for line in (smi.root / "state" / "calls.log").read_text().splitlines()]
    assert [call["clients"] for call in calls] == [["nvidia-fabricmanager"], []]


def test_every_call_publishes_the_gpus_as_the_device_plugin_finds_them(smi):
    publish = smi.root / "shared" / "sim-gpu1.json"
    publish.parent.mkdir()
    (smi.root / "state" / "publish").write_text(str(publish) + "\n")
    smi("-mig", "1")
    smi("mig", "-cgi", "9,9", "-C")
    assert json.loads(publish.read_text()) == {"gpus": [{"index": 0, "mig": True, "mig_devices": ["3g.71gb", "3g.71gb"]}]}
    shutil.rmtree(smi.root / "run")  # a reboot: the instances are gone once anything calls nvidia-smi
    smi("mig", "-lgi")
    assert json.loads(publish.read_text())["gpus"][0]["mig_devices"] == []


def test_a_gpu_instance_made_without_c_gets_its_compute_instance_from_cci(smi):
    smi("-mig", "1")
    assert smi("mig", "-cgi", "9")[0] == 0
    assert parse_compute_instances(smi("mig", "-lci")[1]) == []
    code, out = smi("mig", "-cci", "-gi", "1", "-i", "0")
    assert code == 0 and out.startswith("Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1")
    assert [ci["gpu_instance_id"] for ci in parse_compute_instances(smi("mig", "-lci")[1])] == [1]
    assert smi("mig", "-cci", "-gi", "1")[0] != 0  # it has one
    assert smi("mig", "-cci", "-gi", "5")[0] != 0  # no such GPU instance
