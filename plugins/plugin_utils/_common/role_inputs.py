# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the roles' preflight decisions (anaconda_install, nccl_preflight, nvidia_container_toolkit_preflight,
nvidia_driver_preflight, rolling_upgrade_preflight) share: refusing keys a role does not pass, listing values in a
message, and reading numbers as Jinja's int and float filters read them."""


def check_keys(what, given, known):
    """ValueError naming the keys of ``given`` that are not in ``known`` (a role's YAML and its filter disagree)."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError("%s has unknown key(s) %s; known: %s" % (what, ", ".join(unknown), ", ".join(known)))


def joined(items, separator=", "):
    return separator.join(str(item) for item in items)


def as_int(value):
    """As Jinja's int filter: int(value), else int(float(value)), else 0 (text that is not a number)."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def as_float(value):
    """As Jinja's float filter: float(value), else 0.0."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
