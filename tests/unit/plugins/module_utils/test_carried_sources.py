# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""carried_sources: a one-file program imports the modules it carries, packages included, and nothing else by their
package's name. Run as the roles' programs run: the file's text, then install(), in a Python without site-packages."""

import pathlib
import subprocess
import sys

SOURCE = (pathlib.Path(__file__).resolve().parents[4] / "plugins" / "module_utils" / "carried_sources.py").read_text()
PACKAGE = "ansible_collections.dlinfra.gpu_cluster.plugins.module_utils"


def run(program):
    return subprocess.run([sys.executable, "-IS", "-c", SOURCE + "\n" + program], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_program_imports_its_carried_modules_by_their_names():
    done = run('''
install({"base": "X = 1\\n", "pkg": "", "pkg.leaf": "from %s.base import X\\nY = X + 1\\n"})
from %s.pkg.leaf import Y
import %s.pkg as pkg
print(Y, hasattr(pkg, "__path__"))
''' % (PACKAGE, PACKAGE, PACKAGE))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "True"]


def test_a_module_it_does_not_carry_is_not_found():
    done = run('''
install({"base": "X = 1\\n"})
try:
    import %s.other
except ModuleNotFoundError as error:
    print("not found:", error.name)
''' % PACKAGE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "not found: %s.other" % PACKAGE
