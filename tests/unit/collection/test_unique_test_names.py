# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest collects tests/unit and tests/integration in one run without packages (rootdir-relative basenames), so two
Python files with one file name anywhere under the two stop the whole unit stage at collection ("import file
mismatch"), or import one's helper in place of the other's. Name them apart."""
import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[2]
COLLECTED = ("unit", "integration")  # pytest.ini's testpaths


def test_every_python_file_under_tests_unit_and_tests_integration_has_its_own_name():
    places = collections.defaultdict(list)
    for top in COLLECTED:
        for path in (TESTS / top).rglob("*.py"):
            if path.name not in ("__init__.py", "conftest.py") and "__pycache__" not in path.parts:
                places[path.name].append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in places.items() if len(paths) > 1} == {}


def test_the_folders_checked_are_the_ones_pytest_collects():
    ini = (TESTS.parent / "pytest.ini").read_text()
    testpaths = next(line for line in ini.splitlines() if line.startswith("testpaths"))
    assert testpaths.split("=", 1)[1].split() == ["tests/" + top for top in COLLECTED]
