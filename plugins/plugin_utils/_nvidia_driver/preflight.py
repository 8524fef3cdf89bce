# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems the nvidia_driver role's preflight reports: pure Python.

``preflight_problems`` puts the problems of the node's driver plan (nvidia_driver_choice's ``driver_plans``) first,
then turns the role's settings (its variables and the platform's data) and what preflight found on the host (the plan,
its GPUs, Secure Boot, the signing key) into one line per problem; the role fails once, listing them all.
"""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys, joined

SETTINGS = ("distribution", "major_version", "releases", "source", "source_effective", "sources", "branch", "version",
            "cuda_key_fingerprint", "cuda_key_url", "fabric_manager_wanted", "fabric_manager_package",
            "source_last_branch", "mok_signing", "mok_certificate")
FOUND = ("plan_problems", "branch", "flavor", "anchor", "kernel_flavors", "nvswitch_count", "secure_boot_state",
         "missing_mok_files")

SECURE_BOOT_ON = "SecureBoot enabled"


def preflight_problems(settings, found):
    """One line per problem in ``settings`` (keys SETTINGS) and ``found`` (keys FOUND); empty when the role can go on.

    settings: distribution and major_version (the host's), releases (the platform's releases the role supports),
    source (nvidia_driver_source as set), source_effective (the source the role uses), sources (the platform's package
    sets), branch and version (nvidia_driver_branch and nvidia_driver_version as set), cuda_key_fingerprint and
    cuda_key_url (of the CUDA repository's key), fabric_manager_wanted (whether the node gets the fabric manager),
    fabric_manager_package (the effective source's, empty where it carries none), source_last_branch (the newest
    branch whose package names the effective source's set knows, empty where any branch fits), mok_signing and
    mok_certificate (nvidia_driver_secure_boot_mok_*).
    found: plan_problems (those of the node's plan), branch and flavor (the plan's branch and kernel module flavour),
    anchor and kernel_flavors (of the package set for that branch: its anchor package, the flavours it has kernel
    modules for), nvswitch_count, secure_boot_state (what mokutil --sb-state printed, empty where not asked) and
    missing_mok_files (the signing key files that do not exist).
    """
    check_keys("settings", settings, SETTINGS)
    check_keys("found", found, FOUND)
    distribution, major_version = settings["distribution"], settings["major_version"]
    sources, source_effective = settings["sources"], settings["source_effective"]
    branch, version = settings.get("branch"), settings.get("version")
    plan_problems = list(found.get("plan_problems") or [])
    problems = list(plan_problems)

    if major_version not in settings["releases"]:
        problems.append("%s %s is not supported; supported %s releases: %s"
                        % (distribution, major_version, distribution, joined(settings["releases"])))
    if source_effective not in sources:
        problems.append("nvidia_driver_source=%s is not available on %s; use one of: %s"
                        % (settings["source"], distribution, joined(sources)))
    if not plan_problems and source_effective in sources and found["flavor"] not in found["kernel_flavors"]:
        problems.append("the packages of driver branch %s (%s) carry no %s kernel modules; set nvidia_driver_flavor: "
                        "proprietary, or another nvidia_driver_branch" % (found["branch"], found["anchor"], found["flavor"]))
    last_branch = str(settings.get("source_last_branch") or "")
    if not plan_problems and _past(found["branch"], last_branch):
        problems.append("driver branch %s is newer than the packages the %s source's set names on %s: from branch 590 "
                        "NVIDIA's repository drops the branch from its package names (nvidia-dkms-open, not "
                        "nvidia-dkms-590-open) and locks a branch with pinning packages instead; set nvidia_driver_branch "
                        "(or nvidia_driver_version) to %s or lower, or choose another nvidia_driver_source"
                        % (found["branch"], source_effective, distribution, last_branch))
    if branch and version and not ("%s." % version).startswith("%s." % branch):
        problems.append("nvidia_driver_version=%s is not on nvidia_driver_branch=%s; set one of them, or make them agree"
                        % (version, branch))
    if source_effective == "cuda" and len(settings["cuda_key_fingerprint"]) == 0:
        problems.append("no fingerprint is pinned for the CUDA repository key on this platform; set "
                        "nvidia_driver_cuda_repo_key_fingerprint to the fingerprint NVIDIA publishes for %s"
                        % settings["cuda_key_url"])
    if settings.get("fabric_manager_wanted") and len(settings.get("fabric_manager_package") or "") == 0:
        problems.append("%s NVSwitch(es) need the fabric manager, which the %s source does not carry; set "
                        "nvidia_driver_source=cuda (NVIDIA's repository has nvidia-fabricmanager)"
                        % (found["nvswitch_count"], source_effective))
    if SECURE_BOOT_ON in (found.get("secure_boot_state") or "") and not settings.get("mok_signing"):
        problems.append("Secure Boot is enabled, so the kernel will refuse the unsigned DKMS module; enroll a Machine Owner "
                        "Key for DKMS (mokutil --import %s, then confirm it in the firmware at the next boot) and set "
                        "nvidia_driver_secure_boot_mok_signing=true, or turn Secure Boot off" % settings["mok_certificate"])
    if found.get("missing_mok_files"):
        problems.append("nvidia_driver_secure_boot_mok_signing is true but %s do(es) not exist; create the key pair DKMS "
                        "signs with (dkms generate_mok), enroll it with mokutil --import, or point "
                        "nvidia_driver_secure_boot_mok_key / _certificate at yours"
                        % joined(found["missing_mok_files"], " and "))
    return problems


def _past(branch, last_branch):
    """Whether driver ``branch`` is newer than ``last_branch``; False where either is not a number."""
    branch = str(branch or "")
    return branch.isdigit() and last_branch.isdigit() and int(branch) > int(last_branch)
