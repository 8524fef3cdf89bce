# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems the nvidia_container_toolkit role's preflight reports: pure Python.

``preflight_problems`` turns the role's settings (its variables, the platform's data and the host's facts) into one
line per problem; the role fails once, listing them all. Patterns are matched against values as text, as Ansible's
tests match them.
"""

import os.path
import re
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys, joined

SETTINGS = ("os_family", "distribution", "major_version", "releases", "version", "repo_key_fingerprint",
            "engine_source", "docker_repo_key_fingerprint", "source", "packages", "local_packages", "run")

_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")


def _fingerprint_ok(given):
    """As the repository definitions in vars/main.yml carry it: without spaces, in upper case."""
    return bool(_FINGERPRINT.match(str(given).replace(" ", "").upper()))


def _unique(items):
    return list(dict.fromkeys(items))


def preflight_problems(settings):
    """One line per problem in ``settings`` (keys SETTINGS); empty when the role can go on.

    settings: os_family, distribution and major_version (the host's), releases (the platform's releases the role
    supports), version (nvidia_container_toolkit_version), repo_key_fingerprint and docker_repo_key_fingerprint (as
    set: spaces and case do not count), engine_source, source (nvidia_container_toolkit_*), packages (the toolkit's
    packages) and local_packages (nvidia_container_toolkit_local_packages, paths of .deb files).
    """
    check_keys("settings", settings, SETTINGS)
    version = settings["version"]
    source = settings["source"]
    local_packages = settings.get("local_packages") or []
    local_files = [os.path.basename(path) for path in local_packages]
    local_names = [re.sub(r"_.*$", "", name) for name in local_files]
    version_pattern = re.compile(r"^[^_]+_" + re.escape(str(version)) + r"([-_.~+]|$)")
    problems = []

    if not (settings["os_family"] == "Debian" and settings["major_version"] in (settings.get("releases") or [])):
        problems.append("%s %s is not supported; supported: Debian 12 and 13, Ubuntu 22.04 and 24.04"
                        % (settings["distribution"], settings["major_version"]))
    if len(version) == 0:
        problems.append("nvidia_container_toolkit_version is empty; set the toolkit version to install (for example "
                        "1.17.8)")
    if not _fingerprint_ok(settings["repo_key_fingerprint"]):
        problems.append("nvidia_container_toolkit_repo_key_fingerprint=%s is not a 40-digit hex fingerprint; copy it from "
                        "gpg --show-keys of the repository key" % settings["repo_key_fingerprint"])
    if settings["engine_source"] == "docker" and not _fingerprint_ok(settings["docker_repo_key_fingerprint"]):
        problems.append("nvidia_container_toolkit_docker_repo_key_fingerprint=%s is not a 40-digit hex fingerprint"
                        % settings["docker_repo_key_fingerprint"])
    lacking = _unique(package for package in settings["packages"] if package not in local_names)
    if source == "local" and lacking:
        problems.append("nvidia_container_toolkit_source is local but nvidia_container_toolkit_local_packages lacks %s; "
                        "list a .deb file (<package>_<version>_<arch>.deb) for each" % joined(lacking))
    bad_versions = [name for name in local_files if not version_pattern.match(name)]
    if source == "local" and bad_versions:
        problems.append("%s do(es) not carry nvidia_container_toolkit_version %s; list the files of that version, or "
                        "change the version" % (joined(bad_versions), version))
    if local_packages and source != "local":
        problems.append("nvidia_container_toolkit_local_packages is set but nvidia_container_toolkit_source is %s; set "
                        "the source to local to install them" % source)
    return problems + run_problems(settings.get("run") or {})


def run_problems(run):
    """The run command's settings: image, path, engine, readonly_dirs, docker_install, cdi, engines_found (the
    engines' binaries found on the node). Nothing is checked where no image is set: no command is installed."""
    if not run.get("image"):
        return []
    problems = []
    if re.search(r"\s", str(run["image"])):
        problems.append("nvidia_container_toolkit_run_image=%r holds white space; give one image reference, for example "
                        "nvcr.io/nvidia/pytorch:25.01-py3" % run["image"])
    if not str(run.get("path", "")).startswith("/"):
        problems.append("nvidia_container_toolkit_run_path=%r is not an absolute path; for example /usr/local/bin/run"
                        % run.get("path"))
    bad = [str(d) for d in run.get("readonly_dirs") or [] if not str(d).startswith("/") or re.search(r"[,:]", str(d))]
    if bad:
        problems.append("nvidia_container_toolkit_run_readonly_dirs holds %s: each must be an absolute path without ',' "
                        "or ':' (the engines' mount syntax)" % joined(bad))
    engine = run.get("engine")
    if engine == "docker" and not run.get("docker_install") and "docker" not in (run.get("engines_found") or []):
        problems.append("nvidia_container_toolkit_run_engine is docker, but Docker is not installed and "
                        "nvidia_container_toolkit_docker_install is false; set it to true, or run_engine: podman")
    if engine == "podman":
        if "podman" not in (run.get("engines_found") or []):
            problems.append("nvidia_container_toolkit_run_engine is podman, but podman is not installed; install it from "
                            "the distribution (apt install podman) or use run_engine: docker")
        if not run.get("cdi"):
            problems.append("nvidia_container_toolkit_run_engine is podman, which reaches the GPUs through the CDI spec, "
                            "but nvidia_container_toolkit_cdi is false; set it to true")
    return problems
