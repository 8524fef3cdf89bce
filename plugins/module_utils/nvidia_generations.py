# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each NVIDIA GPU needs from its driver: its architecture, compute capability, kernel module flavour and branches.

Keyed on the PCI device id, which sysfs shows without a driver. Only ids listed here are known: an id that is not is
reported as unknown, never guessed from a range.

Sources of the ids and names:
- Turing and later: NVIDIA's open-gpu-kernel-modules, src/nvidia/generated/g_nv_name_released.h (595.45.04).
- Kepler to Volta (no open module): NVIDIA's Linux driver README, Appendix A "Supported NVIDIA GPU Products".
Compute capabilities: NVIDIA's CUDA GPU list. Kernel modules and branches: NVIDIA's open-gpu-kernel-modules README
(open modules: Turing and later; Blackwell: open only) and its driver announcements (Maxwell, Pascal and Volta end with
the 580 branch; Kepler with 470). A branch minimum is the first production branch that drives the part.
"""

# Per architecture: the open kernel module (required | supported | unsupported), and the branches that drive it.
ARCHITECTURES = {
    "Kepler": {"open_module": "unsupported", "min_branch": 390, "max_branch": 470},
    "Maxwell": {"open_module": "unsupported", "min_branch": 390, "max_branch": 580},
    "Pascal": {"open_module": "unsupported", "min_branch": 390, "max_branch": 580},
    "Volta": {"open_module": "unsupported", "min_branch": 390, "max_branch": 580},
    "Turing": {"open_module": "supported", "min_branch": 418, "max_branch": None},
    "Ampere": {"open_module": "supported", "min_branch": 450, "max_branch": None},
    "Ada": {"open_module": "supported", "min_branch": 525, "max_branch": None},
    "Hopper": {"open_module": "supported", "min_branch": 525, "max_branch": None},
    "Blackwell": {"open_module": "required", "min_branch": 570, "max_branch": None},
}
# The open modules were first released with this branch; NVIDIA packages them by default from OPEN_DEFAULT_BRANCH.
OPEN_FIRST_BRANCH = 515
OPEN_DEFAULT_BRANCH = 560

# device id: (name, architecture, compute capability, min branch where the part needs a later one than its architecture)
DEVICES = {
    0x1023: ("Tesla K40m", "Kepler", "3.5", None),
    0x1024: ("Tesla K40c", "Kepler", "3.5", None),
    0x102D: ("Tesla K80", "Kepler", "3.7", None),
    0x13BD: ("Tesla M10", "Maxwell", "5.0", None),
    0x13F2: ("Tesla M60", "Maxwell", "5.2", None),
    0x17FD: ("Tesla M40", "Maxwell", "5.2", None),
    0x15F7: ("Tesla P100-PCIE-12GB", "Pascal", "6.0", None),
    0x15F8: ("Tesla P100-PCIE-16GB", "Pascal", "6.0", None),
    0x15F9: ("Tesla P100-SXM2-16GB", "Pascal", "6.0", None),
    0x1B38: ("Tesla P40", "Pascal", "6.1", None),
    0x1BB3: ("Tesla P4", "Pascal", "6.1", None),
    0x1DB1: ("Tesla V100-SXM2-16GB", "Volta", "7.0", None),
    0x1DB4: ("Tesla V100-PCIE-16GB", "Volta", "7.0", None),
    0x1DB5: ("Tesla V100-SXM2-32GB", "Volta", "7.0", None),
    0x1DB6: ("Tesla V100-PCIE-32GB", "Volta", "7.0", None),
    0x1DF6: ("Tesla V100S-PCIE-32GB", "Volta", "7.0", None),
    0x1EB8: ("Tesla T4", "Turing", "7.5", None),
    0x20B0: ("NVIDIA A100-SXM4-40GB", "Ampere", "8.0", None),
    0x20B2: ("NVIDIA A100-SXM4-80GB", "Ampere", "8.0", None),
    0x20B3: ("NVIDIA A100-SXM-64GB", "Ampere", "8.0", None),
    0x20B5: ("NVIDIA A100 80GB PCIe", "Ampere", "8.0", None),
    0x20B7: ("NVIDIA A30", "Ampere", "8.0", None),
    0x20BD: ("NVIDIA A800-SXM4-40GB", "Ampere", "8.0", None),
    0x20F1: ("NVIDIA A100-PCIE-40GB", "Ampere", "8.0", None),
    0x20F3: ("NVIDIA A800-SXM4-80GB", "Ampere", "8.0", None),
    0x20F5: ("NVIDIA A800 80GB PCIe", "Ampere", "8.0", None),
    0x2204: ("NVIDIA GeForce RTX 3090", "Ampere", "8.6", None),
    0x2235: ("NVIDIA A40", "Ampere", "8.6", None),
    0x2236: ("NVIDIA A10", "Ampere", "8.6", None),
    0x2237: ("NVIDIA A10G", "Ampere", "8.6", None),
    0x25B6: ("NVIDIA A16", "Ampere", "8.6", None),
    0x2321: ("NVIDIA H100 NVL", "Hopper", "9.0", None),
    0x2322: ("NVIDIA H800 PCIe", "Hopper", "9.0", None),
    0x2324: ("NVIDIA H800", "Hopper", "9.0", None),
    0x2329: ("NVIDIA H20", "Hopper", "9.0", None),
    0x2330: ("NVIDIA H100 80GB HBM3", "Hopper", "9.0", None),
    0x2331: ("NVIDIA H100 PCIe", "Hopper", "9.0", None),
    0x2335: ("NVIDIA H200", "Hopper", "9.0", 550),
    0x2339: ("NVIDIA H100", "Hopper", "9.0", None),
    0x233B: ("NVIDIA H200 NVL", "Hopper", "9.0", 550),
    0x2342: ("NVIDIA GH200 120GB", "Hopper", "9.0", None),
    0x2348: ("NVIDIA GH200 144G HBM3e", "Hopper", "9.0", None),
    0x2684: ("NVIDIA GeForce RTX 4090", "Ada", "8.9", None),
    0x26B5: ("NVIDIA L40", "Ada", "8.9", None),
    0x26B9: ("NVIDIA L40S", "Ada", "8.9", None),
    0x26BA: ("NVIDIA L20", "Ada", "8.9", None),
    0x27B8: ("NVIDIA L4", "Ada", "8.9", None),
    0x2901: ("NVIDIA B200", "Blackwell", "10.0", None),
    0x2941: ("NVIDIA GB200", "Blackwell", "10.0", None),
    0x3182: ("NVIDIA B300 SXM6 AC", "Blackwell", "10.3", 580),
    0x31C2: ("NVIDIA GB300", "Blackwell", "10.3", 580),
    0x2B85: ("NVIDIA GeForce RTX 5090", "Blackwell", "12.0", None),
    0x2BB5: ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "Blackwell", "12.0", None),
}


def describe(device_id):
    """What a GPU needs, from its PCI device id (an int or a '0x2335' / '2335' string): {"device_id" ('10de:2335'),
    "name", "architecture", "compute_capability", "open_module", "min_branch", "max_branch"}; for an id this table does
    not list, the same keys with None and "unknown": True."""
    number = int(device_id, 16) if isinstance(device_id, str) else device_id
    gpu = dict.fromkeys(("name", "architecture", "compute_capability", "open_module", "min_branch", "max_branch"))
    gpu.update(device_id="10de:%04x" % number, unknown=number not in DEVICES)
    if not gpu["unknown"]:
        name, architecture, capability, min_branch = DEVICES[number]
        gpu.update(ARCHITECTURES[architecture], name=name, architecture=architecture, compute_capability=capability)
        gpu["min_branch"] = min_branch or gpu["min_branch"]
    return gpu


def kernel_module_flavor(proc_version_text):
    """'open' or 'proprietary' from /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel Module for
    x86_64  580.159.04 ..." or "... UNIX x86_64 Kernel Module  535.183.01 ..."), None when no module is loaded."""
    for line in (proc_version_text or "").splitlines():
        if line.startswith("NVRM version:"):
            return "open" if "Open Kernel Module" in line else "proprietary"
    return None
