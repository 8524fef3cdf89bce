# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems the nccl role's preflight reports: pure Python.

``preflight_problems`` turns the role's settings (its variables and the platform's data) and what preflight found on the
host into one line per problem; the role fails once, listing them all. Values are compared as Ansible's tests compare
them: a pattern is matched against the value as text.
"""

import re
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys, joined
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.gpudirect import gpudirect_plan

SETTINGS = ("distribution", "major_version", "releases", "default_source", "distribution_cuda", "source", "version",
            "cuda_version", "conf_extra", "conf", "tests_install", "tests_sha256", "tests_src", "tests_url", "tests_nvcc",
            "tests_mpi", "validate", "validate_multinode", "package_manager", "rdma", "rdma_wanted", "rdma_versions",
            "gpudirect", "driver_flavor", "kernel_release")
FOUND = ("nvcc_exists", "hca_count")
RDMA_CHOICES = ("auto", "true", "false")

_CUDA_VERSION = re.compile(r"^[0-9]+\.[0-9]+$")
_NCCL_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
_CONF_KEY = re.compile(r"^NCCL_[A-Z0-9_]+$")
_LINE_BREAK = re.compile(r"[\r\n]")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


def _matches(pattern, value):
    return bool(pattern.match(str(value)))


def preflight_problems(settings, found):
    """One line per problem in ``settings`` (keys SETTINGS) and ``found`` (keys FOUND); empty when the role can go on.

    settings: distribution and major_version (the host's), releases (the platform's releases the role supports),
    default_source and distribution_cuda (the release's, default_source 'unsupported' for a release the role does not
    know), source (the effective nccl_source), version (nccl_version), cuda_version (nccl_cuda_version), conf_extra
    (nccl_conf_extra), conf (nccl.conf's settings, [key, value] pairs), tests_install, tests_sha256, tests_src
    (nccl_tests_*), tests_url (the URL of the nccl-tests archive), tests_nvcc (the path of CUDA's compiler), tests_mpi,
    validate and validate_multinode (nccl_tests_mpi, nccl_validate, nccl_validate_multinode), package_manager (apt or
    dnf), rdma (nccl_rdma), rdma_wanted (whether this node gets the RDMA userspace) and rdma_versions ({rdma_core,
    perftest}: the versions it would get, '' where neither the variable nor the release gives one); gpudirect
    (nccl_gpudirect), driver_flavor (the nvidia_driver role's plan, '' for none) and kernel_release, for
    gpudirect.gpudirect_plan's problems (left out: not checked).
    found: nvcc_exists (whether tests_nvcc exists on the host; read only where nccl-tests are built), hca_count (the
    node's RDMA devices, rdma_fabric_facts).
    """
    check_keys("settings", settings, SETTINGS)
    check_keys("found", found, FOUND)
    distribution = settings["distribution"]
    platform = "%s %s" % (distribution, settings["major_version"])
    source, default_source = settings["source"], settings["default_source"]
    distribution_cuda = settings["distribution_cuda"]
    version, cuda_version = settings["version"], settings["cuda_version"]
    tests_install = settings.get("tests_install")
    problems = []

    if default_source == "unsupported":
        problems.append("%s is not supported; supported %s releases: %s"
                        % (platform, distribution, joined(settings["releases"])))
    if source == "none":
        problems.append("%s has no NCCL package in its archive (Debian 13 is the first with libnccl2, in contrib); set "
                        "nccl_source: cuda and nccl_cuda_version to the cluster's CUDA release (for example 12.4), with "
                        "NVIDIA's CUDA repository or a mirror of it in the apt sources (the nvidia_driver role adds it with "
                        "nvidia_driver_source: cuda)" % platform)
    if source == "distribution" and not distribution_cuda and default_source != "unsupported":
        problems.append("nccl_source=distribution: %s has no NCCL package in its archive; use nccl_source: cuda" % platform)
    if source == "cuda" and not _matches(_CUDA_VERSION, cuda_version):
        problems.append("nccl_cuda_version='%s': NVIDIA's repository builds each NCCL release per CUDA version "
                        "(libnccl2=%s-1+cuda12.4); set nccl_cuda_version to the CUDA major.minor the cluster's frameworks "
                        "use" % (cuda_version, version))
    if source == "distribution" and cuda_version not in ("", distribution_cuda):
        problems.append("nccl_cuda_version=%s: %s's libnccl2 is built for CUDA %s; set nccl_cuda_version to that (or "
                        "empty), or use nccl_source: cuda for a build for CUDA %s"
                        % (cuda_version, platform, distribution_cuda, cuda_version))
    if not _matches(_NCCL_VERSION, version):
        problems.append("nccl_version='%s' is not an NCCL release (major.minor.patch, for example 2.22.3)" % version)
    bad_keys = [key for key in settings.get("conf_extra") or {} if not _matches(_CONF_KEY, key)]
    if bad_keys:
        problems.append("nccl_conf_extra has key(s) NCCL does not read from nccl.conf: %s; use NCCL_* variable names (for "
                        "example NCCL_IB_GID_INDEX)" % joined(bad_keys))
    bad_values = [key for key, value in settings.get("conf") or [] if isinstance(value, str) and _LINE_BREAK.search(value)]
    if bad_values:
        problems.append("the nccl.conf value(s) of %s hold a line break; give each one line" % joined(bad_values))
    if tests_install and not _matches(_SHA256, settings["tests_sha256"]):
        problems.append("nccl_tests_install is true but nccl_tests_sha256 is not a sha256 (64 hex digits): no checksum, no "
                        "build; set it to the sha256 of %s" % (settings.get("tests_src") or settings["tests_url"]))
    if tests_install and not found.get("nvcc_exists"):
        problems.append("nccl_tests_install is true but %s does not exist: building nccl-tests needs CUDA's compiler; "
                        "install the CUDA toolkit (nvidia-cuda-toolkit on Debian) or point nccl_tests_cuda_home at it"
                        % settings["tests_nvcc"])
    if settings.get("validate") and settings.get("validate_multinode") and not settings.get("tests_mpi"):
        problems.append("nccl_validate_multinode is true but nccl_tests_mpi is false: a binary built without MPI runs one "
                        "independent test per node under mpirun; set nccl_tests_mpi: true")
    problems.extend(_rdma_problems(settings, found, platform))
    if "gpudirect" in settings:
        problems.extend(gpudirect_plan(settings["gpudirect"],
                                       settings.get("rdma_wanted") in (True, "True", "true"),
                                       settings.get("driver_flavor") or None, settings.get("kernel_release"),
                                       settings.get("conf_extra"))["problems"])
    return problems


def _rdma_problems(settings, found, platform):
    rdma = str(settings.get("rdma")).lower()
    if rdma not in RDMA_CHOICES:
        return ["nccl_rdma=%r is none of auto, true and false; set auto (the RDMA userspace on nodes with an HCA), "
                "true or false" % (settings.get("rdma"),)]
    if settings.get("rdma_wanted") not in (True, "True", "true"):
        return []
    why = "nccl_rdma is true" if rdma == "true" else "nccl_rdma is auto and the node has %s RDMA device(s)" % found.get(
        "hca_count")
    if settings.get("package_manager") != "apt":
        return ["%s, but the role installs the RDMA userspace with apt only (Debian, Ubuntu), not on %s; install "
                "rdma-core, libibverbs-utils, infiniband-diags and perftest yourself and set nccl_rdma: false"
                % (why, platform)]
    versions = settings.get("rdma_versions") or {}
    variables = (("rdma_core", "nccl_rdma_version"), ("perftest", "nccl_rdma_perftest_version"))
    missing = [variable for key, variable in variables if not str(versions.get(key) or "").strip()]
    if missing:
        return ["%s, but the role knows no RDMA package versions for %s; set %s to the versions its archive carries "
                "(apt-cache policy rdma-core perftest), or nccl_rdma: false" % (why, platform, " and ".join(missing))]
    return []
