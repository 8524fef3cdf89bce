# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the roles' preflight decisions (anaconda_install, nccl_preflight, nvidia_container_toolkit_preflight,
nvidia_driver_preflight) share: refusing keys a role does not pass, and listing values in a message."""


def check_keys(what, given, known):
    """ValueError naming the keys of ``given`` that are not in ``known`` (a role's YAML and its filter disagree)."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError("%s has unknown key(s) %s; known: %s" % (what, ", ".join(unknown), ", ".join(known)))


def joined(items, separator=", "):
    return separator.join(str(item) for item in items)
