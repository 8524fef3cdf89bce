# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The anaconda role's decision about a prefix, its preflight problems, why its installer could not be fetched and
what it does with each environment, and its Jupyter Lab's problems, configuration and restarts: thin wrappers over
plugin_utils/_anaconda and plugin_utils/_workspace/jupyter."""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._anaconda.environments import env_step
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._anaconda.install import (
    fetch_failure, install_action, install_problems)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._workspace.jupyter import (
    jupyter_problems, listeners, main_pids, restarts, server_config)


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


def anaconda_fetch_failure(failed_msg, proxy_servers, url, sha256, name, source):
    """Why the installer could not be fetched, and the fix (see _anaconda/install.fetch_failure)."""
    return fetch_failure(failed_msg, proxy_servers, url, sha256, name, source)


def anaconda_env_step(environment, src, path, known, recorded_sha1, wanted_sha1):
    """One environment's entry of the plan, its action create, update or none (see _anaconda/environments)."""
    return env_step(environment, src, path, list(known or []), recorded_sha1, wanted_sha1)


def anaconda_jupyter_restarts(users, everyone, registered):
    """The users whose Jupyter server restarts (see _workspace/jupyter.restarts)."""
    return restarts(list(users or []), bool(everyone), list(registered or []))


class FilterModule:
    def filters(self):
        return {"anaconda_install_action": anaconda_install_action, "anaconda_install_problems": anaconda_install_problems,
                "anaconda_jupyter_problems": anaconda_jupyter_problems, "anaconda_jupyter_config": anaconda_jupyter_config,
                "anaconda_fetch_failure": anaconda_fetch_failure, "anaconda_env_step": anaconda_env_step,
                "anaconda_jupyter_restarts": anaconda_jupyter_restarts}
