"""Every read of the GPUs or of the loaded nvidia module in rolling_upgrade uses the role's sysfs and procfs roots: a
check that read /sys or /proc while the facts read elsewhere would compare the wrong module with the plan."""
import pathlib

import yaml

TASKS = pathlib.Path(__file__).resolve().parents[4] / "roles" / "rolling_upgrade" / "tasks"
READERS = ("dlinfra.gpu_cluster.rolling_plan", "dlinfra.gpu_cluster.nvidia_gpu_facts")


def calls():
    for path in sorted(TASKS.glob("*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            for module in READERS:
                if module in task:
                    yield path.name, task["name"], task[module]


def test_every_read_of_the_module_or_the_gpus_passes_both_roots():
    found = list(calls())
    assert len(found) == 5  # plan reads the GPUs and the versions in one task; drain the GPUs; apply and verify the versions
    for file, name, args in found:
        assert args.get("sysfs_root") == "{{ rolling_upgrade_sysfs_root }}", (file, name)
        assert args.get("procfs_root") == "{{ rolling_upgrade_procfs_root }}", (file, name)
