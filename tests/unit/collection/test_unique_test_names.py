# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pytest collects tests/unit without packages (rootdir-relative basenames), so two test modules with one file name
stop the whole unit stage at collection ("import file mismatch"). Name them apart."""
import collections
import pathlib

UNIT = pathlib.Path(__file__).resolve().parents[1]


def test_every_python_file_under_tests_unit_has_its_own_name():
    places = collections.defaultdict(list)
    for path in UNIT.rglob("*.py"):
        if path.name not in ("__init__.py", "conftest.py") and "__pycache__" not in path.parts:
            places[path.name].append(str(path.relative_to(UNIT)))
    assert {name: paths for name, paths in places.items() if len(paths) > 1} == {}
