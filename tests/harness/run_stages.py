"""`make test`: every check in order, stopping at the first failure; each stage's time and a closing summary.

  run_stages.py                 all stages
  run_stages.py --only NAME...  just those stages (names as printed; 'molecule' selects every scenario)
"""
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARNESS = "tests/harness"


def molecule_scenarios():
    return sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def stages():
    yield "venv", [HARNESS + "/ensure-venv.sh"]
    yield "docker", [HARNESS + "/ensure-docker.sh"]
    yield "images", [HARNESS + "/build-images.sh"]
    yield "yamllint", ["yamllint", "--strict", "."]
    yield "ansible-lint", ["ansible-lint", "--profile", "production"]
    yield "changelog", ["antsibull-changelog", "lint"]
    yield "argument-specs", ["python", HARNESS + "/role_docs.py"]
    yield "unit", ["pytest", "-q", "-p", "no:cacheprovider"]
    yield "sanity", [HARNESS + "/sanity.sh"]
    for scenario in molecule_scenarios():
        yield "molecule:" + scenario, ["molecule", "test", "-s", scenario]
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


def main(argv):
    only = argv[argv.index("--only") + 1:] if "--only" in argv else []
    env = dict(os.environ, PATH="%s:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")),
               PY_COLORS="0", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    results = []
    for name, command in stages():
        if not selected(name, only):
            continue
        print("\n===== stage %s: %s" % (name, " ".join(command)), flush=True)
        started = time.monotonic()
        returncode = subprocess.call(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
        results.append((name, returncode, elapsed))
        print("===== stage %s: %s in %.0f s" % (name, "passed" if returncode == 0 else "FAILED (exit %d)" % returncode, elapsed), flush=True)
        if returncode != 0:
            break

    print("\n%-34s %8s  %s" % ("stage", "seconds", "result"))
    for name, returncode, elapsed in results:
        print("%-34s %8.0f  %s" % (name, elapsed, "passed" if returncode == 0 else "FAILED"))
    print("%-34s %8.0f" % ("total", sum(r[2] for r in results)))
    failed = sum(1 for r in results if r[1] != 0)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
