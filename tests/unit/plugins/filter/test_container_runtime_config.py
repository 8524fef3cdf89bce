# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_container_toolkit role's merges into daemon.json and containerd's TOML files.

fixtures/debian12-containerd-config.toml is /etc/containerd/config.toml as Debian 12 and 13 ship it;
fixtures/microk8s-containerd-template.toml stands in for MicroK8s' containerd template (placeholders included).
"""

import pathlib
import tomllib

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.filter.container_runtime_config import (
    FilterModule, containerd_imports, containerd_nvidia_dropin, containerd_runtime_in_place, docker_daemon_config, toml_dumps)

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
DEBIAN = (FIXTURES / "debian12-containerd-config.toml").read_text()
MICROK8S = (FIXTURES / "microk8s-containerd-template.toml").read_text()
CRI = "io.containerd.grpc.v1.cri"
RUNTIME = "/usr/bin/nvidia-container-runtime"
DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"
USER_CONFIG = """# mine
version = 2
root = "/srv/containerd"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
    endpoint = ["https://mirror.example"]
"""


def test_filters_are_registered():
    assert set(FilterModule().filters()) == {
        "docker_daemon_config", "containerd_nvidia_dropin", "containerd_imports", "containerd_runtime_in_place"}


@pytest.mark.parametrize("current, default, expected", [
    (None, False, {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}),
    ({"log-level": "warn", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}, True,
     {"log-level": "warn", "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                        "nvidia": {"path": "nvidia-container-runtime", "args": []}},
      "default-runtime": "nvidia"}),
    # the role's own default is taken back; the user's is not touched
    ({"default-runtime": "nvidia"}, False, {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}),
    ({"default-runtime": "crun"}, False,
     {"default-runtime": "crun", "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}),
    # the user's runtime args stay
    ({"runtimes": {"nvidia": {"path": "/old/path", "args": ["--debug"]}}}, False,
     {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": ["--debug"]}}}),
])
def test_docker_daemon_config(current, default, expected):
    merged = docker_daemon_config(current, "nvidia-container-runtime", default)
    assert merged == expected
    assert docker_daemon_config(merged, "nvidia-container-runtime", default) == merged  # a second run changes nothing


def test_docker_daemon_config_leaves_the_input_alone():
    current = {"runtimes": {}}
    docker_daemon_config(current)
    assert current == {"runtimes": {}}


@pytest.mark.parametrize("current", [[], "text", {"runtimes": ["nvidia"]}])
def test_docker_daemon_config_refuses_other_shapes(current):
    with pytest.raises(AnsibleFilterError, match="fix the file"):
        docker_daemon_config(current)


@pytest.mark.parametrize("version", ["1.6.20", "1.7.24"])
def test_dropin_for_1x_carries_the_whole_cri_table(version):
    dropin = tomllib.loads(containerd_nvidia_dropin(USER_CONFIG, version, RUNTIME))
    cri = dropin["plugins"][CRI]
    user = tomllib.loads(USER_CONFIG)["plugins"][CRI]
    assert dropin["version"] == 2
    assert cri["sandbox_image"] == user["sandbox_image"]
    assert cri["registry"] == user["registry"]
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": True}
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True, "BinaryName": RUNTIME}}
    assert "default_runtime_name" not in cri["containerd"]
    assert "root" not in dropin  # only the CRI table moves


def test_dropin_for_1x_keeps_a_default_runc_when_the_main_config_has_none():
    cri = tomllib.loads(containerd_nvidia_dropin(DEBIAN, "1.6.20", RUNTIME, True))["plugins"][CRI]
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}
    assert cri["containerd"]["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v2"}
    assert cri["containerd"]["default_runtime_name"] == "nvidia"


def test_dropin_for_2x_holds_the_runtime_alone():
    main = 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
    dropin = tomllib.loads(containerd_nvidia_dropin(main, "2.0.5", RUNTIME, True))
    assert dropin == {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": {"containerd": {
        "default_runtime_name": "nvidia",
        "runtimes": {"nvidia": {"runtime_type": "io.containerd.runc.v2",
                                "options": {"SystemdCgroup": True, "BinaryName": RUNTIME}}}}}}}


@pytest.mark.parametrize("main, version, match", [
    ('root = "/var/lib/containerd"\n', "1.6.20", "version 1 config"),
    ("version = 2\n", "2.0.5", "migrate it"),
    ("version = 7\n", "1.7.24", "not a containerd config version"),
    ("version = 2\n[plugins\n", "1.7.24", "not valid TOML"),
])
def test_dropin_refuses_what_it_cannot_merge(main, version, match):
    with pytest.raises(AnsibleFilterError, match=match):
        containerd_nvidia_dropin(main, version, RUNTIME)


def test_imports_added_after_the_version_keeping_every_line():
    result = containerd_imports(USER_CONFIG, DROPIN)
    assert result.splitlines()[:3] == ["# mine", "version = 2", 'imports = ["%s"]' % DROPIN]
    assert result.splitlines()[3:] == USER_CONFIG.splitlines()[2:]
    assert containerd_imports(result, DROPIN) == result


@pytest.mark.parametrize("main, expected", [
    ("", 'version = 2\nimports = ["%s"]\n' % DROPIN),
    ('version = 2\nimports = ["/etc/containerd/other.toml"]\n',
     'version = 2\nimports = ["/etc/containerd/other.toml", "%s"]\n' % DROPIN),
    ('version = 2\nimports = [\n  "/a.toml",\n  "/b.toml",\n]\n[plugins]\n',
     'version = 2\nimports = ["/a.toml", "/b.toml", "%s"]\n[plugins]\n' % DROPIN),
])
def test_imports_extends_what_is_there(main, expected):
    assert containerd_imports(main, DROPIN) == expected


def test_imports_leaves_a_covering_glob_alone():
    main = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    assert containerd_imports(main, DROPIN) is main


def test_imports_for_2x_start_a_version_3_config():
    assert containerd_imports("", DROPIN, "2.1.0").startswith("version = 3\n")


def test_runtime_in_place_in_microk8s_template():
    result = containerd_runtime_in_place(MICROK8S, RUNTIME, True)
    engine = tomllib.loads(result)["plugins"][CRI]["containerd"]
    assert engine["runtimes"]["nvidia"] == {"runtime_type": "${RUNTIME_TYPE}", "options": {"BinaryName": RUNTIME}}
    assert engine["default_runtime_name"] == "nvidia"
    assert engine["snapshotter"] == "${SNAPSHOTTER}"
    # Every line but the default runtime's is kept, comments included.
    kept = [line for line in MICROK8S.splitlines() if line.strip() and "default_runtime_name" not in line]
    assert [line for line in result.splitlines() if line in kept] == kept
    assert containerd_runtime_in_place(result, RUNTIME, True) is result


def test_runtime_in_place_without_default_leaves_the_default_alone():
    result = containerd_runtime_in_place(MICROK8S, RUNTIME, False)
    assert tomllib.loads(result)["plugins"][CRI]["containerd"]["default_runtime_name"] == "${RUNTIME}"


def test_runtime_in_place_replaces_a_stale_runtime():
    stale = MICROK8S + '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "old"\n'
    result = containerd_runtime_in_place(stale, RUNTIME)
    assert tomllib.loads(result)["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]["runtime_type"] == "${RUNTIME_TYPE}"
    assert result.count("containerd.runtimes.nvidia]") == 1


@pytest.mark.parametrize("data", [
    {"a": 1, "b": {"c": "x y", "d": [1, 2], "e": {"f": True, "g": 1.5}}, "h": {}},
    {"plugins": {"io.containerd.grpc.v1.cri": {"registry": {"mirrors": {"docker.io": {"endpoint": ["https://m"]}}}}}},
    {"s": 'quote " and \\ and \u00e9', "t": [{"k": "v"}]},
])
def test_toml_dumps_round_trips(data):
    assert tomllib.loads(toml_dumps(data)) == data
