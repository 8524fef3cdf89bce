# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's code on a node as one file. A program a role writes (kubetpl on the heads, the GPU metrics
collector on every node) carries the sources of the module_utils it runs, and install() imports them under their own
names: one file is one task for the role, where a file per module cost a task each.

Private to the collection. The roles' templates put this file's text, then ``install(SOURCES)``, before the program's
own import. Stdlib only, Python 3.9 and later.
"""

import importlib.abc
import importlib.util
import sys

CARRIED_PACKAGE = "ansible_collections.dlinfra.gpu_cluster.plugins.module_utils"


class CarriedSources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The modules of sources ({name under CARRIED_PACKAGE: source}), and CARRIED_PACKAGE and its parents as empty
    packages."""

    def __init__(self, sources):
        self.sources = sources

    def carried(self, name):
        return name[len(CARRIED_PACKAGE) + 1:] if name.startswith(CARRIED_PACKAGE + ".") else None

    def find_spec(self, name, path=None, target=None):  # pylint: disable=unused-argument
        module = self.carried(name)
        if module in self.sources:
            return importlib.util.spec_from_loader(
                name, self, is_package=any(other.startswith(module + ".") for other in self.sources))
        if name == CARRIED_PACKAGE or CARRIED_PACKAGE.startswith(name + "."):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module):
        name = self.carried(module.__name__)
        if name in self.sources:
            code = compile(self.sources[name], "<carried %s>" % module.__name__, "exec")
            exec(code, module.__dict__)  # pylint: disable=exec-used


def install(sources):
    """Import CARRIED_PACKAGE's modules from sources from now on, before any other finder."""
    sys.meta_path.insert(0, CarriedSources(sources))
