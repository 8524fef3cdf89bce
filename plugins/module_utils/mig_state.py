# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's MIG instances as nvidia-smi lists them, and the nvidia-smi commands that reach a declared layout. Stdlib
only: node side, for a module; nothing here runs a command.

``nvidia-smi mig -lgi`` prints one row per GPU instance (GPU, "MIG <profile>", profile id, instance id,
placement start:size) and ``nvidia-smi mig -lci`` one row per compute instance (GPU, GPU instance id,
"MIG <profile>", compute profile id, instance id, placement); without MIG or instances they print a line of text
instead ("No MIG-enabled devices found.", "No GPU instances found"), read as no instances.

``mig_apply_plan`` compares a GPU's instances with the layout declared for it (the controller's resolved
``instances``: profile, profile_id, start) and returns the commands: MIG mode on (``-mig 1``) or off (``-mig 0``),
the compute and GPU instances destroyed (``-dci``, ``-dgi``) and the declared ones created each at its placement
(``-cgi ID:START,... -C``, -C giving each its default compute instance). A GPU whose instances already are the
declared ones, each with a compute instance, gets no command. Changing MIG mode takes effect after a GPU reset or a
reboot: the plan says which GPUs need one, and creates no instances on them until then.
"""

import re

_GI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")
_CI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")


def parse_gpu_instances(text):
    """[{gpu, profile, profile_id, instance_id, start, size}] from ``nvidia-smi mig -lgi``'s output."""
    rows = (_GI_ROW.match(line.strip()) for line in (text or "").splitlines())
    return [{"gpu": int(row.group(1)), "profile": row.group(2), "profile_id": int(row.group(3)),
             "instance_id": int(row.group(4)), "start": int(row.group(5)), "size": int(row.group(6))}
            for row in rows if row]


def parse_compute_instances(text):
    """[{gpu, gpu_instance_id, profile, profile_id, instance_id, start, size}] from ``nvidia-smi mig -lci``'s
    output."""
    rows = (_CI_ROW.match(line.strip()) for line in (text or "").splitlines())
    return [{"gpu": int(row.group(1)), "gpu_instance_id": int(row.group(2)), "profile": row.group(3),
             "profile_id": int(row.group(4)), "instance_id": int(row.group(5)), "start": int(row.group(6)),
             "size": int(row.group(7))} for row in rows if row]


def _in_place(gpu_instances, compute_instances, declared):
    """Whether the GPU's instances are the declared ones (profile and start), each with a compute instance."""
    have = sorted((instance["profile_id"], instance["start"]) for instance in gpu_instances)
    want = sorted((instance["profile_id"], instance["start"]) for instance in declared)
    with_compute = {instance["gpu_instance_id"] for instance in compute_instances}
    return have == want and all(instance["instance_id"] in with_compute for instance in gpu_instances)


def create_command(index, instances):
    """The command that creates ``instances`` (profile_id, start) on GPU ``index``, each with its default compute
    instance; None for none."""
    if not instances:
        return None
    profiles = ",".join("%d:%d" % (instance["profile_id"], instance["start"]) for instance in instances)
    return ["nvidia-smi", "mig", "-cgi", profiles, "-C", "-i", str(index)]


def mig_apply_plan(gpus, declared, lgi_text, lci_text):
    """{"commands": [argv], "reset_required": [GPU index], "changed": [GPU index]}.

    gpus: nvidia_gpu_facts' gpus (index, mig_mode_current, mig_mode_pending). declared: {GPU index: the resolved
    instances ([] or absent for a GPU that is whole or time-sliced, whose MIG mode goes off)}. lgi_text, lci_text:
    what ``nvidia-smi mig -lgi`` and ``-lci`` printed.
    """
    gpu_instances = parse_gpu_instances(lgi_text)
    compute_instances = parse_compute_instances(lci_text)
    plan = {"commands": [], "reset_required": [], "changed": []}
    for gpu in sorted(gpus, key=lambda item: item["index"]):
        index = gpu["index"]
        wanted = list((declared or {}).get(index) or [])
        own_gis = [instance for instance in gpu_instances if instance["gpu"] == index]
        own_cis = [instance for instance in compute_instances if instance["gpu"] == index]
        mode_on = bool(gpu.get("mig_mode_current"))
        pending_on = bool(gpu.get("mig_mode_pending", mode_on))
        commands = []
        if mode_on and (own_gis or own_cis) and not (wanted and _in_place(own_gis, own_cis, wanted)):
            if own_cis:
                commands.append(["nvidia-smi", "mig", "-dci", "-i", str(index)])
            if own_gis:
                commands.append(["nvidia-smi", "mig", "-dgi", "-i", str(index)])
        if bool(wanted) != pending_on:
            commands.append(["nvidia-smi", "-i", str(index), "-mig", "1" if wanted else "0"])
        if bool(wanted) != mode_on:
            plan["reset_required"].append(index)
        elif wanted and not _in_place(own_gis, own_cis, wanted):
            commands.append(create_command(index, wanted))
        if commands or index in plan["reset_required"]:
            plan["changed"].append(index)
        plan["commands"].extend(commands)
    return plan
