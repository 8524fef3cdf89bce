# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark shard staging against aria2c, rclone, curl and get_url, from one local nginx, on one machine.

    .venv/bin/python benchmarks/staging/run.py --json benchmarks/staging/results/full.json    # full: ~20 min, ~9 GiB disk, ~5 GiB tmpfs
    .venv/bin/python benchmarks/staging/run.py --quick                                        # correctness only, seconds

Cases: (a) 64 shards of 64 MiB, (b) 20,000 shards of 64 KiB, each fetched into an empty directory by every
tool, nginx serving them from tmpfs; the physical limits for the same bytes (one HTTP stream to /dev/null, and
plain writes of the same files); a no-op re-run over 1,000,000 staged shards against `rsync -a --dry-run`; and
planning 100,000 shards over 1,000 nodes with 2 replicas (bench_plan.run). Tools alternate round by round and
each row is the median of its rounds. Every timed fetch ends with a sync, so each tool is charged for getting
its bytes to disk. Prints a table and the issue's targets; exit status 0 when all ran
and passed, 1 when a target failed (full mode only), 2 when a measurement failed, 3 when nginx is unavailable,
130 when interrupted (Ctrl-C or SIGTERM: nginx is stopped and the scratch directory removed first; nginx also dies
with a benchmark that is killed outright).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import bench_plan
from _dataset import Case, check_copy, random_pattern, write_same_files
from _fetchers import (FETCHERS, Engine, EngineInlineList, RolePath, StreamThroughSha256, StreamToNull, ToolFailed, engine_from, journal_version,
                       run_logged)
from _server import PACKAGES, Nginx, ServerUnavailable, ensure_packages, find_command, sync_and_drop_caches

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
MODES = {
    "full": dict(big=(64, 64 * MIB), small=(20000, 64 * KIB), get_url_subset=200, noop=(1000000, KIB), runs=3, timeout=1200),
    # quick: correctness only. get_url runs over 3 shards per case: each is a task item of ~1 s, and 18 of them were
    # 22 s of the 46 s quick run here.
    "quick": dict(big=(8, MIB), small=(200, 4 * KIB), get_url_subset=3, noop=(2000, KIB), runs=1, timeout=120),
}
PLAN_LABEL = {"full": "100,000 shards x 1,000 nodes x 2 replicas", "quick": "2,000 shards x 50 nodes x 2 replicas"}
# Space beyond the data itself: file system overhead of small files (4 KiB blocks) and a margin.
SMALL_FILE_BLOCK = 4 * KIB
SPACE_MARGIN = 1 * GIB
# Issue 16's targets for the no-op re-run, and the CPU count from which (a) is also judged against the physical limit:
# on fewer cores hashing every byte cannot keep up with the loopback (see the README).
NOOP_TARGET_SECONDS = 10.0
LIMIT_TARGET_CPUS = 8


class Measure(object):
    """One row's work: before() untimed, body() timed up to a closing sync, after(details) checks the result.

    `rounds` caps how many rounds it takes part in (get_url runs once: minutes per run); `scale` turns a subset's time
    into the whole case's (get_url in (b))."""

    def __init__(self, tool, label, body, before=None, after=None, rounds=None, scale=1.0, note="", warm=None):
        self.tool, self.label, self.body, self.note, self.rounds, self.scale = tool, label, body, note, rounds, scale
        self.before = before or (lambda: None)
        # Untimed, after the page cache is dropped: read back what the tool was just given (Fetcher.warm).
        self.warm = warm or (lambda: None)
        self.after = after or (lambda details: None)
        self.times, self.details, self.failure = [], {}, None


class Bench(object):
    """One benchmark run: its mode, scratch space, log and the rows of the table."""

    def __init__(self, mode, runs, workdir, source_root, other_engines=()):
        self.mode = mode
        self.settings = MODES[mode]
        self.quick = mode == "quick"
        self.runs = runs
        self.work = workdir
        self.source_root = source_root
        self.source_fs = "disk"
        # Other checkouts' engines, measured alternating with this one (--engine-b).
        self.other_engines = tuple(other_engines)
        self.fetchers = FETCHERS[:1] + self.other_engines + FETCHERS[1:]
        self.started = time.monotonic()
        self.rows = []
        self.cache_drops = []
        self.hashed = "all" if self.quick else "ends"
        self.nginx = None

    def log(self, message):
        sys.stderr.write("[%6.1f s] %s\n" % (time.monotonic() - self.started, message))
        sys.stderr.flush()

    def path(self, *names):
        return os.path.join(self.work, *names)

    def settle(self):
        """Before each timed run: flush dirty pages and, in full mode, drop the page cache (recording whether it worked)."""
        dropped = sync_and_drop_caches(drop=not self.quick)
        if dropped is not None:
            self.cache_drops.append(dropped)

    # -- rows ------------------------------------------------------------------------------------

    def add_row(self, case, tool, label, status="ok", seconds=None, nbytes=0, files=0, note="", details=None):
        row = {"case": case, "tool": tool, "label": label, "status": status, "seconds": seconds, "bytes": nbytes, "files": files,
               "note": note, "details": details or {}}
        if seconds:
            row["mb_per_s"] = round(nbytes / seconds / 1e6, 1)
            row["files_per_s"] = round(files / seconds, 1)
        self.rows.append(row)
        shown = "%.2f s" % seconds if seconds else status
        self.log("  %s / %s: %s" % (case, tool, shown))
        return row

    def run_once(self, measure):
        """One timed run of measure; returns (seconds, details) or raises ToolFailed."""
        measure.before()
        self.settle()
        measure.warm()
        errors_before = len(self.nginx.logged_errors())
        started = time.perf_counter()
        details = measure.body() or {}
        os.sync()
        seconds = time.perf_counter() - started
        new_errors = self.nginx.logged_errors()[errors_before:]
        if new_errors:
            raise ToolFailed("nginx logged %d errors during the run, e.g. %s" % (len(new_errors), new_errors[0][-200:]))
        measure.after(details)
        return seconds, details

    def run_rounds(self, title, measures, nbytes, files):
        """Alternate the measures round by round (each round starts one further along the list) and add one row each,
        with the median of its rounds: a slow spell of the machine then falls on every tool alike."""
        for number in range(self.runs):
            shift = number % len(measures)
            for measure in measures[shift:] + measures[:shift]:
                if measure.failure or (measure.rounds is not None and number >= measure.rounds):
                    continue
                self.log("%s, round %d: %s" % (title, number + 1, measure.label))
                try:
                    seconds, measure.details = self.run_once(measure)
                    measure.times.append(round(seconds, 3))
                except ToolFailed as exc:
                    measure.failure = "failed: %s" % exc
        for measure in measures:
            if measure.failure:
                self.add_row(title, measure.tool, measure.label, status=measure.failure)
                continue
            details = dict(measure.details, runs=measure.times)
            median = statistics.median(measure.times)
            if measure.scale != 1.0:
                details["measured_seconds"] = median
            self.add_row(title, measure.tool, measure.label, seconds=round(median * measure.scale, 3), nbytes=nbytes, files=files,
                         note=measure.note, details=details)

    # -- fetch cases -----------------------------------------------------------------------------

    def fetch_case(self, case):
        dest = self.path("dest")

        def empty_dest():
            _empty_dir(dest)

        measures = []
        for fetcher_class in self.fetchers:
            fetcher = fetcher_class(self.path("scratch", "%s-%s" % (case.name, fetcher_class.name)), self.settings["timeout"])
            reason = fetcher.missing()
            if reason:
                if fetcher.name == "engine":
                    raise RuntimeError("the engine cannot run: %s" % reason)
                self.add_row(case.title, fetcher.name, fetcher.label, status="skipped: " + reason)
                continue
            shards, note, rounds = case.shards, "", None
            if fetcher.name == "get_url":
                rounds = 1  # minutes per run in full mode; its figure is far from every other
                if case.count > self.settings["get_url_subset"]:
                    shards = case.shards[:self.settings["get_url_subset"]]
                    note = "%d of %d shards, time x%g (linear extrapolation)" % (len(shards), case.count, case.count / len(shards))
            fetcher.prepare(case, shards, dest)
            measures.append(Measure(fetcher.name, fetcher.label, fetcher.fetch, empty_dest, self._copy_check(fetcher.name, shards, dest),
                                    rounds=rounds, scale=case.count / len(shards), note=note, warm=fetcher.warm))
        for stream_class in (StreamToNull, StreamThroughSha256):
            stream = stream_class(self.path("scratch", "%s-%s" % (case.name, stream_class.name)), self.settings["timeout"])
            reason = stream.missing()
            if reason:
                self.add_row(case.title, stream.name, stream.label, status="skipped: " + reason)
                continue
            stream.prepare(case, case.shards, dest)
            note = "" if stream_class is StreamToNull else "not a target: the stream limit with every byte hashed"
            measures.append(Measure(stream.name, stream.label, stream.fetch, note=note, warm=stream.warm))
        pattern = random_pattern(min(case.size, 64 * MIB))
        measures.append(Measure("disk-write", "limit: disk writes of the same files, then sync",
                                lambda: write_same_files(dest, case.shards, pattern), empty_dest, self._copy_check("disk-write", case.shards, dest)))
        try:
            self.run_rounds(case.title, measures, case.total_bytes, case.count)
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    def _copy_check(self, tool, shards, dest):
        """After a run: the copy must be whole (sizes, and sha256 as self.hashed says), the engine must say it fetched
        every shard; then the copy is deleted, so that one copy at a time is on disk."""
        def check(details):
            try:
                problems = check_copy(dest, shards, hashed="none" if tool == "disk-write" else self.hashed,
                                      besides=RolePath.HANDOFF if tool == "role" else ())
                if tool.startswith("engine") and details.get("fetched") != len(shards):
                    problems.append("the engine reports %s shards fetched, expected %d" % (details.get("fetched"), len(shards)))
                if problems:
                    raise ToolFailed("wrong copy: " + "; ".join(problems))
            finally:
                shutil.rmtree(dest, ignore_errors=True)
        return check

    # -- no-op re-run ----------------------------------------------------------------------------

    def noop_case(self, case):
        """Stage the shards once with the engine (untimed, from file:// URLs of the same source: a million HTTP requests
        would only add minutes), copy the tree, then time the engine's re-run from the HTTP shard list against rsync's
        dry run, alternating."""
        staged, copy = self.path("noop-staged"), self.path("noop-copy")
        seeding = Engine(self.path("scratch", "noop-seed"), self.settings["timeout"])
        local = [dict(shard, url="file://" + os.path.join(case.source_dir, shard["name"])) for shard in case.shards]
        seeding.prepare(case, local, staged)
        self.log("%s: staging %d shards once with the engine (untimed)" % (case.title, case.count))
        first = seeding.fetch()
        problems = check_copy(staged, case.shards, hashed=self.hashed)
        if first.get("fetched") != case.count or problems:
            raise RuntimeError("staging the no-op tree failed: %s, %s" % (first, problems[:3]))
        engine = Engine(self.path("scratch", "noop-engine"), self.settings["timeout"])
        engine.prepare(case, case.shards, staged)

        def check_engine(details):
            if details.get("fetched") != 0 or details.get("confirmed") != case.count or details.get("changed"):
                raise ToolFailed("the re-run was not a no-op: %s" % details)

        # The run before a re-run was given the same shard-list file (the HTTP one, not the seeding's file:// one).
        self.log("%s: one untimed run with the HTTP shard list, as the run before a re-run" % case.title)
        check_engine(engine.fetch())
        measures = [Measure("engine", "engine re-run (journal)", engine.fetch, after=check_engine, warm=engine.warm)]
        inline = EngineInlineList(self.path("scratch", "noop-inline"), self.settings["timeout"])
        inline.prepare(case, case.shards, staged)
        measures.append(Measure(inline.name, inline.label + " re-run", inline.fetch, after=check_engine, warm=inline.warm))
        for other_class in self.other_engines:
            if journal_version(other_class.collections_dir) != journal_version(Engine.collections_dir):
                self.add_row(case.title, other_class.name, other_class.label + " re-run",
                             status="skipped: its journal format differs from this engine's, so the staged tree is not its no-op")
                continue
            other = other_class(self.path("scratch", "noop-" + other_class.name), self.settings["timeout"])
            other.prepare(case, case.shards, staged)
            measures.append(Measure(other.name, other.label + " re-run", other.fetch, after=check_engine, warm=other.warm))
        rsync = find_command("rsync")
        label = "rsync -a --dry-run (tree vs. its copy)"
        try:
            if rsync is None:
                self.add_row(case.title, "rsync", label, status="skipped: rsync is not installed")
            else:
                self.log("%s: copying the tree with rsync -a (untimed)" % case.title)
                run_logged([rsync, "-a", staged + "/", copy + "/"], self.path("scratch", "rsync-copy.log"), self.settings["timeout"])
                itemized = self.path("scratch", "rsync-dry-run.log")
                command = [rsync, "-a", "--dry-run", "--itemize-changes", staged + "/", copy + "/"]

                def check_rsync(_details):
                    with open(itemized) as handle:
                        changes = [line for line in handle.read().splitlines() if line.strip() and not line.rstrip().endswith(" ./")]
                    if changes:
                        raise ToolFailed("rsync's dry run found %d differences, e.g. %s" % (len(changes), changes[0]))

                measures.append(Measure("rsync", label, lambda: run_logged(command, itemized, self.settings["timeout"]), after=check_rsync))
            self.run_rounds(case.title, measures, 0, case.count)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
            shutil.rmtree(copy, ignore_errors=True)

    # -- planning --------------------------------------------------------------------------------

    def plan_case(self):
        self.log("plan: %s" % PLAN_LABEL[self.mode])
        result = bench_plan.run(self.quick)
        timings = result["timings_s"]
        key = next(key for key in timings if key.endswith("_2_replicas_numpy") or key.endswith("_2_replicas_pure"))
        status = "ok" if result.get("rerun_moves_nothing") else "failed: a re-run of the same plan moved shards"
        self.add_row("plan", "engine", "shard_plan.make_plan, %s" % PLAN_LABEL[self.mode], status=status,
                     seconds=timings[key], files=result["shards"], details=result)
        status = "ok" if result.get("plan_task_agrees") else "failed: the plan task's placement differs from make_plan's"
        self.add_row("plan task", "engine", "the role's plan task: plan, plan file, %d lists" % result["plan_task_files"], status=status,
                     seconds=result["plan_task_seconds"], files=result["shards"])


def _empty_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


# -- results -------------------------------------------------------------------------------------

def add_ratios(rows):
    """engine/tool: the engine's speed over the tool's on the same work (tool seconds / engine seconds); > 1 means the engine is faster."""
    engine_seconds = {row["case"]: row["seconds"] for row in rows if row["tool"] == "engine" and row["seconds"]}
    for row in rows:
        if row["seconds"] and row["case"] in engine_seconds:
            row["engine_ratio"] = round(row["seconds"] / engine_seconds[row["case"]], 2)


def _find(rows, case, tool):
    return next((row for row in rows if row["case"] == case and row["tool"] == tool and row["seconds"]), None)


def evaluate_targets(rows, big, small, noop, cpus=None):
    """The issues' targets, each (name, verdict, evidence); verdict is PASS, FAIL or 'n/a' when a figure is missing (or, for
    the physical limit, when the machine has fewer than LIMIT_TARGET_CPUS CPUs: the ratio is still shown)."""
    peers = ("aria2c", "aria2c-sha256", "rclone", "curl", "get_url")
    cpus = os.cpu_count() if cpus is None else cpus
    targets = []

    def fastest_peer(case):
        candidates = [row for row in rows if row["case"] == case and row["tool"] in peers and row["seconds"]]
        return min(candidates, key=lambda row: row["seconds"]) if candidates else None

    def target(name, engine, other, factor, strictly=False, judged=True, why_not=""):
        if engine is None or other is None:
            targets.append((name, "n/a", "a figure is missing"))
            return
        ratio = other["seconds"] / engine["seconds"]
        met = ratio > factor if strictly else ratio >= factor
        evidence = "%s/%s = %.2f (needs %s %g)" % (engine["tool"], other["tool"], ratio, ">" if strictly else ">=", factor)
        targets.append((name, ("PASS" if met else "FAIL") if judged else "n/a", evidence + why_not))

    engine = _find(rows, big, "engine")
    target("(a) engine >= the fastest peer", engine, fastest_peer(big), 1.0)
    target("(a) the role (ansible-playbook) >= the fastest peer", _find(rows, big, "role"), fastest_peer(big), 1.0)
    limits = [row for row in (_find(rows, big, "stream-null"), _find(rows, big, "disk-write")) if row]
    target("(a) engine >= 0.8x the physical limit, on >= %d CPUs" % LIMIT_TARGET_CPUS, engine,
           max(limits, key=lambda row: row["seconds"]) if limits else None, 0.8, judged=cpus >= LIMIT_TARGET_CPUS,
           why_not="" if cpus >= LIMIT_TARGET_CPUS else "; not judged on %d CPUs" % cpus)
    engine = _find(rows, small, "engine")
    target("(b) engine >= the fastest peer", engine, fastest_peer(small), 1.0)
    target("(b) the role (ansible-playbook) >= the fastest peer", _find(rows, small, "role"), fastest_peer(small), 1.0)
    target("(b) engine >= 20x the get_url loop", engine, _find(rows, small, "get_url"), 20.0)
    engine = _find(rows, noop, "engine")
    target("no-op re-run faster than rsync -a --dry-run", engine, _find(rows, noop, "rsync"), 1.0, strictly=True)
    if engine is None:
        targets.append(("no-op re-run <= %g s" % NOOP_TARGET_SECONDS, "n/a", "a figure is missing"))
    else:
        targets.append(("no-op re-run <= %g s" % NOOP_TARGET_SECONDS, "PASS" if engine["seconds"] <= NOOP_TARGET_SECONDS else "FAIL",
                        "%.2f s for %d shards" % (engine["seconds"], engine["files"])))
    for case, name in (("plan", "plan <= 5 s"), ("plan task", "the role's whole plan task <= 5 s")):
        plan = _find(rows, case, "engine")
        if plan is None:
            targets.append((name, "n/a", "a figure is missing"))
        else:
            targets.append((name, "PASS" if plan["seconds"] <= bench_plan.TARGET_SECONDS else "FAIL", "%.2f s" % plan["seconds"]))
    return targets


def format_table(rows):
    header = "%-28s %-14s %-44s %9s %12s %11s  %s" % ("case", "tool", "how", "seconds", "rate", "engine/tool", "note")
    lines = [header, "-" * len(header)]
    for row in rows:
        if not row["seconds"]:
            lines.append("%-28s %-14s %-44s %9s %12s %11s  %s" % (row["case"], row["tool"], row["label"][:44], "-", "-", "-", row["status"]))
            continue
        if row["bytes"] and row["case"].startswith("(a)"):
            rate = "%.0f MB/s" % row["mb_per_s"]
        else:
            rate = "%.0f files/s" % row["files_per_s"]
        ratio = "%.2fx" % row["engine_ratio"] if "engine_ratio" in row else "-"
        note = row["note"] if row["status"] == "ok" else row["status"]
        lines.append("%-28s %-14s %-44s %9.2f %12s %11s  %s" % (row["case"], row["tool"], row["label"][:44], row["seconds"], rate, ratio, note))
    return "\n".join(lines)


def tool_versions():
    probes = {"nginx": ["-v"], "aria2c": ["--version"], "rclone": ["version"], "curl": ["--version"], "rsync": ["--version"]}
    versions = {}
    for command, args in probes.items():
        path = find_command(command)
        if path:
            done = subprocess.run([path] + args, capture_output=True, text=True, timeout=30, check=False)
            versions[command] = ((done.stdout or done.stderr).strip().splitlines() or [""])[0]
    return versions


def _blocks(count, size):
    return count * -(-size // SMALL_FILE_BLOCK) * SMALL_FILE_BLOCK


def required_space(settings, sources_apart):
    """(bytes on the scratch file system, bytes where the sources go) at the run's peak. The cases' sources exist one
    at a time; the scratch holds one fetched copy, or the no-op's staged tree and its copy."""
    cases = [settings[key] for key in ("big", "small", "noop")]
    source = max(_blocks(*case) for case in cases)
    scratch = max(_blocks(*settings["big"]), _blocks(*settings["small"]), 2 * _blocks(*settings["noop"]))
    if sources_apart:
        return scratch + SPACE_MARGIN, source + SPACE_MARGIN
    return scratch + source + SPACE_MARGIN, 0


def _free_bytes(path):
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def _is_tmpfs(path):
    """Whether path lies on a tmpfs (the deepest mount point in /proc/mounts that contains it)."""
    path, best, fstype = os.path.realpath(path), "", None
    try:
        with open("/proc/mounts") as handle:
            for line in handle:
                fields = line.split()
                mount = fields[1].replace("\\040", " ")
                if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                    best, fstype = mount, fields[2]
    except OSError:
        return False
    return fstype == "tmpfs"


CASES = ("big", "small", "noop", "plan")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each, correctness checks only (no targets)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--runs", type=int, help="rounds, tools alternating; each row is the median (default: 3 in full mode, 1 in quick mode)")
    parser.add_argument("--workdir", metavar="DIR", help="where the scratch directory goes (default: the system's temp dir); needs ~9 GiB free "
                        "in full mode, ~13 GiB when the sources go there too")
    parser.add_argument("--source-dir", metavar="DIR", help="where nginx's data goes (default: /dev/shm when it is a tmpfs with room, "
                        "else the scratch directory)")
    parser.add_argument("--engine-b", metavar="CHECKOUT", action="append", default=[],
                        help="also measure the engine of another checkout of this repository (e.g. a git worktree of an older commit), "
                        "alternating with this one: an A/B comparison in one run; give it again for engine-c, engine-d")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (data, configs, logs) for inspection")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES),
                        help="measure only these cases (default: all); the targets of the others read n/a")
    args = parser.parse_args(argv)
    if args.runs is not None and not 1 <= args.runs <= 5:
        parser.error("--runs must be between 1 and 5")
    return args


def main(argv=None):
    args = parse_args(argv)
    # SIGTERM (a test's timeout, a CI's cancel) ends like Ctrl-C: through the finally blocks that stop nginx and remove
    # the scratch directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    mode = "quick" if args.quick else "full"
    settings = MODES[mode]
    missing = ensure_packages(["nginx"] if args.quick else list(PACKAGES), lambda message: sys.stderr.write(message + "\n"))
    if "nginx" in missing:
        sys.stderr.write("staging benchmark: nginx is unavailable (%s); it serves the data, so nothing can be measured\n" % missing["nginx"])
        return 3
    parent = args.workdir or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    source_parent = args.source_dir
    if source_parent is None:
        apart_needed = required_space(settings, True)[1]
        source_parent = "/dev/shm" if os.path.isdir("/dev/shm") and _is_tmpfs("/dev/shm") and _free_bytes("/dev/shm") >= apart_needed else None
    apart = source_parent is not None and os.stat(source_parent).st_dev != os.stat(parent).st_dev
    needed, needed_apart = required_space(settings, apart)
    for where, need in ((parent, needed), (source_parent, needed_apart)):
        if where and need and _free_bytes(where) < need:
            sys.stderr.write("staging benchmark: %s has %.1f GiB free, the %s mode needs %.1f GiB there; free space, or pass --workdir "
                             "or --source-dir on a larger file system\n" % (where, _free_bytes(where) / GIB, mode, need / GIB))
            return 2
    work = tempfile.mkdtemp(prefix="staging-bench-", dir=parent)
    os.chmod(work, 0o755)
    source_root = tempfile.mkdtemp(prefix="staging-bench-www-", dir=source_parent) if source_parent else os.path.join(work, "www")
    os.makedirs(source_root, exist_ok=True)
    os.chmod(source_root, 0o755)
    others = [engine_from(checkout, "bcdefgh"[number]) for number, checkout in enumerate(args.engine_b[:7])]
    bench = Bench(mode, args.runs or settings["runs"], work, source_root, others)
    if _is_tmpfs(source_root):
        bench.source_fs = "tmpfs"
    big = Case("big", "(a) %d x %d MiB" % (settings["big"][0], settings["big"][1] // MIB), *settings["big"])
    small = Case("small", "(b) %d x %d KiB" % (settings["small"][0], settings["small"][1] // KIB), *settings["small"])
    noop = Case("noop", "no-op re-run, %d shards" % settings["noop"][0], *settings["noop"])
    try:
        with Nginx(source_root, bench.path("nginx")) as nginx:
            bench.nginx = nginx
            bench.log("nginx on %s serving %s (%s); %s mode, median of %d rounds" % (nginx.base_url, source_root, bench.source_fs, mode, bench.runs))
            for case in [case for case in (big, small, noop) if case.name in args.cases]:
                bench.log("writing %s" % case.title)
                case.create(source_root, nginx.base_url)
                try:
                    if case is noop:
                        bench.noop_case(case)
                    else:
                        bench.fetch_case(case)
                finally:
                    case.remove_source()
        if "plan" in args.cases:
            bench.plan_case()
    except ServerUnavailable as exc:
        sys.stderr.write("staging benchmark: %s\n" % exc)
        return 3
    finally:
        if args.keep:
            sys.stderr.write("scratch kept in %s (sources deleted)\n" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
        if source_parent:
            shutil.rmtree(source_root, ignore_errors=True)
    return report(bench, args, (big.title, small.title, noop.title))


def report(bench, args, titles):
    rows = bench.rows
    add_ratios(rows)
    targets = evaluate_targets(rows, *titles)
    drops = "worked" if bench.cache_drops and all(bench.cache_drops) else ("failed (ignored)" if bench.cache_drops else "not tried (quick mode)")
    print("Staging benchmark, %s mode, median of %d round(s), tools alternating; %d CPUs, Python %s; sources on %s; "
          "page-cache drop before each run: %s" % (bench.mode, bench.runs, os.cpu_count(), platform.python_version(), bench.source_fs, drops))
    print("Rates: MB/s = 10^6 bytes/s. engine/tool = tool seconds / engine seconds on the same work (> 1: the engine is faster).")
    print(format_table(rows))
    failures = [row for row in rows if row["status"].startswith("failed")]
    print()
    if bench.quick:
        print("Targets (not enforced in quick mode):")
    else:
        print("Targets:")
    for name, verdict, evidence in targets:
        print("  %-4s  %-66s %s" % (verdict, name, evidence))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump({"mode": bench.mode, "runs": bench.runs, "source_fs": bench.source_fs, "cpus": os.cpu_count(), "python": platform.python_version(),
                       "kernel": platform.release(), "tools": tool_versions(), "page_cache_drop": drops, "rows": rows,
                       "targets": [{"target": name, "verdict": verdict, "evidence": evidence} for name, verdict, evidence in targets]},
                      handle, indent=2)
    if failures:
        return 2
    if not bench.quick and any(verdict == "FAIL" for _name, verdict, _evidence in targets):
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.stderr.write("staging benchmark: interrupted\n")
        sys.exit(130)
