"""`make test`: every check in order, stopping at the first failure; each stage's time and a closing summary.

  run_stages.py                 all stages
  run_stages.py --only NAME...  just those stages (names as printed; 'checks', 'parallel', 'lab' and 'molecule' select
                                theirs)

After the quick lints, two groups run AT_ONCE members at a time (the machine's 2 cores are the limit). First the checks
that need no lab (unit, sanity, ansible-lint). Then the simulated lab's stages, one after another in one lane (each
needs the lab the one before it left), beside the molecule scenarios, longest first (their containers and networks
carry the scenario's name; the lab's carry the label org.dlinfra.demo). Each stage's output is printed whole when it
ends, with its own time, and the group's wall time after them.

The time guard (time_budget.py) knows CI's limit (90 minutes; MAKE_TEST_BUDGET=SECONDS for another): each stage's end
line gives its share of the budget and what is predicted left; a stage starts only while the stages left, at this run's
slowness against the record (stage_seconds.json), fit; and the running stages are stopped when it is spent. Either way
the run fails with a message naming the slow stages, and the stages it stopped while they ran say "stopped by the time
guard" (they count among the failed) rather than FAILED: their logs end where the guard's signal cut them.
`--record` writes this run's times into the record.
"""
import concurrent.futures
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import time_budget

ROOT = pathlib.Path(__file__).resolve().parents[3]
HARNESS = "tests/harness"
AT_ONCE = 2
LOGS = ROOT / ".cache" / "stages"


def molecule_scenarios(record):
    """The scenarios, the longest in the record first, so that the last to start are short; one not recorded first."""
    names = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
    return sorted(names, key=lambda name: -record.get("molecule:" + name, 10 ** 6))


def stages():
    yield "venv", [HARNESS + "/setup/ensure_venv.sh"]
    yield "docker", [HARNESS + "/setup/ensure_docker.sh"]
    yield "images", [HARNESS + "/setup/build_images.sh"]
    yield "yamllint", ["yamllint", "--strict", "."]
    yield "changelog", ["antsibull-changelog", "lint"]
    yield "argument-specs", ["python", HARNESS + "/generate/role_docs.py"]
    # Independent of each other and of the tree (sanity checks a copy): side by side, the longest first.
    # unit: pytest.ini's testpaths, tests/unit and tests/integration (the role and playbook runs on localhost, the
    # benchmarks' quick modes: the peer one in containers of the image the images stage built). They spend most of
    # their time waiting (slow stores, killed peers, timeouts), so three pytest-xdist workers, a test module each (its
    # fixtures once), fill that time: 204 s alone in one process, 97 s in three.
    yield "checks", [("unit", ["pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadscope"]),
                     ("sanity", [HARNESS + "/stages/sanity.sh"]),
                     ("ansible-lint", ["ansible-lint", "--profile", "production"])]
    # The lab's runs wait on reboots, drains and downloads; the scenarios beside them fill that time.
    lab = [
        # The README's "Use it" from a fresh venv and HOME outside the clone, on the simulated lab (left up afterwards:
        # the one lab of a `make test`, for the multi-node checks that follow it).
        ("as-a-user", [HARNESS + "/lab/as_a_user.sh"]),
        # On that converged lab: a package version, a hold, a config file, a repository, a kernel module option and a
        # service changed by hand; one site.yml finds each through the roles' records and repairs it.
        ("drift", ["python", HARNESS + "/lab/drift_lab.py"]),
        # validate.yml on that lab: healthy, then with faults injected and removed; report.html in headless Chromium.
        ("validate", ["python", HARNESS + "/lab/validate_lab.py"]),
        # dlinfra.gpu_cluster.train on that lab with Debian's PyTorch: bad input refused, an epoch read exactly once
        # across 2 nodes x 2 ranks, a rank killed mid-epoch and the re-run resumed from the checkpoint.
        ("train", ["python", HARNESS + "/lab/train_lab.py"]),
        # Where people work, on sim-gpu1: Jupyter Lab (wheels through the store's index) and a VNC desktop for a user,
        # each answering with its secret only, and neither reachable in a port scan from another lab host.
        ("workspace", ["python", HARNESS + "/lab/workspace_lab.py"]),
        # upgrade.yml on the same lab: a toolkit pin moved through drain, change, a real reboot, verify, rollback, resume.
        ("rolling", ["python", HARNESS + "/lab/rolling_lab.py"]),
        # The offline bundle, built on that lab's store from what its converges fetched through the store's apt proxy,
        # carried to a fresh air-gapped lab (it replaces the lab above): site.yml converges from it and is idempotent
        # with only variables pointing the roles at it, the nodes try to reach nothing else, and without each of those
        # variables the run stops naming it.
        ("airgap", ["python", HARNESS + "/lab/airgap_lab.py"]),
    ]
    molecule = [("molecule:" + scenario, ["molecule", "test", "-s", scenario]) for scenario in molecule_scenarios(GUARD.budget.record)]
    yield "parallel", [("lab", lab)] + molecule


def selected(name, only):
    return not only or name in only or name.split(":")[0] in only


def holds_stages(command):
    """A group's members or a lane's stages ((name, command) pairs), rather than one command."""
    return isinstance(command[0], tuple)


def picked(group, members, only):
    """The members of a group that --only names: all for the group's name, a whole lane for its name, else one by one."""
    if not only or group in only:
        return members
    chosen = []
    for name, command in members:
        if holds_stages(command) and name not in only:
            command = [stage for stage in command if selected(stage[0], only)]
        if command and (holds_stages(command) or selected(name, only)):
            chosen.append((name, command))
    return chosen


def chosen_steps(only):
    """The stages and groups (with their chosen members) that this run takes, in order."""
    steps = []
    for name, command in stages():
        if holds_stages(command):
            members = picked(name, command, only)
            if members:
                steps.append((name, members))
        elif selected(name, only):
            steps.append((name, command))
    return steps


def planned(step):
    """A step as the time guard plans it: a stage's name, or a group (AT_ONCE, its lanes of (stage, 0 s run))."""
    name, command = step
    if not holds_stages(command):
        return name
    return AT_ONCE, [[(stage[0], 0.0) for stage in (m[1] if holds_stages(m[1]) else [m])] for m in command]


def stamp_lines(source, out, started):
    """Copy a stage's output (bytes) to its log, each line after the seconds since started: `  12.3| line`."""
    for line in source:
        out.write("%6.1f| %s" % (time.monotonic() - started, line.decode("utf-8", "replace")))
        out.flush()


def cpu_times():
    """(busy, total) jiffies of the whole machine since boot, from /proc/stat (idle and iowait count as idle)."""
    fields = [int(v) for v in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def cpu_use(before):
    """How busy the machine's CPUs were since ``before`` (cpu_times()): whether more side by side could help."""
    busy, total = (now - then for now, then in zip(cpu_times(), before))
    idle_seconds = (total - busy) / os.sysconf("SC_CLK_TCK")
    return "machine CPU %.0f%% busy, %.0f core-seconds idle" % (100.0 * busy / max(total, 1), idle_seconds)


def run_logged(name, command, env):
    """One stage, its output to a log; (exit status, seconds, log). The time guard may stop it (GUARD.stop)."""
    log = LOGS / (name.replace(":", "-") + ".log")
    started = time.monotonic()
    with open(log, "w") as out:
        returncode = GUARD.call(name, command, env, out)
    return returncode, time.monotonic() - started, log


def run_group(group, members, env, at_once, plan_after):
    """Members side by side, at_once at a time: a stage, or a lane of stages one after another that stops at its first
    failure. Each stage printed whole as it ends. After a failure, or once the time guard stopped the run, no new member
    or lane stage starts. plan_after: the time guard's plan of the steps after this group."""
    LOGS.mkdir(parents=True, exist_ok=True)
    print("\n===== %s: %d at a time: %s" % (group, at_once, ", ".join(
        " -> ".join(s[0] for s in m[1]) if holds_stages(m[1]) else m[0] for m in members)), flush=True)
    results, lock = [], threading.Lock()
    lanes = [list(m[1]) if holds_stages(m[1]) else [m] for m in members]
    left = [[stage[0] for stage in lane] for lane in lanes]  # per lane, its stages not ended yet

    def plan():
        return [(at_once, [[(name, GUARD.ran(name)) for name in names] for names in left])] + plan_after

    GUARD.plan = plan

    def run_lane(index):
        for name, command in lanes[index]:
            if any(r[1] != 0 for r in results) or not GUARD.allows(plan(), name):
                return
            returncode, elapsed, log = run_logged(name, command, env)
            LOGGED[name] = log
            with lock:
                left[index].remove(name)
                print("\n===== stage %s: %s (output of %s)" % (name, " ".join(command), log), flush=True)
                print(log.read_text(errors="replace"), end="", flush=True)
                GUARD.ended(name, returncode, elapsed, plan())
                results.append((name, returncode, elapsed))
            if returncode != 0:
                return

    started, cpu = time.monotonic(), cpu_times()
    with concurrent.futures.ThreadPoolExecutor(max_workers=at_once) as pool:
        running, pending = set(), list(range(len(lanes)))
        while pending or running:
            while pending and len(running) < at_once and all(r[1] == 0 for r in results) and not GUARD.stopped:
                running.add(pool.submit(run_lane, pending.pop(0)))
            if not running:
                break
            running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED).not_done
    print("===== %s: %d stages in %.0f s (wall clock); %s" % (group, len(results), time.monotonic() - started, cpu_use(cpu)),
          flush=True)
    return results


class Guard(object):
    """The time guard over one run (time_budget.Budget): each stage's end line says its share of the budget; a stage
    starts only while the stages left fit; once the budget is spent, the running stages are stopped. Either way the
    run fails, naming the slow stages."""

    def __init__(self, budget):
        self.budget, self.stopped, self.lock = budget, None, threading.Lock()
        self.running = {}  # stage -> (process, started)
        self.cut_short = set()  # the stages that were running when the guard stopped the run
        self.plan = list  # what is left of the run, for the watch (set as the run goes)

    def start(self):
        threading.Thread(target=self.watch, daemon=True).start()

    def ran(self, name):
        """Seconds a running stage has run so far (0 for one not started)."""
        entry = self.running.get(name)
        return time.monotonic() - entry[1] if entry else 0.0

    def names_left(self, plan):
        names = []
        for step in plan:
            names.extend([step] if isinstance(step, str) else [stage[0] for lane in step[1] for stage in lane])
        return names

    def allows(self, plan, name):
        """Whether stage name may start: the stages left, it first, fit the budget. If not, the run stops."""
        with self.lock:
            if self.stopped:
                return False
            if not self.budget.fits(plan):
                self.stop(self.budget.stop_message(plan, self.names_left(plan)))
                return False
            return True

    def watch(self):
        """Every WATCH_SECONDS in a thread of its own: past the budget (less the time to stop cleanly), the running
        stages are stopped."""
        while not self.stopped:
            time.sleep(WATCH_SECONDS)
            if self.budget.out_of_time():
                with self.lock:
                    plan = self.plan()
                    self.stop(self.budget.stop_message(plan, self.names_left(plan)) + " Stopped while running: %s."
                              % ", ".join(sorted(list(self.running))))

    def stop(self, message):
        """Fail the run: no stage starts any more, and the running ones get SIGTERM, then SIGKILL 20 s later."""
        self.stopped = message
        self.cut_short.update(list(self.running))
        print("\n===== " + message, flush=True)
        groups = [entry[0].pid for entry in list(self.running.values())]  # a copy: stages end in other threads

        def signal_all():
            for sig, delay in ((signal.SIGTERM, 0), (signal.SIGKILL, 20)):
                time.sleep(delay)
                for group in groups:
                    try:
                        os.killpg(group, sig)
                    except ProcessLookupError:
                        pass
        if groups:
            threading.Thread(target=signal_all, daemon=True).start()

    def call(self, name, command, env, out):
        """Run one stage's command in its own process group, so that the guard can stop it with what it started. With
        out (a group's stage), each line of its output goes there stamped with the seconds since the stage started, so
        that a log shows where a stage's time went."""
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                   stdout=None if out is None else subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.running[name] = (process, time.monotonic())
        try:
            if out is not None:
                stamp_lines(process.stdout, out, self.running[name][1])
            return process.wait()
        finally:
            del self.running[name]

    def verdict(self, name, returncode):
        """A stage's result: passed, FAILED, or stopped by the time guard. A stage the guard stopped did not fail by
        itself (its exit is the guard's signal), and its log's last lines say nothing about why the run stopped."""
        if returncode == 0:
            return "passed"
        return STOPPED if name in self.cut_short else "FAILED"

    def ended(self, name, returncode, elapsed, plan):
        self.budget.end(name, elapsed)
        verdict = self.verdict(name, returncode)
        print("===== stage %s: %s in %.0f s (%s)" % (
            name, "FAILED (exit %d)" % returncode if verdict == "FAILED" else verdict, elapsed,
            self.budget.share(elapsed, plan)), flush=True)


STARTED, STARTED_CPU = time.monotonic(), cpu_times()
# CI's limit, or MAKE_TEST_BUDGET (seconds) where a run has another.
GUARD = Guard(time_budget.Budget(time_budget.load_record(), int(os.environ.get("MAKE_TEST_BUDGET", time_budget.CI_SECONDS))))
WATCH_SECONDS = 5
STOPPED = "stopped by the time guard"
LOGGED = {}  # stage name -> its log, for the stages of groups
FAILURE_LINES = ("fatal: [", "failed: [", "FAILED", "ERROR", "Error", "Traceback")


def why_failed(name):
    """Again at the end, where a CI's tail shows it: a failed stage's error lines and its last lines. A group's
    stages print whole as they end, so a failure early in a long group would sit far above the summary."""
    log = LOGGED.get(name)
    if log is None:
        return
    if name in GUARD.cut_short:
        print("\n===== %s was %s while it ran (its log: %s); the guard's message says why" % (name, STOPPED, log))
        return
    lines = log.read_text(errors="replace").splitlines()
    errors = [line for line in lines[:-40] if any(word in line for word in FAILURE_LINES)]
    print("\n===== why %s failed: its error lines, then its last 40 lines (all of it in %s)" % (name, log))
    print("\n".join([line[:400] for line in errors[-20:]] + ["..."] + [line[:400] for line in lines[-40:]]))


def main(argv):
    if "-h" in argv or "--help" in argv:  # before anything starts: a run takes most of an hour
        print(__doc__)
        return 0
    only = [name for name in argv[argv.index("--only") + 1:] if name != "--record"] if "--only" in argv else []
    env = dict(os.environ, PATH="%s:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")),
               PY_COLORS="0", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", NO_COLOR="1",
               PYTHONUNBUFFERED="1")  # a stage's lines stamped as they are written, not when a buffer fills
    steps = chosen_steps(only)
    GUARD.start()
    results = []
    for index, (name, command) in enumerate(steps):
        after = [planned(step) for step in steps[index + 1:]]
        if holds_stages(command):  # a group: its members run side by side
            results.extend(run_group(name, command, env, AT_ONCE, after))
        else:
            GUARD.plan = lambda name=name, after=after: [name] + after
            if not GUARD.allows(GUARD.plan(), name):
                break
            print("\n===== stage %s: %s" % (name, " ".join(command)), flush=True)
            started = time.monotonic()
            returncode = GUARD.call(name, command, env, None)
            elapsed = time.monotonic() - started
            results.append((name, returncode, elapsed))
            GUARD.ended(name, returncode, elapsed, after)
        if GUARD.stopped or any(r[1] != 0 for r in results):
            break
    if GUARD.stopped:  # again here, where a CI's tail shows it: the stages stopped may print long after it
        results.append(("time guard", 1, GUARD.budget.used()))
        print("\n===== " + GUARD.stopped, flush=True)

    for name, returncode, elapsed in results:
        if returncode != 0:
            why_failed(name)
    print("\n%-34s %8s  %s" % ("stage", "seconds", "result"))
    for name, returncode, elapsed in results:
        print("%-34s %8.0f  %s" % (name, elapsed, GUARD.verdict(name, returncode)))
    print("%-34s %8.0f  %s" % ("total (wall clock)", time.monotonic() - STARTED, cpu_use(STARTED_CPU)))
    failed = sum(1 for r in results if r[1] != 0)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    if "--record" in argv and not failed and not only:
        time_budget.write_record(results, "make test --record, %s" % time.strftime("%Y-%m-%d"))
        print("the stages' times are now the record (%s)" % time_budget.RECORD)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
