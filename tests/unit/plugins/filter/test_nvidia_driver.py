import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.filter.nvidia_driver import (
    FilterModule, nvidia_driver_cuda_problem, nvidia_driver_node_flavor, nvidia_driver_other_kernel_packages,
    nvidia_driver_package_version, nvidia_driver_plans, nvidia_driver_problems, nvidia_driver_swap_out,
    nvidia_driver_swap_problem, nvidia_driver_ubuntu_modules)

V100, B200 = "0x1db5", "0x2901"
SETTINGS = {"cluster_group_pattern": "^cluster_", "consistency": "branch"}


def node(*ids, branch="", fixed="False"):
    return {"pci_gpus": [{"address": "0000:%02x:00.0" % n, "device_id": d, "class": "0x030200"} for n, d in enumerate(ids)],
            "flavor": "auto", "branch": branch, "platform": "Ubuntu 24", "platform_branch": "570", "fixed_branch": fixed}


def test_hosts_are_planned_with_their_cluster_group_and_hosts_without_a_node_left_out():
    nodes = {"v100-1": node(V100), "b200-1": node(B200), "v100-2": node(V100), "head": None}
    groups = {"all": list(nodes), "cluster_a": ["v100-1", "b200-1"], "cluster_b": ["v100-2"], "rack_1": ["v100-1"]}
    plans = nvidia_driver_plans(nodes, groups, SETTINGS)
    assert sorted(plans) == ["b200-1", "v100-1", "v100-2"]
    assert {host: (plan["branch"], plan["flavor"]) for host, plan in plans.items()} == {
        "v100-1": ("570", "proprietary"), "b200-1": ("570", "open"), "v100-2": ("570", "proprietary")}


def test_the_text_false_of_a_fact_is_not_a_fixed_branch_and_a_pin_is_compared_as_text():
    plans = nvidia_driver_plans({"b200-1": node(B200, branch=575)}, {"cluster_a": ["b200-1"]}, SETTINGS)
    assert (plans["b200-1"]["branch"], plans["b200-1"]["problems"]) == ("575", [])


def test_a_fixed_source_without_the_branch_the_gpus_need_is_a_problem():
    plans = nvidia_driver_plans({"b200-1": node(B200, branch="", fixed="true")}, {}, SETTINGS)
    assert plans["b200-1"]["problems"] == []  # 570 is the platform's own and B200 takes it
    nodes = {"v100-1": node(V100, fixed="true")}
    nodes["v100-1"]["platform_branch"] = "590"
    plans = nvidia_driver_plans(nodes, {}, SETTINGS)
    assert plans["v100-1"]["branch"] == "580" and "set nvidia_driver_source: cuda" in plans["v100-1"]["problems"][0]


def test_the_cuda_filter_takes_empty_values_and_numbers():
    assert nvidia_driver_cuda_problem("", "550", "gpu1", "nccl_cuda_version") == ""
    assert nvidia_driver_cuda_problem("12.4", None, "gpu1", "nccl_cuda_version 12.4") == ""
    assert nvidia_driver_cuda_problem("13.0", 550, "gpu1", "nccl_cuda_version 13.0").startswith(
        "gpu1: nccl_cuda_version 13.0 needs driver branch 580 or later")


def test_a_node_flavour_follows_the_first_branch_set():
    gpus = node("0x2335")["pci_gpus"]  # H200
    assert nvidia_driver_node_flavor(gpus, "h1", "auto", ["", "550.163.01", "580"]) == "proprietary"
    assert nvidia_driver_node_flavor(gpus, "h1", "auto", [None, "", "580"]) == "open"
    assert nvidia_driver_node_flavor(gpus, "h1", "proprietary", ["580"]) == "proprietary"
    assert nvidia_driver_node_flavor(node(B200)["pci_gpus"], "b1", "auto", ["570"]) == "open"


def test_a_node_flavour_its_gpus_cannot_run_names_host_and_variable():
    with pytest.raises(AnsibleFilterError, match="v1: nvidia_driver_flavor is open but Tesla V100"):
        nvidia_driver_node_flavor(node(V100)["pci_gpus"], "v1", "open", ["550"])


PREFLIGHT_SETTINGS = {
    "distribution": "Debian", "major_version": "13", "releases": ["12", "13"], "source": "",
    "source_effective": "distribution", "sources": ["distribution", "tesla", "cuda"], "branch": "", "version": "",
    "cuda_key_fingerprint": "", "cuda_key_url": "", "fabric_manager_wanted": False, "fabric_manager_package": "",
    "mok_signing": False, "mok_certificate": "/var/lib/dkms/mok.pub",
}
PREFLIGHT_FOUND = {"plan_problems": [], "branch": "550", "flavor": "proprietary", "anchor": "nvidia-smi",
                   "kernel_flavors": ["open", "proprietary"], "nvswitch_count": 0, "secure_boot_state": "",
                   "missing_mok_files": []}


def test_every_filter_is_exposed():
    assert FilterModule().filters() == {
        "nvidia_driver_plans": nvidia_driver_plans, "nvidia_driver_cuda_problem": nvidia_driver_cuda_problem,
        "nvidia_driver_node_flavor": nvidia_driver_node_flavor, "nvidia_driver_problems": nvidia_driver_problems,
        "nvidia_driver_ubuntu_modules": nvidia_driver_ubuntu_modules,
        "nvidia_driver_swap_out": nvidia_driver_swap_out, "nvidia_driver_swap_problem": nvidia_driver_swap_problem,
        "nvidia_driver_package_version": nvidia_driver_package_version,
        "nvidia_driver_other_kernel_packages": nvidia_driver_other_kernel_packages}


def test_the_swap_filters_take_dpkg_query_s_lines():
    assert nvidia_driver_swap_out(["nvidia-smi hi  nvidia-graphics-drivers", "adduser ii  adduser"],
                                  ["nvidia-tesla-470-smi"], [], "nvidia-graphics-drivers-tesla-470") == ["nvidia-smi"]
    assert nvidia_driver_swap_out(["nvidia-kernel-dkms ii  nvidia-graphics-drivers"], ["nvidia-open-kernel-dkms"],
                                  ["nvidia-kernel-dkms"]) == ["nvidia-kernel-dkms"]
    assert nvidia_driver_swap_problem(["nvidia-smi nvidia-graphics-drivers"], "gpu01", ["nvidia-smi"], "470") == ""


def test_the_problems_filter_returns_the_lines():
    assert nvidia_driver_problems(PREFLIGHT_SETTINGS, PREFLIGHT_FOUND) == []
    assert nvidia_driver_problems(dict(PREFLIGHT_SETTINGS, major_version="11"), PREFLIGHT_FOUND) == [
        "Debian 11 is not supported; supported Debian releases: 12, 13"]


def test_the_problems_filter_turns_a_missing_or_unknown_key_into_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_problems: 'flavor'"):
        nvidia_driver_problems(PREFLIGHT_SETTINGS, {key: value for key, value in PREFLIGHT_FOUND.items() if key != "flavor"})
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_problems: settings has unknown key.s. mok"):
        nvidia_driver_problems(dict(PREFLIGHT_SETTINGS, mok=True), PREFLIGHT_FOUND)


def test_the_ubuntu_modules_filter_takes_what_the_probes_printed_and_empty_values():
    installed = ["linux-image-aws;ii ;linux-image-6.8.0-1012-aws", "linux-image-6.8.0-1012-aws;ii ;"]
    available = ["linux-modules-nvidia-580-server-open-aws", "linux-modules-nvidia-580-server-open-6.8.0-1012-aws"]
    assert nvidia_driver_ubuntu_modules(installed, available, "6.8.0-1012-aws", "580-server-open")["packages"] == available
    assert nvidia_driver_ubuntu_modules(None, None, None, None)["packages"] == []
