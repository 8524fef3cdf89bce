# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which runs record: only one that runs every phase of the role, whatever --tags and --skip-tags say."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged.record import every_phase_runs


# (run tags, skip tags) as ansible-playbook gives them in ansible_run_tags and ansible_skip_tags
@pytest.mark.parametrize("run_tags, skip_tags, records", [
    pytest.param(["all"], [], True, id="no tags"),
    pytest.param(["nccl"], [], True, id="--tags ROLE"),
    pytest.param(["nccl", "nccl_validate"], [], True, id="--tags ROLE,ROLE_validate"),
    pytest.param(["all"], ["molecule-notest", "notest"], True, id="--skip-tags molecule-notest,notest"),
    pytest.param(["all"], ["anaconda_install"], True, id="--skip-tags another role's phase"),
    pytest.param(["nccl_install"], [], False, id="--tags ROLE_install"),
    pytest.param(["anaconda"], [], False, id="--tags other_role"),
    pytest.param(["always"], [], False, id="--tags always"),
    pytest.param(["all"], ["nccl_verify"], False, id="--skip-tags ROLE_verify"),
    pytest.param(["all"], ["nccl"], False, id="--skip-tags ROLE"),
    pytest.param(["all"], ["always"], False, id="--skip-tags always"),
    pytest.param(["all"], ["notest", "always_x"], False, id="--skip-tags always_x"),
    pytest.param(["nccl"], ["nccl_tests"], False, id="--tags ROLE --skip-tags ROLE_tests"),
])
def test_only_a_run_of_every_phase_records(run_tags, skip_tags, records):
    assert every_phase_runs("nccl", run_tags, skip_tags) is records
    assert every_phase_runs("nccl", tuple(run_tags), tuple(skip_tags)) is records


@pytest.mark.parametrize("skip_tag", ["ncclx", "nccl-tests", "xnccl_install", "alwaysx", "never"])
def test_a_skip_tag_that_only_looks_alike_leaves_the_role_whole(skip_tag):
    assert every_phase_runs("nccl", ["all"], [skip_tag]) is True


def test_one_role_name_inside_another_is_not_that_role():
    # nvidia_driver's phases are not nvidia_container_toolkit's, nor the other way round
    assert every_phase_runs("nvidia_driver", ["all"], ["nvidia_container_toolkit_install"]) is True
    assert every_phase_runs("nvidia_container_toolkit", ["nvidia_driver"], []) is False
