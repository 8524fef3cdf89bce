# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The error every stage of the shard_staging planner raises, and the check of the byte counts it is given (its messages
write byte counts with module_utils/byte_units.py)."""


class ShardPlanError(Exception):
    """An input that cannot be planned; the message names the input and says what to do."""


def byte_count(value, what, meaning):
    """``value`` if it is a whole number of bytes, else ShardPlanError naming ``what`` and its ``meaning``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ShardPlanError(f"{what} is {value!r}; it must be a whole number of bytes ({meaning})")
    return value
