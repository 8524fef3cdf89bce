# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
import sys
import warnings

import pytest
from ansible.plugins.loader import init_plugin_loader
from ansible.utils.collection_loader import AnsibleCollectionConfig


def _collection_modules():
    return {name: module for name, module in sys.modules.items()
            if name == "ansible_collections" or name.startswith("ansible_collections.")}


@pytest.fixture(scope="module")
def ansible_plugin_loader():
    """Ansible's plugin loader for a module whose templates use lookups or this collection's filters, removed
    afterwards. Its collection finder refuses to import modules of this collection that were not imported through it
    (which broke test modules run after that one in the same process), and cannot find this collection's plugins
    where its package was imported without it (as every test module importing the collection's Python does): so
    during the module the collection's modules come through the finder, and the others' are back afterwards."""
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)
    outside = _collection_modules()
    for name in outside:
        del sys.modules[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if AnsibleCollectionConfig.collection_finder is None:
            init_plugin_loader()
        else:  # configured once per process: a later module puts the same finder back
            AnsibleCollectionConfig.collection_finder._install()  # pylint: disable=protected-access
    yield
    sys.meta_path[:], sys.path_hooks[:] = meta_path, path_hooks
    sys.path_importer_cache.clear()
    for name in _collection_modules():
        del sys.modules[name]
    sys.modules.update(outside)
