# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The conda TEST DOUBLE (tests/test_doubles/conda/fixture_conda.py) makes each environment it creates a Python venv of
the host's python3, with pip where the host has ensurepip, so that the role's `ENV/bin/python -m pip install` and the
Jupyter kernels run for real; an update keeps the venv."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

SOURCE = pathlib.Path(__file__).resolve().parents[3] / "tests" / "test_doubles" / "conda" / "fixture_conda.py"
SPEC = importlib.util.spec_from_file_location("test_double_conda", SOURCE)
conda = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(conda)


@pytest.fixture
def venvs(tmp_path, monkeypatch):
    """The venv commands the double runs; each makes ENV/bin/python as venv would."""
    calls = []

    def run(argv, check, stdout):
        calls.append(argv)
        (pathlib.Path(argv[-1]) / "bin").mkdir(parents=True)
        (pathlib.Path(argv[-1]) / "bin" / "python").write_text("")

    monkeypatch.setattr(conda.subprocess, "run", run)
    monkeypatch.setattr(conda, "conda_version", lambda: "24.9.2")
    (tmp_path / "env.yml").write_text("name: torch\ndependencies:\n  - python=3.12\n  - pip\n")
    return calls


@pytest.mark.parametrize("has_ensurepip, flags", [(True, []), (False, ["--without-pip"])])
def test_create_makes_a_venv(tmp_path, venvs, monkeypatch, has_ensurepip, flags):
    monkeypatch.setitem(sys.modules, "ensurepip", sys.modules.get("os") if has_ensurepip else None)
    target = str(tmp_path / "envs" / "torch")
    assert conda.env(["create", "--file", str(tmp_path / "env.yml"), "--prefix", target]) == 0
    assert venvs == [["/usr/bin/python3", "-m", "venv"] + flags + [target]]
    assert (tmp_path / "envs" / "torch" / "conda-meta" / "history").read_text().count("# update specs:") == 1


def test_update_keeps_the_venv(tmp_path, venvs):
    target = str(tmp_path / "envs" / "torch")
    conda.env(["create", "--file", str(tmp_path / "env.yml"), "--prefix", target])
    assert conda.env(["update", "--file", str(tmp_path / "env.yml"), "--prefix", target, "--prune"]) == 0
    assert len(venvs) == 1
