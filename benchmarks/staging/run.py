# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark shard staging against aria2c, rclone, curl and get_url, from one local nginx, on one machine.

    .venv/bin/python benchmarks/staging/run.py --json benchmarks/staging/results/full.json    # full: ~15 min, ~12 GiB disk
    .venv/bin/python benchmarks/staging/run.py --quick                                        # correctness only, seconds

Cases: (a) 64 shards of 64 MiB, (b) 20,000 shards of 64 KiB, each fetched into an empty directory by every
tool; the physical limits for the same bytes (one HTTP stream to /dev/null, and plain writes of the same
files); a no-op re-run over 100,000 staged shards against `rsync -a --dry-run`; and planning 100,000 shards
over 1,000 nodes with 2 replicas (bench_plan.run). Every timed fetch ends with a sync, so each tool is
charged for getting its bytes to disk. Prints a table and the issue's targets; exit status 0 when all ran
and passed, 1 when a target failed (full mode only), 2 when a measurement failed, 3 when nginx is unavailable.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import bench_plan
from _dataset import Case, check_copy, random_pattern, write_same_files
from _fetchers import FETCHERS, Engine, StreamThroughSha256, StreamToNull, ToolFailed, run_logged
from _server import PACKAGES, Nginx, ServerUnavailable, ensure_packages, find_command, sync_and_drop_caches

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
MODES = {
    "full": dict(big=(64, 64 * MIB), small=(20000, 64 * KIB), get_url_subset=200, noop=(100000, KIB), runs=2, timeout=1200),
    "quick": dict(big=(8, MIB), small=(200, 4 * KIB), get_url_subset=10, noop=(2000, KIB), runs=1, timeout=120),
}
PLAN_LABEL = {"full": "100,000 shards x 1,000 nodes x 2 replicas", "quick": "2,000 shards x 50 nodes x 2 replicas"}
# Space beyond the data itself: file system overhead of small files (4 KiB blocks) and a margin.
SMALL_FILE_BLOCK = 4 * KIB
SPACE_MARGIN = 1 * GIB


class Bench(object):
    """One benchmark run: its mode, scratch space, log and the rows of the table."""

    def __init__(self, mode, runs, workdir):
        self.mode = mode
        self.settings = MODES[mode]
        self.quick = mode == "quick"
        self.runs = runs
        self.work = workdir
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

    # -- one row ---------------------------------------------------------------------------------

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

    def timed_runs(self, runs, before, body, after):
        """Best of `runs`: before() untimed, body() timed up to a closing sync, after() checks; returns (best seconds, last details)."""
        best, details = None, {}
        for _run in range(runs):
            before()
            self.settle()
            errors_before = len(self.nginx.logged_errors())
            started = time.perf_counter()
            details = body() or {}
            os.sync()
            seconds = time.perf_counter() - started
            new_errors = self.nginx.logged_errors()[errors_before:]
            if new_errors:
                raise ToolFailed("nginx logged %d errors during the run, e.g. %s" % (len(new_errors), new_errors[0][-200:]))
            after(details)
            best = seconds if best is None else min(best, seconds)
        return round(best, 3), details

    # -- fetch cases -----------------------------------------------------------------------------

    def fetch_case(self, case):
        dest = self.path("dest")
        for fetcher_class in FETCHERS:
            fetcher = fetcher_class(self.path("scratch", "%s-%s" % (case.name, fetcher_class.name)), self.settings["timeout"])
            shards, note, runs = case.shards, "", self.runs
            if fetcher.name == "get_url":
                runs = 1  # minutes per run in full mode; its figure is far from every other
                if case.count > self.settings["get_url_subset"]:
                    shards = case.shards[:self.settings["get_url_subset"]]
                    note = "%d of %d shards, time x%g (linear extrapolation)" % (len(shards), case.count, case.count / len(shards))
            self.measure_fetcher(case, fetcher, shards, runs, note, dest)
        self.measure_limits(case, dest)

    def measure_fetcher(self, case, fetcher, shards, runs, note, dest):
        reason = fetcher.missing()
        if reason:
            if fetcher.name == "engine":
                raise RuntimeError("the engine cannot run: %s" % reason)
            self.add_row(case.title, fetcher.name, fetcher.label, status="skipped: " + reason)
            return
        self.log("%s: %s" % (case.title, fetcher.label))
        fetcher.prepare(case, shards, dest)

        def check(details):
            problems = check_copy(dest, shards, hashed=self.hashed)
            if fetcher.name == "engine" and details.get("fetched") != len(shards):
                problems.append("the engine reports %s shards fetched, expected %d" % (details.get("fetched"), len(shards)))
            if problems:
                raise ToolFailed("wrong copy: " + "; ".join(problems))

        try:
            seconds, details = self.timed_runs(runs, lambda: _empty_dir(dest), fetcher.fetch, check)
        except ToolFailed as exc:
            self.add_row(case.title, fetcher.name, fetcher.label, status="failed: %s" % exc)
            return
        finally:
            shutil.rmtree(dest, ignore_errors=True)
        measured = seconds
        seconds = round(seconds * case.count / len(shards), 3)
        if seconds != measured:
            details["measured_seconds"] = measured
        details["runs"] = runs
        self.add_row(case.title, fetcher.name, fetcher.label, seconds=seconds, nbytes=case.total_bytes, files=case.count, note=note, details=details)

    def measure_limits(self, case, dest):
        for stream_class in (StreamToNull, StreamThroughSha256):
            stream = stream_class(self.path("scratch", "%s-%s" % (case.name, stream_class.name)), self.settings["timeout"])
            reason = stream.missing()
            if reason:
                self.add_row(case.title, stream.name, stream.label, status="skipped: " + reason)
                continue
            stream.prepare(case, case.shards, dest)
            note = "" if stream_class is StreamToNull else "not a target: the stream limit with every byte hashed"
            try:
                seconds, _details = self.timed_runs(self.runs, lambda: None, stream.fetch, lambda details: None)
                self.add_row(case.title, stream.name, stream.label, seconds=seconds, nbytes=case.total_bytes, files=case.count, note=note)
            except ToolFailed as exc:
                self.add_row(case.title, stream.name, stream.label, status="failed: %s" % exc)
        pattern = random_pattern(min(case.size, 64 * MIB))

        def check(_details):
            problems = check_copy(dest, case.shards, hashed="none")
            if problems:
                raise ToolFailed("; ".join(problems))

        label = "limit: disk writes of the same files, then sync"
        try:
            seconds, _details = self.timed_runs(self.runs, lambda: _empty_dir(dest), lambda: write_same_files(dest, case.shards, pattern), check)
            self.add_row(case.title, "disk-write", label, seconds=seconds, nbytes=case.total_bytes, files=case.count)
        except ToolFailed as exc:
            self.add_row(case.title, "disk-write", label, status="failed: %s" % exc)
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    # -- no-op re-run ----------------------------------------------------------------------------

    def noop_case(self, case):
        """Stage the shards once with the engine (untimed), copy the tree, then time a re-run against rsync's dry run."""
        staged, copy = self.path("noop-staged"), self.path("noop-copy")
        engine = Engine(self.path("scratch", "noop-engine"), self.settings["timeout"])
        engine.prepare(case, case.shards, staged)
        self.log("%s: staging %d shards once with the engine (untimed)" % (case.title, case.count))
        first = engine.fetch()
        problems = check_copy(staged, case.shards, hashed=self.hashed)
        if first.get("fetched") != case.count or problems:
            raise RuntimeError("staging the no-op tree failed: %s, %s" % (first, problems[:3]))

        def check_engine(details):
            if details.get("fetched") != 0 or details.get("confirmed") != case.count or details.get("changed"):
                raise ToolFailed("the re-run was not a no-op: %s" % details)

        try:
            seconds, details = self.timed_runs(self.runs, lambda: None, engine.fetch, check_engine)
            self.add_row(case.title, "engine", "shard_transfer re-run (journal)", seconds=seconds, files=case.count, details=details)
        except ToolFailed as exc:
            self.add_row(case.title, "engine", "shard_transfer re-run (journal)", status="failed: %s" % exc)
        rsync = find_command("rsync")
        label = "rsync -a --dry-run (tree vs. its copy)"
        if rsync is None:
            self.add_row(case.title, "rsync", label, status="skipped: rsync is not installed")
            return
        run_logged([rsync, "-a", staged + "/", copy + "/"], self.path("scratch", "rsync-copy.log"), self.settings["timeout"])
        itemized = self.path("scratch", "rsync-dry-run.log")

        def check_rsync(_details):
            with open(itemized) as handle:
                changes = [line for line in handle.read().splitlines() if line.strip() and not line.rstrip().endswith(" ./")]
            if changes:
                raise ToolFailed("rsync's dry run found %d differences, e.g. %s" % (len(changes), changes[0]))

        try:
            command = [rsync, "-a", "--dry-run", "--itemize-changes", staged + "/", copy + "/"]
            seconds, _details = self.timed_runs(self.runs, lambda: None, lambda: run_logged(command, itemized, self.settings["timeout"]), check_rsync)
            self.add_row(case.title, "rsync", label, seconds=seconds, files=case.count)
        except ToolFailed as exc:
            self.add_row(case.title, "rsync", label, status="failed: %s" % exc)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
            shutil.rmtree(copy, ignore_errors=True)

    # -- planning --------------------------------------------------------------------------------

    def plan_case(self):
        self.log("plan: %s" % PLAN_LABEL[self.mode])
        result = bench_plan.run(self.quick)
        timings = result["timings_s"]
        key = next(key for key in timings if key.endswith("_2_replicas_numpy") or key.endswith("_2_replicas_pure"))
        status = "ok" if result.get("paths_agree", True) else "failed: the numpy and pure-Python placements differ"
        self.add_row("plan", "engine", "shard_plan.make_plan, %s (%s)" % (PLAN_LABEL[self.mode], key.rsplit("_", 1)[1]), status=status,
                     seconds=timings[key], files=result["shards"], details=result)


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


def evaluate_targets(rows, big, small, noop):
    """The issue's targets, each (name, verdict, evidence); verdict is PASS, FAIL or 'n/a' when a figure is missing."""
    peers = ("aria2c", "rclone", "curl", "get_url")
    targets = []

    def fastest_peer(case):
        candidates = [row for row in rows if row["case"] == case and row["tool"] in peers and row["seconds"]]
        return min(candidates, key=lambda row: row["seconds"]) if candidates else None

    def target(name, engine, other, factor, strictly=False):
        if engine is None or other is None:
            targets.append((name, "n/a", "a figure is missing"))
            return
        ratio = other["seconds"] / engine["seconds"]
        met = ratio > factor if strictly else ratio >= factor
        targets.append((name, "PASS" if met else "FAIL", "engine/%s = %.2f (needs %s %g)" % (other["tool"], ratio, ">" if strictly else ">=", factor)))

    engine = _find(rows, big, "engine")
    target("(a) engine >= 0.9x the fastest peer", engine, fastest_peer(big), 0.9)
    limits = [row for row in (_find(rows, big, "stream-null"), _find(rows, big, "disk-write")) if row]
    target("(a) engine >= 0.8x the physical limit (slower of stream and disk)", engine, max(limits, key=lambda row: row["seconds"]) if limits else None, 0.8)
    engine = _find(rows, small, "engine")
    target("(b) engine >= the fastest peer", engine, fastest_peer(small), 1.0)
    target("(b) engine >= 20x the get_url loop", engine, _find(rows, small, "get_url"), 20.0)
    target("no-op re-run faster than rsync -a --dry-run", _find(rows, noop, "engine"), _find(rows, noop, "rsync"), 1.0, strictly=True)
    plan = _find(rows, "plan", "engine")
    if plan is None:
        targets.append(("plan <= 5 s", "n/a", "a figure is missing"))
    else:
        targets.append(("plan <= 5 s", "PASS" if plan["seconds"] <= bench_plan.TARGET_SECONDS else "FAIL", "%.2f s" % plan["seconds"]))
    return targets


def format_table(rows):
    header = "%-28s %-12s %-44s %9s %12s %11s  %s" % ("case", "tool", "how", "seconds", "rate", "engine/tool", "note")
    lines = [header, "-" * len(header)]
    for row in rows:
        if not row["seconds"]:
            lines.append("%-28s %-12s %-44s %9s %12s %11s  %s" % (row["case"], row["tool"], row["label"][:44], "-", "-", "-", row["status"]))
            continue
        if row["bytes"] and row["case"].startswith("(a)"):
            rate = "%.0f MB/s" % row["mb_per_s"]
        else:
            rate = "%.0f files/s" % row["files_per_s"]
        ratio = "%.2fx" % row["engine_ratio"] if "engine_ratio" in row else "-"
        note = row["note"] if row["status"] == "ok" else row["status"]
        lines.append("%-28s %-12s %-44s %9.2f %12s %11s  %s" % (row["case"], row["tool"], row["label"][:44], row["seconds"], rate, ratio, note))
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


def required_space(settings):
    """Bytes the full run needs at its peak: both fetch sources, one fetched copy, and three no-op trees."""
    big_count, big_size = settings["big"]
    small_count, small_size = settings["small"]
    noop_count, noop_size = settings["noop"]

    def blocks(size):
        return -(-size // SMALL_FILE_BLOCK) * SMALL_FILE_BLOCK
    sources = big_count * blocks(big_size) + small_count * blocks(small_size)
    return sources + max(big_count * blocks(big_size), small_count * blocks(small_size)) + 3 * noop_count * blocks(noop_size) + SPACE_MARGIN


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each, correctness checks only (no targets)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--runs", type=int, help="runs per measurement, the best one counts (default: 2 in full mode, 1 in quick mode)")
    parser.add_argument("--workdir", metavar="DIR", help="where the scratch directory goes (default: the system's temp dir); needs ~12 GiB free in full mode")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (data, configs, logs) for inspection")
    args = parser.parse_args(argv)
    if args.runs is not None and not 1 <= args.runs <= 5:
        parser.error("--runs must be between 1 and 5")
    return args


def main(argv=None):
    args = parse_args(argv)
    mode = "quick" if args.quick else "full"
    settings = MODES[mode]
    missing = ensure_packages(["nginx"] if args.quick else list(PACKAGES), lambda message: sys.stderr.write(message + "\n"))
    if "nginx" in missing:
        sys.stderr.write("staging benchmark: nginx is unavailable (%s); it serves the data, so nothing can be measured\n" % missing["nginx"])
        return 3
    parent = args.workdir or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    stats = os.statvfs(parent)
    free, needed = stats.f_bavail * stats.f_frsize, required_space(settings)
    if free < needed:
        sys.stderr.write("staging benchmark: %s has %.1f GiB free, the %s mode needs %.1f GiB; free space or pass --workdir on a larger file system\n"
                         % (parent, free / GIB, mode, needed / GIB))
        return 2
    work = tempfile.mkdtemp(prefix="staging-bench-", dir=parent)
    os.chmod(work, 0o755)
    bench = Bench(mode, args.runs or settings["runs"], work)
    big = Case("big", "(a) %d x %d MiB" % (settings["big"][0], settings["big"][1] // MIB), *settings["big"])
    small = Case("small", "(b) %d x %d KiB" % (settings["small"][0], settings["small"][1] // KIB), *settings["small"])
    noop = Case("noop", "no-op re-run, %d shards" % settings["noop"][0], *settings["noop"])
    try:
        with Nginx(bench.path("www"), bench.path("nginx")) as nginx:
            bench.nginx = nginx
            bench.log("nginx on %s serving %s; %s mode, best of %d runs" % (nginx.base_url, bench.path("www"), mode, bench.runs))
            for case in (big, small, noop):
                bench.log("writing %s" % case.title)
                case.create(bench.path("www"), nginx.base_url)
            for case in (big, small):
                bench.fetch_case(case)
                case.remove_source()
            bench.noop_case(noop)
        bench.plan_case()
    except ServerUnavailable as exc:
        sys.stderr.write("staging benchmark: %s\n" % exc)
        return 3
    finally:
        if args.keep:
            sys.stderr.write("scratch kept in %s\n" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return report(bench, args, (big.title, small.title, noop.title))


def report(bench, args, titles):
    rows = bench.rows
    add_ratios(rows)
    targets = evaluate_targets(rows, *titles)
    drops = "worked" if bench.cache_drops and all(bench.cache_drops) else ("failed (ignored)" if bench.cache_drops else "not tried (quick mode)")
    print("Staging benchmark, %s mode, best of %d run(s); %d CPUs, Python %s; page-cache drop before each run: %s"
          % (bench.mode, bench.runs, os.cpu_count(), platform.python_version(), drops))
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
            json.dump({"mode": bench.mode, "runs": bench.runs, "cpus": os.cpu_count(), "python": platform.python_version(),
                       "kernel": platform.release(), "tools": tool_versions(), "page_cache_drop": drops, "rows": rows,
                       "targets": [{"target": name, "verdict": verdict, "evidence": evidence} for name, verdict, evidence in targets]},
                      handle, indent=2)
    if failures:
        return 2
    if not bench.quick and any(verdict == "FAIL" for _name, verdict, _evidence in targets):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
