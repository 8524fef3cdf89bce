# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one byte formatter: binary units for the plan, the progress, validate and the report."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import byte_unit, human_bytes


@pytest.mark.parametrize("count, text", [
    (0, "0 B"), (None, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (2097152, "2.0 MiB"),
    (1.1e9, "1.0 GiB"),  # a rate in bytes per second is a float
    (int(1.2 * 10 ** 12), "1.1 TiB"), (90 * 2 ** 50, "90.0 PiB"), (2 ** 70, "1024.0 EiB"), (-2048, "-2.0 KiB"),
])
def test_byte_counts_read_in_binary_units(count, text):
    assert human_bytes(count) == text


@pytest.mark.parametrize("largest, scale", [
    (0, (1, "B")), (1023, (1, "B")), (1024, (1024, "KiB")), (5 * 2 ** 30, (2 ** 30, "GiB")), (2 ** 70, (2 ** 60, "EiB")),
])
def test_an_axis_takes_the_unit_of_its_largest_value(largest, scale):
    assert byte_unit(largest) == scale
