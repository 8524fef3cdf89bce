"""The `drift` stage of make test, on the lab as-a-user converged (its second run took the roles' records' fast path,
plugins/modules/converged_state.py): each kind of item a role manages is changed on a node the way an admin, a package
upgrade or a stray script would, and the next site.yml, from the installed collection, must find and repair every one.

  1. the record of each role that keeps one is on every GPU node;
  2. the drifts, all at once: a package version moved (the toolkit's four packages to the fixture repository's 1.17.9-1:
     their dependencies are exact; the lab pins no toolkit version for rolling_upgrade, so the role's record finds it),
     a hold lifted (libnccl2), a base package removed (fio), a config file edited (/etc/nccl.conf), a repository removed (the toolkit's .sources), a
     kernel module option changed (the nouveau blacklist), a service disabled (nvidia-persistenced) and a timer stopped
     (the GPU metrics collector's), spread over the two GPU nodes;
  3. site.yml --check --diff: each role that drifted says it would change something on that node, the other roles that
     keep a record say nothing, and every drift is still there afterwards;
  4. site.yml: every item reads as before the drift, the roles that drifted ran in full (each named its drift), the
     others took the fast path (one skipped include each), and no item of a role that did not drift was touched.
"""
import json
import os
import re
import subprocess
import time

from lab import ROOT, Stage, fresh_work

WORK = ROOT / ".cache" / "drift"
STAGE = Stage("drift-lab")
step, fail, sh = STAGE.step, STAGE.fail, STAGE.sh
RECORDED_ROLES = ("preflight", "nvidia_driver", "nvidia_container_toolkit", "nccl", "anaconda", "gpu_monitoring")
NODES = ("sim-gpu1", "sim-gpu2")

# (role, node, what drifts, the command that reads the item, the command that changes it)
DRIFTS = [
    ("nvidia_container_toolkit", "sim-gpu1", "a package version",
     "dpkg-query -W -f '${Version}' nvidia-container-toolkit",
     "apt-get install -y -q --allow-downgrades --allow-change-held-packages nvidia-container-toolkit=1.17.9-1 "
     "nvidia-container-toolkit-base=1.17.9-1 libnvidia-container-tools=1.17.9-1 libnvidia-container1=1.17.9-1 "
     ">/dev/null && apt-mark hold -qq nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools "
     "libnvidia-container1"),
    ("nccl", "sim-gpu2", "a hold", "apt-mark showhold libnccl2", "apt-mark unhold libnccl2"),
    ("preflight", "sim-gpu2", "a package the role keeps installed", "dpkg-query -W -f '${db:Status-Abbrev}' fio",
     "apt-get remove -y -q fio >/dev/null"),
    ("nccl", "sim-gpu1", "a config file's content", "sha256sum /etc/nccl.conf", "echo NCCL_DEBUG=TRACE >> /etc/nccl.conf"),
    ("nvidia_container_toolkit", "sim-gpu2", "a repository",
     "sha256sum /etc/apt/sources.list.d/nvidia-container-toolkit.sources",
     "rm /etc/apt/sources.list.d/nvidia-container-toolkit.sources"),
    ("nvidia_driver", "sim-gpu1", "a kernel module option", "sha256sum /etc/modprobe.d/dlinfra-blacklist-nouveau.conf",
     "echo 'options nouveau modeset=1' > /etc/modprobe.d/dlinfra-blacklist-nouveau.conf"),
    ("nvidia_driver", "sim-gpu2", "a service's state", "systemctl is-enabled nvidia-persistenced",
     "systemctl disable -q nvidia-persistenced"),
    ("gpu_monitoring", "sim-gpu1", "a timer's state", "systemctl is-active dlinfra-gpu-metrics.timer",
     "systemctl stop dlinfra-gpu-metrics.timer"),
]
RECORD = "/var/lib/dlinfra/converged/%s.json"
CHECK_TASK = "Read whether the node still holds what the role's last full run left"


def site(name, *extra):
    """site.yml from the installed collection on the as-a-user inventory; (exit status, output)."""
    command = ["ansible-playbook", "dlinfra.gpu_cluster.site", "-i", str(WORK / "inventory"), "-v",
               "-e", "demo_cache_dir=%s" % (ROOT / ".cache" / "demo"),
               "-e", "environment_fixture_dir=%s" % (ROOT / "tests" / "fixtures" / "environments")] + list(extra)
    # One line of JSON per result: what converged_state said on each host.
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(WORK / "collections"), ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_CALLBACK_FORMAT_PRETTY="0")
    env.pop("ANSIBLE_CONFIG", None)
    started = time.monotonic()
    with open(WORK / (name + ".log"), "w") as log:
        code = subprocess.call(command, cwd=WORK, env=env, stdout=log, stderr=subprocess.STDOUT)
    print("drift-lab: site.yml (%s): exit %d in %.0f s (log %s)" % (name, code, time.monotonic() - started,
                                                                    WORK / (name + ".log")), flush=True)
    return code, (WORK / (name + ".log")).read_text(errors="replace")


def reasons(output):
    """(role, host) -> the reason converged_state gave ('' for the fast path), for each role that keeps a record."""
    found, role = {}, None
    for line in output.splitlines():
        task = re.match(r"TASK \[dlinfra\.gpu_cluster\.(\w+) : (.*?)\] \*", line)
        if task:
            role = task.group(1) if task.group(2) == CHECK_TASK else None
            continue
        result = re.match(r"ok: \[([\w-]+)\] => (\{.*\})$", line)
        if role and result:
            found[(role, result.group(1))] = json.loads(result.group(2)).get("reason", "")
    return found


def changed(output):
    """(role, host) of every result reported as changed, by the role of its task."""
    found, role = set(), None
    for line in output.splitlines():
        task = re.match(r"TASK \[(?:dlinfra\.gpu_cluster\.(\w+) : )?.*\] \*", line)
        if task:
            role = task.group(1)
            continue
        result = re.match(r"changed: \[([\w-]+)\]", line)
        if role and result:
            found.add((role, result.group(1)))
    return found


def main():
    begun = time.monotonic()
    fresh_work(STAGE, WORK)

    step("1. each GPU node holds the record of every role that keeps one")
    for node in NODES:
        missing = [role for role in RECORDED_ROLES if not sh(node, "test -s %s && echo yes" % (RECORD % role), check=False)]
        if missing:
            fail("%s has no record of %s after as-a-user's runs (%s)" % (node, ", ".join(missing), RECORD % "ROLE"))
    written = {(role, node): sh(node, "stat -c %%Y %s" % (RECORD % role)) for node in NODES for role in RECORDED_ROLES}

    step("2. the drifts: " + "; ".join("%s of %s on %s" % (what, role, node) for role, node, what, dummy, dummy in DRIFTS)
         )
    before = {(node, read): sh(node, read, check=False) for dummy, node, dummy, read, dummy in DRIFTS}
    for role, node, what, read, change in DRIFTS:
        sh(node, change)
        if sh(node, read, check=False) == before[(node, read)]:
            fail("changing %s of %s on %s (%s) left it as it was" % (what, role, node, change))

    drifted = {(role, node) for role, node, dummy, dummy, dummy in DRIFTS}
    step("3. site.yml --check --diff names each drift as a change and changes nothing")
    code, output = site("site-check", "--check", "--diff")
    if code != 0:
        print(output[-4000:])
        fail("site.yml --check failed after the drifts")
    reported = {key for key in changed(output) if key[0] in RECORDED_ROLES and key[1] in NODES}
    problems = ["check mode did not report the drift of %s on %s" % key for key in sorted(drifted - reported)]
    problems += ["check mode reported a change of %s on %s, which did not drift" % key for key in sorted(reported - drifted)]
    problems += ["check mode changed %s of %s on %s" % (what, role, node) for role, node, what, read, dummy in DRIFTS
                 if sh(node, read, check=False) == before[(node, read)]]
    if problems:
        fail("; ".join(problems))
    print("drift-lab: check mode reported changes of exactly the roles that drifted: %s"
          % ", ".join("%s on %s" % key for key in sorted(reported)))

    step("4. site.yml finds each drift and repairs it; the roles that did not drift take the fast path")
    code, output = site("site-drift")
    if code != 0:
        print(output[-4000:])
        fail("site.yml failed after the drifts")
    not_converged = reasons(output)
    problems = []
    for role, node, what, read, change in DRIFTS:
        now = sh(node, read, check=False)
        if now != before[(node, read)]:
            problems.append("%s of %s on %s is not repaired: %r, was %r" % (what, role, node, now, before[(node, read)]))
        if not not_converged.get((role, node), "").startswith("drift: "):
            problems.append("%s on %s did not name the drift of %s: %r" % (role, node, what, not_converged.get((role, node))))
    for (role, node), reason in sorted(not_converged.items()):
        if (role, node) not in drifted and reason:
            problems.append("%s on %s ran in full without a drift: %s" % (role, node, reason))
    for (role, node), mtime in written.items():
        if (role, node) not in drifted and sh(node, "stat -c %%Y %s" % (RECORD % role)) != mtime:
            problems.append("the record of %s on %s was rewritten without a drift" % (role, node))
    missing = [key for key in written if key not in not_converged]
    if missing:
        problems.append("no converged_state result read for %s" % missing)
    if problems:
        fail("; ".join(problems))
    for (role, node), reason in sorted(not_converged.items()):
        if reason:
            print("drift-lab: %s on %s ran in full: %s" % (role, node, reason[:300]))
    print("drift-lab: passed in %.0f s; every drift repaired by one site.yml" % (time.monotonic() - begun))


if __name__ == "__main__":
    main()
