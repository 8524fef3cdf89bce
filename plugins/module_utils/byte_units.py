# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: byte counts as people read them, in binary units (KiB, MiB, GiB: 1024 each), one way for every message,
progress line, plan summary, check and report of the collection. Here so that both the modules on the nodes and the
controller's code (which may import module_utils) use it. May change without notice."""

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def byte_unit(largest):
    """(divisor, unit) in which ``largest`` bytes read as 1 to 1023.9 (an axis scaled for its largest value)."""
    for power, unit in enumerate(UNITS):
        if abs(largest) < 1024 ** (power + 1) or unit == UNITS[-1]:
            return 1024 ** power, unit
    return None  # pragma: no cover


def human_bytes(count):
    """``count`` bytes (or bytes per second) with one decimal in the largest unit it reaches: 1023 -> '1023 B',
    1536 -> '1.5 KiB', 1288490189 -> '1.2 GiB'. None reads as 0."""
    count = count or 0
    if abs(count) < 1024:
        return "%d B" % count
    value = float(count)
    for unit in UNITS[1:]:
        value /= 1024
        if abs(value) < 1024 or unit == UNITS[-1]:
            break
    return "%.1f %s" % (value, unit)
