import os
import pathlib
import resource
import shlex
import sys
import time

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils import gpu_metrics
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.gpu_metrics import (
    KILL_GRACE_S,
    collect,
    main,
    normalize_bus_id,
    xid_counts,
)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_smi import parse_nvidia_smi_xml
from exposition_check import parse_exposition, promtool_check_metrics
from test_nvidia_smi import build_sysfs

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "nvidia_smi"
REPORTS = sorted(path.name for path in FIXTURES.glob("*.xml") if path.name != "nvidia_smi_truncated.xml")
GPU_LABELS = {"gpu", "uuid", "model", "pci_bus_id"}


def cat(path):
    return "cat " + shlex.quote(str(path))


def run(tmp_path, command, kernel_log="", timeout=10.0, sysfs_root=None, procfs_root=None):
    text, problems = collect(command=command, timeout=timeout, sysfs_root=str(sysfs_root or tmp_path / "sys"),
                             procfs_root=str(procfs_root or tmp_path / "proc"), kernel_log=kernel_log,
                             state_file=str(tmp_path / "state.json"))
    return parse_exposition(text), text, problems


def value(families, name, **labels):
    matches = [sample for sample_labels, sample in families[name]["samples"]
               if all(sample_labels.get(key) == wanted for key, wanted in labels.items())]
    assert len(matches) == 1, (name, labels, families.get(name))
    return matches[0]


def eight_gpu_report():
    """The idle H200 capture's <gpu> block eight times (bus ids 0x18..0xdf, own UUIDs), as on an HGX H200 board."""
    text = (FIXTURES / "h200_580_capture.xml").read_text()
    head, rest = text.split("\t<gpu ", 1)
    block, tail = rest.rsplit("\t</gpu>\n", 1)
    gpus = []
    for index, bus in enumerate((0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)):
        gpus.append(("\t<gpu " + block + "\t</gpu>\n").replace("00000000:00:06.0", "00000000:%02X:00.0" % bus)
                    .replace("GPU-aaaaaaaa-1111-2222-3333-000000000200", "GPU-aaaaaaaa-1111-2222-3333-00000000020%d" % index))
    return head.replace("<attached_gpus>1<", "<attached_gpus>8<") + "".join(gpus) + tail


@pytest.mark.parametrize("fixture", REPORTS)
def test_every_recorded_report_gives_every_gpu_its_series(tmp_path, fixture):
    families, _text, problems = run(tmp_path, cat(FIXTURES / fixture))
    report = parse_nvidia_smi_xml((FIXTURES / fixture).read_text())
    assert problems == []
    assert value(families, "nvidia_smi_up") == 1
    assert value(families, "nvidia_gpus_answering") == len(report["gpus"])
    assert value(families, "nvidia_driver_info", version=report["driver_version"]) == 1
    for gpu in report["gpus"]:
        labels = {"gpu": str(gpu["index"]), "uuid": gpu["uuid"], "model": gpu["name"], "pci_bus_id": gpu["pci_bus_id"]}
        assert value(families, "nvidia_gpu_memory_total_bytes", **labels) == gpu["memory_total_mib"] * 1024 * 1024
        assert value(families, "nvidia_gpu_memory_used_bytes", **labels) >= 0
        assert value(families, "nvidia_gpu_power_limit_watts", **labels) > 0
    for name, family in families.items():
        assert name.startswith("nvidia_")
        assert family["help"] and family["type"] in ("gauge", "counter")
        assert (family["type"] == "counter") == name.endswith("_total")
        if name.startswith("nvidia_gpu_"):
            assert all(GPU_LABELS <= set(labels) for labels, _value in family["samples"]), name


@pytest.mark.parametrize("fixture", REPORTS + ["nvidia_smi_truncated.xml"])
def test_promtool_check_metrics_passes_on_every_recorded_report(tmp_path, fixture, promtool):
    _families, text, _problems = run(tmp_path, cat(FIXTURES / fixture), kernel_log=str(FIXTURES / "dmesg_xid_79.txt"))
    code, output = promtool_check_metrics(promtool, text)
    assert code == 0, output


def test_the_busy_h200_in_units_prometheus_uses(tmp_path):
    families, _text, _problems = run(tmp_path, cat(FIXTURES / "h200_580_busy_capture.xml"))
    gpu = {"gpu": "0", "uuid": "GPU-bbbbbbbb-1111-2222-3333-000000000200", "model": "NVIDIA H200",
           "pci_bus_id": "00000000:00:06.0"}
    assert value(families, "nvidia_gpu_temperature_celsius", **gpu) == 67
    assert value(families, "nvidia_gpu_memory_temperature_celsius", **gpu) == 52
    assert value(families, "nvidia_gpu_power_draw_watts", **gpu) == 692.53
    assert value(families, "nvidia_gpu_power_limit_watts", **gpu) == 700
    assert value(families, "nvidia_gpu_sm_clock_hertz", **gpu) == 1425e6
    assert value(families, "nvidia_gpu_memory_clock_hertz", **gpu) == 3201e6
    assert value(families, "nvidia_gpu_utilization_ratio", **gpu) == 1.0
    assert value(families, "nvidia_gpu_memory_utilization_ratio", **gpu) == 0.23
    assert value(families, "nvidia_gpu_memory_used_bytes", **gpu) == 1011 * 1024 * 1024
    assert value(families, "nvidia_gpu_performance_state", **gpu) == 0
    assert value(families, "nvidia_gpu_ecc_volatile_errors_total", type="uncorrectable", **gpu) == 0
    assert value(families, "nvidia_gpu_remapped_rows_failed", **gpu) == 0
    assert value(families, "nvidia_gpu_pcie_link_generation", **gpu) == 5
    assert value(families, "nvidia_gpu_pcie_link_width_max", **gpu) == 16
    assert value(families, "nvidia_gpu_clock_event_reason_active", reason="sw_power_cap", **gpu) == 1
    assert value(families, "nvidia_gpu_clock_event_reason_active", reason="hw_thermal_slowdown", **gpu) == 0
    assert value(families, "nvidia_gpu_persistence_mode_enabled", **gpu) == 1
    assert value(families, "nvidia_gpu_mig_mode_enabled", **gpu) == 0
    # Volta-era page retirement is N/A on Hopper: absent, not a made-up 0.
    assert "nvidia_gpu_retired_pages_total" not in families


def test_volta_reports_retired_pages_and_no_mig(tmp_path):
    families, _text, _problems = run(tmp_path, cat(FIXTURES / "dgx1_8x_tesla_v100_sxm2_32gb.xml"))
    assert len(families["nvidia_gpu_power_draw_watts"]["samples"]) == 8
    assert "nvidia_gpu_mig_mode_enabled" not in families
    assert "nvidia_gpu_temperature_celsius" not in families  # trimmed from this rebuilt report


def test_pci_count_next_to_the_gpus_that_answer(tmp_path):
    sysfs = build_sysfs(tmp_path / "sys", "pci_dgx_a100.txt")
    families, _text, _problems = run(tmp_path, cat(FIXTURES / "hgx_h100_2x_h100_80gb_hbm3_mig.xml"), sysfs_root=sysfs)
    assert value(families, "nvidia_gpus_on_pci") == 8
    assert value(families, "nvidia_gpus_answering") == 2


def test_each_mig_device_is_a_series_of_its_gpu_with_its_instance_ids(tmp_path):
    """GPU 0 of the HGX H100 report has MIG on and two MIG devices (GPU instances 1 and 2, compute instance 0 each);
    GPU 1, MIG pending, has none."""
    families, _text, _problems = run(tmp_path, cat(FIXTURES / "hgx_h100_2x_h100_80gb_hbm3_mig.xml"))
    assert value(families, "nvidia_gpu_mig_devices", gpu="0") == 2 and value(families, "nvidia_gpu_mig_devices", gpu="1") == 0
    for device, instance in (("0", "1"), ("1", "2")):
        labels = {"gpu": "0", "uuid": "GPU-3c8e1f4a-9b2d-6e7f-a1c3-5d4b8e2f0a19", "mig_device": device,
                  "gpu_instance_id": instance, "compute_instance_id": "0"}
        assert value(families, "nvidia_gpu_mig_memory_total_bytes", **labels) == 40448 * 2 ** 20
        assert value(families, "nvidia_gpu_mig_memory_used_bytes", **labels) == 16 * 2 ** 20
        assert value(families, "nvidia_gpu_mig_multiprocessors", **labels) == 60
    assert {labels["gpu"] for labels, _sample in families["nvidia_gpu_mig_memory_used_bytes"]["samples"]} == {"0"}


def test_driver_flavor_from_the_loaded_module(tmp_path):
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text((FIXTURES / "proc_driver_nvidia_version_open_h200_580.txt").read_text())
    families, _text, _problems = run(tmp_path, cat(FIXTURES / "h200_580_capture.xml"), procfs_root=proc)
    assert families["nvidia_driver_info"]["samples"] == [
        ({"version": "580.159.04", "flavor": "open", "cuda_version": "13.0"}, 1.0)]


def test_driver_info_from_the_module_while_nvidia_smi_fails(tmp_path):
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text((FIXTURES / "proc_driver_nvidia_version_proprietary.txt").read_text())
    families, _text, _problems = run(tmp_path, "false", procfs_root=proc)
    assert families["nvidia_driver_info"]["samples"] == [({"version": "535.54.03", "flavor": "proprietary", "cuda_version": ""}, 1.0)]


def write_script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body", [
    "sleep 30\n",
    # ignores SIGTERM, and a child holds stdout open: the whole group is killed, the pipes close
    "trap '' TERM\nsleep 30 &\nsleep 30\n",
])
def test_a_hung_nvidia_smi_is_down_within_its_timeout(tmp_path, body):
    hung = write_script(tmp_path / "nvidia-smi", body)
    started = time.monotonic()
    families, _text, problems = run(tmp_path, hung, timeout=0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 0.5 + KILL_GRACE_S
    assert value(families, "nvidia_smi_up") == 0
    assert value(families, "nvidia_gpus_answering") == 0
    assert 0.5 <= value(families, "nvidia_smi_duration_seconds") < 0.5 + KILL_GRACE_S
    assert "did not finish within 0.5 s" in problems[0]
    assert not any(name.startswith("nvidia_gpu_") for name in families)


@pytest.mark.parametrize("command, problem", [
    ("{script} 9", "exited with 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
    ("/nonexistent/nvidia-smi -q -x", "could not run /nonexistent/nvidia-smi"),
    ("cat " + str(FIXTURES / "nvidia_smi_truncated.xml"), "is not its XML report: not well-formed XML"),
])
def test_a_failing_nvidia_smi_is_down_and_says_why(tmp_path, command, problem):
    script = write_script(tmp_path / "nvidia-smi", "cat %s\nexit \"$1\"\n" % shlex.quote(str(FIXTURES / "nvidia_smi_driver_not_loaded.txt")))
    families, _text, problems = run(tmp_path, command.format(script=script))
    assert value(families, "nvidia_smi_up") == 0
    assert problem in problems[0]


@pytest.mark.parametrize("address, expected", [
    ("0000:07:00", "00000000:07:00.0"), ("PCI:0000:07:00", None), ("0000:1b:00.0", "00000000:1B:00.0"),
    ("00000000:DB:00.0", "00000000:DB:00.0"), ("07:00", "00000000:07:00.0"),
])
def test_normalize_bus_id(address, expected):
    if expected is None:
        with pytest.raises(ValueError):
            normalize_bus_id(address)
    else:
        assert normalize_bus_id(address) == expected


def test_xid_events_by_code_and_gpu_from_a_recorded_log(tmp_path):
    families, _text, _problems = run(tmp_path, "false", kernel_log=str(FIXTURES / "dmesg_xid_79.txt"))
    assert value(families, "nvidia_kernel_log_up") == 1
    assert value(families, "nvidia_xid_events_total", xid="79", pci_bus_id="00000000:00:06.0") == 1
    assert value(families, "nvidia_xid_events_total", xid="154", pci_bus_id="00000000:00:06.0") == 1


def test_an_unreadable_kernel_log_is_reported_not_fatal(tmp_path):
    families, _text, problems = run(tmp_path, cat(FIXTURES / "h200_580_capture.xml"), kernel_log=str(tmp_path / "missing"))
    assert value(families, "nvidia_kernel_log_up") == 0
    assert value(families, "nvidia_smi_up") == 1
    assert "could not read" in problems[0]


def kmsg(*records):
    return lambda path: list(records)


XID_79 = "NVRM: Xid (PCI:0000:07:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID_48 = "NVRM: Xid (PCI:0000:0f:00): 48, pid=1234, name=python, An uncorrectable double bit error"


def test_kmsg_records_count_once_each_and_since_boot(tmp_path, monkeypatch):
    state = str(tmp_path / "state.json")
    device = str(tmp_path)  # not a regular file: read as /dev/kmsg
    monkeypatch.setattr(gpu_metrics, "read_kmsg", kmsg((10, "boot"), (11, XID_79)))
    assert xid_counts(device, state, "boot-a") == ({"79|00000000:07:00.0": 1}, None)
    # the same records again: nothing new
    assert xid_counts(device, state, "boot-a") == ({"79|00000000:07:00.0": 1}, None)
    # the ring buffer wrapped (record 11 gone) and two new Xids came: the count keeps what it saw
    monkeypatch.setattr(gpu_metrics, "read_kmsg", kmsg((12, XID_79), (13, XID_48)))
    assert xid_counts(device, state, "boot-a") == ({"79|00000000:07:00.0": 2, "48|00000000:0F:00.0": 1}, None)
    # a reboot starts again
    monkeypatch.setattr(gpu_metrics, "read_kmsg", kmsg((1, "boot")))
    assert xid_counts(device, state, "boot-b") == ({}, None)


def test_kmsg_reads_the_real_device_where_permitted(tmp_path):
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    records = gpu_metrics.read_kmsg("/dev/kmsg")
    assert records and all(isinstance(sequence, int) for sequence, _message in records)
    assert [sequence for sequence, _message in records] == sorted(sequence for sequence, _message in records)


def test_main_writes_the_textfile_atomically(tmp_path, capsys):
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    code = main(["--command", cat(FIXTURES / "h200_580_capture.xml"), "--textfile-directory", str(textfile),
                 "--kernel-log", "", "--state-file", str(tmp_path / "state.json"), "--sysfs-root", str(tmp_path),
                 "--procfs-root", str(tmp_path)])
    assert code == 0
    assert os.listdir(textfile) == ["nvidia_gpu.prom"]
    families = parse_exposition((textfile / "nvidia_gpu.prom").read_text())
    assert value(families, "nvidia_smi_up") == 1
    assert capsys.readouterr().out == ""


def test_main_writes_the_expected_fabric_rate_in_node_exporters_unit(tmp_path, capsys):
    base = ["--command", "false", "--kernel-log", "", "--state-file", "", "--sysfs-root", str(tmp_path),
            "--procfs-root", str(tmp_path)]
    assert main(base + ["--fabric-expected-rate-gbps", "400"]) == 0
    families = parse_exposition(capsys.readouterr().out)
    # sysfs' "400 Gb/sec (4X NDR)" is 5e10 bytes a second in node_infiniband_rate_bytes_per_second
    assert value(families, "dlinfra_fabric_expected_rate_bytes_per_second") == 5e10
    assert main(base + ["--fabric-expected-rate-gbps", ""]) == 0
    assert "dlinfra_fabric_expected_rate_bytes_per_second " not in capsys.readouterr().out


@pytest.mark.parametrize("rate", ["fast", "0", "-400", "nan"])
def test_main_refuses_an_expected_fabric_rate_that_is_not_a_rate(tmp_path, capsys, rate):
    with pytest.raises(SystemExit):
        main(["--command", "false", "--kernel-log", "", "--fabric-expected-rate-gbps", rate])
    assert "--fabric-expected-rate-gbps" in capsys.readouterr().err


def test_main_says_why_nvidia_smi_is_down_on_stderr(tmp_path, capsys):
    code = main(["--command", "false", "--kernel-log", "", "--state-file", "", "--sysfs-root", str(tmp_path),
                 "--procfs-root", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0
    assert "nvidia_smi_up 0" in captured.out
    assert "false exited with 1" in captured.err


def test_main_fails_when_the_textfile_cannot_be_written(tmp_path, capsys):
    code = main(["--command", "false", "--textfile-directory", str(tmp_path / "missing"), "--kernel-log", "",
                 "--state-file", "", "--sysfs-root", str(tmp_path), "--procfs-root", str(tmp_path)])
    assert code == 1
    assert "could not write" in capsys.readouterr().err


def test_eight_gpus_cost_well_under_the_cpu_target(tmp_path):
    """The issue's target: <= 100 ms CPU per run on an 8-GPU node. Here: the collector's own CPU (parse, sysfs,
    render, write) plus nvidia-smi's stand-in (cat), best of 5 runs, on the H200 capture times eight."""
    report = tmp_path / "eight.xml"
    report.write_text(eight_gpu_report())
    families, _text, _problems = run(tmp_path, cat(report))
    assert value(families, "nvidia_gpus_answering") == 8
    costs = []
    for _run in range(5):
        own, children = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        run(tmp_path, cat(report), kernel_log=str(FIXTURES / "dmesg_xid_79.txt"))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        costs.append(time.process_time() - own + after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime)
    sys.stderr.write("8-GPU run: %.1f ms CPU (best of 5)\n" % (min(costs) * 1000))
    assert min(costs) < 0.1


def test_the_metric_names_are_the_documented_ones():
    """Names the alert rules and the dashboard will use: a rename is a breaking change, so it shows here."""
    names = set(gpu_metrics._families())  # pylint: disable=protected-access
    assert len(names) == 41
    assert {"dlinfra_fabric_expected_rate_bytes_per_second", "nvidia_smi_up", "nvidia_gpus_on_pci", "nvidia_gpus_answering", "nvidia_driver_info",
            "nvidia_xid_events_total", "nvidia_gpu_temperature_celsius", "nvidia_gpu_power_draw_watts",
            "nvidia_gpu_memory_used_bytes", "nvidia_gpu_ecc_volatile_errors_total",
            "nvidia_gpu_remapped_rows_failed", "nvidia_gpu_clock_event_reason_active"} <= names
