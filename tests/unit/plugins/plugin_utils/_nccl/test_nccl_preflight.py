# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each problem the nccl role's preflight reports, word for word, and the settings that do not raise it."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.preflight import FOUND, SETTINGS, preflight_problems

SHA = "0123456789abcdef" * 4
URL = "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.8.tar.gz"
# Debian 13 with its archive's libnccl2, nothing built: all well.
DEBIAN13 = {
    "distribution": "Debian", "major_version": "13", "releases": ["12", "13"], "default_source": "distribution",
    "distribution_cuda": "12.4", "source": "distribution", "version": "2.22.3", "cuda_version": "", "conf_extra": {},
    "conf": [], "tests_install": False, "tests_sha256": "", "tests_src": "", "tests_url": URL, "tests_nvcc": "/usr/bin/nvcc",
    "tests_mpi": False, "validate": False, "validate_multinode": False, "package_manager": "apt", "rdma": "auto",
    "rdma_wanted": False, "rdma_versions": {"rdma_core": "56.1-1", "perftest": "25.01.0+0.80-1"},
    "gpudirect": "auto", "driver_flavor": "", "kernel_release": "6.12.48+deb13-amd64",
}
UBUNTU24 = dict(DEBIAN13, distribution="Ubuntu", major_version="24", releases=["22", "24"], default_source="cuda",
                distribution_cuda="", source="cuda", cuda_version="12.6", tests_nvcc="/usr/local/cuda/bin/nvcc")
NO_NVCC = {"nvcc_exists": False, "hca_count": 0}

UNSUPPORTED = "Debian 11 is not supported; supported Debian releases: 12, 13"
NO_PACKAGE = ("Debian 12 has no NCCL package in its archive (Debian 13 is the first with libnccl2, in contrib); set "
              "nccl_source: cuda and nccl_cuda_version to the cluster's CUDA release (for example 12.4), with NVIDIA's CUDA "
              "repository or a mirror of it in the apt sources (the nvidia_driver role adds it with nvidia_driver_source: "
              "cuda)")


def problems(base=None, found=None, **settings):
    return preflight_problems(dict(base or DEBIAN13, **settings), found or NO_NVCC)


def test_the_keys_are_those_the_docs_name():
    assert set(DEBIAN13) == set(SETTINGS)
    assert FOUND == ("nvcc_exists", "hca_count")


@pytest.mark.parametrize("base, settings", [
    pytest.param(DEBIAN13, {}, id="debian13-archive"),
    pytest.param(DEBIAN13, {"cuda_version": "12.4"}, id="debian13-archive-its-cuda"),
    pytest.param(DEBIAN13, {"source": "cuda", "cuda_version": "12.4"}, id="debian13-cuda-repository"),
    pytest.param(UBUNTU24, {}, id="ubuntu24-cuda-repository"),
    pytest.param(UBUNTU24, {"version": "2.23.4", "cuda_version": "13.0"}, id="other-releases"),
    pytest.param(DEBIAN13, {"conf_extra": {"NCCL_IB_GID_INDEX": 3, "NCCL_P2P_LEVEL": "NVL"},
                            "conf": [("NCCL_IB_GID_INDEX", 3), ("NCCL_P2P_LEVEL", "NVL")]}, id="nccl-conf"),
    pytest.param(DEBIAN13, {"tests_install": True, "tests_sha256": SHA.upper()}, id="tests-upper-case-sha256"),
    pytest.param(DEBIAN13, {"validate": True, "validate_multinode": True, "tests_mpi": True}, id="multinode-with-mpi"),
    pytest.param(DEBIAN13, {"validate": True}, id="single-node-validation-without-mpi"),
    pytest.param(DEBIAN13, {"validate_multinode": True}, id="multinode-without-validation"),
])
def test_good_settings_are_no_problem(base, settings):
    assert problems(base, {"nvcc_exists": True, "hca_count": 0}, **settings) == []


def test_an_unsupported_release():
    assert problems(major_version="11", default_source="unsupported", distribution_cuda="", source="unsupported") == [
        UNSUPPORTED]


def test_an_unsupported_release_asked_for_the_archive_is_only_unsupported():
    assert problems(major_version="11", default_source="unsupported", distribution_cuda="") == [UNSUPPORTED]


def test_a_release_without_a_package():
    assert problems(major_version="12", default_source="none", distribution_cuda="", source="none") == [NO_PACKAGE]


def test_the_archive_asked_for_where_it_has_no_package():
    assert problems(base=UBUNTU24, source="distribution", cuda_version="") == [
        "nccl_source=distribution: Ubuntu 24 has no NCCL package in its archive; use nccl_source: cuda"]


@pytest.mark.parametrize("cuda_version", ["", "12", "12.4.1", "v12.4", 12])
def test_the_cuda_repository_needs_a_cuda_major_minor(cuda_version):
    assert problems(base=UBUNTU24, cuda_version=cuda_version) == [
        "nccl_cuda_version='%s': NVIDIA's repository builds each NCCL release per CUDA version (libnccl2=2.22.3-1+cuda12.4); "
        "set nccl_cuda_version to the CUDA major.minor the cluster's frameworks use" % cuda_version]


def test_a_cuda_version_is_matched_as_text():
    assert problems(base=UBUNTU24, cuda_version=12.4) == []


@pytest.mark.parametrize("cuda_version", ["12.6", "12", 12.4])
def test_the_archive_build_is_for_its_own_cuda_release(cuda_version):
    assert problems(cuda_version=cuda_version) == [
        "nccl_cuda_version=%s: Debian 13's libnccl2 is built for CUDA 12.4; set nccl_cuda_version to that (or empty), or "
        "use nccl_source: cuda for a build for CUDA %s" % (cuda_version, cuda_version)]


@pytest.mark.parametrize("version", ["2.22", "2.22.3.1", "", "v2.22.3", 2.22])
def test_an_nccl_version_that_is_not_a_release(version):
    assert problems(version=version) == [
        "nccl_version='%s' is not an NCCL release (major.minor.patch, for example 2.22.3)" % version]


def test_conf_keys_nccl_does_not_read():
    assert problems(conf_extra={"IB_GID_INDEX": 3, "NCCL_OK": 1, "nccl_debug": "INFO", 7: "x"}) == [
        "nccl_conf_extra has key(s) NCCL does not read from nccl.conf: IB_GID_INDEX, nccl_debug, 7; use NCCL_* variable "
        "names (for example NCCL_IB_GID_INDEX)"]


def test_conf_values_with_a_line_break_in_the_order_of_the_file():
    conf = [("NCCL_DEBUG", "INFO"), ("NCCL_IB_HCA", "mlx5_0\nNCCL_DEBUG=TRACE"), ("NCCL_NUMBER", 3),
            ("NCCL_SOCKET_IFNAME", "ib0\r")]
    assert problems(conf=conf) == [
        "the nccl.conf value(s) of NCCL_IB_HCA, NCCL_SOCKET_IFNAME hold a line break; give each one line"]


@pytest.mark.parametrize("src, named", [("", URL), ("/srv/nccl-tests-2.17.8.tar.gz", "/srv/nccl-tests-2.17.8.tar.gz")])
@pytest.mark.parametrize("sha256", ["", SHA[:-1], SHA + "0", "g" * 64])
def test_a_build_without_a_sha256_names_the_archive(sha256, src, named):
    assert problems(found={"nvcc_exists": True}, tests_install=True, tests_sha256=sha256, tests_src=src) == [
        "nccl_tests_install is true but nccl_tests_sha256 is not a sha256 (64 hex digits): no checksum, no build; set it "
        "to the sha256 of %s" % named]


def test_a_build_without_cuda_s_compiler():
    assert problems(base=UBUNTU24, tests_install=True, tests_sha256=SHA) == [
        "nccl_tests_install is true but /usr/local/cuda/bin/nvcc does not exist: building nccl-tests needs CUDA's compiler; "
        "install the CUDA toolkit (nvidia-cuda-toolkit on Debian) or point nccl_tests_cuda_home at it"]


def test_the_build_s_checksum_and_compiler_are_not_checked_without_a_build():
    assert problems(tests_install=False, tests_sha256="") == []


def test_a_multinode_validation_without_mpi():
    assert problems(validate=True, validate_multinode=True) == [
        "nccl_validate_multinode is true but nccl_tests_mpi is false: a binary built without MPI runs one independent test "
        "per node under mpirun; set nccl_tests_mpi: true"]


def test_every_problem_at_once_in_the_order_preflight_lists_them():
    lines = problems(major_version="12", default_source="none", distribution_cuda="", source="distribution",
                     cuda_version="12.4", version="2", conf_extra={"X": 1}, conf=[("X", "a\nb")], tests_install=True,
                     validate=True, validate_multinode=True)
    assert [line.split(" ")[0] for line in lines] == [
        "nccl_source=distribution:", "nccl_cuda_version=12.4:", "nccl_version='2'", "nccl_conf_extra", "the",
        "nccl_tests_install", "nccl_tests_install", "nccl_validate_multinode"]
    lines = problems(base=UBUNTU24, major_version="20", default_source="unsupported", source="none", cuda_version="")
    assert lines == ["Ubuntu 20 is not supported; supported Ubuntu releases: 22, 24", NO_PACKAGE.replace("Debian 12", "Ubuntu 20")]


def test_an_unknown_key_is_refused_by_name():
    with pytest.raises(ValueError, match="settings has unknown key.s. cuda; known: distribution"):
        problems(cuda="12.4")
    with pytest.raises(ValueError, match="found has unknown key.s. nvcc"):
        problems(found={"nvcc": True})


@pytest.mark.parametrize("settings", [
    pytest.param({"rdma": "auto", "rdma_wanted": True}, id="auto-with-hcas"),
    pytest.param({"rdma": True, "rdma_wanted": True}, id="true-as-yaml-gives-it"),
    pytest.param({"rdma": False, "rdma_versions": {"rdma_core": "", "perftest": ""}}, id="false-needs-no-versions"),
    pytest.param({"rdma": "auto", "package_manager": "dnf"}, id="auto-without-hcas-on-dnf"),
])
def test_rdma_settings_that_are_no_problem(settings):
    assert problems(found={"nvcc_exists": False, "hca_count": 2}, **settings) == []


def test_rdma_that_is_none_of_the_choices():
    assert problems(rdma="yes") == [
        "nccl_rdma='yes' is none of auto, true and false; set auto (the RDMA userspace on nodes with an HCA), true or false"]


def test_rdma_wanted_where_the_role_knows_no_versions_names_both_variables():
    assert problems(UBUNTU24, {"nvcc_exists": False, "hca_count": 2}, rdma_wanted=True,
                    rdma_versions={"rdma_core": "", "perftest": ""}) == [
        "nccl_rdma is auto and the node has 2 RDMA device(s), but the role knows no RDMA package versions for Ubuntu 24; "
        "set nccl_rdma_version and nccl_rdma_perftest_version to the versions its archive carries (apt-cache policy "
        "rdma-core perftest), or nccl_rdma: false"]


def test_rdma_wanted_with_dnf_says_to_install_it_yourself():
    assert problems(rdma="true", rdma_wanted=True, package_manager="dnf", distribution="Rocky", major_version="9") == [
        "nccl_rdma is true, but the role installs the RDMA userspace with apt only (Debian, Ubuntu), not on Rocky 9; "
        "install rdma-core, libibverbs-utils, infiniband-diags and perftest yourself and set nccl_rdma: false"]


def test_a_gpudirect_problem_is_one_line_of_the_list_without_the_host():
    settings = dict(DEBIAN13, gpudirect="true", rdma_wanted=True)
    assert preflight_problems(settings, {"nvcc_exists": True, "hca_count": 2}) == [
        "nccl_gpudirect is true but the nvidia_driver role planned no driver for this node (no "
        "gpu_cluster_driver_plan_file), and GPUDirect RDMA goes through the driver; run the nvidia_driver role first "
        "(site.yml does), or set nccl_gpudirect: auto"]
    assert preflight_problems(dict(settings, driver_flavor="open"), {"nvcc_exists": True, "hca_count": 2}) == []
