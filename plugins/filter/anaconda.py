# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The anaconda role's decision about a prefix and its preflight problems, and its Jupyter Lab's problems and
configuration: thin wrappers over plugin_utils/anaconda_install and plugin_utils/_workspace/jupyter."""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._anaconda.install import install_action, install_problems
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._workspace.jupyter import (
    jupyter_problems, listeners, main_pids, server_config)


def anaconda_install_action(record, flavor, version, prefix_exists, prefix_is_dir=False, prefix_entries=None):
    """none, install, install_into_empty, update or refuse (see install_action)."""
    entries = None if prefix_entries in (None, "") else int(prefix_entries)
    return install_action(record or {}, flavor, version, boolean(prefix_exists, strict=False),
                          boolean(prefix_is_dir, strict=False), entries)


def anaconda_install_problems(settings, found):
    """One line per problem, empty when all is well (see install_problems)."""
    try:
        return install_problems(settings, found)
    except (KeyError, ValueError) as error:
        raise AnsibleFilterError("anaconda_install_problems: %s" % error) from error


def anaconda_jupyter_problems(settings, found):
    """One line per Jupyter problem (see _workspace/jupyter.jupyter_problems); found's ss and units are the raw
    output of ss -ltnpeH and systemctl show --property Id,MainPID."""
    try:
        found = dict(found)
        found["listeners"] = listeners(found.pop("ss", "") or "")
        found["main_pids"] = main_pids(found.pop("units", "") or "")
        return jupyter_problems(settings, found)
    except (KeyError, ValueError, TypeError) as error:
        raise AnsibleFilterError("anaconda_jupyter_problems: %s" % error) from error


def anaconda_jupyter_config(user, home, settings):
    """A user's jupyter_server_config.json content (see _workspace/jupyter.server_config)."""
    try:
        return server_config(user, home, settings)
    except (KeyError, ValueError, TypeError) as error:
        raise AnsibleFilterError("anaconda_jupyter_config: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"anaconda_install_action": anaconda_install_action, "anaconda_install_problems": anaconda_install_problems,
                "anaconda_jupyter_problems": anaconda_jupyter_problems, "anaconda_jupyter_config": anaconda_jupyter_config}
