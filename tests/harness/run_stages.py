"""`make test`: every check in order, stopping at the first failure; each stage's time and a closing summary.

  run_stages.py                 all stages
  run_stages.py --only NAME...  just those stages (names as printed; a group's name, 'checks' or 'molecule', selects its members)

Two groups run AT_ONCE stages at a time, longest first: the checks that need no lab (ansible-lint, unit, sanity) and the
molecule scenarios (their containers and networks carry the scenario's name). Each member's output is printed whole
when it ends, with its own time, and the group's wall time after them.
"""
import concurrent.futures
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = "tests/harness"
AT_ONCE = 2
# Seconds each scenario took in a serial run (fresh-clone CI, 2026-11-26): the longest start first, so the last to
# start are short. A scenario not listed starts first.
MOLECULE_SECONDS = {"shard_staging": 303, "nvidia_container_toolkit": 176, "microk8s": 139, "preflight": 127,
                    "anaconda": 126, "nvidia_driver": 120, "nccl": 98}
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
    yield "checks", [("unit", ["pytest", "-q", "-p", "no:cacheprovider"]), ("sanity", [HARNESS + "/sanity.sh"]),
                     ("ansible-lint", ["ansible-lint", "--profile", "production"])]
    yield "molecule", [("molecule:" + scenario, ["molecule", "test", "-s", scenario]) for scenario in molecule_scenarios()]
    # The README's "Use it" from a fresh venv and HOME outside the clone, on the simulated lab (left up afterwards:
    # the one lab of a `make test`, for the multi-node checks that follow it).
    yield "as-a-user", [HARNESS + "/as_a_user.sh"]
    # validate.yml on that lab: healthy, then with faults injected and removed; report.html in headless Chromium.
    yield "validate", ["python", HARNESS + "/validate_lab.py"]
    # upgrade.yml on the same lab: a toolkit pin moved through drain, change, a real reboot, verify, rollback and resume.
    yield "rolling", ["python", HARNESS + "/rolling_lab.py"]
    # The air-gapped lab, made afresh (it replaces the lab above): site.yml converges and is idempotent with only inventory
    # variables pointing the roles at the store, the nodes try to reach nothing else, and without the apt proxy preflight
    # stops naming the variable.
    yield "airgap", ["python", HARNESS + "/airgap_lab.py"]


def selected(name, only):
    return not only or name in only or name.split(":")[0] in only


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
    """Stages side by side, at_once at a time; each printed whole as it ends. After a failure no new one starts."""
    LOGS.mkdir(parents=True, exist_ok=True)
    print("\n===== %s: %d stages, %d at a time: %s" % (group, len(members), at_once, ", ".join(m[0] for m in members)), flush=True)
    results, pending = [], list(members)
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=at_once) as pool:
        running = {}
        while pending or running:
            while pending and len(running) < at_once and all(r[1] == 0 for r in results):
                name, command = pending.pop(0)
                running[pool.submit(run_logged, name, command, env)] = (name, command)
            if not running:
                break
            done = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED).done
            for future in done:
                name, command = running.pop(future)
                returncode, elapsed, log = future.result()
                print("\n===== stage %s: %s (output of %s)" % (name, " ".join(command), log), flush=True)
                print(log.read_text(errors="replace"), end="", flush=True)
                report(name, returncode, elapsed)
                results.append((name, returncode, elapsed))
    print("===== %s: %d stages in %.0f s (wall clock)" % (group, len(results), time.monotonic() - started), flush=True)
    return results


STARTED = time.monotonic()


def main(argv):
    only = argv[argv.index("--only") + 1:] if "--only" in argv else []
    env = dict(os.environ, PATH="%s:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")),
               PY_COLORS="0", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    results = []
    for name, command in stages():
        if isinstance(command[0], tuple):  # a group of stages that run side by side
            members = [member for member in command if name in only or selected(member[0], only)]
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

    print("\n%-34s %8s  %s" % ("stage", "seconds", "result"))
    for name, returncode, elapsed in results:
        print("%-34s %8.0f  %s" % (name, elapsed, "passed" if returncode == 0 else "FAILED"))
    print("%-34s %8.0f" % ("total (wall clock)", time.monotonic() - STARTED))
    failed = sum(1 for r in results if r[1] != 0)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
