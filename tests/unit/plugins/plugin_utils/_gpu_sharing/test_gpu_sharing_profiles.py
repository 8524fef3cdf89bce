# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_jobs import mig_resource
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.profiles import (
    has_no_mig, memory_slices, mig_profiles, model_key, place)

SEVEN_SLICE_IDS = [19, 20, 15, 14, 9, 5, 0]


@pytest.mark.parametrize("name, profiles", [
    ("NVIDIA A100-SXM4-40GB", ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
    ("NVIDIA A100-PCIE-40GB", ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
    ("NVIDIA A100-SXM4-80GB", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("NVIDIA A100 80GB PCIe", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("NVIDIA H100 80GB HBM3", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("NVIDIA H100 PCIe", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("NVIDIA H100 NVL", ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"]),
    ("NVIDIA GH200 120GB", ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"]),
    ("NVIDIA H200", ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
    ("NVIDIA H200 NVL", ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
    ("NVIDIA GH200 144G HBM3e", ["1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"]),
    ("NVIDIA B200", ["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"]),
])
def test_seven_slice_models_have_the_guides_profiles_and_ids(name, profiles):
    table = mig_profiles(name)
    assert list(table) == profiles
    assert [table[profile]["id"] for profile in profiles] == SEVEN_SLICE_IDS
    assert [table[profile]["max_instances"] for profile in profiles] == [7, 1, 4, 3, 2, 1, 1]
    assert memory_slices(name) == 8


def test_the_a30_has_four_slices_and_its_own_ids():
    table = mig_profiles("NVIDIA A30")
    assert {profile: (row["id"], row["max_instances"]) for profile, row in table.items()} == {
        "1g.6gb": (14, 4), "1g.6gb+me": (21, 1), "2g.12gb": (5, 2), "2g.12gb+me": (6, 1), "4g.24gb": (0, 1)}
    assert memory_slices("NVIDIA A30") == 4


def test_placements_are_those_nvidia_smi_mig_lgipp_lists_on_an_h100():
    table = mig_profiles("NVIDIA H100 80GB HBM3")
    assert {profile: row["placements"] for profile, row in table.items()} == {
        "1g.10gb": [(start, 1) for start in range(7)], "1g.10gb+me": [(start, 1) for start in range(7)],
        "1g.20gb": [(0, 2), (2, 2), (4, 2), (6, 2)], "2g.20gb": [(0, 2), (2, 2), (4, 2)],
        "3g.40gb": [(0, 4), (4, 4)], "4g.40gb": [(0, 4)], "7g.80gb": [(0, 8)]}


@pytest.mark.parametrize("name", ["NVIDIA H200", "H200", "  nvidia   h200 ", "NVIDIA H100 80GB HBM3",
                                  "h100 80gb hbm3"])
def test_models_match_with_or_without_the_nvidia_prefix_and_in_any_case(name):
    assert mig_profiles(name) is not None


@pytest.mark.parametrize("name", ["NVIDIA L40S", "NVIDIA L4", "NVIDIA A10", "NVIDIA A40", "Tesla V100-SXM2-16GB",
                                  "Tesla T4", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090",
                                  "Tesla P100-PCIE-16GB"])
def test_gpus_without_mig_are_known_as_such(name):
    assert mig_profiles(name) is None
    assert has_no_mig(name)


@pytest.mark.parametrize("name", ["NVIDIA H200", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA Z9000"])
def test_a_mig_gpu_or_an_unknown_one_is_not_said_to_lack_mig(name):
    assert not has_no_mig(name)


@pytest.mark.parametrize("layout, placed", [
    ({"7g.80gb": 1}, [("7g.80gb", 0)]),
    ({"3g.40gb": 1, "4g.40gb": 1}, [("4g.40gb", 0), ("3g.40gb", 4)]),
    ({"3g.40gb": 2}, [("3g.40gb", 0), ("3g.40gb", 4)]),
    ({"2g.20gb": 3, "1g.10gb": 1}, [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)]),
    ({"1g.20gb": 4}, [("1g.20gb", 0), ("1g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6)]),
    ({"1g.10gb": 7}, [("1g.10gb", start) for start in range(7)]),
    # 3g at 0 leaves 2g at 4, 1g at 6 and no start for the second 1g (slot 7 takes no 1g): the search moves 3g to 4,
    # where the driver put it in the -lgi listing of NVIDIA/DCGM issue 138 (fixtures/mig/lgi-a100-80gb-two-gpus.txt).
    ({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)]),
])
def test_layouts_that_fit_are_placed_largest_first(layout, placed):
    assert place(mig_profiles("NVIDIA H100 80GB HBM3"), layout) == placed


@pytest.mark.parametrize("layout", [{"3g.40gb": 2, "1g.10gb": 1}, {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1},
                                    {"7g.80gb": 1, "1g.10gb": 1}, {"1g.20gb": 4, "1g.10gb": 1}])
def test_layouts_whose_slices_overlap_on_every_placement_do_not_fit(layout):
    assert place(mig_profiles("NVIDIA H100 80GB HBM3"), layout) is None


@pytest.mark.parametrize("product, key", [("NVIDIA H100 80GB HBM3", "h100 80gb hbm3"), ("Tesla T4", "tesla t4"),
                                          ("", ""), (None, "")])
def test_model_key(product, key):
    assert model_key(product) == key


@pytest.mark.parametrize("profile, resource", [("1g.10gb", "nvidia.com/mig-1g.10gb"),
                                               ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me")])
def test_resource_names_carry_no_plus(profile, resource):
    assert mig_resource(profile) == resource
