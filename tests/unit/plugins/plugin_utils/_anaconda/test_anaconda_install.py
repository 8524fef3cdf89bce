# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The anaconda role's decision about a prefix, every branch of it, and each problem its preflight reports, word for word."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._anaconda.install import ACTIONS, install_action, install_problems

SHA = "a" * 64
DONE = {"flavor": "miniforge", "version": "24.9.2-0", "complete": True}


def record(**changes):
    return dict(DONE, **changes)


# (record, prefix_exists, prefix_is_dir, prefix_entries) -> action, for miniforge 24.9.2-0 wanted
@pytest.mark.parametrize("found, prefix, action", [
    pytest.param(DONE, (True, True, None), "none", id="record-same-flavour-same-version"),
    pytest.param(record(version="24.7.1-0"), (True, True, None), "update", id="record-same-flavour-other-version"),
    pytest.param(record(complete=False), (True, True, None), "update", id="unfinished-record-same-version"),
    pytest.param(record(version="24.7.1-0", complete=False), (True, True, None), "update", id="unfinished-record-other-version"),
    pytest.param(record(complete=None), (True, True, None), "update", id="record-without-complete"),
    pytest.param(record(flavor="anaconda"), (True, True, None), "refuse", id="record-other-flavour-same-version"),
    pytest.param(record(flavor="miniconda", version="py312_24.9.2-0"), (True, True, None), "refuse",
                 id="record-other-flavour-other-version"),
    pytest.param(record(flavor="anaconda", complete=False), (True, True, None), "refuse", id="unfinished-record-other-flavour"),
    pytest.param({}, (False, False, None), "install", id="absent-prefix"),
    pytest.param(None, (False, False, None), "install", id="absent-prefix-no-record-at-all"),
    pytest.param({}, (True, True, 0), "install_into_empty", id="empty-directory"),
    pytest.param({}, (True, True, 3), "refuse", id="non-empty-directory"),
    pytest.param({}, (True, True, None), "refuse", id="directory-not-counted"),
    pytest.param({}, (True, False, None), "refuse", id="a-file-at-the-prefix"),
])
def test_the_decision(found, prefix, action):
    assert install_action(found, "miniforge", "24.9.2-0", *prefix) == action
    assert action in ACTIONS


def test_a_record_decides_whatever_the_prefix_looks_like():
    for prefix in [(False, False, None), (True, True, 0), (True, False, None)]:
        assert install_action(DONE, "miniforge", "24.9.2-0", *prefix) == "none"
        assert install_action(record(flavor="anaconda"), "miniforge", "24.9.2-0", *prefix) == "refuse"


SETTINGS = {
    "flavor": "miniforge", "architectures": ["x86_64", "aarch64", "ppc64le"], "architecture": "x86_64",
    "installer_sha256": SHA, "installer_name": "Miniforge3-24.9.2-0-Linux-x86_64.sh", "installer_file": "",
    "installer_url": "", "prefix": "/opt/anaconda3", "marker": "/opt/anaconda3/.dlinfra-anaconda-installer.json",
    "environments": [{"name": "torch", "file": "envs/torch.yml"}, {"name": "jax", "file": "envs/jax.yml"}],
}
FOUND = {"action": "install", "record": {}, "controller_installer_exists": False, "controller_sha256": "",
         "foreign_conda": [], "missing_users": [], "missing_env_files": []}


def problems(settings=None, **found):
    return install_problems(dict(SETTINGS, **(settings or {})), dict(FOUND, **found))


def test_all_well_is_no_problem():
    assert problems() == []
    assert install_problems({key: SETTINGS[key] for key in SETTINGS if key != "environments"}, {"action": "none"}) == []


@pytest.mark.parametrize("given", ["", "abc", "A" * 63, "g" * 64, SHA + "0"])
def test_no_sha256_no_install(given):
    assert problems({"installer_sha256": given}) == [
        'anaconda_installer_sha256 is "%s", not a SHA-256 (64 hex digits): no checksum, no install. Set it to the hash '
        'published for Miniforge3-24.9.2-0-Linux-x86_64.sh (the SHA256 column of https://repo.anaconda.com/archive/ or '
        '/miniconda/, or the .sha256 file of the Miniforge release), or run sha256sum on a copy you trust.' % given]


def test_an_upper_case_sha256_is_one():
    assert problems({"installer_sha256": "A" * 64}) == []


def test_an_architecture_the_flavour_has_no_installer_for():
    assert problems({"architecture": "s390x"}) == [
        "miniforge publishes no Linux installer for s390x (it has: x86_64, aarch64, ppc64le); choose another anaconda_flavor"]


def test_a_file_and_a_url():
    assert problems({"installer_file": "/srv/Miniforge3.sh", "installer_url": "https://mirror/Miniforge3.sh"},
                    controller_installer_exists=True) == [
        "anaconda_installer_file and anaconda_installer_url are both set; keep one (the file for air-gapped sites, "
        "the URL otherwise)"]


@pytest.mark.parametrize("action", ["install", "install_into_empty", "update", "refuse"])
def test_a_file_missing_on_the_controller_where_an_install_needs_it(action):
    assert problems({"installer_file": "/srv/Miniforge3.sh"}, action=action, record=DONE)[:1] == [
        "anaconda_installer_file /srv/Miniforge3.sh does not exist on the controller; copy the installer there or fix the path"]


def test_a_file_missing_on_the_controller_where_nothing_is_installed_is_no_problem():
    assert problems({"installer_file": "/srv/Miniforge3.sh"}, action="none") == []


def test_a_file_not_named_sh():
    assert problems({"installer_file": "/srv/Miniforge3.bin"}, controller_installer_exists=True) == [
        "anaconda_installer_file /srv/Miniforge3.bin does not end in .sh, which the installers require; rename it"]


def test_a_file_with_another_hash_names_both_in_lower_case():
    assert problems({"installer_file": "/srv/Miniforge3.sh", "installer_sha256": "B" * 64},
                    controller_installer_exists=True, controller_sha256="c" * 64) == [
        "anaconda_installer_file /srv/Miniforge3.sh has SHA-256 %s, not anaconda_installer_sha256 %s; nothing was copied. "
        "Replace the file with the published installer, or correct the hash" % ("c" * 64, "b" * 64)]
    assert problems({"installer_file": "/srv/Miniforge3.sh", "installer_sha256": "C" * 64},
                    controller_installer_exists=True, controller_sha256="c" * 64) == []


@pytest.mark.parametrize("prefix", ["opt/anaconda3", "/", "/opt/ana conda", " /opt/anaconda3", "/ opt", ""])
def test_a_prefix_that_is_not_absolute_or_has_spaces(prefix):
    assert problems({"prefix": prefix}) == [
        'anaconda_prefix "%s" must be an absolute path without spaces (the installers refuse spaces)' % prefix]


def test_a_prefix_of_another_distribution():
    found = record(flavor="anaconda", version="2024.10-1")
    assert problems(action="refuse", record=found) == [
        "/opt/anaconda3 holds anaconda 2024.10-1 but anaconda_flavor is miniforge, and the role does not turn one "
        "distribution into another. Set anaconda_flavor: anaconda for this host, or install miniforge into another "
        "anaconda_prefix"]


@pytest.mark.parametrize("foreign, holds", [
    ([], ""),
    (["conda-23.11.0-py311h06a4308_0.json"], ", and holds conda-23.11.0-py311h06a4308_0.json"),
    (["conda-23.1.0-0.json", "conda-23.11.0-0.json"], ", and holds conda-23.1.0-0.json, conda-23.11.0-0.json"),
])
def test_a_prefix_without_a_record(foreign, holds):
    assert problems(action="refuse", foreign_conda=foreign) == [
        "/opt/anaconda3 exists and is not empty, but has no record of an install by this role "
        "(.dlinfra-anaconda-installer.json)%s. It was installed by other means, or an install was interrupted; the role "
        "never wipes or adopts such a prefix. Move it aside (mv /opt/anaconda3 /opt/anaconda3.old) or remove it, or set "
        "anaconda_prefix to another path, then run again" % holds]


@pytest.mark.parametrize("action", ["none", "install", "install_into_empty", "update"])
def test_a_record_or_a_foreign_prefix_is_a_problem_only_when_refused(action):
    assert problems(action=action, record=record(flavor="anaconda"), foreign_conda=["conda-1.json"]) == []
    assert problems(action=action, foreign_conda=["conda-1.json"]) == []


def test_users_unknown_to_the_host():
    assert problems(missing_users=["alice", "bob"]) == [
        "anaconda_init_users lists alice, bob, unknown to this host (getent passwd); create them first or drop them"]


def test_an_environment_named_twice():
    environments = SETTINGS["environments"] + [{"name": "torch", "file": "envs/torch2.yml"}]
    assert problems({"environments": environments}) == [
        "anaconda_environments names an environment twice: torch, jax, torch; give each a unique name"]


def test_environment_names_that_are_not_directory_names():
    environments = [{"name": "torch", "file": "a.yml"}, {"name": "my env", "file": "b.yml"}, {"name": "x/y", "file": "c.yml"},
                    {"name": "ok-1.2_3", "file": "d.yml"}]
    assert problems({"environments": environments}) == [
        "anaconda_environments has names that are not a directory name (letters, digits, . _ -): my env, x/y"]


def test_environment_files_missing_on_the_controller():
    assert problems(missing_env_files=["/inv/envs/torch.yml", "/inv/envs/jax.yml"]) == [
        "environment files missing on the controller: /inv/envs/torch.yml, /inv/envs/jax.yml; give "
        "anaconda_environments[].file as an absolute path or one relative to the inventory directory"]


def test_every_problem_at_once_in_the_order_preflight_lists_them():
    lines = problems({"installer_sha256": "", "architecture": "s390x", "installer_file": "/srv/x.bin", "installer_url": "u",
                      "prefix": "rel", "environments": [{"name": "a b"}, {"name": "a b"}]},
                     action="refuse", controller_sha256="c" * 64, missing_users=["carol"], missing_env_files=["/e.yml"])
    assert [line.split(" ")[0] for line in lines] == [
        "anaconda_installer_sha256", "miniforge", "anaconda_installer_file", "anaconda_installer_file",
        "anaconda_installer_file", "anaconda_installer_file", "anaconda_prefix", "rel", "anaconda_init_users",
        "anaconda_environments", "anaconda_environments", "environment"]
    assert len(lines) == 12


def test_an_unknown_key_is_refused_by_name():
    with pytest.raises(ValueError, match="found has unknown key.s. acton"):
        install_problems(SETTINGS, {"acton": "none"})
    with pytest.raises(ValueError, match="settings has unknown key.s. prefx"):
        install_problems(dict(SETTINGS, prefx="/opt"), FOUND)
