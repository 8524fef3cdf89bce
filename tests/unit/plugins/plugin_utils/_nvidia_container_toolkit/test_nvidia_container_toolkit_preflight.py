# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each problem the nvidia_container_toolkit role's preflight reports, word for word, and the settings that do not
raise it."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_container_toolkit.preflight import (
    SETTINGS, preflight_problems)

PACKAGES = ("libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit-base", "nvidia-container-toolkit")
NVIDIA_KEY = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
DOCKER_KEY = "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"
DEBIAN13 = {
    "os_family": "Debian", "distribution": "Debian", "major_version": "13", "releases": ["12", "13"], "version": "1.17.8",
    "repo_key_fingerprint": NVIDIA_KEY, "engine_source": "distribution", "docker_repo_key_fingerprint": DOCKER_KEY,
    "source": "repository", "packages": list(PACKAGES), "local_packages": [],
    "run": {"image": "", "path": "/usr/local/bin/run", "engine": "docker", "readonly_dirs": ["/srv/datasets"],
            "docker_install": False, "cdi": True, "engines_found": []},
}
RUN = dict(DEBIAN13["run"], image="nvcr.io/nvidia/pytorch:25.01-py3")


def debs(version="1.17.8", names=PACKAGES, directory="/srv/debs/"):
    return ["%s%s_%s_amd64.deb" % (directory, name, version) for name in names]


def problems(**settings):
    return preflight_problems(dict(DEBIAN13, **settings))


def test_the_keys_are_those_the_docs_name():
    assert set(DEBIAN13) == set(SETTINGS)


@pytest.mark.parametrize("settings", [
    pytest.param({}, id="debian13-repository"),
    pytest.param({"distribution": "Ubuntu", "major_version": "22", "releases": ["22", "24"]}, id="ubuntu22"),
    pytest.param({"repo_key_fingerprint": "c95b 321b 61e8 8c18 09c4 f759 ddca e044 f796 ecb0"}, id="key-spaced-lower"),
    pytest.param({"engine_source": "docker"}, id="docker-engines"),
    pytest.param({"docker_repo_key_fingerprint": "none"}, id="docker-key-unused-without-docker-engines"),
    pytest.param({"source": "local", "local_packages": debs()}, id="local-debs"),
    pytest.param({"source": "local", "local_packages": debs("1.17.8-1") + debs("1.17.8~rc1", PACKAGES[:1], "")},
                 id="local-debs-with-revisions"),
    pytest.param({"source": "local", "local_packages": debs(names=PACKAGES[::-1] + PACKAGES[:1])}, id="any-order-twice"),
])
def test_good_settings_are_no_problem(settings):
    assert problems(**settings) == []


@pytest.mark.parametrize("settings, platform", [
    ({"major_version": "11"}, "Debian 11"),
    ({"distribution": "Ubuntu", "major_version": "20", "releases": ["22", "24"]}, "Ubuntu 20"),
    ({"os_family": "RedHat", "distribution": "Rocky", "major_version": "9", "releases": []}, "Rocky 9"),
    ({"os_family": "RedHat", "major_version": "13"}, "Debian 13"),
    ({"releases": None}, "Debian 13"),
])
def test_an_unsupported_platform(settings, platform):
    assert problems(**settings) == [
        "%s is not supported; supported: Debian 12 and 13, Ubuntu 22.04 and 24.04" % platform]


def test_no_version():
    assert problems(version="") == [
        "nvidia_container_toolkit_version is empty; set the toolkit version to install (for example 1.17.8)"]


@pytest.mark.parametrize("fingerprint", ["", "ABC", NVIDIA_KEY[:-1], NVIDIA_KEY + "0", "G" * 40, "0x" + NVIDIA_KEY[2:]])
def test_a_repository_key_fingerprint_that_is_not_one(fingerprint):
    assert problems(repo_key_fingerprint=fingerprint) == [
        "nvidia_container_toolkit_repo_key_fingerprint=%s is not a 40-digit hex fingerprint; copy it from gpg --show-keys "
        "of the repository key" % fingerprint]


@pytest.mark.parametrize("fingerprint", ["", "xyz", DOCKER_KEY[:-2]])
def test_docker_s_key_fingerprint_counts_only_for_docker_s_engines(fingerprint):
    assert problems(engine_source="docker", docker_repo_key_fingerprint=fingerprint) == [
        "nvidia_container_toolkit_docker_repo_key_fingerprint=%s is not a 40-digit hex fingerprint" % fingerprint]
    assert problems(docker_repo_key_fingerprint=fingerprint) == []


@pytest.mark.parametrize("files, lacking", [
    ([], "libnvidia-container1, libnvidia-container-tools, nvidia-container-toolkit-base, nvidia-container-toolkit"),
    (debs(names=PACKAGES[1:3]), "libnvidia-container1, nvidia-container-toolkit"),
    (debs(names=PACKAGES[:3]) + ["/srv/nvidia-container-toolkit.deb"], "nvidia-container-toolkit"),
])
def test_local_debs_lacking_a_package_in_the_order_they_install(files, lacking):
    lines = problems(source="local", local_packages=files)
    assert lines[0] == (
        "nvidia_container_toolkit_source is local but nvidia_container_toolkit_local_packages lacks %s; list a .deb file "
        "(<package>_<version>_<arch>.deb) for each" % lacking)


@pytest.mark.parametrize("files, named", [
    (debs("1.17.80"), ", ".join(name.rsplit("/")[-1] for name in debs("1.17.80"))),
    (debs() + debs("1.18.0", PACKAGES[:1]), "libnvidia-container1_1.18.0_amd64.deb"),
    (debs() + ["/srv/nvidia-container-toolkit.deb"], "nvidia-container-toolkit.deb"),
    (debs() + ["/srv/libnvidia-container1-1.17.8.deb"], "libnvidia-container1-1.17.8.deb"),
])
def test_local_debs_of_another_version(files, named):
    assert problems(source="local", local_packages=files) == [
        "%s do(es) not carry nvidia_container_toolkit_version 1.17.8; list the files of that version, or change the version"
        % named]


def test_the_version_is_a_literal_in_the_file_name():
    assert problems(source="local", version="1.17", local_packages=debs("1x17")) == [
        ", ".join("%s_1x17_amd64.deb" % name for name in PACKAGES)
        + " do(es) not carry nvidia_container_toolkit_version 1.17; list the files of that version, or change the version"]


@pytest.mark.parametrize("source", ["repository", "mirror"])
def test_local_debs_without_the_local_source(source):
    assert problems(source=source, local_packages=debs("9.9")) == [
        "nvidia_container_toolkit_local_packages is set but nvidia_container_toolkit_source is %s; set the source to local to "
        "install them" % source]


def test_every_problem_at_once_in_the_order_preflight_lists_them():
    lines = problems(major_version="11", version="", repo_key_fingerprint="x", engine_source="docker",
                     docker_repo_key_fingerprint="y", source="local", local_packages=debs("1.0", PACKAGES[:1]))
    assert [line.split(" ")[0] for line in lines] == [
        "Debian", "nvidia_container_toolkit_version", "nvidia_container_toolkit_repo_key_fingerprint=x",
        "nvidia_container_toolkit_docker_repo_key_fingerprint=y", "nvidia_container_toolkit_source",
        "libnvidia-container1_1.0_amd64.deb"]


def test_an_unknown_key_is_refused_by_name():
    with pytest.raises(ValueError, match="settings has unknown key.s. fingerprint; known: os_family"):
        problems(fingerprint="x")


@pytest.mark.parametrize("run", [
    pytest.param({"image": "", "engine": "podman", "path": "relative"}, id="no-image-no-command"),
    pytest.param({"docker_install": True}, id="docker-installed-by-the-role"),
    pytest.param({"engines_found": ["docker"]}, id="docker-there"),
    pytest.param({"engine": "podman", "engines_found": ["podman"]}, id="podman-there"),
])
def test_good_run_settings(run):
    assert problems(run=dict(RUN, **run)) == []


@pytest.mark.parametrize("run, wanted", [
    ({"image": "nvcr.io/x y", "docker_install": True}, "nvidia_container_toolkit_run_image='nvcr.io/x y' holds white space"),
    ({"path": "bin/run", "docker_install": True}, "nvidia_container_toolkit_run_path='bin/run' is not an absolute path"),
    ({"readonly_dirs": ["data", "/a:b", "/ok"], "docker_install": True},
     "nvidia_container_toolkit_run_readonly_dirs holds data, /a:b: each must be an absolute path"),
    ({}, "Docker is not installed and nvidia_container_toolkit_docker_install is false; set it to true"),
    ({"engine": "podman"}, "podman is not installed; install it from the distribution"),
    ({"engine": "podman", "engines_found": ["podman"], "cdi": False}, "but nvidia_container_toolkit_cdi is false"),
])
def test_each_run_problem_names_the_variable_and_the_fix(run, wanted):
    found = problems(run=dict(RUN, **run))
    assert len(found) == 1 and wanted in found[0], found
