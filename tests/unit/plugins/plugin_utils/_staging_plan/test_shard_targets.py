# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the planner takes from each target's report: its room less the reserve, its ranks, its peer endpoint."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.targets import less_reserve


@pytest.mark.parametrize("free, ours, reserve, expected", [
    (1000, 300, 200, {"free_bytes": 800, "ours_bytes": 300}),
    (100, 300, 200, {"free_bytes": 0, "ours_bytes": 200}),  # free cannot cover the reserve: the rest comes off ours
    (100, 50, 200, {"free_bytes": 0, "ours_bytes": 0}),
    (1000, None, 200, {"free_bytes": 800}),  # an older shard_space: free + held as before
])
def test_the_reserve_comes_off_free_plus_ours_whatever_a_run_left(free, ours, reserve, expected):
    result = {"free_bytes": free, "held_bytes": 40, "total_bytes": 10 ** 6}
    if ours is not None:
        result["ours_bytes"] = ours
    assert less_reserve(result, reserve) == dict(expected, held_bytes=40, total_bytes=10 ** 6)
    if ours is not None:
        # A run that moved 60 bytes from free into dest leaves the sum the planner weighs alone.
        moved = less_reserve(dict(result, free_bytes=free - 60, ours_bytes=ours + 60), reserve)
        assert moved["free_bytes"] + moved["ours_bytes"] == expected["free_bytes"] + expected["ours_bytes"]

