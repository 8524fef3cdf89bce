"""The `drift` stage of make test, on the lab as-a-user converged (its second run took the roles' records' fast path,
plugins/modules/converged_state.py): each kind of item a role manages is changed on a node the way an admin, a package
upgrade or a stray script would, and the next site.yml, from the installed collection, must find and repair every one.

  1. the record of each role that keeps one is on every GPU node (microk8s's on the head too);
  2. the drifts, all at once: a package version moved (the toolkit's four packages to the fixture repository's 1.17.9-1:
     their dependencies are exact; the lab pins no toolkit version for rolling_upgrade, so the role's record finds it),
     a hold lifted (libnccl2), a base package removed (fio), a config file edited (/etc/nccl.conf), a repository
     removed (the toolkit's .sources), a kernel module option changed (the nouveau blacklist), a service disabled
     (nvidia-persistenced) and a timer stopped (the GPU metrics collector's), spread over the two GPU nodes (a role
     that drifts twice does so on one node: each role run in full costs the two site.yml runs below); and
     microk8s's: the snap's refresh hold lifted, a user taken out of the microk8s group, the GPU node label removed and
     a wanted addon disabled (the last two through MicroK8s on the head, where kubectl runs: workers refuse it);
  3. site.yml --check --diff: each role that drifted says it would change something on that node, the other roles that
     keep a record say nothing, and every drift is still there afterwards;
  4. site.yml: every item reads as before the drift, the roles that drifted ran in full (each named its drift, by the
     record's item where the case gives one), the others took the fast path (one skipped include each), and no item of
     a role that did not drift was touched.

A drift of the cluster's own state (an addon) is in the record of every host of the cluster: the heads' play runs
first and repairs it, so in a real run only the heads run in full for it. In check mode nothing repairs it and the
workers' play finds it too: each worker has a microk8s drift of its own, so the roles that drift are the same in both.
"""
import collections
import json
import os
import re
import subprocess
import time

from lab import ROOT, Stage, fresh_work

WORK = ROOT / ".cache" / "drift"
STAGE = Stage("drift-lab")
step, fail, sh = STAGE.step, STAGE.fail, STAGE.sh
RECORDED_ROLES = ("preflight", "nvidia_driver", "nvidia_container_toolkit", "nccl", "anaconda", "gpu_monitoring",
                  "microk8s")
NODES = ("sim-gpu1", "sim-gpu2")
HEAD = "sim-head"
# (role, node) of each record the stage checks: every recorded role on each GPU node, and microk8s's on the head.
RECORDS = tuple((role, node) for node in NODES for role in RECORDED_ROLES) + (("microk8s", HEAD),)
# The user the lab's inventory puts in the microk8s group (inventories/sim/group_vars/gpu_cluster.yml).
MICROK8S_USER = "dlinfra-admin"
KUBECTL = "/snap/bin/microk8s kubectl"
# One field of `kubectl get node NODE -o json` read on the head: the GPU label the microk8s role sets.
GPU_LABEL = ("%s get node %%s -o json | python3 -c \"import json, sys; "
             "print(json.load(sys.stdin)['metadata']['labels'].get('nvidia.com/gpu.present', 'none'))\"" % KUBECTL)
# An addon's line of MicroK8s' status (core/NAME: enabled or disabled).
ADDON = "/snap/bin/microk8s status --format short | grep '^core/%s: '"

# role, node (whose record drifts), what drifts, the command that reads the item, the command that changes it; on: the
# host both commands run on, where not the node; item: the record's item the node's reason must name, where given.
Drift = collections.namedtuple("Drift", "role node what read change on item", defaults=(None, ""))
DRIFTS = [Drift(*case) for case in [
    ("nvidia_container_toolkit", "sim-gpu1", "a package version",
     "dpkg-query -W -f '${Version}' nvidia-container-toolkit",
     "apt-get install -y -q --allow-downgrades --allow-change-held-packages nvidia-container-toolkit=1.17.9-1 "
     "nvidia-container-toolkit-base=1.17.9-1 libnvidia-container-tools=1.17.9-1 libnvidia-container1=1.17.9-1 "
     ">/dev/null && apt-mark hold -qq nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools "
     "libnvidia-container1"),
    ("nccl", "sim-gpu1", "a hold", "apt-mark showhold libnccl2", "apt-mark unhold libnccl2"),
    ("preflight", "sim-gpu2", "a package the role keeps installed", "dpkg-query -W -f '${db:Status-Abbrev}' fio",
     "apt-get remove -y -q fio >/dev/null"),
    ("nccl", "sim-gpu1", "a config file's content", "sha256sum /etc/nccl.conf", "echo NCCL_DEBUG=TRACE >> /etc/nccl.conf"),
    ("nvidia_container_toolkit", "sim-gpu2", "a repository",
     "sha256sum /etc/apt/sources.list.d/nvidia-container-toolkit.sources",
     "rm /etc/apt/sources.list.d/nvidia-container-toolkit.sources"),
    ("nvidia_driver", "sim-gpu1", "a kernel module option", "sha256sum /etc/modprobe.d/dlinfra-blacklist-nouveau.conf",
     "echo 'options nouveau modeset=1' > /etc/modprobe.d/dlinfra-blacklist-nouveau.conf"),
    ("nvidia_driver", "sim-gpu1", "a service's state", "systemctl is-enabled nvidia-persistenced",
     "systemctl disable -q nvidia-persistenced"),
    ("gpu_monitoring", "sim-gpu1", "a timer's state", "systemctl is-active dlinfra-gpu-metrics.timer",
     "systemctl stop dlinfra-gpu-metrics.timer"),
    ("microk8s", "sim-gpu1", "the snap's refresh hold", "snap list microk8s", "snap refresh --unhold microk8s", None,
     "snap microk8s"),
    ("microk8s", "sim-gpu2", "a user's membership of the microk8s group",
     "id -nG %s | tr ' ' '\\n' | grep -x microk8s" % MICROK8S_USER,
     "gpasswd -d %s microk8s >/dev/null" % MICROK8S_USER, None, "member microk8s %s" % MICROK8S_USER),
    ("microk8s", "sim-gpu2", "its node's GPU label", GPU_LABEL % "sim-gpu2",
     "%s label node sim-gpu2 nvidia.com/gpu.present-" % KUBECTL, HEAD, "observed k8s node"),
    ("microk8s", HEAD, "a wanted addon (hostpath-storage)", ADDON % "hostpath-storage",
     "/snap/bin/microk8s disable hostpath-storage", HEAD, "observed k8s addon hostpath-storage"),
]]
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


def named(reason, item):
    """Whether a converged_state reason ('drift: ITEM: recorded ..., now ...; ITEM: ...') names item ('' names any)."""
    return not item or re.search(r"(?:^drift: |; )%s: recorded " % re.escape(item), reason) is not None


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

    step("1. each GPU node holds the record of every role that keeps one, the head microk8s's")
    missing = ["%s on %s" % (role, node) for role, node in RECORDS
               if not sh(node, "test -s %s && echo yes" % (RECORD % role), check=False)]
    if missing:
        fail("no record of %s after as-a-user's runs (%s)" % (", ".join(missing), RECORD % "ROLE"))
    written = {(role, node): sh(node, "stat -c %%Y %s" % (RECORD % role)) for role, node in RECORDS}

    step("2. the drifts: " + "; ".join("%s of %s on %s" % (drift.what, drift.role, drift.node) for drift in DRIFTS))
    before = {drift: sh(drift.on or drift.node, drift.read, check=False) for drift in DRIFTS}
    for drift in DRIFTS:
        sh(drift.on or drift.node, drift.change)
        if sh(drift.on or drift.node, drift.read, check=False) == before[drift]:
            fail("changing %s of %s on %s (%s) left it as it was" % (drift.what, drift.role, drift.node, drift.change))

    drifted = {(drift.role, drift.node) for drift in DRIFTS}
    step("3. site.yml --check --diff names each drift as a change and changes nothing")
    code, output = site("site-check", "--check", "--diff")
    if code != 0:
        print(output[-4000:])
        fail("site.yml --check failed after the drifts")
    reported = {key for key in changed(output) if key in RECORDS}
    problems = ["check mode did not report the drift of %s on %s" % key for key in sorted(drifted - reported)]
    problems += ["check mode reported a change of %s on %s, which did not drift" % key for key in sorted(reported - drifted)]
    problems += ["check mode changed %s of %s on %s" % (drift.what, drift.role, drift.node) for drift in DRIFTS
                 if sh(drift.on or drift.node, drift.read, check=False) == before[drift]]
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
    for drift in DRIFTS:
        now = sh(drift.on or drift.node, drift.read, check=False)
        if now != before[drift]:
            problems.append("%s of %s on %s is not repaired: %r, was %r"
                            % (drift.what, drift.role, drift.node, now, before[drift]))
        reason = not_converged.get((drift.role, drift.node), "")
        if not reason.startswith("drift: ") or not named(reason, drift.item):
            problems.append("%s on %s did not name the drift of %s%s: %r" % (
                drift.role, drift.node, drift.what, " (%s)" % drift.item if drift.item else "", reason or None))
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
