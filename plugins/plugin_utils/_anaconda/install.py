# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The anaconda role's decision about a prefix, and the problems its preflight reports: pure Python.

``install_action`` reads the role's record in the prefix and what the prefix holds, and says what the install phase
does there. ``install_problems`` turns the role's settings and what preflight found into one line per problem; the
role fails once, listing them all. ``fetch_failure`` says why the installer could not be fetched, and the fix.
"""

import posixpath
import re
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.role_inputs import check_keys, joined

ACTIONS = ("none", "install", "install_into_empty", "update", "refuse")

SETTINGS = ("flavor", "architectures", "architecture", "installer_sha256", "installer_name", "installer_file",
            "installer_url", "prefix", "marker", "environments")
FOUND = ("action", "record", "controller_installer_exists", "controller_sha256", "foreign_conda", "missing_users",
         "missing_env_files")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PREFIX = re.compile(r"^/[^ ]")
_ENV_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def install_action(record, wanted_flavor, wanted_version, prefix_exists, prefix_is_dir, prefix_entries):
    """What the prefix needs, one of ACTIONS.

    ``record`` is the role's record read from the prefix (flavor, version, complete), empty where there is none;
    ``prefix_entries`` the number of entries at the top of the prefix, None where they were not counted (the role
    counts them only in a directory without a record).

    none: the wanted version is installed, and the install finished. update: this role's install of another version,
    or one that did not finish (installer -u). install: an absent prefix. install_into_empty: an empty directory, a
    mount point for instance (installer -f). refuse: another distribution's record, or anything else at the prefix,
    which preflight reports.
    """
    if record:
        if record.get("flavor") != wanted_flavor:
            return "refuse"
        if record.get("version") == wanted_version and record.get("complete"):
            return "none"
        return "update"
    if not prefix_exists:
        return "install"
    if prefix_is_dir and prefix_entries == 0:
        return "install_into_empty"
    return "refuse"


def install_problems(settings, found):
    """One line per problem in ``settings`` (the role's values, keys SETTINGS) and ``found`` (what preflight found on
    the host and the controller, keys FOUND); empty when the role can go on.

    settings: flavor (anaconda_flavor), architectures (those the flavour publishes installers for), architecture (the
    host's), installer_sha256, installer_name (the installer's file name), installer_file, installer_url, prefix,
    marker (the path of the role's record), environments (anaconda_environments).
    found: action (install_action's), record, controller_installer_exists, controller_sha256 (of installer_file on the
    controller, empty where not computed), foreign_conda (conda package records in a prefix without a record),
    missing_users (anaconda_init_users unknown to the host), missing_env_files (environment files not on the controller).
    """
    check_keys("settings", settings, SETTINGS)
    check_keys("found", found, FOUND)
    flavor, prefix = settings["flavor"], settings["prefix"]
    installer_file = settings.get("installer_file") or ""
    given_sha256 = settings.get("installer_sha256", "")
    sha256 = str(given_sha256).lower()
    action = found["action"]
    record = found.get("record") or {}
    controller_sha256 = found.get("controller_sha256") or ""
    env_names = [str(env.get("name", "")) for env in settings.get("environments") or []]
    problems = []

    if not _SHA256.match(sha256):
        problems.append(
            'anaconda_installer_sha256 is "%s", not a SHA-256 (64 hex digits): no checksum, no install. Set it to the hash '
            "published for %s (the SHA256 column of https://repo.anaconda.com/archive/ or /miniconda/, or the .sha256 file "
            "of the Miniforge release), or run sha256sum on a copy you trust." % (given_sha256, settings["installer_name"]))
    if settings["architecture"] not in settings["architectures"]:
        problems.append("%s publishes no Linux installer for %s (it has: %s); choose another anaconda_flavor"
                        % (flavor, settings["architecture"], joined(settings["architectures"])))
    if installer_file and settings.get("installer_url"):
        problems.append("anaconda_installer_file and anaconda_installer_url are both set; keep one (the file for air-gapped "
                        "sites, the URL otherwise)")
    if installer_file and action != "none" and not found.get("controller_installer_exists"):
        problems.append("anaconda_installer_file %s does not exist on the controller; copy the installer there or fix the "
                        "path" % installer_file)
    if installer_file and not installer_file.endswith(".sh"):
        problems.append("anaconda_installer_file %s does not end in .sh, which the installers require; rename it"
                        % installer_file)
    if controller_sha256 and controller_sha256 != sha256:
        problems.append("anaconda_installer_file %s has SHA-256 %s, not anaconda_installer_sha256 %s; nothing was copied. "
                        "Replace the file with the published installer, or correct the hash"
                        % (installer_file, controller_sha256, sha256))
    if not (_PREFIX.match(prefix) and " " not in prefix and prefix != "/"):
        problems.append('anaconda_prefix "%s" must be an absolute path without spaces (the installers refuse spaces)'
                        % prefix)
    if action == "refuse" and record:
        problems.append("%s holds %s %s but anaconda_flavor is %s, and the role does not turn one distribution into "
                        "another. Set anaconda_flavor: %s for this host, or install %s into another anaconda_prefix"
                        % (prefix, record.get("flavor"), record.get("version"), flavor, record.get("flavor"), flavor))
    if action == "refuse" and not record:
        foreign = found.get("foreign_conda") or []
        problems.append("%s exists and is not empty, but has no record of an install by this role (%s)%s. It was installed "
                        "by other means, or an install was interrupted; the role never wipes or adopts such a prefix. Move "
                        "it aside (mv %s %s.old) or remove it, or set anaconda_prefix to another path, then run again"
                        % (prefix, posixpath.basename(settings["marker"]),
                           (", and holds " + joined(foreign)) if foreign else "", prefix, prefix))
    if found.get("missing_users"):
        problems.append("anaconda_init_users lists %s, unknown to this host (getent passwd); create them first or drop them"
                        % joined(found["missing_users"]))
    if len(set(env_names)) != len(env_names):
        problems.append("anaconda_environments names an environment twice: %s; give each a unique name"
                        % joined(env_names))
    bad_names = [name for name in env_names if not _ENV_NAME.match(name)]
    if bad_names:
        problems.append("anaconda_environments has names that are not a directory name (letters, digits, . _ -): %s"
                        % joined(bad_names))
    if found.get("missing_env_files"):
        problems.append("environment files missing on the controller: %s; give anaconda_environments[].file as an "
                        "absolute path or one relative to the inventory directory" % joined(found["missing_env_files"]))
    return problems


_HIDDEN = "the download failed (details hidden: anaconda_proxy_servers is secret)"


def fetch_failure(failed_msg, proxy_servers, url, sha256, name, source):
    """Why the installer could not be fetched (a checksum that does not match, or the download), and the fix.

    failed_msg: the failed task's msg (None where it has none). proxy_servers: anaconda_proxy_servers; where set, a
    download's error is not shown (it may hold the proxy's credentials). url, sha256 (as asked), name and source (the
    URL or file it was fetched from): the installer's.
    """
    if proxy_servers and "checksum" not in (failed_msg or ""):
        reason = _HIDDEN
    else:
        reason = "unknown error" if failed_msg is None else failed_msg
    if "checksum" in reason:
        return ("the installer at %s does not match anaconda_installer_sha256 (%s) and was thrown away; nothing was "
                "installed. %s Fix: set anaconda_installer_sha256 to the hash published for %s, or make the mirror serve "
                "the published file." % (url, sha256, reason, name))
    return ("could not fetch %s: %s Fix: check anaconda_installer_mirror / anaconda_installer_url and "
            "anaconda_proxy_servers, or put the installer on the controller (anaconda_installer_file)."
            % (source, reason))
