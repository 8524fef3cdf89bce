# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG GPU instance profiles of each GPU model, and whether a layout fits a GPU. Pure Python.

Source: NVIDIA's Multi-Instance GPU User Guide, "Supported MIG Profiles" (profile names, compute and memory fractions,
instances available, the placement diagrams) and "Supported GPUs" (which products have MIG: compute capability 8.0
and later data-centre parts); the GPU instance profile ids and placements are what ``nvidia-smi mig -lgip`` and
``-lgipp`` list on those GPUs (as quoted in NVIDIA's mig-parted and gpu-operator pull requests for the A30, H100 NVL,
H200, GH200 144G and B200; NVIDIA's mig-parted config-default.yaml names the same profiles per device).

A GPU has 8 memory slices and 7 compute slices (A30: 4 and 4). A GPU instance occupies the memory slices
``start .. start + size - 1`` of one of its profile's placements; instances may not overlap, so a layout is checked by
placing it, not by summing slices: ``3g.40gb`` + ``4g.40gb`` fits an H100, ``3g.40gb`` x 2 + ``1g.10gb`` does not.
The ``+me`` (media extensions) profiles exist once per GPU. Newer drivers add ``-me``, ``+me.all`` and ``+gfx``
variants on some GPUs: not listed here, so a layout naming one is refused as unknown.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.nvidia_generations import DEVICES

# (name pattern, GPU instance profile id, compute slices, memory slices, most instances, placement starts).
# In a name pattern, m1, m2, m4 and m8 are the GB of memory of 1, 2, 4 and 8 memory slices on that model.
_EIGHT_SLICES = (
    ("1g.{m1}gb", 19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    ("1g.{m1}gb+me", 20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    ("1g.{m2}gb", 15, 1, 2, 4, (0, 2, 4, 6)),
    ("2g.{m2}gb", 14, 2, 2, 3, (0, 2, 4)),
    ("3g.{m4}gb", 9, 3, 4, 2, (0, 4)),
    ("4g.{m4}gb", 5, 4, 4, 1, (0,)),
    ("7g.{m8}gb", 0, 7, 8, 1, (0,)),
)
_FOUR_SLICES = (
    ("1g.{m1}gb", 14, 1, 1, 4, (0, 1, 2, 3)),
    ("1g.{m1}gb+me", 21, 1, 1, 1, (0, 1, 2, 3)),
    ("2g.{m2}gb", 5, 2, 2, 2, (0, 2)),
    ("2g.{m2}gb+me", 6, 2, 2, 1, (0, 2)),
    ("4g.{m4}gb", 0, 4, 4, 1, (0,)),
)

# Product names as nvidia-smi reports them (without "NVIDIA "), lower case: (geometry, GB of 1, 2, 4, 8 slices).
_MODELS = {
    ("a100-sxm4-40gb", "a100-pcie-40gb"): (_EIGHT_SLICES, {"m1": 5, "m2": 10, "m4": 20, "m8": 40}),
    ("a100-sxm4-80gb", "a100 80gb pcie"): (_EIGHT_SLICES, {"m1": 10, "m2": 20, "m4": 40, "m8": 80}),
    ("a30",): (_FOUR_SLICES, {"m1": 6, "m2": 12, "m4": 24}),
    ("h100 80gb hbm3", "h100 pcie"): (_EIGHT_SLICES, {"m1": 10, "m2": 20, "m4": 40, "m8": 80}),
    ("h100 nvl",): (_EIGHT_SLICES, {"m1": 12, "m2": 24, "m4": 47, "m8": 94}),
    ("gh200 120gb",): (_EIGHT_SLICES, {"m1": 12, "m2": 24, "m4": 48, "m8": 96}),
    ("h200", "h200 nvl"): (_EIGHT_SLICES, {"m1": 18, "m2": 35, "m4": 71, "m8": 141}),
    ("gh200 144g hbm3e",): (_EIGHT_SLICES, {"m1": 18, "m2": 36, "m4": 72, "m8": 144}),
    ("b200",): (_EIGHT_SLICES, {"m1": 23, "m2": 45, "m4": 90, "m8": 180}),
}

# MIG needs compute capability 8.0 or later and a data-centre part: these capabilities (GA10x, Orin, Ada) have none.
_NO_MIG_CAPABILITIES = ("8.6", "8.7", "8.9")


def model_key(product_name):
    """``product_name`` as the table keys it: 'NVIDIA H100 80GB HBM3' -> 'h100 80gb hbm3'."""
    name = " ".join(str(product_name or "").split()).lower()
    return name[len("nvidia "):] if name.startswith("nvidia ") else name


def _profiles(geometry, memory):
    return {pattern.format(**memory):
            {"id": profile_id, "compute_slices": compute, "memory_slices": size, "max_instances": most,
             "placements": [(start, size) for start in starts]}
            for pattern, profile_id, compute, size, most, starts in geometry}


MIG_PROFILES = {name: _profiles(geometry, memory) for names, (geometry, memory) in _MODELS.items() for name in names}


def mig_profiles(product_name):
    """{profile name: {"id", "compute_slices", "memory_slices", "max_instances", "placements": [(start, size)]}} of
    the model, None where the table does not list it."""
    return MIG_PROFILES.get(model_key(product_name))


def has_no_mig(product_name):
    """True for a model known to have no MIG: a GeForce part, or one nvidia_generations lists below compute
    capability 8.0 or at 8.6, 8.7 or 8.9 (V100, T4, A10, A40, L4, L40S...)."""
    key = model_key(product_name)
    if key.startswith("geforce") or key.startswith("titan"):
        return True
    for name, _architecture, capability, _branch in DEVICES.values():
        if model_key(name) == key:
            major, minor = (int(part) for part in capability.split("."))
            return major < 8 or capability in _NO_MIG_CAPABILITIES
    return False


def memory_slices(product_name):
    """The model's memory slices (8, or 4 on the A30), None where the table does not list it."""
    profiles = mig_profiles(product_name)
    return None if profiles is None else max(start + size for profile in profiles.values()
                                             for start, size in profile["placements"])


def place(profiles, layout):
    """[(profile name, start)] placing every instance of ``layout`` ({profile name: count}) on one GPU of ``profiles``
    without overlap, the largest first; None where no placement exists."""
    instances = sorted((name for name, count in layout.items() for _copy in range(count)),
                       key=lambda name: (-profiles[name]["memory_slices"], profiles[name]["id"]))
    placed = []

    def search(position, used):
        if position == len(instances):
            return True
        name = instances[position]
        for start, size in profiles[name]["placements"]:
            slots = set(range(start, start + size))
            if not slots & used:
                placed.append((name, start))
                if search(position + 1, used | slots):
                    return True
                placed.pop()
        return False

    return list(placed) if search(0, set()) else None
