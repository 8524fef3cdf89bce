"""nvidia_gpu_facts' main() on fake hosts: a sysfs tree, a procfs file and an nvidia-smi that prints a captured report."""

import pathlib

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import nvidia_gpu_facts

FIXTURES = pathlib.Path(__file__).parents[1] / "module_utils" / "fixtures" / "nvidia_smi"

A100_GPU_3 = {
    "index": 3, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-4e7a1c9d-2b8f-4d3e-b6a0-5f9c8e1d2a44", "pci_bus_id": "00000000:4E:00.0",
    "memory_total_mib": 81920, "persistence_mode": True, "mig_mode_current": False, "mig_mode_pending": False,
    "mig_device_count": 0, "fabric_state": None, "fabric_status": None,
}


class FakeHost:
    """Directories standing in for /sys, /proc and a bin directory, filled from the fixtures."""

    def __init__(self, root, pci_table, proc_version=None, nouveau_loaded=False):
        self.root = root
        self.sysfs = root / "sys"
        self.procfs = root / "proc"
        self.bin = root / "bin"
        for directory in (self.sysfs, self.procfs, self.bin):
            directory.mkdir()
        for line in (FIXTURES / pci_table).read_text().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            address, vendor, device, pci_class = line.split()
            device_dir = self.sysfs / "bus" / "pci" / "devices" / address
            device_dir.mkdir(parents=True)
            for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
                (device_dir / name).write_text(value + "\n")
        if proc_version:
            (self.procfs / "driver" / "nvidia").mkdir(parents=True)
            (self.procfs / "driver" / "nvidia" / "version").write_text((FIXTURES / proc_version).read_text())
        if nouveau_loaded:
            (self.sysfs / "module" / "nouveau").mkdir(parents=True)

    def install_nvidia_smi(self, output_fixture, exit_code, to_stderr=False, delay_s=0):
        """An nvidia-smi that accepts only `-q -x`, prints the fixture and exits as the real one does."""
        script = self.bin / "nvidia-smi"
        script.write_text(
            "#!/bin/sh\n"
            "PATH=/usr/bin:/bin\n"  # the tests narrow PATH to the fake bin directory
            'if [ "$*" != "-q -x" ]; then echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2; fi\n'
            + ("sleep %d\n" % delay_s if delay_s else "")
            + "cat '%s'%s\n" % (FIXTURES / output_fixture, " >&2" if to_stderr else "")
            + "exit %d\n" % exit_code)
        script.chmod(0o755)
        return str(script)

    def install_dmesg(self, output, exit_code=0):
        """A dmesg that prints `output` (a fixture name, or text on stderr when it fails) and exits with exit_code."""
        script = self.bin / "dmesg"
        body = "cat '%s'\n" % (FIXTURES / output) if exit_code == 0 else "echo '%s' >&2\n" % output
        script.write_text("#!/bin/sh\nPATH=/usr/bin:/bin\n" + body + "exit %d\n" % exit_code)
        script.chmod(0o755)
        return str(script)

    def args(self, **extra):
        return dict(sysfs_root=str(self.sysfs), procfs_root=str(self.procfs), **extra)


@pytest.fixture
def run_module(module_result):
    """run_module(args): nvidia_gpu_facts.main()'s result (conftest.py)."""
    return lambda args: module_result(nvidia_gpu_facts.main, args)


def assert_facts_mirror_result(result):
    top_level = {key: value for key, value in result.items() if key not in ("changed", "ansible_facts", "invocation", "_exit_code")}
    assert result["ansible_facts"] == {"nvidia_gpu": top_level}
    assert result["changed"] is False
    assert result["_exit_code"] == 0


def test_ok_on_a_dgx_a100(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_dgx_a100.txt", proc_version="proc_driver_nvidia_version_proprietary.txt")
    smi = host.install_nvidia_smi("dgx_a100_8x_a100_sxm4_80gb.xml", 0)
    result = run_module(host.args(nvidia_smi_path=smi))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "ok"
    assert result["message"] is None
    assert result["raw_message"] is None
    assert result["reboot_required"] is False
    assert result["gpu_count"] == 8
    assert {key: result["gpus"][3][key] for key in A100_GPU_3} == A100_GPU_3
    assert result["driver_version"] == "535.54.03"
    assert result["cuda_version"] == "12.2"
    assert result["kernel_module_version"] == "535.54.03"
    assert result["library_version"] == "535.54.03"
    assert result["nvidia_smi_path"] == smi
    assert result["nouveau_loaded"] is False
    assert len(result["pci_gpus"]) == 8
    assert result["nvswitch_count"] == 6
    assert result["pci_nvswitches"][0] == {"address": "0000:c1:00.0", "device_id": "0x1af1", "class": "0x068000"}


def test_ok_finds_nvidia_smi_on_path(tmp_path, run_module, monkeypatch):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt")
    smi = host.install_nvidia_smi("geforce_rtx_3090_single.xml", 0)
    monkeypatch.setenv("PATH", str(host.bin))
    result = run_module(host.args())
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "ok"
    assert result["nvidia_smi_path"] == smi
    assert [gpu["name"] for gpu in result["gpus"]] == ["NVIDIA GeForce RTX 3090"]


def test_version_mismatch_when_report_and_loaded_module_disagree(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt", proc_version="proc_driver_nvidia_version_proprietary.txt")
    result = run_module(host.args(nvidia_smi_path=host.install_nvidia_smi("geforce_rtx_3090_single.xml", 0)))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "version_mismatch"
    assert result["message"] == ("the loaded kernel module is 535.54.03 but nvidia-smi reports driver 525.147.05; "
                                 "reboot to load the installed driver")
    assert result["reboot_required"] is True
    assert result["gpus"] == []
    assert result["gpu_count"] == 1


@pytest.mark.parametrize("report, pci_table, proc_version, gpu_count, nvswitch_count, mig_current, persistence", [
    ("hgx_h100_2x_h100_80gb_hbm3_mig.xml", "pci_hgx_h100.txt", "proc_driver_nvidia_version_open.txt", 2, 4, [True, False], [True, True]),
    ("dgx1_8x_tesla_v100_sxm2_32gb.xml", "pci_dgx1_v100.txt", None, 8, 0, [None] * 8, [False] * 8),
    ("geforce_rtx_3090_single.xml", "pci_desktop_rtx_3090.txt", None, 1, 0, [None], [True]),
])
def test_ok_per_model(tmp_path, run_module, report, pci_table, proc_version, gpu_count, nvswitch_count, mig_current, persistence):
    host = FakeHost(tmp_path, pci_table, proc_version=proc_version)
    result = run_module(host.args(nvidia_smi_path=host.install_nvidia_smi(report, 0)))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "ok"
    assert result["gpu_count"] == gpu_count
    assert len(result["pci_gpus"]) == gpu_count
    assert result["nvswitch_count"] == nvswitch_count
    assert [gpu["mig_mode_current"] for gpu in result["gpus"]] == mig_current
    assert [gpu["persistence_mode"] for gpu in result["gpus"]] == persistence


def test_no_gpu_without_driver(tmp_path, run_module, monkeypatch):
    host = FakeHost(tmp_path, "pci_vm_without_nvidia.txt")
    monkeypatch.setenv("PATH", str(host.bin))
    result = run_module(host.args())
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "no_gpu"
    assert result["message"] == "no NVIDIA GPU (PCI vendor 0x10de, class 0x0300 or 0x0302) is present on this host"
    assert result["gpu_count"] == 0
    assert result["nvidia_smi_path"] is None
    assert result["reboot_required"] is False


def test_no_gpu_with_driver_packages_installed(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_vm_without_nvidia.txt")
    smi = host.install_nvidia_smi("nvidia_smi_driver_not_loaded.txt", 9)
    result = run_module(host.args(nvidia_smi_path=smi))
    assert result["driver_state"] == "no_gpu"
    assert result["raw_message"] == (FIXTURES / "nvidia_smi_driver_not_loaded.txt").read_text().strip()


def test_not_installed(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_dgx_a100.txt")
    result = run_module(host.args(nvidia_smi_path=str(host.bin / "nvidia-smi")))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "not_installed"
    assert result["message"] == "8 NVIDIA GPU(s) on PCI but no nvidia-smi binary; install the NVIDIA driver"
    assert result["gpu_count"] == 8
    assert result["nvidia_smi_path"] is None
    assert result["raw_message"] is None


@pytest.mark.parametrize("nouveau_loaded", [False, True])
def test_not_loaded(tmp_path, run_module, nouveau_loaded):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt", nouveau_loaded=nouveau_loaded)
    smi = host.install_nvidia_smi("nvidia_smi_driver_not_loaded.txt", 9)
    result = run_module(host.args(nvidia_smi_path=smi))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "not_loaded"
    assert result["reboot_required"] is nouveau_loaded
    assert result["nouveau_loaded"] is nouveau_loaded
    assert result["kernel_module_version"] is None
    assert result["raw_message"] == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                                     "Make sure that the latest NVIDIA driver is installed and running.")


@pytest.mark.parametrize("to_stderr", [False, True])
def test_version_mismatch(tmp_path, run_module, to_stderr):
    host = FakeHost(tmp_path, "pci_dgx_a100.txt", proc_version="proc_driver_nvidia_version_proprietary.txt")
    smi = host.install_nvidia_smi("nvidia_smi_version_mismatch.txt", 18, to_stderr=to_stderr)
    result = run_module(host.args(nvidia_smi_path=smi))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "version_mismatch"
    assert result["reboot_required"] is True
    assert result["kernel_module_version"] == "535.54.03"
    assert result["library_version"] == "535.183"
    assert result["raw_message"] == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.183"
    assert result["message"] == ("the loaded kernel module and the installed user-space driver differ "
                                 "(kernel module 535.54.03, user-space library 535.183); reboot to load the installed driver")
    assert result["gpus"] == []
    assert result["gpu_count"] == 8


def test_error_when_nvidia_smi_sees_no_device(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt", proc_version="proc_driver_nvidia_version_proprietary.txt")
    smi = host.install_nvidia_smi("nvidia_smi_no_devices.txt", 6)
    result = run_module(host.args(nvidia_smi_path=smi))
    assert result["driver_state"] == "error"
    assert result["message"] == "nvidia-smi exited with 6: No devices were found"
    assert result["raw_message"] == "No devices were found"


def test_error_on_malformed_report(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt", proc_version="proc_driver_nvidia_version_proprietary.txt")
    smi = host.install_nvidia_smi("nvidia_smi_truncated.xml", 0)
    result = run_module(host.args(nvidia_smi_path=smi))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "error"
    assert result["message"].startswith("%s -q -x printed output that is not its XML report: not well-formed XML" % smi)
    assert result["gpus"] == []
    assert result["gpu_count"] == 1
    assert result["driver_version"] is None


def test_error_when_nvidia_smi_hangs(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt", proc_version="proc_driver_nvidia_version_proprietary.txt")
    smi = host.install_nvidia_smi("geforce_rtx_3090_single.xml", 0, delay_s=10)
    result = run_module(host.args(nvidia_smi_path=smi, timeout=1))
    assert result["driver_state"] == "error"
    assert result["message"] == "%s -q -x did not finish within 1 s; the driver may be hung: look for Xid errors in dmesg" % smi
    assert result["raw_message"] is None


def test_check_mode_reports_the_same(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_dgx_a100.txt", proc_version="proc_driver_nvidia_version_proprietary.txt")
    args = host.args(nvidia_smi_path=host.install_nvidia_smi("dgx_a100_8x_a100_sxm4_80gb.xml", 0))
    normal = run_module(args)
    checked = run_module(dict(args, _ansible_check_mode=True))
    assert checked["ansible_facts"] == normal["ansible_facts"]
    assert checked["changed"] is False


@pytest.mark.parametrize("option, make_value, message", [
    ("nvidia_smi_path", lambda host: str(host.bin),
     "nvidia_smi_path={value} is not an executable file; point it at the nvidia-smi binary or leave it unset to look nvidia-smi up on PATH"),
    ("sysfs_root", lambda host: str(host.root / "missing"),
     "sysfs_root={value} is not a directory; set it to where sysfs is mounted (normally /sys)"),
    ("procfs_root", lambda host: str(host.root / "missing"),
     "procfs_root={value} is not a directory; set it to where procfs is mounted (normally /proc)"),
    ("timeout", lambda host: 0, "timeout={value} must be a positive number of seconds"),
])
def test_bad_input_fails_with_the_fix(tmp_path, run_module, option, make_value, message):
    host = FakeHost(tmp_path, "pci_dgx_a100.txt")
    value = make_value(host)
    result = run_module(dict(host.args(), **{option: value}))
    assert result["failed"] is True
    assert result["msg"] == message.format(value=value)
    assert result["_exit_code"] == 1


def test_nvidia_smi_path_that_is_not_executable_fails(tmp_path, run_module):
    host = FakeHost(tmp_path, "pci_dgx_a100.txt")
    smi = host.install_nvidia_smi("dgx_a100_8x_a100_sxm4_80gb.xml", 0)
    pathlib.Path(smi).chmod(0o644)
    result = run_module(host.args(nvidia_smi_path=smi))
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia_smi_path=%s is not an executable file" % smi)


def test_kernel_log_xid_events(tmp_path, run_module, monkeypatch):
    host = FakeHost(tmp_path, "pci_hgx_h100.txt", proc_version="proc_driver_nvidia_version_open.txt")
    host.install_dmesg("dmesg_xid_79.txt")
    monkeypatch.setenv("PATH", str(host.bin))
    result = run_module(host.args(nvidia_smi_path=host.install_nvidia_smi("hgx_h100_2x_h100_80gb_hbm3_mig.xml", 0), kernel_log=True))
    assert_facts_mirror_result(result)
    assert result["kernel_log_error"] is None
    assert [(event["pci"], event["xid"]) for event in result["xid_events"]] == [("0000:00:06", 79), ("0000:00:06", 154)]
    assert result["gpus"][0]["performance_state"] == "P0"


def test_kernel_log_without_xid(tmp_path, run_module, monkeypatch):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt")
    host.install_dmesg("proc_driver_nvidia_version_proprietary.txt")  # an NVRM line that is no Xid
    monkeypatch.setenv("PATH", str(host.bin))
    result = run_module(host.args(nvidia_smi_path=host.install_nvidia_smi("geforce_rtx_3090_single.xml", 0), kernel_log=True))
    assert (result["xid_events"], result["kernel_log_error"]) == ([], None)


def test_kernel_log_not_permitted(tmp_path, run_module, monkeypatch):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt")
    dmesg = host.install_dmesg("dmesg: read kernel buffer failed: Operation not permitted", exit_code=1)
    monkeypatch.setenv("PATH", str(host.bin))
    result = run_module(host.args(nvidia_smi_path=host.install_nvidia_smi("geforce_rtx_3090_single.xml", 0), kernel_log=True))
    assert_facts_mirror_result(result)
    assert result["driver_state"] == "ok"
    assert result["xid_events"] is None
    assert result["kernel_log_error"] == (
        "%s exited with 1: dmesg: read kernel buffer failed: Operation not permitted; reading the kernel log needs root "
        "(become) or CAP_SYSLOG where kernel.dmesg_restrict=1, and containers usually lack CAP_SYSLOG: read it on the host" % dmesg)


def test_kernel_log_without_dmesg(tmp_path, run_module, monkeypatch):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt")
    monkeypatch.setenv("PATH", str(host.bin))
    real_get_bin_path = nvidia_gpu_facts.AnsibleModule.get_bin_path
    # get_bin_path also searches the sbin directories, where a host may have a real dmesg.
    monkeypatch.setattr(nvidia_gpu_facts.AnsibleModule, "get_bin_path",
                        lambda self, name, *args, **kwargs: None if name == "dmesg" else real_get_bin_path(self, name, *args, **kwargs))
    result = run_module(host.args(nvidia_smi_path=host.install_nvidia_smi("geforce_rtx_3090_single.xml", 0), kernel_log=True))
    assert result["xid_events"] is None
    assert result["kernel_log_error"] == "dmesg was not found (util-linux); install it to read the driver's Xid reports"


def test_kernel_log_off(tmp_path, run_module, monkeypatch):
    host = FakeHost(tmp_path, "pci_desktop_rtx_3090.txt")
    host.install_dmesg("dmesg_xid_79.txt")
    monkeypatch.setenv("PATH", str(host.bin))
    result = run_module(host.args(nvidia_smi_path=host.install_nvidia_smi("geforce_rtx_3090_single.xml", 0), kernel_log=False))
    assert (result["xid_events"], result["kernel_log_error"]) == (None, None)


def test_the_lent_h200_is_hopper_9_0_on_the_open_module(tmp_path, run_module):
    # PCI and /proc/driver/nvidia/version as read on a lent H200 with driver 580 (no nvidia-smi here: the facts come
    # from sysfs and procfs alone).
    host = FakeHost(tmp_path, "h200_580_sysfs_pci.txt", proc_version="proc_driver_nvidia_version_open_h200_580.txt")
    result = run_module(host.args(nvidia_smi_path=str(tmp_path / "bin" / "absent")))
    assert result["pci_gpus"] == [{"address": "0000:00:06.0", "device_id": "0x2335", "class": "0x030200", "name": "NVIDIA H200",
                                   "architecture": "Hopper", "compute_capability": "9.0"}]
    assert result["kernel_module_flavor"] == "open"
    assert result["kernel_module_version"] == "580.159.04"
