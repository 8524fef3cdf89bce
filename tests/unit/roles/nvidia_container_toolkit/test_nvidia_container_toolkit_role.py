# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_container_toolkit role's platform data, rendered by Ansible's own templating.

Molecule runs Debian 12/13 against a fixture of NVIDIA's repository with the distribution's engines; what it cannot
reach (Docker's repository, Ubuntu, other architectures) is checked here: the repository definitions the deb822 task
receives, the package lists the install tasks pass to apt and what preflight hands its problem filter.
"""

from __future__ import annotations

import pathlib

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_container_toolkit import preflight as nvidia_container_toolkit_preflight
from role_vars import role_vars, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "nvidia_container_toolkit"

PLATFORMS = {
    # id: (distribution, major, os_family, codename)
    "debian12": ("Debian", "12", "Debian", "bookworm"),
    "debian13": ("Debian", "13", "Debian", "trixie"),
    "ubuntu2404": ("Ubuntu", "24", "Debian", "noble"),
}


def role_templar(platform, architecture="x86_64", resolved=None, **overrides):
    distribution, major, os_family, codename = PLATFORMS[platform]
    variables = role_vars(ROLE, distribution, major, os_family)
    variables.update(trust(overrides))
    variables.update({
        "ansible_facts": {"distribution": distribution, "distribution_major_version": major, "os_family": os_family,
                          "distribution_release": codename, "architecture": architecture},
        "ansible_check_mode": False,
        "inventory_hostname": "gpu01",
    })
    if resolved is not None:
        variables["__nvidia_container_toolkit_resolved"] = resolved
    return Templar(loader=DataLoader(), variables=variables)


def resolve(templar, name):
    return templar.template(trust("{{ %s }}" % name))


@pytest.mark.parametrize("mirror, architecture, uri, key_url", [
    ("", "x86_64", "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
     "https://nvidia.github.io/libnvidia-container/gpgkey"),
    ("http://mirror.internal/nvidia/", "aarch64", "http://mirror.internal/nvidia/stable/deb/arm64",
     "http://mirror.internal/nvidia/gpgkey"),
])
def test_nvidia_repository_follows_the_mirror_and_the_architecture(mirror, architecture, uri, key_url):
    templar = role_templar("debian12", architecture, nvidia_container_toolkit_repo_mirror=mirror)
    repo = resolve(templar, "__nvidia_container_toolkit_repo")
    assert repo["uris"] == [uri]
    assert repo["suites"] == ["/"]
    assert repo["key_url"] == key_url
    assert repo["key_fingerprint"] == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    assert repo["signed_by"] == "/etc/apt/keyrings/nvidia-container-toolkit.asc"


def test_fingerprint_with_spaces_and_lower_case_is_normalised():
    templar = role_templar("debian12", nvidia_container_toolkit_repo_key_fingerprint="c95b 321b 61e8 8c18 09c4 f759 ddca e044 f796 ecb0")
    assert resolve(templar, "__nvidia_container_toolkit_repo.key_fingerprint") == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


@pytest.mark.parametrize("platform, mirror, uri, suite", [
    ("debian12", "", "https://download.docker.com/linux/debian", "bookworm"),
    ("debian13", "", "https://download.docker.com/linux/debian", "trixie"),
    ("ubuntu2404", "https://mirror.internal/docker/", "https://mirror.internal/docker", "noble"),
])
def test_docker_repository(platform, mirror, uri, suite):
    repo = resolve(role_templar(platform, nvidia_container_toolkit_docker_repo_mirror=mirror), "__nvidia_container_toolkit_docker_repo")
    assert repo["uris"] == [uri]
    assert repo["suites"] == [suite]
    assert repo["components"] == ["stable"]
    assert repo["key_url"] == uri + "/gpg"
    assert repo["key_fingerprint"] == "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"


@pytest.mark.parametrize("platform, source, docker_version, containerd_version, resolved, expected", [
    ("debian12", "distribution", "20.10", "1.6",
     {"docker.io": "20.10.24+dfsg1-1+deb12u1+b6", "containerd": "1.6.20~ds1-1+deb12u3"},
     ["docker.io=20.10.24+dfsg1-1+deb12u1+b6", "containerd=1.6.20~ds1-1+deb12u3"]),
    ("debian13", "distribution", "26.1", "",
     {"docker.io": "26.1.5+dfsg1-9+deb13u1"},
     ["docker.io=26.1.5+dfsg1-9+deb13u1", "docker-cli=26.1.5+dfsg1-9+deb13u1", "containerd"]),
    ("ubuntu2404", "distribution", "", "", {}, ["docker.io", "containerd"]),
    ("debian12", "docker", "5:27.3.1", "1.7",
     {"docker-ce": "5:27.3.1-1~debian.12~bookworm", "containerd.io": "1.7.22-1"},
     ["docker-ce=5:27.3.1-1~debian.12~bookworm", "docker-ce-cli=5:27.3.1-1~debian.12~bookworm", "containerd.io=1.7.22-1"]),
])
def test_engine_packages_carry_their_resolved_versions(platform, source, docker_version, containerd_version, resolved, expected):
    templar = role_templar(platform, resolved=resolved, nvidia_container_toolkit_engine_source=source,
                           nvidia_container_toolkit_docker_install=True, nvidia_container_toolkit_containerd_install=True,
                           nvidia_container_toolkit_docker_version=docker_version,
                           nvidia_container_toolkit_containerd_version=containerd_version)
    assert resolve(templar, "__nvidia_container_toolkit_engine_install") == expected


def test_only_the_engines_asked_for_are_installed():
    templar = role_templar("debian12", nvidia_container_toolkit_containerd_install=True)
    assert resolve(templar, "__nvidia_container_toolkit_engines_wanted") == ["containerd"]
    assert resolve(templar, "__nvidia_container_toolkit_engine_install") == ["containerd"]


def test_defaults_install_no_engine():
    assert resolve(role_templar("debian13"), "__nvidia_container_toolkit_engines_wanted") == []


def reach_check_sources(templar):
    """The sources preflight's reachability check asks, rendered from the task as the role has it."""
    import yaml
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    task = [t for t in tasks if "dlinfra.gpu_cluster.source_reachable" in t][0]
    variables = dict(templar.available_variables, **trust(task["vars"]))
    return Templar(loader=DataLoader(), variables=variables).template(trust(task["dlinfra.gpu_cluster.source_reachable"]["sources"]))


@pytest.mark.parametrize("overrides, expected", [
    ({}, [("https://nvidia.github.io/libnvidia-container/gpgkey", "direct"),
          ("https://nvidia.github.io/libnvidia-container/stable/deb/amd64/InRelease", "apt")]),
    ({"nvidia_container_toolkit_repo_mirror": "http://store/nv", "nvidia_container_toolkit_engine_source": "docker",
      "nvidia_container_toolkit_docker_repo_mirror": "http://store/docker/debian"},
     [("http://store/nv/gpgkey", "direct"), ("http://store/nv/stable/deb/amd64/InRelease", "apt"),
      ("http://store/docker/debian/gpg", "direct"), ("http://store/docker/debian/dists/trixie/InRelease", "apt")]),
    ({"nvidia_container_toolkit_source": "local"}, []),
])
def test_the_reachability_check_asks_what_the_role_will_download(overrides, expected):
    sources = reach_check_sources(role_templar("debian13", **overrides))
    assert [(s["url"], s.get("route", "direct")) for s in sources] == expected


TOOLKIT_PACKAGES = ("libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit-base",
                    "nvidia-container-toolkit")


def preflight_problems(templar):
    """The problem list of preflight's fail task: its settings gathered by its own task vars, handed to the Python its
    filter (nvidia_container_toolkit_problems) wraps."""
    import yaml
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    task_vars = next(task["vars"] for task in tasks if "ansible.builtin.fail" in task)
    assert task_vars["__nvidia_container_toolkit_problems"] == (
        "{{ __nvidia_container_toolkit_settings | dlinfra.gpu_cluster.nvidia_container_toolkit_problems }}")
    variables = dict(templar.available_variables, **trust(task_vars))
    settings = Templar(loader=DataLoader(), variables=variables).template(trust("{{ __nvidia_container_toolkit_settings }}"))
    return nvidia_container_toolkit_preflight.preflight_problems(settings)


@pytest.mark.parametrize("platform, overrides", [
    ("debian12", {}),
    ("debian13", {"nvidia_container_toolkit_engine_source": "docker"}),
    ("ubuntu2404", {"nvidia_container_toolkit_repo_key_fingerprint": "c95b 321b 61e8 8c18 09c4 f759 ddca e044 f796 ecb0"}),
    ("debian13", {"nvidia_container_toolkit_source": "local", "nvidia_container_toolkit_local_packages": [
        "/srv/debs/%s_1.17.8-1_amd64.deb" % name for name in TOOLKIT_PACKAGES]}),
])
def test_good_settings_pass_preflight(platform, overrides):
    assert preflight_problems(role_templar(platform, **overrides)) == []


@pytest.mark.parametrize("platform, overrides, expected", [
    ("debian13", {"nvidia_container_toolkit_version": ""}, "nvidia_container_toolkit_version is empty;"),
    ("debian12", {"nvidia_container_toolkit_repo_key_fingerprint": "F796ECB0"},
     "nvidia_container_toolkit_repo_key_fingerprint=F796ECB0 is not a 40-digit hex fingerprint;"),
    ("ubuntu2404", {"nvidia_container_toolkit_engine_source": "docker",
                    "nvidia_container_toolkit_docker_repo_key_fingerprint": "0EBFCD88"},
     "nvidia_container_toolkit_docker_repo_key_fingerprint=0EBFCD88 is not a 40-digit hex fingerprint"),
    ("debian13", {"nvidia_container_toolkit_source": "local"},
     "nvidia_container_toolkit_source is local but nvidia_container_toolkit_local_packages lacks libnvidia-container1, "
     "libnvidia-container-tools, nvidia-container-toolkit-base, nvidia-container-toolkit;"),
    ("debian13", {"nvidia_container_toolkit_local_packages": ["/srv/nvidia-container-toolkit_1.17.8_amd64.deb"]},
     "nvidia_container_toolkit_local_packages is set but nvidia_container_toolkit_source is repository;"),
])
def test_each_problem_names_the_variable_and_the_fix(platform, overrides, expected):
    problems = preflight_problems(role_templar(platform, **overrides))
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems[0]


def test_an_unsupported_release_is_named():
    templar = role_templar("debian12")
    templar.available_variables = dict(templar.available_variables, ansible_facts=dict(
        templar.available_variables["ansible_facts"], distribution_major_version="11"))
    assert preflight_problems(templar) == ["Debian 11 is not supported; supported: Debian 12 and 13, Ubuntu 22.04 and 24.04"]
