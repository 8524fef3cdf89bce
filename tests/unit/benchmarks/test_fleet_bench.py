"""benchmarks/fleet/run.py without a lab: the PLAY RECAP it reads and the 1,000-node extrapolation it prints."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("fleet_run", ROOT / "benchmarks" / "fleet" / "run.py")
fleet = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(fleet)

OUTPUT = """
PLAY RECAP *********************************************************************
sim-gpu1                   : ok=180  changed=0    unreachable=0    failed=0    skipped=40   rescued=0    ignored=0
sim-gpu2                   : ok=179  changed=1    unreachable=0    failed=0    skipped=41   rescued=1    ignored=0
sim-head                   : ok=120  changed=0    unreachable=0    failed=0    skipped=30   rescued=0    ignored=0
"""


def test_the_recap_gives_each_hosts_tasks_and_changes():
    hosts = fleet.recap(OUTPUT)
    assert hosts["sim-gpu1"] == {"tasks": 220, "changed": 0, "unreachable": 0, "failed": 0}
    assert hosts["sim-gpu2"]["tasks"] == 220 and hosts["sim-gpu2"]["changed"] == 1
    assert sorted(hosts) == ["sim-gpu1", "sim-gpu2", "sim-head"]


def test_the_extrapolation_scales_the_marginal_node():
    small = {"wall_s": 90.0, "cpu_s": 37.0, "gpu_tasks": 220, "max_tasks": 220}
    large = {"wall_s": 106.0, "cpu_s": 56.0, "gpu_tasks": 220, "max_tasks": 220}
    estimate = fleet.extrapolate(small, large)
    assert estimate["cpu_per_gpu_node_s"] == 19.0
    assert estimate["fleet_cpu_h"] == round((18.0 + 1000 * 19.0) / 3600, 2)
    assert estimate["fleet_minutes_cpu_bound"] == round((18.0 + 19000.0) / 16 / 60, 1)
    # 220 tasks x 50 batches of 20 hosts x (106 s / 220 tasks)
    assert estimate["fleet_minutes_linear"] == round(220 * 50 * (106.0 / 220) / 60, 1)


def test_role_tasks_count_each_task_once_per_host():
    output = "\n".join([
        "TASK [dlinfra.gpu_cluster.nvidia_driver : Read the GPUs] ************************",
        "ok: [sim-gpu1]", "ok: [sim-gpu2]",
        "TASK [dlinfra.gpu_cluster.nvidia_driver : Hold the packages] ********************",
        "ok: [sim-gpu1] => (item=nvidia-smi)", "ok: [sim-gpu1] => (item=libcuda1)",
        "TASK [Say where the report is] ***************************************************",
        "skipping: [sim-gpu1]",
        "TASK [dlinfra.gpu_cluster.microk8s : Join] ***************************************",
        "skipping: [sim-gpu2]"])
    assert fleet.role_tasks(output, "sim-gpu1") == {"nvidia_driver": 2, "play": 1}
