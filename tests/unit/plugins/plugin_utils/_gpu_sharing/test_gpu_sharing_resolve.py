# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.resolve import in_place, mig_layout, resolve

H100 = "NVIDIA H100 80GB HBM3"


def modes(result):
    return [(gpu["index"], gpu["mode"], gpu.get("layout") or gpu.get("replicas")) for gpu in result["gpus"]]


@pytest.mark.parametrize("rules", [None, []])
def test_without_rules_every_gpu_is_whole(h200_facts, rules):
    result = resolve("gpu1", h200_facts, rules)
    assert result["problems"] == []
    assert result["gpus"] == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-489faca6-90bf-5e38-b8a5-bf43ce28cf48",
                               "memory_total_mib": 143771, "mode": "whole"}]


def test_a_mig_layout_on_the_real_h200_facts_is_placed_in_creation_order(h200_facts):
    result = resolve("gpu1", h200_facts, [{"mode": "mig", "layout": {"1g.18gb": 4, "3g.71gb": 1}}])
    assert result["problems"] == []
    # 3g at 0 would leave the 1g instances slots 4 to 6 and 7, which takes no 1g: 3g goes to 4.
    assert result["gpus"][0]["instances"] == [
        {"profile": "3g.71gb", "profile_id": 9, "start": 4}, {"profile": "1g.18gb", "profile_id": 19, "start": 0},
        {"profile": "1g.18gb", "profile_id": 19, "start": 1}, {"profile": "1g.18gb", "profile_id": 19, "start": 2},
        {"profile": "1g.18gb", "profile_id": 19, "start": 3}]


def test_indexes_win_over_a_model_which_wins_over_all_and_the_later_rule_of_a_kind_wins(node_facts):
    facts = node_facts(H100, H100, H100, "NVIDIA L40S")
    rules = [{"mode": "time_slicing", "replicas": 4},
             {"indexes": [1], "mode": "mig", "layout": {"1g.10gb": 7}},
             {"model": "H100 80GB HBM3", "mode": "mig", "layout": {"7g.80gb": 1}},
             {"model": "NVIDIA H100 80GB HBM3", "mode": "mig", "layout": {"3g.40gb": 2}},
             {"mode": "whole"}]
    assert modes(resolve("n", facts, rules)) == [(0, "mig", {"3g.40gb": 2}), (1, "mig", {"1g.10gb": 7}),
                                                 (2, "mig", {"3g.40gb": 2}), (3, "whole", None)]


def test_time_slicing_on_every_gpu(node_facts):
    result = resolve("n", node_facts("NVIDIA L40S", "NVIDIA L40S"), [{"mode": "time_slicing", "replicas": 4}])
    assert modes(result) == [(0, "time_slicing", 4), (1, "time_slicing", 4)]


def test_mig_next_to_whole_gpus_is_allowed(node_facts):
    result = resolve("n", node_facts(H100, H100), [{"indexes": [0], "mode": "mig", "layout": {"1g.10gb": 7}}])
    assert modes(result) == [(0, "mig", {"1g.10gb": 7}), (1, "whole", None)]


PROBLEMS = [
    ("not a list", "not-a-list", [H100],
     "n: gpu_sharing_layout is 'not-a-list'; give a list of rules (see the gpu_sharing filters' docs)"),
    ("rule not a mapping", ["mig"], [H100],
     "n: gpu_sharing_layout[0] is 'mig'; each rule is a mapping with mode and optionally model or indexes"),
    ("unknown key", [{"mode": "whole", "gpus": "all"}], [H100],
     "n: gpu_sharing_layout[0] has unknown key(s) gpus; known: indexes, layout, mode, model, replicas"),
    ("model and indexes", [{"mode": "whole", "model": H100, "indexes": [0]}], [H100],
     "n: gpu_sharing_layout[0] sets both model and indexes; split it into two rules"),
    ("indexes not a list", [{"mode": "whole", "indexes": 0}], [H100],
     "n: gpu_sharing_layout[0]: indexes is 0; give a list of GPU indexes such as [0, 1]"),
    ("unknown mode", [{"mode": "mps"}], [H100],
     "n: gpu_sharing_layout[0]: mode is 'mps'; use one of whole, mig, time_slicing"),
    ("mig without layout", [{"mode": "mig"}], [H100],
     'n: gpu_sharing_layout[0]: mode mig needs a layout of profile: instances, such as {"3g.40gb": 2}; got None'),
    ("layout as a list", [{"mode": "mig", "layout": ["3g.40gb", "3g.40gb"]}], [H100],
     'n: gpu_sharing_layout[0]: mode mig needs a layout of profile: instances, such as {"3g.40gb": 2}; '
     "got ['3g.40gb', '3g.40gb']"),
    ("layout with whole", [{"mode": "whole", "layout": {"1g.10gb": 1}}], [H100],
     "n: gpu_sharing_layout[0]: layout is only for mode mig (mode is whole); remove it"),
    ("replicas 1", [{"mode": "time_slicing", "replicas": 1}], [H100],
     "n: gpu_sharing_layout[0]: time_slicing needs replicas from 2 to 64 (pods per GPU); got 1"),
    ("replicas 1000", [{"mode": "time_slicing", "replicas": 1000}], [H100],
     "n: gpu_sharing_layout[0]: time_slicing needs replicas from 2 to 64 (pods per GPU); got 1000"),
    ("replicas 0", [{"mode": "time_slicing", "replicas": 0}], [H100],
     "n: gpu_sharing_layout[0]: time_slicing needs replicas from 2 to 64 (pods per GPU); got 0"),
    ("replicas with mig", [{"mode": "mig", "layout": {"7g.80gb": 1}, "replicas": 2}], [H100],
     "n: gpu_sharing_layout[0]: replicas is only for mode time_slicing (mode is mig); remove it"),
    ("matches no gpu", [{"model": "H200", "mode": "whole"}], [H100],
     "n: gpu_sharing_layout[0] matches no GPU of the node (GPU 0 (NVIDIA H100 80GB HBM3)); fix its model or indexes, "
     "or remove it"),
    ("index out of range", [{"indexes": [3], "mode": "whole"}], [],
     "n: gpu_sharing_layout[0] matches no GPU of the node (no GPUs); fix its model or indexes, or remove it"),
    ("mig on a gpu without", [{"mode": "mig", "layout": {"1g.10gb": 1}}], ["NVIDIA L40S"],
     "n: gpu_sharing_layout[0]: GPU 0 (NVIDIA L40S) has no MIG; use mode whole or time_slicing for it"),
    ("mig on a gpu not in the table", [{"mode": "mig", "layout": {"1g.24gb": 1}}],
     ["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
     "n: gpu_sharing_layout[0]: GPU 0 (NVIDIA RTX PRO 6000 Blackwell Server Edition) is not in the MIG profile table "
     "(plugin_utils/_gpu_sharing/profiles.py); use mode whole or time_slicing, or add the model's profiles from "
     "NVIDIA's MIG user guide"),
    ("unknown profile", [{"mode": "mig", "layout": {"1g.5gb": 7}}], [H100],
     "n: gpu_sharing_layout[0]: GPU 0 (NVIDIA H100 80GB HBM3) has no MIG profile 1g.5gb; its profiles: 1g.10gb, "
     "1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
    ("too many instances", [{"mode": "mig", "layout": {"1g.10gb+me": 2, "1g.10gb": 8}}], [H100],
     "n: gpu_sharing_layout[0]: GPU 0 (NVIDIA H100 80GB HBM3) takes fewer instances of 1g.10gb (8, at most 7), "
     "1g.10gb+me (2, at most 1); lower the count"),
    ("does not fit", [{"mode": "mig", "layout": {"3g.40gb": 2, "1g.10gb": 1}}], [H100],
     "n: gpu_sharing_layout[0]: 1g.10gb x 1 + 3g.40gb x 2 does not fit GPU 0 (NVIDIA H100 80GB HBM3): its instances "
     "overlap on every placement of the GPU's memory slices; use fewer or smaller profiles (e.g. 3g + 4g, 3g x 2, "
     "2g x 3 + 1g, 1g x 7 on a 7-slice GPU)"),
    ("time slicing next to mig", [{"indexes": [0], "mode": "mig", "layout": {"7g.80gb": 1}},
                                  {"indexes": [1], "mode": "time_slicing", "replicas": 2}], [H100, H100],
     "n: gpu_sharing_layout mixes time_slicing with other modes (GPU 0 mig, GPU 1 time_slicing); the device plugin "
     "time-slices every whole GPU of a node and the node's labels describe one kind of sharing: give all the node's "
     "GPUs mode time_slicing, or none"),
    ("two replica counts", [{"indexes": [0], "mode": "time_slicing", "replicas": 2},
                            {"indexes": [1], "mode": "time_slicing", "replicas": 4}], [H100, H100],
     "n: gpu_sharing_layout gives time-sliced GPUs different replicas (2, 4); the device plugin takes one count per "
     "node: use one"),
]


@pytest.mark.parametrize("rules, names, problem", [case[1:] for case in PROBLEMS], ids=[case[0] for case in PROBLEMS])
def test_each_problem_names_the_host_the_variable_and_the_fix(node_facts, rules, names, problem):
    result = resolve("n", node_facts(*names), rules)
    assert result == {"gpus": [], "problems": [problem]}


def test_every_problem_is_reported_at_once(node_facts):
    rules = [{"mode": "mps"}, {"mode": "time_slicing", "replicas": 1}, {"mode": "mig", "layout": {"1g.5gb": 1}}]
    assert len(resolve("n", node_facts(H100), rules)["problems"]) == 3


def test_a_mig_gpu_shows_whole_until_its_layout_is_in_place(node_facts):
    facts = node_facts(H100, H100)
    rules = [{"mode": "mig", "layout": {"3g.40gb": 2}}]
    resolved = resolve("n", facts, rules)
    assert modes(in_place(resolved, facts)) == [(0, "whole", None), (1, "whole", None)]  # MIG off
    facts["gpus"][0].update(mig_mode_current=True, mig_device_count=2)
    facts["gpus"][1].update(mig_mode_current=True, mig_device_count=1)  # one instance missing
    assert modes(in_place(resolved, facts)) == [(0, "mig", {"3g.40gb": 2}), (1, "whole", None)]
    assert in_place(resolved, facts)["gpus"][1] == {key: value for key, value in resolved["gpus"][1].items()
                                                    if key not in ("layout", "instances", "mode")} | {"mode": "whole"}


def test_the_mig_layout_the_module_takes(node_facts):
    resolved = resolve("n", node_facts(H100, H100), [{"indexes": [1], "mode": "mig", "layout": {"7g.80gb": 1}}])
    assert mig_layout(resolved) == {"1": [{"profile": "7g.80gb", "profile_id": 0, "start": 0}]}
    problems = {"gpus": [], "problems": ["n: gpu_sharing_layout[0]: ..."]}
    assert in_place(problems, node_facts(H100)) == problems
