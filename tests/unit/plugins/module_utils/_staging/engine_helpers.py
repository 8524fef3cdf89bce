# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the shard engine's tests share: fast retry settings and checks of a dest directory."""

import hashlib
import json
import os

FAST = dict(backoff=0.001, backoff_max=0.01, timeout=5)
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
KIB = 1024
MIB = 1024 * 1024


def sha256_of(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def read_journal(path):
    with open(path) as handle:
        return journal_entries(handle.read())


def journal_entries(text):
    """What a journal (its JSON text) records, read from its on-disk columns: name -> [size, mtime_ns, sha256, validator]."""
    columns = json.loads(text)
    assert columns["version"] == 2
    return dict((name, list(entry)) for name, *entry in
                zip(columns["names"], columns["sizes"], columns["mtimes"], columns["sha256"], columns["validators"]))


def visible(dest):
    return sorted(name for name in os.listdir(dest) if not name.startswith("."))


def hidden_partials(dest):
    return sorted(name for name in os.listdir(dest) if name.endswith(".part") or name.endswith(".part.state"))


def snapshot(dest):
    result = {}
    for name in os.listdir(dest):
        info = os.lstat(os.path.join(dest, name))
        with open(os.path.join(dest, name), "rb") as handle:
            result[name] = (info.st_size, info.st_mtime_ns, hashlib.sha256(handle.read()).hexdigest())
    return result


def assert_staged(dest, contents):
    for name, data in contents.items():
        assert sha256_of(os.path.join(dest, name)) == hashlib.sha256(data).hexdigest(), name


def outside_target(tmp_path, name="precious", size=150 * KIB):
    """A file outside any dest (a stand-in for /etc/shadow) with an old mtime, so that a write would show in fingerprint()."""
    directory = tmp_path / "outside"
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_bytes(os.urandom(size))
    os.utime(str(path), ns=(1000000000 * 10 ** 9, 1000000000 * 10 ** 9))
    return path


def fingerprint(path):
    """(bytes, mtime_ns) of a file, to show it untouched."""
    return path.read_bytes(), os.stat(str(path)).st_mtime_ns


def plant_link(link, target):
    """A symbolic link at link pointing to target (which need not exist)."""
    os.symlink(str(target), str(link))
    return link
