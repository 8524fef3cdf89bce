# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each GPU's sharing, from the rules a node declares in ``gpu_sharing_layout`` and its GPU facts. Pure Python.

``gpu_sharing_layout`` is a list of rules. A rule matches all the node's GPUs, or those of one ``model`` (the product
name nvidia-smi reports, with or without "NVIDIA "), or those at ``indexes``; it sets a ``mode``:

    gpu_sharing_layout:
      - mode: whole                          # all GPUs (the default without any rule)
      - model: H100 80GB HBM3
        mode: mig
        layout: {"3g.40gb": 1, "4g.40gb": 1}  # profile: instances, as NVIDIA's mig-parted writes it
      - indexes: [6, 7]
        mode: mig
        layout: {"1g.10gb": 7}

``time_slicing`` takes ``replicas`` (2 to MAX_REPLICAS). A rule for indexes wins over one for a model, which wins over
one for all GPUs; between rules of the same kind the later wins. Every problem is reported at once, each naming the
host, the variable, the rule or GPU and the fix.

One node shares one way: the device plugin's time-slicing applies to every whole GPU of the node with one replica
count, and the node's labels (sharing, replicas) describe the node, so time-slicing is refused next to MIG or whole
GPUs on the same node and with two replica counts. MIG next to whole GPUs is fine (the plugin's mixed strategy).
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import describe
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._gpu_sharing.profiles import (
    has_no_mig, mig_profiles, model_key, place)

VARIABLE = "gpu_sharing_layout"
MODES = ("whole", "mig", "time_slicing")
RULE_KEYS = ("indexes", "layout", "mode", "model", "replicas")
# A typo such as 1000 is refused; past a few dozen clients each gets too little of a GPU's memory to be useful.
MAX_REPLICAS = 64


def _gpu_shown(gpu):
    return "GPU %s (%s)" % (gpu["index"], gpu["name"])


def _rule_problems(where, rule):
    """The problems of one rule on its own (keys, mode, layout's form, replicas)."""
    if not isinstance(rule, dict):
        return ["%s is %r; each rule is a mapping with mode and optionally model or indexes" % (where, rule)]
    problems = []
    unknown = sorted(set(rule) - set(RULE_KEYS))
    if unknown:
        problems.append("%s has unknown key(s) %s; known: %s"
                        % (where, ", ".join(map(str, unknown)), ", ".join(RULE_KEYS)))
    if "model" in rule and "indexes" in rule:
        problems.append("%s sets both model and indexes; split it into two rules" % where)
    indexes = rule.get("indexes")
    if "indexes" in rule and (not isinstance(indexes, list) or not indexes
                              or not all(isinstance(index, int) and not isinstance(index, bool) for index in indexes)):
        problems.append("%s: indexes is %r; give a list of GPU indexes such as [0, 1]" % (where, indexes))
    mode = rule.get("mode")
    if mode not in MODES:
        problems.append("%s: mode is %r; use one of %s" % (where, mode, ", ".join(MODES)))
    layout = rule.get("layout")
    if mode == "mig" and (not isinstance(layout, dict) or not layout or not all(
            isinstance(count, int) and not isinstance(count, bool) and count > 0 for count in layout.values())):
        problems.append('%s: mode mig needs a layout of profile: instances, such as {"3g.40gb": 2}; got %r'
                        % (where, layout))
    if mode != "mig" and "layout" in rule:
        problems.append("%s: layout is only for mode mig (mode is %s); remove it" % (where, mode))
    replicas = rule.get("replicas")
    if mode == "time_slicing" and (not isinstance(replicas, int) or isinstance(replicas, bool)
                                   or not 2 <= replicas <= MAX_REPLICAS):
        problems.append("%s: time_slicing needs replicas from 2 to %d (pods per GPU); got %r"
                        % (where, MAX_REPLICAS, replicas))
    if mode != "time_slicing" and "replicas" in rule:
        problems.append("%s: replicas is only for mode time_slicing (mode is %s); remove it" % (where, mode))
    return problems


def _matches(rule, gpu):
    if "indexes" in rule:
        return gpu["index"] in rule["indexes"]
    if "model" in rule:
        return model_key(rule["model"]) == model_key(gpu["name"])
    return True


def _specificity(rule):
    return 2 if "indexes" in rule else 1 if "model" in rule else 0


def _mig_problem(where, gpu, layout):
    """'' where ``layout`` fits ``gpu``, else the problem."""
    name = gpu["name"]
    profiles = mig_profiles(name)
    if profiles is None:
        if has_no_mig(name):
            return "%s: %s has no MIG; use mode whole or time_slicing for it" % (where, _gpu_shown(gpu))
        return ("%s: %s is not in the MIG profile table (plugin_utils/_gpu_sharing/profiles.py); use mode whole or "
                "time_slicing, or add the model's profiles from NVIDIA's MIG user guide" % (where, _gpu_shown(gpu)))
    unknown = sorted(set(layout) - set(profiles))
    if unknown:
        return "%s: %s has no MIG profile %s; its profiles: %s" % (where, _gpu_shown(gpu), ", ".join(unknown),
                                                                   ", ".join(profiles))
    too_many = ["%s (%d, at most %d)" % (profile, count, profiles[profile]["max_instances"])
                for profile, count in sorted(layout.items()) if count > profiles[profile]["max_instances"]]
    if too_many:
        return "%s: %s takes fewer instances of %s; lower the count" % (where, _gpu_shown(gpu), ", ".join(too_many))
    if place(profiles, layout) is None:
        shown = " + ".join("%s x %d" % (profile, count) for profile, count in sorted(layout.items()))
        return ("%s: %s does not fit %s: its instances overlap on every placement of the GPU's memory slices; "
                "use fewer or smaller profiles (e.g. 3g + 4g, 3g x 2, 2g x 3 + 1g, 1g x 7 on a 7-slice GPU)"
                % (where, shown, _gpu_shown(gpu)))
    return ""


def _setting(gpu, rule):
    setting = {"index": gpu["index"], "name": gpu["name"], "uuid": gpu.get("uuid"),
               "memory_total_mib": gpu.get("memory_total_mib"), "mode": rule.get("mode", "whole")}
    if setting["mode"] == "mig":
        profiles = mig_profiles(gpu["name"])
        setting["layout"] = dict(sorted(rule["layout"].items()))
        setting["instances"] = [{"profile": profile, "profile_id": profiles[profile]["id"], "start": start}
                                for profile, start in place(profiles, rule["layout"])]
    if setting["mode"] == "time_slicing":
        setting["replicas"] = rule["replicas"]
    return setting


def _node_problems(host, settings, variable):
    modes = {setting["mode"] for setting in settings}
    replicas = sorted({setting["replicas"] for setting in settings if setting["mode"] == "time_slicing"})
    shown = ", ".join("GPU %s %s" % (setting["index"], setting["mode"]) for setting in settings)
    problems = []
    if "time_slicing" in modes and len(modes) > 1:
        problems.append("%s: %s mixes time_slicing with other modes (%s); the device plugin time-slices every whole "
                        "GPU of a node and the node's labels describe one kind of sharing: give all the node's GPUs "
                        "mode time_slicing, or none" % (host, variable, shown))
    if len(replicas) > 1:
        problems.append("%s: %s gives time-sliced GPUs different replicas (%s); the device plugin takes one count per "
                        "node: use one" % (host, variable, ", ".join(map(str, replicas))))
    return problems


def node_gpus(facts):
    """The node's GPUs as nvidia_gpu_facts saw them: nvidia-smi's where the driver answers; else those on PCI, numbered
    in PCI order (nvidia-smi's default order), named from their device ids, with no uuid or memory."""
    gpus = (facts or {}).get("gpus") or []
    if gpus:
        return sorted(gpus, key=lambda gpu: gpu["index"])
    return [{"index": index, "name": pci.get("name") or _pci_name(pci.get("device_id")), "uuid": None,
             "memory_total_mib": None} for index, pci in enumerate((facts or {}).get("pci_gpus") or [])]


def _pci_name(device_id):
    known = describe(device_id) if device_id else {"unknown": True}
    return "unknown PCI device %s" % device_id if known["unknown"] else known["name"]


def resolve(host, facts, rules, variable=VARIABLE):
    """{"gpus": [each GPU's setting], "problems": [...]} for ``host``.

    facts: what nvidia_gpu_facts returned (node_gpus: its ``gpus``, or ``pci_gpus`` where the driver does not answer).
    rules: the node's declaration (None or [] for whole GPUs), named ``variable`` in messages. A setting: index, name,
    uuid, memory_total_mib, mode; for mig also layout ({profile: count}) and instances ([{profile, profile_id, start}],
    in the order to create them, each at its start); for time_slicing also replicas. With problems, gpus is empty.
    """
    gpus = node_gpus(facts)
    if rules is None:
        rules = []
    if not isinstance(rules, list):
        return {"gpus": [], "problems": ["%s: %s is %r; give a list of rules (see the gpu_sharing filters' docs)"
                                         % (host, variable, rules)]}
    problems = []
    chosen = {gpu["index"]: ({"mode": "whole"}, -1, None) for gpu in gpus}
    for number, rule in enumerate(rules):
        where = "%s: %s[%d]" % (host, variable, number)
        own = _rule_problems(where, rule)
        problems.extend(own)
        if own:
            continue
        matched = [gpu for gpu in gpus if _matches(rule, gpu)]
        if not matched:
            problems.append("%s matches no GPU of the node (%s); fix its model or indexes, or remove it"
                            % (where, ", ".join(_gpu_shown(gpu) for gpu in gpus) or "no GPUs"))
        for gpu in matched:
            if _specificity(rule) >= chosen[gpu["index"]][1]:
                chosen[gpu["index"]] = (rule, _specificity(rule), where)
    for gpu in gpus:
        rule, _specificity_of, where = chosen[gpu["index"]]
        if rule["mode"] == "mig":
            problem = _mig_problem(where, gpu, rule["layout"])
            if problem:
                problems.append(problem)
    if problems:
        return {"gpus": [], "problems": problems}
    settings = [_setting(gpu, chosen[gpu["index"]][0]) for gpu in gpus]
    problems = _node_problems(host, settings, variable)
    return {"gpus": [] if problems else settings, "problems": problems}


def in_place(resolved, facts):
    """``resolved`` with each GPU declared ``mig`` that does not have its layout yet shown ``whole``: its MIG mode is
    not on, or it has not as many MIG devices as its declared instances (nvidia_gpu_facts' ``mig_mode_current`` and
    ``mig_device_count``). Kubernetes is told of the instances that exist, never of declared ones: until the rolling
    path applies the layout, the device plugin finds a whole GPU there."""
    if resolved.get("problems"):
        return resolved
    found = {gpu["index"]: gpu for gpu in (facts or {}).get("gpus") or []}
    gpus = []
    for setting in resolved.get("gpus") or []:
        gpu = found.get(setting["index"]) or {}
        if setting["mode"] == "mig" and not (gpu.get("mig_mode_current")
                                             and gpu.get("mig_device_count") == len(setting["instances"])):
            setting = {key: value for key, value in setting.items() if key not in ("layout", "instances")}
            setting["mode"] = "whole"
        gpus.append(setting)
    return dict(resolved, gpus=gpus)


def mig_layout(resolved):
    """{GPU index: its instances} of the GPUs declared ``mig``: what the nvidia_mig module's ``layout`` takes."""
    return {str(gpu["index"]): gpu["instances"] for gpu in resolved.get("gpus") or [] if gpu["mode"] == "mig"}
