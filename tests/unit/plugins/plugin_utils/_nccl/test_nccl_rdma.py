# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl role's check that apt can install the RDMA versions it pins, on `apt-cache madison` output as Debian 13's
apt prints it."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.rdma import availability_problem, madison_versions

MADISON = [
    " rdma-core |     56.1-1 | http://deb.debian.org/debian trixie/main amd64 Packages",
    "  perftest | 25.01.0+0.80-1 | http://deb.debian.org/debian trixie/main amd64 Packages",
    " rdma-core |     56.1-1 | http://deb.debian.org/debian trixie/main Sources",
]
PINS = {"rdma_core": "56.1-1", "perftest": "25.01.0+0.80-1"}


def test_madison_lines_give_each_packages_versions_once():
    assert madison_versions(MADISON + ["", "N: Unable to locate package x"]) == {
        "rdma-core": ["56.1-1"], "perftest": ["25.01.0+0.80-1"]}


def test_pins_the_sources_carry_are_no_problem():
    assert availability_problem("gpu01", MADISON, PINS) == ""


def test_a_pin_the_sources_lack_names_host_versions_and_variables():
    assert availability_problem("gpu01", MADISON, dict(PINS, rdma_core="44.0-2")) == (
        "gpu01: the apt sources have no rdma-core 44.0-2 (available: rdma-core 56.1-1; perftest 25.01.0+0.80-1); set "
        "nccl_rdma_version and nccl_rdma_perftest_version to versions the sources carry, or nccl_rdma: false")


def test_sources_without_the_packages_say_none():
    assert availability_problem("gpu01", [], PINS).startswith(
        "gpu01: the apt sources have no rdma-core 56.1-1 or perftest 25.01.0+0.80-1 (available: none); ")
