"""The `rolling` stage of make test: upgrade.yml, from the installed collection, on the simulated lab that as-a-user
converged and validate checked. The pin of the NVIDIA Container Toolkit moves (the store's fixture repository holds
1.17.8-1, 1.17.9-1 and 1.18.0-1); every assertion reads what the nodes and the test doubles recorded: the MicroK8s
double's calls.log (every kubectl call, timed), the toolkit package's install time on each node, Docker's restart count
and start time of each container.

  0. batches larger than max_unavailable allows: refused before anything changes.
  1. pin 1.17.9; a "GPU busy" stand-in on sim-gpu1 (a test double of nvidia-smi printing a recorded report with one
     process) and a pending reboot on sim-gpu2 (/run/reboot-required, as a kernel update leaves it): the run stops on
     sim-gpu1 naming the process; nothing was drained or changed anywhere.
  2. the same, forced: per node cordon -> drain -> change -> (sim-gpu2: a real reboot) -> verify -> uncordon, one node
     at a time; the head is at its pins and is never cordoned or drained.
  3. pin 1.18.0, broken on sim-gpu1 (a test double of nvidia-container-runtime there fails while 1.18.0 is installed): sim-gpu1
     is rolled back to 1.17.9, verified and uncordoned, the run stops naming it; sim-gpu2 is not touched.
  4. sim-gpu1 NotReady in the double: the change and the rollback both fail verification; sim-gpu1 stays cordoned, the
     run stops saying how to resume, the state file holds the recorded versions.
  5. sim-gpu1 Ready again: a re-run resumes it and finishes sim-gpu2; every node at 1.18.0 and uncordoned.
  6. a second run changes nothing (changed=0 on every host) and cordons nothing.
  7. the pin moved back to 1.17.9, then site.yml (not upgrade.yml), as a user re-runs it on a provisioned cluster: each
     node takes the same path, one at a time, and the toolkit role after it finds the pin met (the package's install
     time is the one inside the node's cordon window); the head is not touched.
  8. the MicroK8s channel pinned for the whole cluster (1.32/stable -> 1.33/stable), upgrade.yml: the head first, alone,
     then each GPU node, each through the same path, every node on the new channel and uncordoned.
  9. check mode with the toolkit pin moved (1.18.0): it says per node what a real run would do, reports it as a change,
     and cordons, drains and installs nothing.
 10. sim-gpu2 cordoned by hand, the pin still moved: sim-gpu1 is not cordoned, since with it two nodes of the cluster
     would be out (max_unavailable 1); the run stops naming sim-gpu2.
 11. a pod on sim-gpu1 that a PodDisruptionBudget protects (the double refuses its eviction): the drain fails, sim-gpu1
     is uncordoned unchanged, and the run stops naming the pod.
 12. a MIG layout declared for sim-gpu1 (3g.71gb x 2 on a test double of nvidia-smi that keeps MIG state over a real
     H200's report, a client holding the GPU so that the new mode stays pending and the reset is refused): refused before
     anything changes while the cluster runs the nvidia addon; then on NVIDIA's device plugin: cordon -> drain -> MIG
     mode -> a real reboot -> the boot unit makes the instances -> the microk8s role labels the node and gives it the
     mig-single config -> verify (the layout; the 2 MIG devices allocatable as the MicroK8s double's device plugin
     advertises them) -> uncordon; sim-gpu2 and the head untouched. A second run changes nothing.
 13. the layout moved to 1g.18gb x 7: MIG stays on, so no reboot; the instances replaced, the node's device plugin pod
     started again (the plugin reads MIG devices when it starts), 7 nvidia.com/gpu allocatable.
"""
import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

from lab import FIXTURES, ROOT, Stage, fresh_work
from play_recap import recap

WORK = ROOT / ".cache" / "rolling"
CALLS = "/srv/microk8s-test-double/calls.log"
STATE_FILE = "/var/lib/dlinfra/rolling_upgrade.json"
DOUBLE_DIR = "/usr/local/lib/dlinfra-rolling-test-double"
MIG_DOUBLE = ROOT / "tests" / "test_doubles" / "nvidia_smi" / "nvidia_smi_mig.py"
MIG_STATE = "/var/lib/nvidia-smi-test-double"  # the MIG double's state on the node (its mode survives a reboot)
GPU_AGENT = "dlinfra-test-gpu-agent"  # a service that holds the GPUs, not in rolling_upgrade_gpu_holders
NODES = ("sim-gpu1", "sim-gpu2")
HEAD = "sim-head"


STAGE = Stage("rolling-lab")
step, fail, sh = STAGE.step, STAGE.fail, STAGE.sh


def snap_channel(host):
    return json.loads(sh(host, "cat /var/lib/snapd/test-double-state.json"))["snaps"]["microk8s"]["channel"]


def snap_changed_at(host):
    """When the snap test double last wrote its state on the host (a refresh, or the hold the role puts back after)."""
    return float(sh(host, "python3 -c \"import os; print(os.stat('/var/lib/snapd/test-double-state.json').st_mtime)\""))


def set_pin(version):
    (WORK / "inventory" / "group_vars" / "gpu_nodes" / "rolling_pin.yml").write_text(
        "nvidia_container_toolkit_version: \"%s\"\n" % version)


def upgrade(name, *extra, playbook="dlinfra.gpu_cluster.upgrade"):
    """Run a playbook (upgrade) from the installed collection; (exit status, log text)."""
    command = ["ansible-playbook", playbook, "-i", str(WORK / "inventory"),
               "-e", "demo_cache_dir=%s" % (ROOT / ".cache" / "demo"),
               "-e", "environment_fixture_dir=%s" % (ROOT / "tests" / "fixtures" / "environments")] + list(extra)
    # Pipelining, as a site's ansible.cfg would have it: a third less time through the docker connection.
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(WORK / "collections"), ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="1")
    env.pop("ANSIBLE_CONFIG", None)
    started = time.monotonic()
    with open(WORK / (name + ".log"), "w") as log:
        code = subprocess.call(command, cwd=WORK, env=env, stdout=log, stderr=subprocess.STDOUT)
    text = (WORK / (name + ".log")).read_text()
    print("rolling-lab: run %s: exit %d in %.0f s (log %s)" % (name, code, time.monotonic() - started, WORK / (name + ".log")),
          flush=True)
    return code, text


def calls_since(offset):
    lines = sh(HEAD, "cat %s 2>/dev/null || true" % CALLS).splitlines()
    return [json.loads(line) for line in lines[offset:]], len(lines)


def calls_offset():
    return calls_since(0)[1]


def events(calls, node, verbs=("cordon", "drain", "uncordon", "get")):
    """(time, verb) of the kubectl calls about one node: cordon, drain, uncordon, and `get node NODE` (verification)."""
    found = []
    for call in calls:
        argv = call["argv"][1:]
        if argv and argv[0] in ("cordon", "drain", "uncordon") and argv[1] == node and argv[0] in verbs:
            found.append((call["time"], argv[0]))
        elif argv[:3] == ["get", "node", node] and "get" in verbs:
            found.append((call["time"], "verify"))
    return found


def toolkit(host):
    return sh(host, "dpkg-query -W -f '${Version}' nvidia-container-toolkit").strip()


def toolkit_installed_at(host):
    """When the toolkit package was last unpacked on the host (its file list's change time, as the host's clock)."""
    return float(sh(host, "python3 -c \"import os; print(os.stat('/var/lib/dpkg/info/nvidia-container-toolkit.list').st_ctime)\""))


def container(host):
    state = json.loads(subprocess.run(["docker", "inspect", host], capture_output=True, text=True, check=True).stdout)[0]
    started = datetime.datetime.fromisoformat(re.sub(r"(\.\d{6})\d*Z$", r"\1+00:00", state["State"]["StartedAt"]))
    return state["RestartCount"], started.timestamp()


def node_cordoned(name):
    node = json.loads(sh(HEAD, "/snap/bin/microk8s kubectl get node %s -o json" % name))
    return bool(node.get("spec", {}).get("unschedulable"))


def set_node(host, key, value):
    """Set a field of the node in the MicroK8s double's cluster state (ready; undisruptable: pods a PDB protects)."""
    script = ("import json; p='/srv/microk8s-test-double/cluster.json'; s=json.load(open(p)); "
              "[c['nodes'][%r].__setitem__(%r, %r) for c in s['clusters'].values() if %r in c['nodes']]; "
              "json.dump(s, open(p, 'w'))" % (host, key, value, host))
    sh(HEAD, "python3 -c \"%s\"" % script)


def set_ready(host, ready):
    set_node(host, "ready", ready)


def max_cordoned(calls):
    cordoned, most = set(), 0
    for call in calls:
        argv = call["argv"][1:]
        if argv and argv[0] in ("cordon", "drain"):
            cordoned.add(argv[1])
        elif argv and argv[0] == "uncordon":
            cordoned.discard(argv[1])
        most = max(most, len(cordoned))
    return most


def expect_path(calls, node, changed_at, reboot_at=None):
    """cordon -> drain -> change -> (reboot) -> verify -> uncordon, each once, in that order."""
    seen = events(calls, node)
    verbs = [verb for dummy, verb in seen]
    if verbs.count("cordon") != 1 or verbs.count("drain") != 1 or verbs.count("uncordon") != 1 or "verify" not in verbs:
        fail("%s: expected one cordon, one drain, verification and one uncordon; the double recorded %s" % (node, verbs))
    at = {verb: t for t, verb in seen if verb != "verify"}
    verified = [t for t, verb in seen if verb == "verify" and t > changed_at]
    order = [("cordon", at["cordon"]), ("drain", at["drain"]), ("change", changed_at)]
    if reboot_at is not None:
        order.append(("reboot", reboot_at))
    order += [("verify", verified[0] if verified else 0.0), ("uncordon", at["uncordon"])]
    times = [t for dummy, t in order]
    if times != sorted(times) or not verified:
        fail("%s: out of order: %s" % (node, ", ".join("%s %.2f" % item for item in order)))
    return at


def install_busy_double():
    """TEST DOUBLE of nvidia-smi on sim-gpu1, ahead of any other on PATH: it prints a recorded report of one GPU
    running one process."""
    sh("sim-gpu1", "mkdir -p %s" % DOUBLE_DIR)
    subprocess.run(["docker", "cp", str(FIXTURES / "h100_80gb_hbm3_single_busy.xml"), "sim-gpu1:%s/nvidia-smi.xml" % DOUBLE_DIR],
                   check=True)
    put("sim-gpu1", "/usr/local/bin/nvidia-smi",
        "#!/bin/sh\n# TEST DOUBLE (tests/harness/lab/rolling_lab.py): a GPU with one process\ncat %s/nvidia-smi.xml\n" % DOUBLE_DIR)


def put(host, path, text, mode=0o755):
    """Write a file on the host, executable unless MODE says (through a local file and docker cp: no shell quoting)."""
    local = WORK / pathlib.Path(path).name
    local.write_text(text)
    local.chmod(mode)
    subprocess.run(["docker", "cp", str(local), "%s:%s" % (host, path)], check=True)


def install_mig_double(host):
    """TEST DOUBLE of nvidia-smi on the host that keeps MIG state (tests/test_doubles/nvidia_smi), over a real H200's
    report; two services hold the GPU while they run (a new MIG mode stays pending, a reset is refused): the driver
    package's nvidia-persistenced, which the role stops, and an agent of the site's that the role is not told of; every
    call publishes the GPUs where the MicroK8s double's device plugin reads them."""
    sh(host, "mkdir -p %s /srv/microk8s-test-double/gpus /etc/systemd/system/nvidia-persistenced.service.d && "
             "printf '%%s\\n' nvidia-persistenced %s > %s/clients && "
             "echo /srv/microk8s-test-double/gpus/%s.json > %s/publish" % (MIG_STATE, GPU_AGENT, MIG_STATE, host, MIG_STATE))
    # The lab has no GPU for the daemons to open: each sleeps in their place, a process that holds nothing but runs.
    put(host, "/etc/systemd/system/nvidia-persistenced.service.d/test-double.conf",
        "# TEST DOUBLE (tests/harness/lab/rolling_lab.py): the daemon, with no GPU to keep\n"
        "[Service]\nType=exec\nExecStart=\nExecStart=/bin/sleep infinity\n", mode=0o644)
    put(host, "/etc/systemd/system/%s.service" % GPU_AGENT,
        "# TEST DOUBLE (tests/harness/lab/rolling_lab.py): an agent of the site's that holds the GPUs open\n"
        "[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n", mode=0o644)
    sh(host, "systemctl daemon-reload && systemctl restart nvidia-persistenced && systemctl enable -q --now %s" % GPU_AGENT)
    subprocess.run(["docker", "cp", str(FIXTURES / "h200_580_capture.xml"), "%s:%s/report.xml" % (host, MIG_STATE)],
                   check=True)
    subprocess.run(["docker", "cp", str(MIG_DOUBLE), "%s:%s/nvidia_smi_mig.py" % (host, MIG_STATE)], check=True)
    put(host, "/usr/local/bin/nvidia-smi", "#!/bin/sh\n# TEST DOUBLE (tests/test_doubles/nvidia_smi)\n"
                                           "exec python3 %s/nvidia_smi_mig.py \"$@\"\n" % MIG_STATE)


def set_mig_layout(host, layout, extra=""):
    (WORK / "inventory" / "host_vars" / (host + ".yml")).write_text(
        "gpu_sharing_layout:\n  - mode: mig\n    layout: %s\n%s" % (layout, extra) if layout else
        "gpu_sharing_layout:\n  - mode: whole\n%s" % extra)


def active(host, *units):
    return sh(host, "systemctl is-active %s || true" % " ".join(units)).split()


def mig_published(host):
    return json.loads(sh(HEAD, "cat /srv/microk8s-test-double/gpus/%s.json" % host))["gpus"]


def install_broken_release_double(version):
    """TEST DOUBLE of nvidia-container-runtime on sim-gpu1, ahead of the package's on PATH: while the toolkit package
    is VERSION it fails as a binary missing its library does (a release that breaks on this node); otherwise it runs
    the package's."""
    put("sim-gpu1", "/usr/local/bin/nvidia-container-runtime", """#!/bin/sh
# TEST DOUBLE (tests/harness/lab/rolling_lab.py): toolkit %s is broken on this node
if [ "$(dpkg-query -W -f='${Version}' nvidia-container-toolkit)" = %s ]; then
  echo "nvidia-container-runtime: error while loading shared libraries: libnvidia-container-go.so.1:" \\
    "cannot open shared object file: No such file or directory" >&2
  exit 127
fi
exec /usr/bin/nvidia-container-runtime "$@"
""" % (version, version))


def main():
    begun = time.monotonic()
    fresh_work(STAGE, WORK)
    group_dir = WORK / "inventory" / "group_vars" / "gpu_nodes"
    group_dir.mkdir()
    shutil.move(str(group_dir.with_suffix(".yml")), str(group_dir / "main.yml"))
    for host in NODES:
        if toolkit(host) != "1.17.8-1":
            fail("%s has toolkit %s, not the lab's 1.17.8-1" % (host, toolkit(host)))
    head_restarts = container(HEAD)[0]

    step("0. pin 1.17.9, batches of 2 where one node may be out: refused before anything changes")
    set_pin("1.17.9")
    offset = calls_offset()
    code, log = upgrade("0-refused", "-e", "gpu_cluster_serial=2")
    wanted = "gpu_cluster_serial (2) puts up to 2 nodes of cluster_sim in one batch, more than rolling_upgrade_max_unavailable (1)"
    if code == 0 or wanted not in " ".join(log.split()) or calls_since(offset)[0]:
        fail("run 0-refused: expected %r before any kubectl call (exit %d); see %s" % (wanted, code, WORK / "0-refused.log"))
    print("rolling-lab: the batch size was refused in the first play, before any node was touched")

    step("1. GPU busy on sim-gpu1, a reboot pending on sim-gpu2: the run stops on sim-gpu1")
    install_busy_double()
    sh("sim-gpu2", "echo '*** System restart required ***' > /run/reboot-required && echo linux-image-amd64 > /run/reboot-required.pkgs")
    offset = calls_offset()
    code, log = upgrade("1-busy")
    calls = calls_since(offset)[0]
    wanted = "sim-gpu1: GPU processes still running after 4 s, so the node was not drained or changed: pid 23817 python3 on GPU 0"
    if code == 0 or wanted not in " ".join(log.split()):
        fail("run 1-busy: expected a failure with %r (exit %d); see %s" % (wanted, code, WORK / "1-busy.log"))
    if [verb for dummy, verb in events(calls, "sim-gpu1", ("drain",))] or events(calls, "sim-gpu2") or events(calls, HEAD):
        fail("run 1-busy: something was drained or touched: %s" % [c["argv"] for c in calls])
    if node_cordoned("sim-gpu1") or [toolkit(h) for h in NODES] != ["1.17.8-1", "1.17.8-1"]:
        fail("run 1-busy: sim-gpu1 left cordoned or a toolkit changed")
    print("rolling-lab: the busy GPU stopped the run with its process named; nothing drained, nothing changed")

    step("2. forced: cordon -> drain -> change -> reboot (sim-gpu2) -> verify -> uncordon, one node at a time")
    restarts_before = container("sim-gpu2")[0]
    offset = calls_offset()
    code, log = upgrade("2-forced", "-e", "rolling_upgrade_force=true")
    calls = calls_since(offset)[0]
    sh("sim-gpu1", "rm -rf /usr/local/bin/nvidia-smi %s" % DOUBLE_DIR)
    if code != 0:
        fail("run 2-forced: exit %d; see %s" % (code, WORK / "2-forced.log"))
    restarts, started = container("sim-gpu2")
    if restarts != restarts_before + 1:
        fail("run 2-forced: sim-gpu2 was not rebooted (restart count %d -> %d)" % (restarts_before, restarts))
    first = expect_path(calls, "sim-gpu1", toolkit_installed_at("sim-gpu1"))
    second = expect_path(calls, "sim-gpu2", toolkit_installed_at("sim-gpu2"), reboot_at=started)
    if not first["uncordon"] < second["cordon"] or max_cordoned(calls) != 1:
        fail("run 2-forced: nodes were out together (sim-gpu1 uncordoned %.2f, sim-gpu2 cordoned %.2f)"
             % (first["uncordon"], second["cordon"]))
    if events(calls, HEAD, ("cordon", "drain", "uncordon")) or container(HEAD)[0] != head_restarts:
        fail("run 2-forced: the head, at its pins, was cordoned, drained or rebooted")
    if [toolkit(h) for h in NODES] != ["1.17.9-1", "1.17.9-1"] or sh("sim-gpu2", "ls /run/reboot-required 2>/dev/null || true").strip():
        fail("run 2-forced: toolkits %s, or sim-gpu2 still asks for a reboot" % [toolkit(h) for h in NODES])
    summary = " ".join(log.split())
    for line in ('"msg": "sim-head: unchanged"', '"msg": "sim-gpu1: changed (toolkit 1.17.8-1 -> 1.17.9)"',
                 '"msg": "sim-gpu2: changed (toolkit 1.17.8-1 -> 1.17.9; the system asks for a reboot'):
        if line not in summary:
            fail("run 2-forced: the summary lacks %s" % line)
    print("rolling-lab: both nodes took the path in order, one at a time; sim-gpu2 really rebooted; the head untouched")

    step("3. pin 1.18.0, broken on sim-gpu1: rolled back to 1.17.9, verified, uncordoned; the run stops naming it")
    set_pin("1.18.0")
    install_broken_release_double("1.18.0-1")
    offset = calls_offset()
    code, log = upgrade("3-rollback")
    calls = calls_since(offset)[0]
    sh("sim-gpu1", "rm -f /usr/local/bin/nvidia-container-runtime")
    flat = " ".join(log.replace('\\"', '"').split())
    # The record holds the driver's kernel module flavour too (rolling_upgrade_target.driver_flavor, unchanged here).
    if code == 0 or ("sim-gpu1 was ROLLED BACK to {\"toolkit\": \"1.17.9-1\", \"driver_flavor\": \"proprietary\"}, verified and "
                     "uncordoned") not in flat:
        fail("run 3-rollback: expected the rollback message (exit %d); see %s" % (code, WORK / "3-rollback.log"))
    if "nvidia-container-runtime --version exited 127" not in flat:
        fail("run 3-rollback: the message does not say what failed")
    if toolkit("sim-gpu1") != "1.17.9-1" or node_cordoned("sim-gpu1") or sh("sim-gpu1", "ls %s 2>/dev/null || true" % STATE_FILE).strip():
        fail("run 3-rollback: sim-gpu1 at %s, cordoned %s, or its state file left" % (toolkit("sim-gpu1"), node_cordoned("sim-gpu1")))
    verbs = [verb for dummy, verb in events(calls, "sim-gpu1")]
    if verbs[:2] != ["cordon", "drain"] or verbs[-2:] != ["verify", "uncordon"]:
        fail("run 3-rollback: sim-gpu1's calls %s: expected cordon, drain, ..., the rollback's verification, uncordon" % verbs)
    if events(calls, "sim-gpu2") or toolkit("sim-gpu2") != "1.17.9-1":
        fail("run 3-rollback: sim-gpu2 was touched after the rollback stopped the run")
    print("rolling-lab: sim-gpu1 rolled back to 1.17.9, verified and uncordoned; the run stopped; sim-gpu2 untouched")

    step("4. sim-gpu1 NotReady: change and rollback fail verification; it stays cordoned and the run stops")
    set_ready("sim-gpu1", False)
    try:
        code, log = upgrade("4-stuck")
    finally:
        set_ready("sim-gpu1", True)
    flat = " ".join(log.replace('\\"', '"').split())
    if code == 0 or "sim-gpu1 is left cordoned" not in flat or "run the upgrade again: it resumes" not in flat:
        fail("run 4-stuck: expected the left-cordoned message (exit %d); see %s" % (code, WORK / "4-stuck.log"))
    if "in Kubernetes the node is not Ready" not in flat:
        fail("run 4-stuck: the message does not say what failed")
    recorded = json.loads(sh("sim-gpu1", "cat %s" % STATE_FILE))
    if not node_cordoned("sim-gpu1") or recorded["previous"] != {"toolkit": "1.17.9-1", "driver_flavor": "proprietary"} or node_cordoned("sim-gpu2"):
        fail("run 4-stuck: sim-gpu1 cordoned %s, recorded %s" % (node_cordoned("sim-gpu1"), recorded))
    print("rolling-lab: sim-gpu1 left cordoned with its recorded versions; the run stopped with how to resume")

    step("5. fixed: a re-run resumes sim-gpu1 and finishes sim-gpu2")
    offset = calls_offset()
    code, log = upgrade("5-resume")
    calls = calls_since(offset)[0]
    if code != 0:
        fail("run 5-resume: exit %d; see %s" % (code, WORK / "5-resume.log"))
    if [toolkit(h) for h in NODES] != ["1.18.0-1", "1.18.0-1"] or any(node_cordoned(h) for h in NODES + (HEAD,)):
        fail("run 5-resume: toolkits %s, or a node still cordoned" % [toolkit(h) for h in NODES])
    expect_path(calls, "sim-gpu2", toolkit_installed_at("sim-gpu2"))
    if max_cordoned(calls) > 1 or sh("sim-gpu1", "ls %s 2>/dev/null || true" % STATE_FILE).strip():
        fail("run 5-resume: two nodes out together, or sim-gpu1's state file left")
    print("rolling-lab: resumed; every node at 1.18.0 and uncordoned")

    step("6. a second run changes nothing")
    offset = calls_offset()
    code, log = upgrade("6-again")
    calls = calls_since(offset)[0]
    changed = {host: counts.get("changed") for host, counts in recap(log).items()}
    if code != 0 or set(changed) != set(NODES + (HEAD,)) or any(changed.values()):
        fail("run 6-again: exit %d, changed per host %s" % (code, changed))
    if [c for c in calls if c["argv"][1] in ("cordon", "drain", "uncordon")]:
        fail("run 6-again: nodes were cordoned or drained: %s" % [c["argv"] for c in calls])
    print("rolling-lab: changed=0 on every host, nothing cordoned")

    step("7. pin 1.17.9 again, then site.yml: the nodes take the rolling path before the roles, which change nothing")
    set_pin("1.17.9")
    offset = calls_offset()
    code, log = upgrade("7-site", playbook="dlinfra.gpu_cluster.site")
    calls = calls_since(offset)[0]
    if code != 0:
        fail("run 7-site: exit %d; see %s" % (code, WORK / "7-site.log"))
    if [toolkit(h) for h in NODES] != ["1.17.9-1", "1.17.9-1"] or any(node_cordoned(h) for h in NODES + (HEAD,)):
        fail("run 7-site: toolkits %s, or a node still cordoned" % [toolkit(h) for h in NODES])
    # Installed once, inside the node's cordon window: the toolkit role that runs later did not install it again.
    first = expect_path(calls, "sim-gpu1", toolkit_installed_at("sim-gpu1"))
    second = expect_path(calls, "sim-gpu2", toolkit_installed_at("sim-gpu2"))
    if not first["uncordon"] < second["cordon"] or max_cordoned(calls) != 1 or events(calls, HEAD, ("cordon", "drain")):
        fail("run 7-site: nodes out together, or the head cordoned")
    print("rolling-lab: site.yml moved both nodes to 1.17.9 through the rolling path, one at a time")

    step("8. MicroK8s 1.32/stable -> 1.33/stable on the whole cluster: the head alone first, then each GPU node")
    cluster_dir = WORK / "inventory" / "group_vars" / "gpu_cluster"
    if not cluster_dir.is_dir():
        cluster_dir.mkdir()
        shutil.move(str(cluster_dir.with_suffix(".yml")), str(cluster_dir / "main.yml"))
    (cluster_dir / "rolling_pin.yml").write_text("microk8s_channel: \"1.33/stable\"\n")
    offset = calls_offset()
    code, log = upgrade("8-microk8s")
    calls = calls_since(offset)[0]
    if code != 0:
        fail("run 8-microk8s: exit %d; see %s" % (code, WORK / "8-microk8s.log"))
    channels = {host: snap_channel(host) for host in (HEAD,) + NODES}
    if set(channels.values()) != {"1.33/stable"} or any(node_cordoned(h) for h in NODES + (HEAD,)):
        fail("run 8-microk8s: channels %s, or a node still cordoned" % channels)
    paths = [expect_path(calls, host, snap_changed_at(host)) for host in (HEAD,) + NODES]
    if not paths[0]["uncordon"] < paths[1]["cordon"] < paths[1]["uncordon"] < paths[2]["cordon"] or max_cordoned(calls) != 1:
        fail("run 8-microk8s: not one node at a time, head first: %s" % paths)
    print("rolling-lab: the head, then sim-gpu1, then sim-gpu2 moved to 1.33/stable, one at a time")

    step("9. check mode, the toolkit pinned at 1.18.0: says what it would do, changes nothing")
    set_pin("1.18.0")
    offset = calls_offset()
    code, log = upgrade("9-check", "--check")
    calls = calls_since(offset)[0]
    flat = " ".join(log.split())
    changed = {host: counts.get("changed") for host, counts in recap(log).items()}
    if code != 0 or changed != {HEAD: 0, "sim-gpu1": 1, "sim-gpu2": 1}:
        fail("run 9-check: exit %d, changed per host %s; see %s" % (code, changed, WORK / "9-check.log"))
    for host in NODES:
        if "%s would be cordoned, drained, changed (toolkit 1.17.9-1 -> 1.18.0), verified and uncordoned" % host not in flat:
            fail("run 9-check: no line says what would happen to %s" % host)
    if [c for c in calls if c["argv"][1] in ("cordon", "drain", "uncordon")] or [toolkit(h) for h in NODES] != ["1.17.9-1"] * 2:
        fail("run 9-check: check mode cordoned, drained or installed something")
    print("rolling-lab: check mode named what each node would go through and touched nothing")

    step("10. sim-gpu2 cordoned by hand: sim-gpu1 is not taken out beside it; the run stops naming sim-gpu2")
    sh(HEAD, "/snap/bin/microk8s kubectl cordon sim-gpu2")
    offset = calls_offset()
    try:
        code, log = upgrade("10-out")
    finally:
        sh(HEAD, "/snap/bin/microk8s kubectl uncordon sim-gpu2")
    calls = calls_since(offset)[0]
    flat = " ".join(log.split())
    wanted = "sim-gpu1: not cordoned, since sim-gpu2 of cluster_sim is cordoned already"
    if code == 0 or wanted not in flat:
        fail("run 10-out: expected %r (exit %d); see %s" % (wanted, code, WORK / "10-out.log"))
    if [c for c in calls if c["argv"][1] in ("cordon", "drain", "uncordon")][:-1] or [toolkit(h) for h in NODES] != ["1.17.9-1"] * 2:
        fail("run 10-out: a node was cordoned, drained or changed: %s" % [c["argv"] for c in calls])
    print("rolling-lab: a node cordoned outside the run counted against max_unavailable; nothing else was taken out")

    step("11. a pod a PodDisruptionBudget protects on sim-gpu1: the drain fails, sim-gpu1 uncordoned unchanged, the run stops")
    set_node("sim-gpu1", "undisruptable", ["training/job-0"])
    offset = calls_offset()
    try:
        code, log = upgrade("11-pdb")
    finally:
        set_node("sim-gpu1", "undisruptable", [])
    calls = calls_since(offset)[0]
    flat = " ".join(log.replace('\\"', '"').split())
    wanted = 'sim-gpu1: kubectl drain did not finish (exit 1, within rolling_upgrade_drain_timeout'
    if code == 0 or wanted not in flat or 'error when evicting pods/"job-0" -n "training"' not in flat:
        fail("run 11-pdb: expected %r naming training/job-0 (exit %d); see %s" % (wanted, code, WORK / "11-pdb.log"))
    verbs = [verb for dummy, verb in events(calls, "sim-gpu1", ("cordon", "drain", "uncordon"))]
    if verbs != ["cordon", "drain", "uncordon"] or node_cordoned("sim-gpu1") or events(calls, "sim-gpu2"):
        fail("run 11-pdb: sim-gpu1's calls %s, cordoned %s, or sim-gpu2 touched" % (verbs, node_cordoned("sim-gpu1")))
    if [toolkit(h) for h in NODES] != ["1.17.9-1"] * 2:
        fail("run 11-pdb: a toolkit changed")
    print("rolling-lab: the refused eviction stopped the run; sim-gpu1 back in service, unchanged")

    step("12. a MIG layout for sim-gpu1: drain, MIG mode, a real reboot, the instances made at boot, Kubernetes told, verify")
    set_pin("1.17.9")
    (WORK / "inventory" / "host_vars").mkdir(exist_ok=True)
    set_mig_layout("sim-gpu1", '{"3g.71gb": 2}')
    install_mig_double("sim-gpu1")
    # The lab's cluster runs the nvidia addon: refused before any node is touched.
    offset = calls_offset()
    code, log = upgrade("12-mig-addon")
    wanted = "sim-gpu1: rolling_upgrade_gpu_sharing_layout gives GPUs a MIG layout, which Kubernetes learns from NVIDIA's"
    if code == 0 or wanted not in " ".join(log.split()) or [c for c in calls_since(offset)[0] if c["argv"][1] != "get"] \
            or sh("sim-gpu1", "cat %s/calls.log 2>/dev/null || true" % MIG_STATE).strip():
        fail("run 12-mig-addon: expected %r before any change (exit %d); see %s" % (wanted, code, WORK / "12-mig-addon.log"))
    (cluster_dir / "rolling_gpu_support.yml").write_text("microk8s_gpu_support: device_plugin\n")
    restarts_before = container("sim-gpu1")[0]
    offset = calls_offset()
    code, log = upgrade("12-mig")
    calls = calls_since(offset)[0]
    if code != 0:
        fail("run 12-mig: exit %d; see %s" % (code, WORK / "12-mig.log"))
    restarts, started = container("sim-gpu1")
    if restarts != restarts_before + 1:
        fail("run 12-mig: sim-gpu1 was not rebooted for its pending MIG mode (restarts %d -> %d)" % (restarts_before, restarts))
    # What the nvidia-smi double was asked to change: the mode (pending: the agent holds the GPU, persistenced was
    # stopped), a reset (refused), then after the reboot the instances, made by the boot unit.
    changes = [json.loads(line) for line in sh("sim-gpu1", "cat %s/calls.log" % MIG_STATE).splitlines()]
    wanted = [["-i", "0", "-mig"], ["-r", "-i", "0"], ["mig", "-cgi", "9:0,9:4"]]
    if [call["argv"][:3] for call in changes] != wanted or not changes[1]["time"] < started < changes[2]["time"] \
            or [call["clients"] for call in changes[:2]] != [[GPU_AGENT], [GPU_AGENT]]:
        fail("run 12-mig: the MIG commands on sim-gpu1 (the reboot at %.2f): %s" % (started, changes))
    if active("sim-gpu1", "nvidia-persistenced", GPU_AGENT) != ["active", "active"]:
        fail("run 12-mig: nvidia-persistenced and %s are not running again on sim-gpu1" % GPU_AGENT)
    expect_path(calls, "sim-gpu1", changes[0]["time"], reboot_at=started)
    if events(calls, "sim-gpu2", ("cordon", "drain", "uncordon")) or events(calls, HEAD, ("cordon", "drain", "uncordon")):
        fail("run 12-mig: sim-gpu2 or the head was cordoned or drained")
    if mig_published("sim-gpu1") != [{"index": 0, "mig": True, "mig_devices": ["3g.71gb", "3g.71gb"]}]:
        fail("run 12-mig: sim-gpu1's GPU: %s" % mig_published("sim-gpu1"))
    shown_unit = sh("sim-gpu1", "systemctl show -p UnitFileState -p ActiveState -p ExecMainStatus dlinfra-mig-layout.service")
    unit = dict(line.split("=", 1) for line in shown_unit.split())
    if unit != {"ExecMainStatus": "0", "ActiveState": "active", "UnitFileState": "enabled"}:
        fail("run 12-mig: the boot unit ran at boot and is enabled: %s" % unit)
    node = json.loads(sh(HEAD, "/snap/bin/microk8s kubectl get node sim-gpu1 -o json"))
    labels, allocatable = node["metadata"]["labels"], node["status"]["allocatable"]
    shown = (labels.get("dlinfra.io/gpu.sharing"), labels.get("nvidia.com/device-plugin.config"),
             allocatable.get("nvidia.com/gpu"), bool(node.get("spec", {}).get("unschedulable")))
    if shown != ("mig", "mig-single", "2", False):
        fail("run 12-mig: sim-gpu1 in Kubernetes (sharing, config, nvidia.com/gpu, cordoned): %s" % (shown,))
    if '"msg": "sim-gpu1: changed (MIG: GPU 0 MIG off -> 3g.71gb@0, 3g.71gb@4)"' not in " ".join(log.split()):
        fail("run 12-mig: the summary does not say what changed on sim-gpu1; see %s" % (WORK / "12-mig.log"))
    code, log = upgrade("12-mig-again")
    changed = {host: counts.get("changed") for host, counts in recap(log).items()}
    if code != 0 or any(changed.values()):
        fail("run 12-mig-again: exit %d, changed per host %s" % (code, changed))
    print("rolling-lab: sim-gpu1 took the path to 3g.71gb x 2 through a real reboot; the unit made the instances at boot; "
          "Kubernetes shows 2 MIG devices; a second run changed nothing")

    step("13. sim-gpu1's layout to 1g.18gb x 7: MIG stays on, no reboot; the instances replaced, the device plugin started "
         "again, 7 MIG devices allocatable")
    set_mig_layout("sim-gpu1", '{"1g.18gb": 7}')
    restarts_before = container("sim-gpu1")[0]
    offset = calls_offset()
    code, log = upgrade("13-mig-layout")
    calls = calls_since(offset)[0]
    node = json.loads(sh(HEAD, "/snap/bin/microk8s kubectl get node sim-gpu1 -o json"))
    shown = (node["metadata"]["labels"].get("dlinfra.io/gpu.mig-layout"), node["status"]["allocatable"].get("nvidia.com/gpu"),
             container("sim-gpu1")[0] - restarts_before, bool(node.get("spec", {}).get("unschedulable")))
    if code != 0 or shown != ("7x1g.18gb", "7", 0, False):
        fail("run 13-mig-layout: exit %d; sim-gpu1 (mig-layout label, nvidia.com/gpu, reboots, cordoned): %s; see %s"
             % (code, shown, WORK / "13-mig-layout.log"))
    if not [c for c in calls if c["argv"][1:3] == ["delete", "pod"] and "spec.nodeName=sim-gpu1" in c["argv"]]:
        fail("run 13-mig-layout: the device plugin's pod on sim-gpu1 was not started again")
    print("rolling-lab: the new layout replaced the instances without a reboot; the restarted plugin advertises 7")

    step("14. sim-gpu1 back to a whole GPU, the agent now in rolling_upgrade_gpu_holders: every holder stopped, MIG off "
         "at once (no reset, no reboot), the holders started again, the boot unit removed, 1 GPU allocatable")
    set_mig_layout("sim-gpu1", None, "rolling_upgrade_gpu_holders: [nvidia-persistenced, nvidia-fabricmanager, "
                                     "nvidia-dcgm, dcgm, nvsm, %s]\n" % GPU_AGENT)
    restarts_before = container("sim-gpu1")[0]
    known = len(sh("sim-gpu1", "cat %s/calls.log" % MIG_STATE).splitlines())
    code, log = upgrade("14-mig-off")
    changes = [json.loads(line) for line in sh("sim-gpu1", "cat %s/calls.log" % MIG_STATE).splitlines()[known:]]
    shown = ([(call["argv"][:3], call["clients"]) for call in changes], container("sim-gpu1")[0] - restarts_before)
    wanted = ([(["mig", "-dci", "-i"], []), (["mig", "-dgi", "-i"], []), (["-i", "0", "-mig"], [])], 0)
    if code != 0 or shown != wanted:
        fail("run 14-mig-off: exit %d; the MIG commands on sim-gpu1 with the clients holding the GPU then, and its reboots: "
             "%s; see %s" % (code, shown, WORK / "14-mig-off.log"))
    if active("sim-gpu1", "nvidia-persistenced", GPU_AGENT) != ["active", "active"] \
            or sh("sim-gpu1", "ls /etc/systemd/system/dlinfra-mig-layout.service 2>/dev/null || true").strip():
        fail("run 14-mig-off: the holders are not running again on sim-gpu1, or the boot unit is left")
    node = json.loads(sh(HEAD, "/snap/bin/microk8s kubectl get node sim-gpu1 -o json"))
    shown = (node["metadata"]["labels"].get("dlinfra.io/gpu.sharing"), node["status"]["allocatable"].get("nvidia.com/gpu"),
             mig_published("sim-gpu1"), bool(node.get("spec", {}).get("unschedulable")))
    if shown != ("none", "1", [{"index": 0, "mig": False, "mig_devices": []}], False):
        fail("run 14-mig-off: sim-gpu1 (sharing label, nvidia.com/gpu, its GPU, cordoned): %s" % (shown,))
    print("rolling-lab: MIG off without a reset or a reboot once every holder was stopped; they run again; 1 GPU")

    step("15. a MIG layout for sim-gpu2 while it is in no cluster yet (its microk8s command moved away, as before its "
         "first run): set without a cordon or a drain, no reboot, the boot unit enabled")
    install_mig_double("sim-gpu2")
    set_mig_layout("sim-gpu2", '{"3g.71gb": 2}', "rolling_upgrade_gpu_holders: [nvidia-persistenced, %s]\n" % GPU_AGENT)
    sh("sim-gpu2", "mv /snap/bin/microk8s /snap/bin/microk8s.away")
    restarts_before = container("sim-gpu2")[0]
    offset = calls_offset()
    try:
        code, log = upgrade("15-mig-first")
    finally:
        sh("sim-gpu2", "mv /snap/bin/microk8s.away /snap/bin/microk8s")
    changes = [json.loads(line) for line in sh("sim-gpu2", "cat %s/calls.log" % MIG_STATE).splitlines()]
    shown = ([(call["argv"][:3], call["clients"]) for call in changes], container("sim-gpu2")[0] - restarts_before,
             events(calls_since(offset)[0], "sim-gpu2"), active("sim-gpu2", "nvidia-persistenced", GPU_AGENT),
             sh("sim-gpu2", "systemctl is-enabled dlinfra-mig-layout.service || true").strip())
    wanted = ([(["-i", "0", "-mig"], []), (["mig", "-cgi", "9:0,9:4"], [])], 0, [], ["active", "active"], "enabled")
    said = "sim-gpu2: MIG: GPU 0 MIG off -> 3g.71gb@0, 3g.71gb@4: its MIG layout is set without a drain"
    if code != 0 or shown != wanted or said not in " ".join(log.split()):
        fail("run 15-mig-first: exit %d; sim-gpu2's MIG commands with the clients then, reboots, Kubernetes events, "
             "holders, boot unit: %s; see %s" % (code, shown, WORK / "15-mig-first.log"))
    print("rolling-lab: a node in no cluster yet took its layout without a drain or a reboot")
    print("rolling-lab: passed in %.0f s; the logs are under %s" % (time.monotonic() - begun, WORK))


if __name__ == "__main__":
    os.environ.setdefault("ANSIBLE_NOCOLOR", "1")
    main()
