# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's gpu.sharing: each GPU of a node is shared as the inventory declares (gpu_sharing_layout, resolved by
the gpu_sharing filters' resolver), read from nvidia_gpu_facts' MIG mode (now and after the next GPU reset) and MIG
device count; and the declared layout as the report's node table shows it. Pure Python, on the controller.

A GPU declared whole or time-sliced must have MIG off, now and pending: with MIG on, a pod that asks for
nvidia.com/gpu gets no whole GPU. A GPU declared with a MIG layout must have MIG on, now and pending, and as many MIG
devices as the layout has instances.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.device_plugin import allocatable
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.labels import sharing_kind
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.resolve import node_gpus, resolve
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import check

CHECK_ID = "gpu.sharing"
VARIABLE = "validate_gpu_sharing_layout"  # the validate role's variable; the inventory's gpu_sharing_layout by default


def _indexes(indexes):
    """'GPU 3', 'GPUs 0-7', 'GPUs 0, 2, 5'."""
    indexes = sorted(indexes)
    if len(indexes) == 1:
        return "GPU %d" % indexes[0]
    if indexes == list(range(indexes[0], indexes[-1] + 1)):
        return "GPUs %d-%d" % (indexes[0], indexes[-1])
    return "GPUs " + ", ".join(str(index) for index in indexes)


def _grouped(described):
    """{GPU index: text} -> 'GPUs 0-1 TEXT; GPUs 2-7 OTHER', GPUs with the same text together, in index order."""
    groups = {}
    for index in sorted(described):
        groups.setdefault(described[index], []).append(index)
    return "; ".join("%s %s" % (_indexes(indexes), text) for text, indexes in
                     sorted(groups.items(), key=lambda item: min(item[1])))


def _setting_text(setting):
    if setting["mode"] == "mig":
        return "MIG " + "+".join("%dx%s" % (count, profile) for profile, count in sorted(setting["layout"].items()))
    if setting["mode"] == "time_slicing":
        return "time-sliced x%d" % setting["replicas"]
    return "whole"


def layout_text(settings):
    """The declared layout of a node's GPUs (resolve's settings), as the report shows it; None without GPUs."""
    if not settings:
        return None
    return _grouped({setting["index"]: _setting_text(setting) for setting in settings})


def _observed_text(gpu):
    current, pending = gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")
    if current is None:
        return "no MIG"
    text = "MIG on, %d MIG device(s)" % (gpu.get("mig_device_count") or 0) if current else "MIG off"
    if pending is not None and pending != current:
        text += " (%s after the next GPU reset)" % ("on" if pending else "off")
    return text


def _problems(setting, gpu):
    """What differs between a GPU's declared setting and what nvidia-smi reports of it, each with its fix."""
    where = "GPU %d (%s)" % (setting["index"], setting["name"])
    current, pending = gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")
    if setting["mode"] != "mig":
        if current or pending:
            return ["%s is declared %s but has %s: a pod asking for nvidia.com/gpu gets no whole GPU there; turn MIG "
                    "off (nvidia-smi -i %d -mig 0, then a GPU reset or a reboot) or declare its MIG layout in %s"
                    % (where, _setting_text(setting), _observed_text(gpu), setting["index"], VARIABLE)]
        return []
    wanted = len(setting["instances"])
    if not current or not pending:
        return ["%s is declared %s but has %s; set MIG mode on (nvidia-smi -i %d -mig 1, then a GPU reset or a reboot "
                "where it is off now) and create the instances, or declare the GPU whole in %s"
                % (where, _setting_text(setting), _observed_text(gpu), setting["index"], VARIABLE)]
    devices = gpu.get("mig_device_count") or 0
    if devices != wanted:
        return ["%s has %d MIG device(s) where its layout %s has %d; destroy and create them as declared (nvidia-smi "
                "mig -dci, -dgi, then -cgi ... -C)" % (where, devices, _setting_text(setting), wanted)]
    return []


def declared_layout(host, facts, rules):
    """The node's declared layout as text for the report (None where it has no GPUs or the declaration is wrong)."""
    resolved = resolve(host, facts or {}, rules, VARIABLE)
    return layout_text(resolved["gpus"])


def declared_resources(host, facts, rules):
    """(the device plugin's resources {name: count}, dlinfra.io/gpu.sharing's value) the declaration gives the node;
    None where nothing is declared (rules empty: k8s.gpu_resources reads the node's own labels) or it is wrong."""
    if not rules:
        return None
    resolved = resolve(host, facts or {}, rules, VARIABLE)
    if resolved["problems"] or not resolved["gpus"]:
        return None
    return allocatable(resolved["gpus"]), sharing_kind(resolved["gpus"])


def sharing_check(host, facts, rules, unusable):
    """gpu.sharing of one GPU node. facts: nvidia_gpu_facts' result; rules: the node's declaration (None or [] for
    whole GPUs); unusable: why nvidia-smi's report cannot be read on this node, None where it can."""
    facts = facts or {}
    if not node_gpus(facts):
        return check(CHECK_ID, "skip", unusable or "no NVIDIA GPU on this node")
    resolved = resolve(host, facts, rules, VARIABLE)
    if resolved["problems"]:
        return check(CHECK_ID, "fail", "; ".join(resolved["problems"]), VARIABLE, None)
    expected = layout_text(resolved["gpus"])
    if unusable:
        return check(CHECK_ID, "skip", unusable, expected, None)
    by_index = {gpu["index"]: gpu for gpu in node_gpus(facts)}
    measured = _grouped({index: _observed_text(gpu) for index, gpu in by_index.items()})
    problems = [problem for setting in resolved["gpus"] for problem in _problems(setting, by_index[setting["index"]])]
    if problems:
        return check(CHECK_ID, "fail", "; ".join(problems), expected, measured)
    return check(CHECK_ID, "pass", "shared as declared: %s (%s)" % (expected, measured), expected, measured)
