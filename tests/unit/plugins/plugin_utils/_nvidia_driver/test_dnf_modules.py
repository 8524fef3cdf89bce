# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugin_utils/dnf_modules: the dnf commands that leave one stream of a module enabled."""
import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nvidia_driver.dnf_modules import enabled_streams, module_stream_commands

# `dnf module list --enabled nvidia-driver --quiet` on EL 9 with NVIDIA's CUDA repository, one stream enabled.
LISTING = """CUDA rhel9-x86_64
Name          Stream           Profiles                      Summary
nvidia-driver 580-open [e]     default [d] [i], fm, ks, src  Nvidia driver for 580-open branch

Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled
"""
ENABLE = ["dnf", "module", "enable", "--assumeyes"]
RESET = ["dnf", "module", "reset", "--assumeyes", "nvidia-driver"]


def test_the_enabled_stream_is_read_from_the_listing():
    assert enabled_streams(LISTING, "nvidia-driver") == ["580-open"]
    assert enabled_streams(LISTING, "nodejs") == []
    assert enabled_streams("", "nvidia-driver") == []


@pytest.mark.parametrize("listing, stream, expected", [
    (LISTING, "580-open", []),
    ("", "580-open", [ENABLE + ["nvidia-driver:580-open"]]),
    (LISTING, "580-dkms", [RESET, ENABLE + ["nvidia-driver:580-dkms"]]),
    (LISTING, "570-open", [RESET, ENABLE + ["nvidia-driver:570-open"]]),
    (LISTING.replace("580-open [e]", "open-dkms [e]"), "580-open", [RESET, ENABLE + ["nvidia-driver:580-open"]]),
])
def test_commands_enable_or_switch_only_where_needed(listing, stream, expected):
    assert module_stream_commands(listing, "nvidia-driver", stream) == expected


def test_a_missing_stream_is_refused():
    with pytest.raises(ValueError, match="a module and a stream"):
        module_stream_commands(LISTING, "nvidia-driver", "")
