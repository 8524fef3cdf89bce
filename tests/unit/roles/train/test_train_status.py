# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status reader's view of a job directory (the units' part needs systemd: the lab's train and validate stages)."""
import importlib.util
import json
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[4] / "roles" / "train" / "files" / "train_status.py"
_SPEC = importlib.util.spec_from_file_location("train_status", _PATH)
train_status = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(train_status)


@pytest.fixture
def job_dir(tmp_path):
    (tmp_path / "progress").mkdir()
    (tmp_path / "samples").mkdir()
    (tmp_path / "progress" / "rank-0002.json").write_text(json.dumps({"rank": 2, "state": "done"}))
    (tmp_path / "progress" / "rank-0003.json").write_text("{half-written")
    (tmp_path / "samples" / "rank-0002.epoch-0.txt").write_text("shard-000/a\nshard-000/b\n")
    return tmp_path


def test_samples_only_when_asked_and_a_half_written_progress_file_is_left_for_the_next_look(job_dir, monkeypatch, capsys):
    monkeypatch.setattr(train_status, "units", lambda job: {"dlinfra-train-j-rank-0002.service": {
        "load": "loaded", "active": "active", "sub": "exited"}})
    train_status.main(["train_status.py", "j", str(job_dir)])
    plain = json.loads(capsys.readouterr().out)
    assert plain["progress"] == {"0002": {"rank": 2, "state": "done"}} and "samples" not in plain
    assert plain["running"] == [] and plain["failed"] == []
    train_status.main(["train_status.py", "--samples", "j", str(job_dir)])
    assert json.loads(capsys.readouterr().out)["samples"] == {"rank-0002.epoch-0.txt": ["shard-000/a", "shard-000/b"]}


def test_wrong_arguments_exit_with_the_usage():
    with pytest.raises(SystemExit) as exited:
        train_status.main(["train_status.py", "j"])
    assert "train_status.py [--samples] JOB JOB_DIR" in str(exited.value)
