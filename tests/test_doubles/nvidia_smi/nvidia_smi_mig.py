"""TEST DOUBLE of nvidia-smi for MIG (`python3 nvidia_smi_mig.py ARGS`, from a wrapper named nvidia-smi): a recorded
`nvidia-smi -q -x` report, and MIG state kept as a real GPU keeps it.

What it honours, with the output formats of NVIDIA's MIG user guide and of the driver:
  -q -x                          the recorded report, each GPU's <mig_mode> and <mig_devices> from the state
  [-i N] -mig 0|1                MIG mode; it takes effect at once, or stays pending while a client holds the GPU
  [-i N] -r                      GPU reset: a pending mode takes effect, the GPU's instances are gone
  mig -lgip [-i N]               the GPU instance profiles of the model, with free and total instances
  mig -cgi P[:S][,...] [-C] [-i N]  GPU instances (profile id or name, optional placement start), -C a compute
                                 instance in each
  mig -cci [ID] -gi G [-i N]     the default compute instance (the whole GPU instance) in GPU instance G
  mig -lgi [-i N], mig -lci [-i N]  the instances, as tables
  mig -dci [-i N], mig -dgi [-i N]  every compute or GPU instance destroyed (compute ones first, as the driver asks)

The state, as on a real node: the MIG mode survives a reboot (STATE_DIR, default /var/lib/nvidia-smi-test-double), the
instances do not (RUN_DIR, default /run/nvidia-smi-test-double, a tmpfs): a RUN_DIR without the state file is a boot,
and a pending mode takes effect then. STATE_DIR/report.xml is the recorded report; STATE_DIR/clients, when present,
names systemd services that hold the GPUs while they are active (as nvidia-persistenced, the fabric manager or DCGM
do): while one is, a mode change stays pending and a reset is refused. The environment variables
NVIDIA_SMI_DOUBLE_STATE_DIR and NVIDIA_SMI_DOUBLE_RUN_DIR move the two.
STATE_DIR/publish, when present, names a file where every call leaves the GPUs as NVIDIA's device plugin would find
them (each GPU's index, MIG mode and its MIG devices' profiles): the microk8s test double reads it to advertise them.
Every command that changes something (-mig, -r, mig -cgi/-cci/-dci/-dgi) is appended to STATE_DIR/calls.log, a JSON line
with its time, its arguments and the clients that held the GPUs then, the record the tests read.

Profiles (ids, sizes, placements) of the two models it reports, from the MIG user guide's H100 and H200 tables.
"""
import json
import os
import re
import subprocess
import sys
import time
from xml.etree import ElementTree

STATE_DIR = os.environ.get("NVIDIA_SMI_DOUBLE_STATE_DIR", "/var/lib/nvidia-smi-test-double")
RUN_DIR = os.environ.get("NVIDIA_SMI_DOUBLE_RUN_DIR", "/run/nvidia-smi-test-double")

# (name with the memory of 1, 2, 4 or 8 memory slices, id, compute slices, memory slices, placement starts)
_PROFILES = (("1g.{m1}gb", 19, 1, 1, (0, 1, 2, 3, 4, 5, 6)), ("1g.{m1}gb+me", 20, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
             ("1g.{m2}gb", 15, 1, 2, (0, 2, 4, 6)), ("2g.{m2}gb", 14, 2, 2, (0, 2, 4)), ("3g.{m4}gb", 9, 3, 4, (0, 4)),
             ("4g.{m4}gb", 5, 4, 4, (0,)), ("7g.{m8}gb", 0, 7, 8, (0,)))
_MEMORY_GB = {"NVIDIA H100 80GB HBM3": {"m1": 10, "m2": 20, "m4": 40, "m8": 80},
              "NVIDIA H200": {"m1": 18, "m2": 35, "m4": 71, "m8": 141}}
_ONCE = ("1g.{m1}gb+me",)  # at most one instance of these on a GPU


def die(message, code=2):
    print(message)
    sys.exit(code)


def report():
    return ElementTree.parse(os.path.join(STATE_DIR, "report.xml"))


def gpus_of(tree):
    return tree.getroot().findall("gpu")


def profiles(product):
    memory = _MEMORY_GB.get(product)
    if memory is None:
        return []
    return [{"name": name.format(**memory),
             "pattern": name, "id": ident, "compute": compute, "size": size, "starts": starts}
            for name, ident, compute, size, starts in _PROFILES]


def load():
    """The state: {"mode": {index: {"current", "pending"}}, "instances": [...]}, a boot applied where RUN_DIR is new."""
    os.makedirs(STATE_DIR, exist_ok=True)
    os.makedirs(RUN_DIR, exist_ok=True)
    try:
        with open(os.path.join(STATE_DIR, "mode.json")) as handle:
            mode = json.load(handle)
    except FileNotFoundError:
        mode = {str(i): {"current": False, "pending": False} for i in range(len(gpus_of(report())))}
    run_file = os.path.join(RUN_DIR, "instances.json")
    if os.path.exists(run_file):
        with open(run_file) as handle:
            instances = json.load(handle)
    else:
        instances = []
        for gpu in mode.values():
            gpu["current"] = gpu["pending"]
    state = {"mode": mode, "instances": instances}
    save(state)
    return state


def published(state):
    """The GPUs as the device plugin finds them: MIG mode and the MIG devices (GPU instances with a compute one)."""
    return {"gpus": [{"index": int(index), "mig": gpu["current"],
                      "mig_devices": sorted(i["profile"] for i in state["instances"]
                                            if i["gpu"] == int(index) and i["ci"] is not None)}
                     for index, gpu in sorted(state["mode"].items(), key=lambda item: int(item[0]))]}


def save(state):
    files = [(os.path.join(STATE_DIR, "mode.json"), state["mode"]),
             (os.path.join(RUN_DIR, "instances.json"), state["instances"])]
    try:
        with open(os.path.join(STATE_DIR, "publish")) as handle:
            files.append((handle.read().strip(), published(state)))
    except FileNotFoundError:
        pass
    for path, value in files:
        with open(path + ".tmp", "w") as handle:
            json.dump(value, handle)
        os.replace(path + ".tmp", path)


def clients():
    """The services of STATE_DIR/clients that are active now (systemctl on PATH answers)."""
    try:
        with open(os.path.join(STATE_DIR, "clients")) as handle:
            names = [line.strip() for line in handle if line.strip()]
    except FileNotFoundError:
        return []
    return [name for name in names
            if subprocess.run(["systemctl", "is-active", "--quiet", name], check=False).returncode == 0]


def selected(args, count):
    """The GPU indexes -i names (a comma-separated list), all of them without it."""
    if "-i" in args:
        text = args[args.index("-i") + 1]
        indexes = [int(item) for item in text.split(",")]
        for index in indexes:
            if index >= count:
                die("No devices were found", 6)
        return indexes
    return list(range(count))


def bus_id(tree, index):
    return gpus_of(tree)[index].get("id")


def set_mode(state, tree, indexes, on):
    for index in indexes:
        gpu = state["mode"][str(index)]
        if gpu["current"] and not on and any(i["gpu"] == index for i in state["instances"]):
            die("Unable to disable MIG Mode for GPU %s: In use by another client\nAll done." % bus_id(tree, index), 0)
        gpu["pending"] = on
        if clients():
            print("Warning: MIG mode is in pending %s state for GPU %s:In use by another client\n%s is currently being "
                  "used by one or more other processes (e.g. CUDA application or a monitoring application such as "
                  "another instance of nvidia-smi). Please first kill all processes using the device and retry the "
                  "command or reboot the system to make MIG mode effective."
                  % ("enable" if on else "disable", bus_id(tree, index), bus_id(tree, index)))
        else:
            gpu["current"] = on
            print("%s MIG Mode for GPU %s" % ("Enabled" if on else "Disabled", bus_id(tree, index)))
    print("All done.")


def reset(state, tree, indexes):
    if clients():
        die("The following GPUs could not be reset:\n  GPU %s: In use by another client\n\n1 device is currently being "
            "used by one or more other processes (e.g., Fabric Manager, CUDA application, graphics application such as "
            "an X server, or a monitoring application such as another instance of nvidia-smi). Please first kill all "
            "processes using this device and all compute applications running in the system." % bus_id(tree, indexes[0]),
            255)
    for index in indexes:
        state["mode"][str(index)]["current"] = state["mode"][str(index)]["pending"]
        state["instances"] = [i for i in state["instances"] if i["gpu"] != index]
        print("GPU %s was successfully reset." % bus_id(tree, index))
    print("All done.")


def mig_on(state, index):
    return state["mode"][str(index)]["current"]


def create(state, tree, indexes, spec, with_compute):
    for index in indexes:
        if not mig_on(state, index):
            die("No MIG-enabled devices found.", 6)
        product = gpus_of(tree)[index].findtext("product_name")
        known = profiles(product)
        for item in spec.split(","):
            name, start = (item.split(":", 1) + [""])[:2]
            profile = next((p for p in known if name in (str(p["id"]), p["name"], "MIG " + p["name"])), None)
            if profile is None:
                die("Unable to create a GPU instance on GPU %2d using profile %s: Invalid Argument" % (index, name), 2)
            own = [i for i in state["instances"] if i["gpu"] == index]
            used = {slot for i in own for slot in range(i["start"], i["start"] + i["size"])}
            starts = [int(start)] if start else list(profile["starts"])
            free = [s for s in starts if s in profile["starts"] and not used & set(range(s, s + profile["size"]))]
            once = profile["pattern"] in _ONCE and any(i["profile_id"] == profile["id"] for i in own)
            if not free or once:
                die("Unable to create a GPU instance on GPU %2d using profile %d: Insufficient Resources"
                    % (index, profile["id"]), 2)
            ids = {i["gi"] for i in own}
            gi = next(n for n in range(1, 15) if n not in ids)
            state["instances"].append({"gpu": index, "gi": gi, "profile": profile["name"], "profile_id": profile["id"],
                                       "compute": profile["compute"], "start": free[0], "size": profile["size"],
                                       "ci": None})
            print("Successfully created GPU instance ID %2d on GPU %2d using profile MIG %s (ID %2d)"
                  % (gi, index, profile["name"], profile["id"]))
            if with_compute:
                state["instances"][-1]["ci"] = 0
                print("Successfully created compute instance ID  0 on GPU %2d GPU instance ID %2d using profile "
                      "MIG %s (ID %2d)" % (index, gi, profile["name"], compute_profile_id(profile["compute"])))
            save(state)


def create_compute(state, indexes, gpu_instance):
    """-cci: the GPU instance's default compute instance (all its slices), where it has none."""
    for index in indexes:
        found = [i for i in state["instances"] if i["gpu"] == index and i["gi"] == gpu_instance]
        if not found:
            die("Failed to create compute instances: GPU instance %d not found on GPU %2d: Not Found"
                % (gpu_instance, index), 6)
        if found[0]["ci"] is not None:
            die("Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile %d: Insufficient "
                "Resources" % (index, gpu_instance, compute_profile_id(found[0]["compute"])), 2)
        found[0]["ci"] = 0
        print("Successfully created compute instance ID  0 on GPU %2d GPU instance ID %2d using profile MIG %s (ID %2d)"
              % (index, gpu_instance, found[0]["profile"], compute_profile_id(found[0]["compute"])))


def compute_profile_id(compute_slices):
    return {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[compute_slices]


def table(title, header, rows, width):
    line = "+" + "-" * width + "+"
    out = [line, "| %-*s|" % (width - 1, title)] + ["| %-*s|" % (width - 1, text) for text in header]
    out.append("|" + "=" * width + "|")
    for row in rows:
        out.extend("| %-*s|" % (width - 1, text) for text in row)
        out.append(line)
    return "\n".join(out)


def list_instances(state, indexes, compute):
    if not any(mig_on(state, index) for index in indexes):
        die("No MIG-enabled devices found.", 6)
    own = sorted((i for i in state["instances"] if i["gpu"] in indexes and (i["ci"] is not None or not compute)),
                 key=lambda i: (i["gpu"], -i["profile_id"], i["gi"]))
    if not own:
        die("No %s instances found: Not Found" % ("compute" if compute else "GPU"), 6)
    if compute:
        rows = [["%3d %6d       MIG %-13s %3d %9d %10d:%d" % (i["gpu"], i["gi"], i["profile"],
                                                              compute_profile_id(i["compute"]), i["ci"], 0,
                                                              i["compute"])] for i in own]
        header = ["GPU     GPU       Name             Profile   Instance   Placement",
                  "      Instance                       ID        ID       Start:Size", "        ID"]
        print(table("Compute instances:", header, rows, 68))
    else:
        rows = [["%3d  MIG %-13s %5d %8d %10d:%d" % (i["gpu"], i["profile"], i["profile_id"], i["gi"], i["start"],
                                                     i["size"])] for i in own]
        header = ["GPU   Name             Profile  Instance   Placement",
                  "                         ID       ID       Start:Size"]
        print(table("GPU instances:", header, rows, 55))


def destroy(state, indexes, compute):
    own = [i for i in state["instances"] if i["gpu"] in indexes]
    if compute:
        done = [i for i in own if i["ci"] is not None]
        for i in done:
            i["ci"] = None
            print("Successfully destroyed compute instance ID  0 from GPU %2d GPU instance ID %2d" % (i["gpu"], i["gi"]))
    else:
        busy = [i for i in own if i["ci"] is not None]
        if busy:
            die("Unable to destroy GPU instance ID %2d from GPU %2d: In use by another client"
                % (busy[0]["gi"], busy[0]["gpu"]), 19)
        done = own
        state["instances"] = [i for i in state["instances"] if i not in own]
        for i in done:
            print("Successfully destroyed GPU instance ID %2d from GPU %2d" % (i["gi"], i["gpu"]))
    if not done:
        die("No %s instances found: Not Found" % ("compute" if compute else "GPU"), 6)


def list_profiles(state, tree, indexes):
    rows = []
    for index in indexes:
        if not mig_on(state, index):
            continue
        own = [i for i in state["instances"] if i["gpu"] == index]
        used = {slot for i in own for slot in range(i["start"], i["start"] + i["size"])}
        for profile in profiles(gpus_of(tree)[index].findtext("product_name")):
            total = 1 if profile["pattern"] in _ONCE else len(profile["starts"])
            free_starts = [s for s in profile["starts"] if not used & set(range(s, s + profile["size"]))]
            free = min(total, len(free_starts)) - (1 if profile["pattern"] in _ONCE and any(
                i["profile_id"] == profile["id"] for i in own) else 0)
            rows.append(["%3d  MIG %-13s %5d %5d/%-6d %6s" % (index, profile["name"], profile["id"], max(free, 0),
                                                              total, profile["size"])])
    if not rows:
        die("No MIG-enabled devices found.", 6)
    header = ["GPU   Name             ID    Instances   Memory", "                              Free/Total   slices"]
    print(table("GPU instance profiles:", header, rows, 60))


def full_report(state, tree):
    for index, gpu in enumerate(gpus_of(tree)):
        mode = gpu.find("mig_mode")
        mode.find("current_mig").text = "Enabled" if state["mode"][str(index)]["current"] else "Disabled"
        mode.find("pending_mig").text = "Enabled" if state["mode"][str(index)]["pending"] else "Disabled"
        devices = gpu.find("mig_devices")
        for child in list(devices):
            devices.remove(child)
        own = [i for i in state["instances"] if i["gpu"] == index and i["ci"] is not None]
        devices.text = None if own else "None"
        for number, instance in enumerate(own):
            device = ElementTree.SubElement(devices, "mig_device")
            for tag, value in (("index", number), ("gpu_instance_id", instance["gi"]),
                               ("compute_instance_id", instance["ci"])):
                ElementTree.SubElement(device, tag).text = str(value)
            memory = ElementTree.SubElement(device, "fb_memory_usage")
            gb = int(re.search(r"(\d+)gb", instance["profile"]).group(1))
            ElementTree.SubElement(memory, "total").text = "%d MiB" % (gb * 1024)
    sys.stdout.write('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n')
    sys.stdout.write(ElementTree.tostring(tree.getroot(), encoding="unicode") + "\n")


def record_call(args):
    if "-mig" in args or "-r" in args or args[:2] in (["mig", "-cgi"], ["mig", "-cci"], ["mig", "-dci"], ["mig", "-dgi"]):
        os.makedirs(STATE_DIR, exist_ok=True)
        with open(os.path.join(STATE_DIR, "calls.log"), "a") as log:
            log.write(json.dumps({"time": time.time(), "argv": args, "clients": clients()}) + "\n")


def main(args):
    record_call(args)
    tree = report()
    state = load()
    count = len(gpus_of(tree))
    if args == ["-q", "-x"]:
        full_report(state, tree)
    elif "-mig" in args and args[0] != "mig":
        set_mode(state, tree, selected(args, count), args[args.index("-mig") + 1] == "1")
    elif "-r" in args:
        reset(state, tree, selected(args, count))
    elif args[:2] == ["mig", "-lgip"]:
        list_profiles(state, tree, selected(args, count))
    elif args[:2] == ["mig", "-cgi"]:
        create(state, tree, selected(args, count), args[2], "-C" in args)
    elif args[:2] == ["mig", "-cci"] and "-gi" in args:
        create_compute(state, selected(args, count), int(args[args.index("-gi") + 1]))
    elif args[:2] in (["mig", "-lgi"], ["mig", "-lci"]):
        list_instances(state, selected(args, count), args[1] == "-lci")
    elif args[:2] in (["mig", "-dci"], ["mig", "-dgi"]):
        destroy(state, selected(args, count), args[1] == "-dci")
    else:
        die("nvidia-smi test double: not simulated: %s" % " ".join(args), 2)
    save(state)


if __name__ == "__main__":
    main(sys.argv[1:])
