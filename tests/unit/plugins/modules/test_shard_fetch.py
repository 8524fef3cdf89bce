# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""shard_fetch's main(): argument handling, check mode, results and failures, on file:// sources."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dlinfra.gpu_cluster.plugins.modules import shard_fetch

MODULE_PATH = shard_fetch.__file__
COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "collections"))


def run_module(capsys, monkeypatch, args, check_mode=False):
    """main()'s result, plus its exit code and the warnings it gave (which the result only carries when no
    controller code is loaded in the same process)."""
    warnings = []
    monkeypatch.setattr(shard_fetch.AnsibleModule, "warn", lambda module, message: warnings.append(message))
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            shard_fetch.main()
    result = json.loads(capsys.readouterr().out)
    result["_exit_code"] = exit_info.value.code
    result["_warnings"] = warnings
    return result


@pytest.fixture
def source(tmp_path):
    """Three shards on a local "NFS" directory, as file:// shard entries."""
    directory = tmp_path / "nfs"
    directory.mkdir()
    shards = []
    for index in range(3):
        data = os.urandom(4096 + index)
        name = "chunks-%06d.tar" % index
        (directory / name).write_bytes(data)
        shards.append({"name": name, "url": "file://%s/%s" % (directory, name), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return shards


def test_stages_inline_shards_and_is_idempotent(tmp_path, capsys, monkeypatch, source):
    dest = tmp_path / "dest"
    first = run_module(capsys, monkeypatch, dict(dest=str(dest), shards=source))
    assert first["_exit_code"] == 0
    assert first["changed"] is True
    assert (first["fetched"], first["confirmed"], first["failed_shards"]) == (3, 0, [])
    assert sorted(first["fetched_names"]) == [shard["name"] for shard in source]
    assert sorted(os.listdir(dest)) == [".shard_fetch.journal", ".shard_fetch.last_run", ".shard_fetch.lock"] + [
        shard["name"] for shard in source]

    second = run_module(capsys, monkeypatch, dict(dest=str(dest), shards=source))
    assert second["changed"] is False
    assert (second["fetched"], second["confirmed"]) == (0, 3)


def test_reads_a_shards_file_and_prunes(tmp_path, capsys, monkeypatch, source):
    dest = tmp_path / "dest"
    shards_file = tmp_path / "shards.json"
    shards_file.write_text(json.dumps(source))
    run_module(capsys, monkeypatch, dict(dest=str(dest), shards_file=str(shards_file)))
    shards_file.write_text(json.dumps({"shards": source[:1]}))

    result = run_module(capsys, monkeypatch, dict(dest=str(dest), shards_file=str(shards_file), prune=True))

    assert result["changed"] is True
    assert (result["removed"], result["confirmed"]) == (2, 1)
    assert sorted(name for name in os.listdir(dest) if not name.startswith(".")) == [source[0]["name"]]


def test_check_mode_reports_and_changes_nothing(tmp_path, capsys, monkeypatch, source):
    dest = tmp_path / "dest"
    result = run_module(capsys, monkeypatch, dict(dest=str(dest), shards=source), check_mode=True)
    assert result["_exit_code"] == 0
    assert result["changed"] is True
    assert (result["fetched"], result["fetched_bytes"]) == (3, sum(shard["size"] for shard in source))
    assert result["throughput"] == 0
    assert not dest.exists()
    assert result["_warnings"] == ["dest %s does not exist and would be created" % dest]


def test_failed_shards_fail_the_task_naming_shard_url_and_reason(tmp_path, capsys, monkeypatch, source):
    missing = {"name": "lost.tar", "url": "file://%s/lost.tar" % tmp_path}
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), shards=source + [missing]))
    assert result["_exit_code"] == 1
    assert result["failed"] is True
    assert result["fetched"] == 3
    assert result["msg"].startswith("1 of 4 shards could not be staged in %s" % (tmp_path / "dest"))
    assert "lost.tar (file://%s/lost.tar): cannot open %s/lost.tar: No such file or directory" % (tmp_path, tmp_path) in result["msg"]
    assert result["failed_shards"] == [{"name": "lost.tar", "url": missing["url"],
                                        "reason": "cannot open %s/lost.tar: No such file or directory" % tmp_path}]


@pytest.mark.parametrize("args, message", [
    ({}, "one of the following is required: shards, shards_file"),
    ({"shards": [], "shards_file": "/x.json"}, "parameters are mutually exclusive: shards|shards_file"),
    ({"shards": [{"name": "a.tar"}]}, "missing required arguments: url"),
    ({"shards": [{"name": "a.tar", "url": "file:///a.tar", "md5": "x"}]}, "Unsupported parameters"),
    ({"shards": [{"name": "../a.tar", "url": "file:///a.tar"}]}, "name must be a plain file name without '/'"),
    ({"shards": [], "verify": "paranoid"}, "value of verify must be one of: quick, full"),
    ({"shards": [], "concurrency": 0}, "concurrency must be between 1 and 256"),
    ({"shards_file": "/nonexistent/shards.json"}, "cannot read shards_file /nonexistent/shards.json"),
])
def test_invalid_arguments_fail_with_a_message(tmp_path, capsys, monkeypatch, args, message):
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), **args))
    assert result["_exit_code"] == 1
    assert result["failed"] is True
    assert message in result["msg"]
    assert not (tmp_path / "dest").exists()


def test_not_enough_space_fails_before_fetching(tmp_path, capsys, monkeypatch, source):
    huge = dict(source[0], name="huge.tar", size=1 << 60, sha256=None)
    del huge["sha256"]
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), shards=source + [huge]))
    assert result["failed"] is True
    assert "not enough free space for %s" % (tmp_path / "dest") in result["msg"]
    # Nothing is fetched; the run's record says it failed (the monitoring's staging alert).
    assert sorted(os.listdir(tmp_path / "dest")) == [".shard_fetch.last_run", ".shard_fetch.lock"]


def test_module_file_runs_as_a_program_with_an_args_file(tmp_path, source):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"dest": str(tmp_path / "dest"), "shards": source, "_ansible_check_mode": True}}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    completed = subprocess.run([sys.executable, MODULE_PATH, str(args_file)], env=env, capture_output=True, text=True, check=False)
    result = json.loads(completed.stdout)
    assert completed.returncode == 0, completed.stderr
    assert (result["changed"], result["fetched"]) == (True, 3)
    assert not (tmp_path / "dest").exists()


def test_streamed_shards_are_listed_not_fetched_and_their_local_copies_pruned(tmp_path, capsys, monkeypatch, source):
    dest = tmp_path / "dest"
    run_module(capsys, monkeypatch, dict(dest=str(dest), shards=source))  # all three cached before
    streamed_file = tmp_path / "streamed.json"
    streamed = [{"name": "chunks-000001.tar", "url": "http://store/ds/chunks-000001.tar"},
                {"name": "chunks-000002.tar", "url": "http://store/ds/chunks-000002.tar"}]
    streamed_file.write_text(json.dumps(streamed))

    result = run_module(capsys, monkeypatch, dict(dest=str(dest), shards=source[:1], streamed_file=str(streamed_file),
                                                  prune=True, handoff_ranks=2))

    assert result["_exit_code"] == 0 and result["removed"] == 2
    assert sorted(name for name in os.listdir(dest) if name.endswith(".tar")) == ["chunks-000000.tar"]
    assert (dest / "shards.txt").read_text().split() == [str(dest / "chunks-000000.tar")] + [s["url"] for s in streamed]
    assert (dest / "ranks" / "rank-0001.txt").read_text().split() == [streamed[0]["url"]]


def test_a_streamed_list_with_a_bad_url_fails_naming_it(tmp_path, capsys, monkeypatch, source):
    streamed_file = tmp_path / "streamed.json"
    streamed_file.write_text(json.dumps([{"name": "x.tar", "url": "ftp://store/x.tar"}]))
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), shards=source, streamed_file=str(streamed_file)))
    assert result["failed"] is True and "ftp://store/x.tar" in result["msg"]


def test_credentials_are_never_in_the_module_output(tmp_path, capsys, monkeypatch, source):
    secret = "m0dule-s3cret"
    shards = [dict(shard) for shard in source] + [{"name": "gone.tar", "url": "http://127.0.0.1:9/gone.tar"}]
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), shards=shards, retries=0, timeout=2,
                                                  url_username="reader", url_password=secret,
                                                  headers={"X-Api-Key": secret}, proxy="http://u:%s@127.0.0.1:9" % secret))
    assert result["_exit_code"] == 1 and result["fetched"] == 3
    assert [failure["name"] for failure in result["failed_shards"]] == ["gone.tar"]
    assert secret not in json.dumps(result)


def test_secrets_come_from_an_access_file_that_is_gone_once_read(tmp_path, capsys, monkeypatch, source):
    """The action ships headers, url_password, proxy and peer_token as access_file, out of the async job's payload."""
    secret = "f1le-s3cret"
    access = tmp_path / "access.json"
    access.write_text(json.dumps({"url_username": "reader", "url_password": secret, "headers": {"X-Api-Key": secret},
                                  "proxy": "http://u:%s@127.0.0.1:9" % secret}))
    seen = {}

    def stage(*args, **kwargs):
        seen.update(kwargs["source_access"], access_exists=access.exists())
        raise shard_fetch.StagingError("stopped here, with %s in the message" % secret)

    monkeypatch.setattr(shard_fetch, "stage", stage)
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), shards=source, access_file=str(access)))
    assert seen == {"url_username": "reader", "url_password": secret, "headers": {"X-Api-Key": secret},
                    "proxy": "http://u:%s@127.0.0.1:9" % secret, "ca_file": None, "access_exists": False}
    assert result["_exit_code"] == 1 and secret not in json.dumps(result)


@pytest.mark.parametrize("content, extra, message", [
    ('{"url_password": "x"}', {"url_password": "y"}, "give access_file or url_password, not both"),
    ('{"password": "x"}', {}, "must be a JSON object with only headers, url_username, url_password, proxy, peer_token"),
    ("{half", {}, "could not be read"),
])
def test_a_bad_access_file_fails_naming_it_and_is_removed(tmp_path, capsys, monkeypatch, source, content, extra, message):
    access = tmp_path / "access.json"
    access.write_text(content)
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), shards=source, access_file=str(access), **extra))
    assert result["_exit_code"] == 1 and message in result["msg"] and not access.exists()


def test_a_peer_file_needs_a_token_from_the_arguments_or_the_access_file(tmp_path, capsys, monkeypatch, source):
    result = run_module(capsys, monkeypatch, dict(dest=str(tmp_path / "dest"), shards=source, peer_file="/x/peer.json"))
    assert result["_exit_code"] == 1 and "required by 'peer_file': peer_token" in result["msg"]
