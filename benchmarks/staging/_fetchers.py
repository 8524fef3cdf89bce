# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The contenders: each fetches a shard list from nginx into an empty directory, the way a user would run it.

Every fetcher writes its inputs (shard list, URL list, playbook) into its own scratch directory before the
clock starts; `fetch()` is what is timed. Peers run without checksum verification (their fastest form), so
the comparison never favours the engine; the engine runs as the role runs it, with every shard's sha256.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from _server import find_command

MODULE_UTILS = ("ansible_collections", "dlinfra", "gpu_cluster", "plugins", "module_utils")
# Where a checkout keeps the engine's entry point (run with python -m) and its journal module: the private package
# _staging, or, in a checkout from before the engine moved there (--engine-b), one shard_*.py module each.
ENGINE_LAYOUTS = ((("_staging", "transfer"), ("_staging", "journal.py")), (("shard_transfer",), ("shard_dest.py",)))
COLLECTIONS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "collections")
# The role's default (shard_staging_concurrency); peers get twice as many parallel transfers.
ENGINE_CONCURRENCY = 8
PEER_PARALLELISM = 16
GET_URL_PLAYBOOK = """\
- name: Fetch each shard with get_url
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Fetch one shard
      ansible.builtin.get_url:
        url: "{{ item.url }}"
        dest: "{{ bench_dest }}/{{ item.name }}"
        mode: "0644"
      loop: "{{ bench_shards }}"
      loop_control:
        label: "{{ item.name }}"
"""


class ToolFailed(Exception):
    """The tool exited non-zero, timed out, or reported failed shards."""


def run_logged(command, log_path, timeout, env=None, cwd=None):
    """Run a command with its output in log_path; raise ToolFailed with the log's tail when it fails."""
    with open(log_path, "wb") as log:
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ToolFailed("%s ran longer than %d s" % (os.path.basename(command[0]), timeout))
    if done.returncode != 0:
        with open(log_path, "rb") as log:
            tail = log.read()[-600:].decode("utf-8", "replace").strip()
        raise ToolFailed("%s exited %d: %s" % (os.path.basename(command[0]), done.returncode, tail))


class Fetcher(object):
    """A tool that fetches shards. `prepare()` writes its inputs; `fetch()` is timed; `missing()` says why it cannot run."""

    name = ""
    label = ""
    command = None

    def __init__(self, scratch, timeout):
        self.scratch = scratch
        self.timeout = timeout
        self.inputs = None

    def missing(self):
        if self.command and find_command(self.command) is None:
            return "%s is not installed" % self.command
        return None

    def prepare(self, case, shards, dest):
        """Write the tool's inputs for fetching `shards` into dest."""
        os.makedirs(self.scratch, exist_ok=True)
        self.inputs = self._write_inputs(case, shards, dest)

    def _write_inputs(self, case, shards, dest):
        raise NotImplementedError

    def warm(self):
        """Read the tool's inputs back into the page cache: on a node they were just written (the role copies the shard
        list to the node right before the fetch), so a dropped cache must not make any tool read them from the disk."""
        for entry in os.scandir(self.scratch):
            if entry.is_file(follow_symlinks=False) and entry.name != "log.txt":
                with open(entry.path, "rb") as handle:
                    while handle.read(1 << 20):
                        pass

    def fetch(self):
        """Do the transfer; return details worth keeping (may be empty)."""
        run_logged(self.inputs, os.path.join(self.scratch, "log.txt"), self.timeout)
        return {}

    def _path(self, name):
        return os.path.join(self.scratch, name)


class Engine(Fetcher):
    """The engine's stage() (_staging/transfer.py) through its command-line entry point: a fresh Python process, as the
    module's is."""

    name = "engine"
    label = "engine (this role)"
    collections_dir = COLLECTIONS_DIR

    def _write_inputs(self, case, shards, dest):
        shard_list = case.write_shard_list(self._path("shards.json"), shards)
        config = {"shards_file": shard_list, "dest": dest, "concurrency": ENGINE_CONCURRENCY}
        with open(self._path("config.json"), "w") as handle:
            json.dump(config, handle)
        return [sys.executable, "-m", engine_layout(self.collections_dir)[0], self._path("config.json")]

    def fetch(self):
        env = dict(os.environ, PYTHONPATH=self.collections_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
        try:
            done = subprocess.run(self.inputs, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                                  timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ToolFailed("the engine ran longer than %d s" % self.timeout)
        lines = done.stdout.strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, ValueError):
            raise ToolFailed("the engine exited %d without a result: %s" % (done.returncode, done.stderr.strip()[-600:]))
        if done.returncode != 0 or "error" in result:
            failed = result.get("failed_shards") or []
            raise ToolFailed("the engine exited %d: %s" % (done.returncode, result.get("error") or result.get("errors") or failed[:3]))
        keep = ("fetched", "confirmed", "verified", "fetched_bytes", "elapsed", "throughput", "changed", "warnings")
        return {key: result[key] for key in keep if key in result}


class EngineInlineList(Engine):
    """The engine given its shard list inline in the config: every shard is parsed, checked and planned against the
    journal, as on a re-run whose shard-list file differs from the last complete run's."""

    name = "engine-inline"
    label = "engine, list inline (parsed and planned)"

    def _write_inputs(self, case, shards, dest):
        with open(self._path("config.json"), "w") as handle:
            json.dump({"shards": shards, "dest": dest, "concurrency": ENGINE_CONCURRENCY}, handle)
        return [sys.executable, "-m", engine_layout(self.collections_dir)[0], self._path("config.json")]


def engine_layout(collections_dir):
    """(the engine's entry module, the path of its journal module) in the checkout under collections_dir."""
    module_utils = os.path.join(collections_dir, *MODULE_UTILS)
    for entry, journal in ENGINE_LAYOUTS:
        if os.path.isfile(os.path.join(module_utils, *entry) + ".py"):
            break
    else:
        entry, journal = ENGINE_LAYOUTS[0]
    return ".".join(MODULE_UTILS + entry), os.path.join(module_utils, *journal)


def journal_version(collections_dir):
    """The journal format of the engine under collections_dir (JOURNAL_VERSION in its journal module; 1 where it has none)."""
    path = engine_layout(collections_dir)[1]
    try:
        with open(path) as handle:
            found = re.search(r"^JOURNAL_VERSION = (\d+)$", handle.read(), re.MULTILINE)
    except OSError:
        return 1
    return int(found.group(1)) if found else 1


def engine_from(checkout, letter="b"):
    """The Engine class for another checkout of this repository (an A/B comparison in one run, e.g. before a change);
    its rows are named engine-<letter>."""
    collections_dir = os.path.join(os.path.abspath(checkout), "collections")
    if not os.path.isdir(os.path.join(collections_dir, "ansible_collections", "dlinfra", "gpu_cluster", "plugins")):
        raise ValueError("%s is not a checkout of this repository (no collections/ansible_collections/dlinfra/gpu_cluster)" % checkout)
    label = "engine of %s" % os.path.basename(os.path.abspath(checkout))
    return type("Engine" + letter.upper(), (Engine,), {"name": "engine-" + letter, "label": label, "collections_dir": collections_dir})


ROLE_PLAYBOOK = """\
- name: Stage the benchmark's dataset with the shard_staging role, as a user runs it
  hosts: stage_targets
  gather_facts: false
  roles:
    - role: dlinfra.gpu_cluster.shard_staging
"""


class RolePath(Fetcher):
    """The shard_staging role through ansible-playbook (connection local), as a user runs it: its defaults (concurrency 8,
    poll interval 10 s) but the dataset, its index (a wids JSON with sizes and sha256, so no HEAD requests) and the
    plan directory. Everything the role does is timed: probe, plan on the controller, the async fetch and its polling,
    the hand-off lists."""

    name = "role"
    label = "shard_staging role (ansible-playbook)"
    command = "ansible-playbook"
    HANDOFF = ("shards.txt", "sources.txt", "ranks", "ranks.json", "world.json")

    def missing(self):
        return None if GetUrlLoop._playbook_command() else "ansible-playbook is not installed"

    def _write_inputs(self, case, shards, dest):
        base = shards[0]["url"].rsplit("/", 1)[0]
        index = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": case.name,
                 "shardlist": [{"url": shard["url"], "nsamples": 1, "filesize": shard["size"], "sha256": shard["sha256"]} for shard in shards]}
        # Beside the case's directory, not in it: rclone copies that whole directory.
        index_name = "%s-index.json" % case.name
        with open(os.path.join(os.path.dirname(case.source_dir), index_name), "w") as handle:
            json.dump(index, handle)
        if [shard["name"] for shard in shards] != case.shard_names():
            raise ValueError("the role stages the case's whole brace pattern; it cannot take a subset")
        source = "%s/shard-{%06d..%06d}.tar" % (base, 0, len(shards) - 1)
        index_url = "%s/%s" % (base.rsplit("/", 1)[0], index_name)
        datasets = {"shard_staging_datasets": [{"name": case.name, "source": source, "index": index_url, "dest": dest}],
                    "shard_staging_plan_dir": self._path("plan")}
        with open(self._path("vars.json"), "w") as handle:
            json.dump(datasets, handle)
        with open(self._path("inventory.ini"), "w") as handle:
            handle.write("[stage_targets]\nlocalhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
        with open(self._path("site.yml"), "w") as handle:
            handle.write(ROLE_PLAYBOOK)
        return [GetUrlLoop._playbook_command(), "-i", self._path("inventory.ini"), "-e", "@" + self._path("vars.json"), self._path("site.yml")]

    def fetch(self):
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_DIR, ANSIBLE_PIPELINING="True", ANSIBLE_LOCALHOST_WARNING="False",
                   ANSIBLE_LOCAL_TEMP=self._path("ansible-local"), ANSIBLE_REMOTE_TMP=self._path("ansible-remote"),
                   ANSIBLE_CONFIG=self._path("absent.cfg"), ANSIBLE_NOCOLOR="1")
        run_logged(self.inputs, self._path("log.txt"), self.timeout, env=env, cwd=self.scratch)
        return {}


class Aria2(Fetcher):
    name = "aria2c"
    label = "aria2c -i, -j%d -x1" % PEER_PARALLELISM
    command = "aria2c"

    def _write_inputs(self, case, shards, dest):
        with open(self._path("input.txt"), "w") as handle:
            for shard in shards:
                handle.write("%s\n  out=%s\n" % (shard["url"], shard["name"]))
        return [find_command("aria2c"), "--no-conf", "--quiet", "-i", self._path("input.txt"), "-d", dest,
                "-j", str(PEER_PARALLELISM), "-x", "1", "--file-allocation=none", "--auto-file-renaming=false",
                "--allow-overwrite=true", "--summary-interval=0", "--max-tries=3"]


class Aria2Sha256(Aria2):
    """aria2c given every shard's sha256 (``checksum=sha-256=...`` per URL): a peer that verifies, as the engine does."""

    name = "aria2c-sha256"
    label = "aria2c -i, -j%d -x1, sha-256 per file" % PEER_PARALLELISM

    def _write_inputs(self, case, shards, dest):
        command = super()._write_inputs(case, shards, dest)
        with open(self._path("input.txt"), "w") as handle:
            for shard in shards:
                handle.write("%s\n  out=%s\n  checksum=sha-256=%s\n" % (shard["url"], shard["name"], shard["sha256"]))
        return command


class Rclone(Fetcher):
    name = "rclone"
    label = "rclone copy :http:, --transfers %d" % PEER_PARALLELISM
    command = "rclone"

    def _write_inputs(self, case, shards, dest):
        if len(shards) != case.count:
            raise ValueError("rclone copies the case's whole directory; it cannot take a subset")
        open(self._path("rclone.conf"), "w").close()
        directory_url = shards[0]["url"].rsplit("/", 1)[0] + "/"
        return [find_command("rclone"), "--config", self._path("rclone.conf"), "copy", ":http:", dest, "--http-url", directory_url,
                "--http-no-head", "--transfers", str(PEER_PARALLELISM), "--checkers", str(PEER_PARALLELISM), "--no-check-dest",
                "--retries", "1", "--low-level-retries", "3", "-q"]


class SequentialCurl(Fetcher):
    """One curl process given every URL: one shard at a time over one keep-alive connection."""

    name = "curl"
    label = "curl, sequential (one process, all URLs)"
    command = "curl"
    output = None

    def _write_inputs(self, case, shards, dest):
        with open(self._path("curl.conf"), "w") as handle:
            for shard in shards:
                target = self.output or os.path.join(dest, shard["name"])
                handle.write('url = "%s"\noutput = "%s"\n' % (shard["url"], target))
        return [find_command("curl"), "--silent", "--show-error", "--fail", "--fail-early", "--config", self._path("curl.conf")]


class StreamToNull(SequentialCurl):
    """The network limit: the same bytes in one HTTP stream into /dev/null, nothing written to disk."""

    name = "stream-null"
    label = "limit: one stream to /dev/null (curl)"
    output = "/dev/null"


# Reads a byte stream from stdin, hashes it with hashlib's sha256 (the engine's hash) and prints the byte count.
HASH_STDIN = """\
import hashlib, sys
hasher, reader, buffer = hashlib.sha256(), sys.stdin.buffer.raw, bytearray(1 << 20)
view, total = memoryview(buffer), 0
while True:
    count = reader.readinto(buffer)
    if not count:
        break
    hasher.update(view[:count])
    total += count
print(total, hasher.hexdigest())
"""


class StreamThroughSha256(SequentialCurl):
    """What verification costs: the same single stream, piped through sha256 in a Python process; no disk writes.

    Not a target of the issue; it shows how much of the one-stream limit is left once every byte is hashed."""

    name = "stream-hash"
    label = "limit: one stream through sha256 (curl | hashlib)"
    output = "-"
    expected_bytes = 0

    def _write_inputs(self, case, shards, dest):
        self.expected_bytes = sum(shard["size"] for shard in shards)
        return super()._write_inputs(case, shards, dest)

    def fetch(self):
        with open(os.path.join(self.scratch, "log.txt"), "wb") as log:
            curl = subprocess.Popen(self.inputs, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
            try:
                hashed = subprocess.run([sys.executable, "-c", HASH_STDIN], stdin=curl.stdout, capture_output=True, text=True,
                                        timeout=self.timeout, check=False)
            except subprocess.TimeoutExpired:
                curl.kill()
                raise ToolFailed("hashing the stream ran longer than %d s" % self.timeout)
            finally:
                curl.stdout.close()
                curl.wait()
        if curl.returncode != 0 or hashed.returncode != 0:
            raise ToolFailed("curl exited %d, the hasher %d: %s" % (curl.returncode, hashed.returncode, hashed.stderr.strip()[-300:]))
        count = int(hashed.stdout.split()[0])
        if count != self.expected_bytes:
            raise ToolFailed("hashed %d bytes, expected %d" % (count, self.expected_bytes))
        return {}


class GetUrlLoop(Fetcher):
    """ansible-playbook, connection local, one ansible.builtin.get_url task item per shard (pipelining on)."""

    name = "get_url"
    label = "ansible.builtin.get_url loop"
    command = "ansible-playbook"

    def missing(self):
        return None if self._playbook_command() else "ansible-playbook is not installed"

    @staticmethod
    def _playbook_command():
        beside_python = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
        return beside_python if os.access(beside_python, os.X_OK) else find_command("ansible-playbook")

    def _write_inputs(self, case, shards, dest):
        with open(self._path("get_url.yml"), "w") as handle:
            handle.write(GET_URL_PLAYBOOK)
        with open(self._path("vars.json"), "w") as handle:
            json.dump({"bench_dest": dest, "bench_shards": [{"name": shard["name"], "url": shard["url"]} for shard in shards]}, handle)
        return [self._playbook_command(), "-i", "localhost,", "-e", "@" + self._path("vars.json"),
                "-e", "ansible_python_interpreter=" + sys.executable, self._path("get_url.yml")]

    def fetch(self):
        env = dict(os.environ, ANSIBLE_PIPELINING="True", ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
                   ANSIBLE_LOCAL_TEMP=self._path("ansible-local"), ANSIBLE_REMOTE_TMP=self._path("ansible-remote"),
                   ANSIBLE_CONFIG=self._path("absent.cfg"), ANSIBLE_NOCOLOR="1")
        run_logged(self.inputs, self._path("log.txt"), self.timeout, env=env, cwd=self.scratch)
        return {}


FETCHERS = (Engine, RolePath, Aria2, Aria2Sha256, Rclone, SequentialCurl, GetUrlLoop)
