# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard list: every kind of bad shard is named before anything happens; shards files as a list or an object."""

import json

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging import input as engine_input
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url

from engine_helpers import FAST


@pytest.mark.parametrize("bad, problem", [
    ({"name": "../escape.tar", "url": "http://127.0.0.1/x"}, "without '/'"),
    ({"name": ".hidden.tar", "url": "http://127.0.0.1/x"}, "must not start with '.'"),
    ({"name": "a.tar", "url": "ftp://127.0.0.1/x"}, "url must be an http://"),
    ({"name": "a.tar", "url": "http://127.0.0.1/x", "sha256": "abc"}, "sha256 must be 64 hex digits"),
    ({"name": "a.tar", "url": "http://127.0.0.1/x", "size": -1}, "size must be a non-negative integer"),
    ({"name": "a.tar", "url": "http://127.0.0.1/x", "md5": "x"}, "unknown keys md5"),
    ("a.tar", "is not a mapping"),
])
def test_invalid_shards_are_rejected_before_anything_happens(tmp_path, bad, problem):
    with pytest.raises(StagingError, match="invalid shard list") as raised:
        stage([bad], str(tmp_path / "dest"), **FAST)
    assert problem in str(raised.value)
    assert not (tmp_path / "dest").exists()


GOOD_DIGEST = "ab" * 32


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("bad, problem", [
    ({"name": "", "url": "http://127.0.0.1/x"}, "non-empty string"),
    ({"name": "a\0.tar", "url": "http://127.0.0.1/x"}, "without '/'"),
    ({"name": "dir/a.tar", "url": "http://127.0.0.1/x"}, "without '/'"),
    ({"name": ".hidden.tar", "url": "http://127.0.0.1/x"}, "must not start with '.'"),
    ({"name": "x" * 300, "url": "http://127.0.0.1/x"}, "is longer than"),
    ({"name": 7, "url": "http://127.0.0.1/x"}, "non-empty string"),
    ({"name": "bad.tar", "url": None}, "url must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "size": True}, "size must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "size": 1.5}, "size must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "sha256": "g" * 64}, "sha256 must be"),
    ({"name": "bad.tar", "url": "http://127.0.0.1/x", "sha256": GOOD_DIGEST + "\n"}, "sha256 must be"),
    ({"name": "good.tar", "url": "http://127.0.0.1/x"}, "duplicate name"),
])
def test_a_bad_shard_anywhere_in_a_long_list_is_named(tmp_path, bad, problem, position):
    # Valid lists take a list-wide fast path; a bad shard at the start, middle or end must still be caught by it.
    shards = [{"name": "s%03d.tar" % i, "url": "http://127.0.0.1/%d" % i, "size": i, "sha256": GOOD_DIGEST} for i in range(50)]
    shards.insert({0: 0, 1: 25, 2: 50}[position], dict(bad))
    shards.append({"name": "good.tar", "url": "http://127.0.0.1/good"})
    with pytest.raises(StagingError, match="invalid shard list") as raised:
        engine_input.normalize_shards(shards)
    assert problem in str(raised.value)


def test_uppercase_digests_are_accepted_and_lowered():
    shards = engine_input.normalize_shards([{"name": "a.tar", "url": "file:///a", "sha256": "AB" * 32},
                                            {"name": "b.tar", "url": "file:///b", "sha256": "ab" * 32}])
    assert [shard.sha256 for shard in shards] == ["ab" * 32, "ab" * 32]


def test_duplicate_names_are_rejected(tmp_path):
    shards = [{"name": "a.tar", "url": "http://127.0.0.1/1"}, {"name": "a.tar", "url": "http://127.0.0.1/2"}]
    with pytest.raises(StagingError, match="duplicate name"):
        stage(shards, str(tmp_path), **FAST)


def test_shards_file_accepts_a_list_or_an_object(tmp_path):
    shards = [{"name": "a.tar", "url": "http://127.0.0.1/a.tar"}]
    (tmp_path / "list.json").write_text(json.dumps(shards))
    (tmp_path / "object.json").write_text(json.dumps({"shards": shards}))
    assert engine_input.load_shards_file(str(tmp_path / "list.json")) == shards
    assert engine_input.load_shards_file(str(tmp_path / "object.json")) == shards
    with pytest.raises(StagingError, match="cannot read shards_file"):
        engine_input.load_shards_file(str(tmp_path / "absent.json"))


@pytest.mark.parametrize("url, shown", [
    ("http://store/yt8m/a.tar", "http://store/yt8m/a.tar"),
    ("https://reader:s3cret@store:8443/a.tar", "https://***@store:8443/a.tar"),
    ("https://token@store/a.tar", "https://***@store/a.tar"),
    ("https://bucket.s3/a.tar?X-Amz-Credential=AK%2F1&X-Amz-Signature=f00d&flag", "https://bucket.s3/a.tar?X-Amz-Credential=***&X-Amz-Signature=***&flag"),
    ("http://u:p@[::1]:80/a.tar?sig=1", "http://***@[::1]:80/a.tar?sig=***"),
    ("file:///data/a.tar", "file:///data/a.tar"),
])
def test_redact_url_hides_user_info_and_query_values(url, shown):
    assert redact_url(url) == shown
