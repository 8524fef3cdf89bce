# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the RDMA userspace versions the nccl role pins are in the node's apt sources: pure Python."""

# The pinned packages whose versions madison is asked for, and the key of each in the role's versions.
PINNED = (("rdma-core", "rdma_core"), ("perftest", "perftest"))


def madison_versions(lines):
    """{package: [versions, newest first]} from `apt-cache madison` lines
    ('  rdma-core |     56.1-1 | http://deb.debian.org/debian trixie/main amd64 Packages')."""
    found = {}
    for line in lines or []:
        fields = [field.strip() for field in str(line).split("|")]
        if len(fields) >= 2 and fields[0] and fields[1] and fields[1] not in found.setdefault(fields[0], []):
            found[fields[0]].append(fields[1])
    return found


def availability_problem(host, madison_lines, versions):
    """'' when apt can install every pinned version, else one sentence naming the host, what is missing, what the
    sources offer, the variables and the fix."""
    available = madison_versions(madison_lines)
    missing = ["%s %s" % (package, versions.get(key)) for package, key in PINNED
               if versions.get(key) not in available.get(package, [])]
    if not missing:
        return ""
    offered = "; ".join("%s %s" % (package, ", ".join(available[package])) for package, _key in PINNED
                        if available.get(package)) or "none"
    return ("%s: the apt sources have no %s (available: %s); set nccl_rdma_version and nccl_rdma_perftest_version to "
            "versions the sources carry, or nccl_rdma: false" % (host, " or ".join(missing), offered))
