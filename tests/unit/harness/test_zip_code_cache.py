# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The test images' cache of code compiled from Ansible's module payloads (tests/harness/setup/image): a module
imported from a new zip the second time runs from the cache, as the source says, under the new zip's path."""

import importlib.util
import pathlib
import sys
import zipfile
import zipimport

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PROBE = "dlinfra_zip_code_probe"
SOURCE = b"def where():\n    return __file__\n\n\ndef answer():\n    return lambda: 42\n"


@pytest.fixture(name="cache")
def fixture_cache(tmp_path, monkeypatch):
    original = zipimport._compile_source
    spec = importlib.util.spec_from_file_location(
        "dlinfra_zip_code_cache", ROOT / "tests/harness/setup/image/dlinfra_zip_code_cache.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CACHE", str(tmp_path / "cache"))
    yield module
    zipimport._compile_source = original


def payload(directory, package, source=SOURCE):
    """A zip with package/module_utils/probe.py. Ansible's payloads hold the package ansible; a test cannot import one
    of that name without replacing the real one in sys.modules, so a payload here is one under a directory named
    ansible, which the cache takes for Ansible's as it does a path with the package."""
    path = directory / "payload.zip"
    directory.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("%s/__init__.py" % package, "")
        archive.writestr("%s/module_utils/__init__.py" % package, "")
        archive.writestr("%s/module_utils/probe.py" % package, source)
    return path


def forget(package):
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]


def load(path, package):
    forget(package)
    sys.path.insert(0, str(path))
    try:
        return importlib.import_module("%s.module_utils.probe" % package)
    finally:
        sys.path.remove(str(path))
        forget(package)


def test_the_second_payload_runs_from_the_cache_under_its_own_path(cache, tmp_path, monkeypatch):
    first = load(payload(tmp_path / "one" / "ansible", PROBE), PROBE)
    assert len(list(pathlib.Path(cache.CACHE).iterdir())) == 2  # the (empty) __init__ files and the module
    second_zip = payload(tmp_path / "two" / "ansible", PROBE)
    compiled, original = [], cache.COMPILE
    monkeypatch.setattr(cache, "COMPILE", lambda *args: compiled.append(args) or original(*args))
    second = load(second_zip, PROBE)
    assert not compiled
    assert second.answer()() == first.answer()() == 42
    assert second.where() == str(second_zip / PROBE / "module_utils/probe.py")
    assert second.answer().__code__.co_filename == second.where()


def test_a_changed_source_is_compiled_again(cache, tmp_path):
    load(payload(tmp_path / "one" / "ansible", PROBE), PROBE)
    changed = load(payload(tmp_path / "two" / "ansible", PROBE, SOURCE.replace(b"42", b"43")), PROBE)
    assert changed.answer()() == 43
    assert len(list(pathlib.Path(cache.CACHE).iterdir())) == 3


def test_other_zips_are_left_to_python(cache, tmp_path):
    assert load(payload(tmp_path / "one" / "other", PROBE), PROBE).answer()() == 42
    assert not pathlib.Path(cache.CACHE).exists()
