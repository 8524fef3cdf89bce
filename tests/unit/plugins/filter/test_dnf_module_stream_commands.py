# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""filter/dnf_modules: the thin wrapper over plugin_utils/dnf_modules, and how it refuses bad input."""
import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.dlinfra.gpu_cluster.plugins.filter.dnf_modules import FilterModule

COMMANDS = FilterModule().filters()["dnf_module_stream_commands"]


def test_no_stream_enabled_gives_one_enable():
    assert COMMANDS("", "nvidia-driver", "580-open") == [["dnf", "module", "enable", "--assumeyes", "nvidia-driver:580-open"]]


def test_an_empty_stream_is_a_filter_error_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="dnf_module_stream_commands: a module and a stream are needed"):
        COMMANDS("", "nvidia-driver", "")
