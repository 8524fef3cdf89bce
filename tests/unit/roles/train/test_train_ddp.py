# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reference job's parts that need no PyTorch: its place against the hand-off, the samples of its shards, the
epoch's length, the records it keeps and its checkpoints' names. The job itself runs on the lab (make test's train
stage)."""
import importlib.util
import io
import pathlib
import tarfile

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[4] / "roles" / "train" / "files" / "train_ddp.py"
_SPEC = importlib.util.spec_from_file_location("train_ddp", _PATH)
train_ddp = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(train_ddp)

WORLD = {"dataset": "yt8m", "node": "gpu2", "node_rank": 1, "nodes": 2, "world_size": 4, "plan_digest": "sha256:x",
         "ranks": [{"local_rank": 0, "global_rank": 2, "list": "ranks/rank-0000.txt"},
                   {"local_rank": 1, "global_rank": 3, "list": "ranks/rank-0001.txt"}]}


def shard(path, samples):
    with tarfile.open(path, "w") as tar:
        for key, parts in samples:
            for extension, data in parts.items():
                info = tarfile.TarInfo("%s.%s" % (key, extension))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_a_place_that_matches_the_hand_off():
    problems, entry = train_ddp.world_problems(WORLD, {"rank": 3, "local_rank": 1, "world_size": 4, "node_rank": 1})
    assert problems == [] and entry["list"] == "ranks/rank-0001.txt"


@pytest.mark.parametrize("place, wanted", [
    ({"rank": 3, "local_rank": 1, "world_size": 6, "node_rank": 1}, "torchrun's world has 6 ranks, the plan's 4"),
    ({"rank": 1, "local_rank": 1, "world_size": 4, "node_rank": 0}, "pass --node-rank 1"),
    ({"rank": 4, "local_rank": 2, "world_size": 4, "node_rank": 1}, "local rank 2 has no list in gpu2's world.json"),
    ({"rank": 2, "local_rank": 1, "world_size": 4, "node_rank": 1}, "torchrun's rank 2 is the plan's global rank 3"),
])
def test_a_place_that_differs_is_named(place, wanted):
    problems, _entry = train_ddp.world_problems(WORLD, place)
    assert any(wanted in problem for problem in problems), problems


def test_no_torchrun_environment_is_a_clear_exit():
    with pytest.raises(SystemExit, match="RANK.*start it with torchrun"):
        train_ddp.torchrun_place({})


def test_samples_group_a_samples_files_and_keep_the_lists_order(tmp_path):
    first = shard(tmp_path / "a.tar", [("s1", {"txt": b"one", "cls": b"1"}), ("s2", {"txt": b"two", "cls": b"2"})])
    second = shard(tmp_path / "b.tar", [("d/s3", {"txt": b"three"})])
    read = list(train_ddp.samples([second, first]))
    assert read == [("b.tar", "d/s3", {"txt": b"three"}), ("a.tar", "s1", {"txt": b"one", "cls": b"1"}),
                    ("a.tar", "s2", {"txt": b"two", "cls": b"2"})]


def test_an_epoch_in_bytes_counts_the_samples_that_fit(tmp_path):
    path = shard(tmp_path / "a.tar", [("s%d" % n, {"txt": b"x" * 10}) for n in range(5)])
    assert train_ddp.epoch_length({"unit": "bytes", "per_rank": 35}, [path]) == 3
    assert train_ddp.epoch_length({"unit": "samples", "per_rank": 400}, [path]) == 400


def test_a_resumed_epochs_record_keeps_what_its_checkpoint_covers(tmp_path):
    record = tmp_path / "rank-0000.epoch-0.txt"
    record.write_text("a\nb\nc\nd\n")
    train_ddp.keep_lines(str(record), 2)
    assert record.read_text() == "a\nb\n"
    train_ddp.keep_lines(str(tmp_path / "new.txt"), 5)
    assert (tmp_path / "new.txt").read_text() == ""


def test_checkpoints_are_listed_by_step_and_only_the_nodes_first_rank_writes(tmp_path):
    reader = train_ddp.Checkpoints(str(tmp_path / "none"), writer=False)
    assert reader.steps() == [] and not (tmp_path / "none").exists()
    for name in ("ckpt-00000010.pt", "ckpt-00000020.pt", "ckpt-00000030.pt.tmp", "other"):
        (tmp_path / name).write_bytes(b"")
    assert train_ddp.Checkpoints(str(tmp_path), writer=False).steps() == [10, 20]


def test_arguments_need_the_hand_off_and_a_job_directory(monkeypatch):
    monkeypatch.delenv("DLINFRA_HANDOFF", raising=False)
    monkeypatch.setenv("DLINFRA_JOB_DIR", "/j")
    with pytest.raises(SystemExit):
        train_ddp.parse_args([])
    args = train_ddp.parse_args(["--handoff", "/srv/ssd/yt8m"])
    assert args.checkpoint_dir == "/j/checkpoints"
