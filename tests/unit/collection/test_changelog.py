# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The changelog that ships: the version galaxy.yml names has a release entry, CHANGELOG.rst is what
antsibull-changelog renders from changelogs/changelog.yaml, and both YAML files keep to the linters' default rules,
since the installed collection has no .yamllint of ours."""

import pathlib
import shutil
import subprocess
import sys

import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

ROOT = pathlib.Path(__file__).resolve().parents[3]
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def test_the_version_galaxy_names_has_a_release_entry():
    releases = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]
    assert VERSION in releases
    assert releases[VERSION]["changes"].get("release_summary")
    assert "\nv%s\n" % VERSION in (ROOT / "CHANGELOG.rst").read_text()


def test_changelog_rst_is_what_antsibull_changelog_generates(tmp_path):
    (tmp_path / "changelogs").mkdir()
    shutil.copy(ROOT / "galaxy.yml", tmp_path)
    for name in ("config.yaml", "changelog.yaml"):
        shutil.copy(ROOT / "changelogs" / name, tmp_path / "changelogs")
    tool = pathlib.Path(sys.executable).with_name("antsibull-changelog")
    result = subprocess.run([str(tool), "generate"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "CHANGELOG.rst").read_text() == (ROOT / "CHANGELOG.rst").read_text(), \
        "CHANGELOG.rst is stale: run antsibull-changelog generate (or release)"


def problems(path, config):
    return ["%s:%s %s" % (path.name, problem.line, problem.message)
            for problem in linter.run(path.read_text(), YamlLintConfig(config), str(path))]


def test_the_changelog_files_pass_the_linters_default_rules():
    # config.yaml is hand-written: yamllint's defaults, strictly. changelog.yaml is generated with lines up to ~90
    # characters: the defaults with ansible-lint's line length (what its yaml rule applies to an installed copy).
    assert problems(ROOT / "changelogs" / "config.yaml", "extends: default") == []
    assert problems(ROOT / "changelogs" / "changelog.yaml",
                    "{extends: default, rules: {line-length: {max: 160}}}") == []
