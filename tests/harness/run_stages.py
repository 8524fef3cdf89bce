"""`make test`: every check in order, stopping at the first failure; each stage's time and a closing summary.

  run_stages.py                 all stages
  run_stages.py --only NAME...  just those stages (names as printed; 'checks', 'parallel', 'lab' and 'molecule' select
                                theirs)

After the quick lints, two groups run AT_ONCE members at a time (the machine's 2 cores are the limit). First the checks
that need no lab (unit, sanity, ansible-lint). Then the simulated lab's stages, one after another in one lane (each
needs the lab the one before it left), beside the molecule scenarios, longest first (their containers and networks
carry the scenario's name; the lab's carry the label org.dlinfra.demo). Each stage's output is printed whole when it
ends, with its own time, and the group's wall time after them.
"""
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = "tests/harness"
AT_ONCE = 2
# Seconds each scenario took in a serial run (fresh-clone CI, 2026-11-26): the longest start first, so the last to
# start are short. A scenario not listed starts first.
MOLECULE_SECONDS = {"shard_staging": 303, "nvidia_container_toolkit": 176, "microk8s": 139, "preflight": 127,
                    "anaconda": 126, "nvidia_driver": 120, "nccl": 98,
                    "gpu_monitoring": 320}
LOGS = ROOT / ".cache" / "stages"


def molecule_scenarios():
    names = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
    return sorted(names, key=lambda name: -MOLECULE_SECONDS.get(name, 10 ** 6))


def stages():
    yield "venv", [HARNESS + "/ensure-venv.sh"]
    yield "docker", [HARNESS + "/ensure-docker.sh"]
    yield "images", [HARNESS + "/build-images.sh"]
    yield "yamllint", ["yamllint", "--strict", "."]
    yield "changelog", ["antsibull-changelog", "lint"]
    yield "argument-specs", ["python", HARNESS + "/role_docs.py"]
    # Independent of each other and of the tree (sanity checks a copy): side by side, the longest first.
    # The unit tests spend most of their time waiting (slow stores, killed peers, timeouts), so three pytest-xdist
    # workers, a test module each (its fixtures once), fill that time: 204 s alone in one process, 97 s in three.
    yield "checks", [("unit", ["pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadscope"]),
                     ("sanity", [HARNESS + "/sanity.sh"]),
                     ("ansible-lint", ["ansible-lint", "--profile", "production"])]
    # The lab's runs wait on reboots, drains and downloads; the scenarios beside them fill that time.
    lab = [
        # The README's "Use it" from a fresh venv and HOME outside the clone, on the simulated lab (left up afterwards:
        # the one lab of a `make test`, for the multi-node checks that follow it).
        ("as-a-user", [HARNESS + "/as_a_user.sh"]),
        # On that converged lab: a package version, a hold, a config file, a repository, a kernel module option and a
        # service changed by hand; one site.yml finds each through the roles' records and repairs it.
        ("drift", ["python", HARNESS + "/drift_lab.py"]),
        # validate.yml on that lab: healthy, then with faults injected and removed; report.html in headless Chromium.
        ("validate", ["python", HARNESS + "/validate_lab.py"]),
        # upgrade.yml on the same lab: a toolkit pin moved through drain, change, a real reboot, verify, rollback, resume.
        ("rolling", ["python", HARNESS + "/rolling_lab.py"]),
        # The offline bundle, built on that lab's store from what its converges fetched through the store's apt proxy,
        # carried to a fresh air-gapped lab (it replaces the lab above): site.yml converges from it and is idempotent
        # with only variables pointing the roles at it, the nodes try to reach nothing else, and without each of those
        # variables the run stops naming it.
        ("airgap", ["python", HARNESS + "/airgap_lab.py"]),
    ]
    molecule = [("molecule:" + scenario, ["molecule", "test", "-s", scenario]) for scenario in molecule_scenarios()]
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


def cpu_times():
    """(busy, total) jiffies of the whole machine since boot, from /proc/stat (idle and iowait count as idle)."""
    fields = [int(v) for v in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def cpu_use(before):
    """How busy the machine's CPUs were since ``before`` (cpu_times()): whether more side by side could help."""
    busy, total = (now - then for now, then in zip(cpu_times(), before))
    idle_seconds = (total - busy) / os.sysconf("SC_CLK_TCK")
    return "machine CPU %.0f%% busy, %.0f core-seconds idle" % (100.0 * busy / max(total, 1), idle_seconds)


def report(name, returncode, elapsed):
    print("===== stage %s: %s in %.0f s" % (name, "passed" if returncode == 0 else "FAILED (exit %d)" % returncode, elapsed), flush=True)


def run_logged(name, command, env):
    """One stage of a group, its output to a log; (exit status, seconds, log)."""
    log = LOGS / (name.replace(":", "-") + ".log")
    started = time.monotonic()
    with open(log, "w") as out:
        returncode = subprocess.call(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    return returncode, time.monotonic() - started, log


def run_group(group, members, env, at_once):
    """Members side by side, at_once at a time: a stage, or a lane of stages one after another that stops at its first
    failure. Each stage printed whole as it ends. After a failure no new member or lane stage starts."""
    LOGS.mkdir(parents=True, exist_ok=True)
    print("\n===== %s: %d at a time: %s" % (group, at_once, ", ".join(
        " -> ".join(s[0] for s in m[1]) if holds_stages(m[1]) else m[0] for m in members)), flush=True)
    results, pending, lock = [], list(members), threading.Lock()

    def run_member(member):
        for name, command in member[1] if holds_stages(member[1]) else [member]:
            if any(r[1] != 0 for r in results):  # a lane stops where any member failed
                return
            returncode, elapsed, log = run_logged(name, command, env)
            LOGGED[name] = log
            with lock:
                print("\n===== stage %s: %s (output of %s)" % (name, " ".join(command), log), flush=True)
                print(log.read_text(errors="replace"), end="", flush=True)
                report(name, returncode, elapsed)
                results.append((name, returncode, elapsed))
            if returncode != 0:
                return

    started, cpu = time.monotonic(), cpu_times()
    with concurrent.futures.ThreadPoolExecutor(max_workers=at_once) as pool:
        running = set()
        while pending or running:
            while pending and len(running) < at_once and all(r[1] == 0 for r in results):
                running.add(pool.submit(run_member, pending.pop(0)))
            if not running:
                break
            running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED).not_done
    print("===== %s: %d stages in %.0f s (wall clock); %s" % (group, len(results), time.monotonic() - started, cpu_use(cpu)),
          flush=True)
    return results


STARTED, STARTED_CPU = time.monotonic(), cpu_times()
LOGGED = {}  # stage name -> its log, for the stages of groups
FAILURE_LINES = ("fatal: [", "failed: [", "FAILED", "ERROR", "Error", "Traceback")


def why_failed(name):
    """Again at the end, where a CI's tail shows it: a failed stage's error lines and its last lines. A group's
    stages print whole as they end, so a failure early in a long group would sit far above the summary."""
    log = LOGGED.get(name)
    if log is None:
        return
    lines = log.read_text(errors="replace").splitlines()
    errors = [line for line in lines[:-40] if any(word in line for word in FAILURE_LINES)]
    print("\n===== why %s failed: its error lines, then its last 40 lines (all of it in %s)" % (name, log))
    print("\n".join([line[:400] for line in errors[-20:]] + ["..."] + [line[:400] for line in lines[-40:]]))


def main(argv):
    if "-h" in argv or "--help" in argv:  # before anything starts: a run takes most of an hour
        print(__doc__)
        return 0
    only = argv[argv.index("--only") + 1:] if "--only" in argv else []
    env = dict(os.environ, PATH="%s:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")),
               PY_COLORS="0", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    results = []
    for name, command in stages():
        if holds_stages(command):  # a group: its members run side by side
            members = picked(name, command, only)
            if members:
                results.extend(run_group(name, members, env, AT_ONCE))
            if any(r[1] != 0 for r in results):
                break
            continue
        if not selected(name, only):
            continue
        print("\n===== stage %s: %s" % (name, " ".join(command)), flush=True)
        started = time.monotonic()
        returncode = subprocess.call(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
        results.append((name, returncode, elapsed))
        report(name, returncode, elapsed)
        if returncode != 0:
            break

    for name, returncode, elapsed in results:
        if returncode != 0:
            why_failed(name)
    print("\n%-34s %8s  %s" % ("stage", "seconds", "result"))
    for name, returncode, elapsed in results:
        print("%-34s %8.0f  %s" % (name, elapsed, "passed" if returncode == 0 else "FAILED"))
    print("%-34s %8.0f  %s" % ("total (wall clock)", time.monotonic() - STARTED, cpu_use(STARTED_CPU)))
    failed = sum(1 for r in results if r[1] != 0)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
