# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/bundle.yml (the role bundle) refuses a request it cannot carry out before it builds anything:
bundle_snaps on a host without a working snap command, malformed entries, a variable of the wrong type; and builds an
empty cache's bundle twice to the same manifest. Real ansible-playbook runs on localhost (connection local)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PLAYBOOK = pathlib.Path(sys.executable).with_name("ansible-playbook")


def run_bundle(tmp_path, *extra):
    cache = tmp_path / "acng"
    cache.mkdir(exist_ok=True)
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: %s\n" % sys.executable)
    # The collection from this clone (the play runs the role dlinfra.gpu_cluster.bundle), as ansible.cfg finds it.
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PWD=str(tmp_path),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"))
    if shutil.which("snap"):
        # This host has snap: stand a failing one in front of it, as on a bundle host whose snap does not work.
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "snap").write_text("#!/bin/sh\necho 'error: cannot communicate with server' >&2\nexit 1\n")
        (fake / "snap").chmod(0o755)
        env["PATH"] = "%s:%s" % (fake, env["PATH"])
    result = subprocess.run(
        [str(PLAYBOOK), str(ROOT / "playbooks" / "bundle.yml"), "-i", str(tmp_path / "hosts.yml"),
         "-e", "bundle_host=localhost", "-e", "bundle_dir=%s" % (tmp_path / "bundle"), "-e", "bundle_cache_dir=%s" % cache,
         "-e", "bundle_manifest=%s" % (tmp_path / "manifest.sha256"), *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def test_snaps_without_a_snap_command_stop_before_anything_is_built(tmp_path):
    code, output = run_bundle(tmp_path, "-e", '{"bundle_snaps": ["microk8s"]}')
    assert code != 0, output
    assert "bundle on localhost: bundle_snaps needs `snap download` on bundle_host" in output
    assert "Install snapd there" in output
    assert not (tmp_path / "bundle.new").exists() and not (tmp_path / "bundle").exists()
    assert not (tmp_path / "manifest.sha256").exists()


@pytest.mark.parametrize("snaps", ['[["microk8s"]]', '[{"channel": "1.32/stable"}]', '[3]'])
def test_malformed_snaps_are_refused_naming_the_variable(tmp_path, snaps):
    code, output = run_bundle(tmp_path, "-e", '{"bundle_snaps": %s}' % snaps)
    assert code != 0, output
    assert "bundle_snaps a list of snap names or of {name, channel}" in output
    assert not (tmp_path / "bundle.new").exists()


# Each of these got past the old play's variable checks (a mapping iterates as its keys) and failed in the middle of
# the build; the role's argument specs now refuse them first.
@pytest.mark.parametrize("variable, value", [("bundle_files", '{"url": "http://example.org/key.gpg"}'),
                                             ("bundle_snaps", '{"name": "microk8s"}')])
def test_a_wrong_type_stops_before_anything_is_built(tmp_path, variable, value):
    code, output = run_bundle(tmp_path, "-e", '{"%s": %s}' % (variable, value))
    assert code != 0, output
    assert "Validation of arguments failed: argument '%s' is of type dict" % variable in output
    assert not (tmp_path / "bundle.new").exists() and not (tmp_path / "bundle").exists()
    assert not (tmp_path / "manifest.sha256").exists()


def test_a_cache_gives_a_bundle_laid_out_as_its_urls_and_the_same_manifest_twice(tmp_path):
    cache = tmp_path / "acng"
    (cache / "vendor.example" / "repo").mkdir(parents=True)
    (cache / "vendor.example" / "repo" / "gpgkey").write_text("key\n")
    (cache / "vendor.example" / "repo" / "gpgkey.head").write_text("acng's record\n")
    (cache / "_xstore").mkdir()
    code, output = run_bundle(tmp_path)
    assert code == 0, output
    manifest = (tmp_path / "manifest.sha256").read_text()
    assert manifest.endswith("  vendor.example/repo/gpgkey\n") and len(manifest.splitlines()) == 1
    assert (tmp_path / "bundle" / "MANIFEST.sha256").read_text() == manifest
    assert "localhost:%s: 1 files" % (tmp_path / "bundle") in output
    assert "localhost : ok=" in output and " changed=0 " not in output.rsplit("PLAY RECAP", maxsplit=1)[-1]
    code, output = run_bundle(tmp_path)
    assert code == 0 and "the same as the bundle it replaced" in output, output
    assert " changed=0 " in output.rsplit("PLAY RECAP", maxsplit=1)[-1]


@pytest.mark.parametrize("lock, expected", [
    (None, "bundle_pip_requirements names {lock}, which is not a file on the controller holding hash-pinned"),
    ("jupyterlab==4.6.6\n", "bundle_pip_requirements names {lock}, which is not a file on the controller holding"),
    ("ok==1.0 \\\n    --hash=sha256:%s\n" % ("ab" * 32), "bundle_pip_index_url must be the http:// or https:// URL"),
])
def test_pip_requirements_that_cannot_be_carried_stop_before_anything_is_built(tmp_path, lock, expected):
    path = tmp_path / "app.lock"
    if lock is not None:
        path.write_text(lock)
    code, output = run_bundle(tmp_path, "-e", '{"bundle_pip_requirements": ["%s"], "bundle_pip_index_url": "%s"}'
                              % (path, "ftp://mirror" if lock and "hash" in lock else "https://pypi.org/simple/"))
    assert code != 0, output
    assert expected.format(lock=path) in output
    assert not (tmp_path / "bundle.new").exists() and not (tmp_path / "bundle").exists()


def test_two_requirement_files_of_one_name_stop_before_anything_is_built(tmp_path):
    locks = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "app.lock").write_text("ok==1.0 \\\n    --hash=sha256:%s\n" % ("ab" * 32))
        locks.append(str(tmp_path / folder / "app.lock"))
    code, output = run_bundle(tmp_path, "-e", '{"bundle_pip_requirements": ["%s", "%s"]}' % tuple(locks))
    assert code != 0, output
    assert "bundle_pip_requirements gives two files of the same name (app.lock, app.lock)" in output
    assert not (tmp_path / "bundle.new").exists() and not (tmp_path / "bundle").exists()
