# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE of the kernel loading the NVIDIA module at boot, for test containers only.

The containers share the host's kernel and can load no module. At each boot (a systemd unit, see
tests/test_doubles/nvidia_kernel_module.yml) this "loads" the module that the installed DKMS package would have built:
it writes what the kernel shows for a loaded nvidia module under a fake sysfs and a fake procfs, in the real layouts:

  SYSFS/module/nvidia/version        the module's version ("550.163.01")
  SYSFS/module/nvidia/refcnt         its users: 1, nvidia-persistenced holding it, so that a changed module needs a reboot
  SYSFS/module/nvidia/holders/       the modules stacked on it (none)
  PROCFS/driver/nvidia/version       "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  V  ..." for the open
                                     flavour, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  V  ..." for the proprietary

The package is the installed nvidia*kernel-dkms one (open flavour when its name says so); its version without epoch and
Debian revision is the module's. No such package: no module, and both files are removed. Between boots nothing changes,
as a swapped package does not replace a loaded module. Usage: load_at_boot.py SYSFS PROCFS
"""

import os
import re
import shutil
import subprocess
import sys

OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (test-double@dlinfra)  Thu Jan  1 00:00:00 UTC 2026\n"
PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Thu Jan  1 00:00:00 UTC 2026\n"
GCC = "GCC version:  gcc version 14.2.0 (Debian 14.2.0-19)\n"


def installed_module():
    """(package, version) of the installed NVIDIA DKMS package, or None."""
    result = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n", "nvidia*kernel-dkms"],
                            capture_output=True, text=True, check=False)
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0][1:2] == "i":
            return fields[1], fields[2]
    return None


def main(sysfs, procfs):
    module_dir = os.path.join(sysfs, "module", "nvidia")
    version_file = os.path.join(procfs, "driver", "nvidia", "version")
    shutil.rmtree(module_dir, ignore_errors=True)
    if os.path.exists(version_file):
        os.remove(version_file)
    found = installed_module()
    if found is None:
        print("no NVIDIA DKMS package installed: no module loaded")
        return
    package, version = found
    upstream = re.sub(r"-[^-]*$", "", re.sub(r"^[0-9]+:", "", version))
    os.makedirs(os.path.join(module_dir, "holders"))
    with open(os.path.join(module_dir, "version"), "w") as handle:
        handle.write(upstream + "\n")
    with open(os.path.join(module_dir, "refcnt"), "w") as handle:
        handle.write("1\n")
    os.makedirs(os.path.dirname(version_file), exist_ok=True)
    with open(version_file, "w") as handle:
        handle.write((OPEN if "open" in package else PROPRIETARY) % upstream + GCC)
    print("loaded the module of %s %s" % (package, version))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
