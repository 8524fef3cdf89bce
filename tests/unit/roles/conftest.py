# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import sys
import warnings

import pytest
from ansible.plugins.loader import init_plugin_loader


@pytest.fixture(scope="module")
def ansible_plugin_loader():
    """Ansible's plugin loader for a module whose templates use lookups, removed afterwards: its collection finder
    refuses to import modules of this collection that were not imported through it, which broke test modules run after
    that one in the same process."""
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        init_plugin_loader()
    yield
    sys.meta_path[:], sys.path_hooks[:] = meta_path, path_hooks
    sys.path_importer_cache.clear()
