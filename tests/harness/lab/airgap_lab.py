"""The `airgap` stage of make test: the offline bundle (playbooks/bundle.yml), built from what the lab's converges
fetched through the store's apt proxy, carried to a fresh air-gapped simulated lab (AIRGAP=1 tests/harness/lab/demo.sh)
whose nodes have no route out and reach only the store, and site.yml converging there from it with nothing but
variables pointing the roles at it. Runs as root: the record of each node's packets lives in the node's network
namespace (tests/fixtures/airgap-record.nft). It starts from the lab the earlier stages converged (as-a-user: every
lab's nodes fetch Debian's packages through the store's apt-cacher-ng, inventories/sim/group_vars/gpu_cluster.yml),
as a site first converges its nodes through such a proxy (docs/airgapped-install.md):

  1. the bundle, built twice on that lab's store, to the same manifest, with Jupyter's pinned packages (the anaconda
     role's lock files) from the package index the store serves (tests/harness/lab/jupyter_index.py);
  2. carried to a fresh air-gapped lab (demo.sh down, then AIRGAP=1 demo.sh lab) whose store serves it with its
     apt-cacher-ng stopped;
  3. the record works: from a node, a connection to Debian's archive by address and a fetch of http://deb.debian.org/
     fail at once, and so does a lookup of example.com; the packet is recorded in the node, the lookups in the store's
     DNS log (tests/fixtures/airgap_store.yml), each with the node; then both records are emptied;
  4. site.yml converges from the bundle with tests/fixtures/airgap_bundle.yml (archive mirrors, the toolkit
     repository and the installer from the bundle, no proxy; microk8s from the bundle's snap files), as two slices at
     once, one per cluster (this lab has a second, tests/fixtures/airgap_hosts.yml), each cluster's staging plan on its
     own targets; one run over both then changes nothing; pip on sim-gpu1 takes every package of Jupyter's lock files
     from the bundle's index with --require-hashes; and the nodes made no outbound attempt: every packet to an address
     off the internal network, and
     every name lookup Docker's DNS passed on (but lookups of the lab's own names, such as apt's SRV lookup of the
     store), fails the stage, named with the node, the address or name, and the task that was running then;
  5. the same variables without one of those that point a role at the bundle (preflight_apt_mirror,
     nvidia_container_toolkit_repo_mirror, anaconda_installer_mirror, microk8s_offline_snaps; WITHOUT): site.yml stops
     in that role, before any change and within seconds, on every host the role runs on, with a message naming the
     host, the role and the variable.

  airgap_lab.py             the stage
  airgap_lab.py --attempts  print what was recorded since the records were last emptied; exit 1 if anything (demo.sh attempts)
  airgap_lab.py --without   step 5 alone, on the air-gapped lab as it is (converged from the bundle)
"""
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import yaml

from lab import ROOT, Stage
from play_recap import recap

WORK = ROOT / ".cache" / "airgap"
STORE = "sim-store"  # the store of inventories/sim (group dataset_store)
PROBE_NODE = "sim-gpu1"
# The air-gapped lab is inventories/sim less sim-gpu2, plus the second cluster (tests/fixtures/airgap_hosts.yml): a
# second GPU node like sim-gpu1 would converge the same roles from the same bundle again, about a quarter of the stage's
# CPU, and no check here needs two. Written two levels under the clone, as inventories/sim is: its demo_cache_dir and
# environment_fixture_dir are relative to the inventory's directory.
LAB_INVENTORY = ROOT / ".cache" / "airgap-inventory"
LEFT_OUT = "sim-gpu2"
INVENTORY = ["-i", str(LAB_INVENTORY), "-i", "tests/fixtures/airgap_hosts.yml"]
TABLE = ["inet", "dlinfra_airgap"]
DNS_LOG = "/var/log/dlinfra-airgap/dns.log"
DNS_QUERY = re.compile(r"^(\w{3} +\d+ \d\d:\d\d:\d\d) dnsmasq\[\d+\]: (?:\d+ \S+ )?query\[(\w+)\] (\S+) from (\S+)")
TASK_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+) .*?\| (TASK \[.*?\])")
NEGATIVE_TIMEOUT = 300
BUNDLE_DIR = "/var/www/html/bundle"  # bundle_dir of the store (inventories/sim/group_vars/dataset_store.yml)
# The lab's two clusters: inventories/sim's, and the second that tests/fixtures/airgap_hosts.yml adds.
CLUSTERS = ("cluster_sim", "cluster_sim2")
# shard_staging_plan_dir of the air-gapped lab (inventories/sim/group_vars/airgap_lab.yml), and its dataset.
PLAN_DIR = ROOT / ".cache" / "demo" / "airgap-shard-staging"
DATASET = "yt8m-mini"

STAGE = Stage("airgap-lab")
step, fail, sh = STAGE.step, STAGE.fail, STAGE.sh


def environment():
    return dict(os.environ, PATH="%s:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")), AIRGAP="1",
                DEMO_INVENTORY=str(LAB_INVENTORY), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")


def without_host(tree, host):
    """An inventory's YAML tree with host taken out of every group's hosts."""
    if not isinstance(tree, dict):
        return tree
    return {key: ({name: hostvars for name, hostvars in value.items() if name != host}
                  if key == "hosts" and isinstance(value, dict) else without_host(value, host))
            for key, value in tree.items()}


def write_lab_inventory():
    """LAB_INVENTORY: a copy of inventories/sim without LEFT_OUT."""
    shutil.rmtree(LAB_INVENTORY, ignore_errors=True)
    shutil.copytree(ROOT / "inventories" / "sim", LAB_INVENTORY)
    hosts = LAB_INVENTORY / "hosts.yml"
    hosts.write_text("# Written by tests/harness/lab/airgap_lab.py: inventories/sim/hosts.yml without %s.\n%s" % (
        LEFT_OUT, yaml.safe_dump(without_host(yaml.safe_load(hosts.read_text()), LEFT_OUT), sort_keys=False)))


def lab_addresses():
    """Each address of the lab's containers -> the container's name."""
    names = subprocess.run(["docker", "ps", "-a", "--filter", "label=org.dlinfra.demo=1", "--format", "{{.Names}}"],
                           capture_output=True, text=True, check=True).stdout.split()
    addresses = {}
    for name in names:
        out = subprocess.run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name],
                             capture_output=True, text=True, check=True).stdout
        for address in out.split():
            addresses[address] = name
    return addresses


def node_pids():
    """The lab's nodes (every container but the store) -> the PID whose network namespace holds the node's record."""
    pids = {}
    for name in sorted(set(lab_addresses().values()) - {STORE}):
        pids[name] = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", name],
                                    capture_output=True, text=True, check=True).stdout.strip()
    return pids


def nft(pid, *args):
    """nft in a node's network namespace (tests/fixtures/airgap-record.nft lives there); its stdout."""
    done = subprocess.run(["nsenter", "-t", pid, "-n", "nft"] + list(args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        fail("nft %s in the network namespace of PID %s: %s" % (" ".join(args), pid, done.stderr.strip()))
    return done.stdout


def record():
    """What was recorded: (packets counted, [packet attempts], [name lookups outside the lab], [lookups of lab names])."""
    packets, attempts = 0, []
    now = time.time()
    for node, pid in node_pids().items():
        counter = json.loads(nft(pid, "-j", "list", "counter", *TABLE, "outbound"))
        packets += [item["counter"]["packets"] for item in counter["nftables"] if "counter" in item][0]
        for name in ("attempts", "attempts6"):
            listed = json.loads(nft(pid, "-j", "list", "set", *TABLE, name))
            for item in listed["nftables"]:
                timeout = item.get("set", {}).get("timeout")
                for elem in item.get("set", {}).get("elem", []):
                    entry = elem.get("elem", elem) if isinstance(elem, dict) else {"val": elem}
                    destination, protocol, port = entry["val"]["concat"]
                    # The element's timeout (the set's) restarts at each of its packets: its age is when it was last seen.
                    timeout = entry.get("timeout", timeout)
                    seen = now - (timeout - entry["expires"]) if "expires" in entry and timeout else None
                    attempts.append({"source": node, "destination": destination, "protocol": protocol, "port": port,
                                     "packets": entry.get("counter", {}).get("packets"), "seen": seen})
    lab_names = set(lab_addresses().values())
    lookups, own = [], []
    for line in sh(STORE, "cat %s" % DNS_LOG).splitlines():
        match = DNS_QUERY.match(line)
        if match:
            when, kind, name, source = match.groups()
            # apt asks for SRV records of its sources (_http._tcp.sim-store), which Docker's DNS does not hold: a
            # lookup about a host of the lab, not an attempt to reach the outside. So is UNKNOWN: the tests' own
            # connection (tests/harness/setup/container_ssh.sh) is a sshd -i on a pipe, whose peer sshd names so
            # and looks up when a session ends leaving a process behind (an async task).
            (own if name.rstrip(".").split(".")[-1] in lab_names or name == "UNKNOWN" else lookups).append(
                {"when": when, "type": kind, "name": name, "source": source})
    return packets, attempts, lookups, own


def require_no_attempts(runs, during):
    """Print what the nodes tried since the records were emptied; fail, naming each attempt, if they tried anything.
    runs: the names of the playbook runs whose timed logs say which task was running."""
    packets, attempts, lookups, own = record()
    lines = describe(packets, attempts, lookups, own, [WORK / ("%s.timed.log" % run) for run in runs])
    for line in lines:
        print("  " + line)
    if packets or attempts or lookups:
        fail("the nodes tried to reach the outside %s: %s" % (during, "; ".join(lines[1:])))


def reset():
    for pid in node_pids().values():
        nft(pid, "flush", "set", *TABLE, "attempts")
        nft(pid, "flush", "set", *TABLE, "attempts6")
        nft(pid, "reset", "counter", *TABLE, "outbound")
    sh(STORE, "truncate -s 0 %s" % DNS_LOG)
    packets, attempts, lookups, own = record()
    if packets or attempts or lookups or own:
        fail("the record is not empty after emptying it: %s packets, %s, %s, %s" % (packets, attempts, lookups, own))


def task_times(logs):
    """(time, task banner) for every task the timed Ansible logs started, in order."""
    started = []
    for path in logs:
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                match = TASK_LINE.match(line)
                if match:
                    when = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")) + int(match.group(2)) / 1000.0
                    started.append((when, match.group(3)))
    return sorted(started, key=lambda item: item[0])


def task_at(moment, tasks, resolution=0.0):
    """The task last started at or before moment, and those started within the resolution after it (the DNS log's times
    are to the second: any of them may have made the lookup), as one description."""
    current, later = None, []
    for when, task in tasks:
        if when <= moment:
            current = task
        elif when < moment + resolution:
            later.append(task)
    return " or ".join(([current] if current else []) + later) or None


def describe(packets, attempts, lookups, own=(), logs=()):
    """One line for each recorded attempt: the node, what it tried and, from the timed logs, the task running then."""
    names = lab_addresses()
    tasks = task_times(logs)
    year = time.strftime("%Y")
    lines = ["%d packet(s) to addresses off the internal network, %d name lookup(s) outside the lab" % (packets, len(lookups))]
    for item in attempts:
        during = task_at(item["seen"], tasks) if item["seen"] else None
        lines.append("%s -> %s %s/%s: %s packet(s)%s%s" % (
            item["source"], item["destination"], item["protocol"], item["port"], item["packets"],
            ", last at %s" % time.strftime("%H:%M:%S", time.localtime(item["seen"])) if item["seen"] else "",
            ", during %s" % during if during else ""))
    for item in lookups:
        moment = time.mktime(time.strptime("%s %s" % (year, item["when"]), "%Y %b %d %H:%M:%S"))
        during = task_at(moment, tasks, resolution=1.0)
        lines.append("%s looked up %s (%s) at %s%s" % (
            names.get(item["source"], item["source"]), item["name"], item["type"], item["when"].split()[-1],
            ", during %s" % during if during else ""))
    if own:
        lines.append("(not attempts: %d lookup(s) of the lab's own names that Docker's DNS passed on: %s)"
                     % (len(own), ", ".join(sorted({"%s %s" % (q["type"], q["name"]) for q in own}))))
    return lines


def start_playbook(name, inventory, *extra, env=None):
    """Start site.yml against inventory in the background; what finish_playbook takes. Its output and a timed log go
    to WORK."""
    log, timed = WORK / (name + ".log"), WORK / (name + ".timed.log")
    timed.unlink(missing_ok=True)
    env = dict(environment(), ANSIBLE_LOG_PATH=str(timed), **(env or {}))
    with open(log, "w") as out:
        process = subprocess.Popen(["ansible-playbook", "site.yml"] + inventory + list(extra), cwd=ROOT, env=env,
                                   stdout=out, stderr=subprocess.STDOUT)
    return name, process, time.monotonic()


def finish_playbook(started, timeout=None):
    """Wait for a run start_playbook started; (exit status or None when it ran past timeout, output, seconds)."""
    name, process, began = started
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        code = None
    elapsed = time.monotonic() - began
    status = "timed out" if code is None else "exit %d" % code
    log = WORK / (name + ".log")
    print("airgap-lab: site.yml (%s): %s in %.0f s (log %s)" % (name, status, elapsed, log), flush=True)
    return code, log.read_text(errors="replace"), elapsed


def playbook(name, inventory, *extra, timeout=None, env=None):
    """site.yml against inventory; (exit status, output, seconds)."""
    return finish_playbook(start_playbook(name, inventory, *extra, env=env), timeout)


def run_again(name, arguments):
    """site.yml once more on a converged lab: it must pass and change nothing. Its time."""
    code, output, seconds = playbook(name, arguments)
    if code != 0:
        print(output[-4000:])
        fail("site.yml run again (%s) failed" % name)
    changed = {host: stats["changed"] for host, stats in recap(output).items() if stats.get("changed")}
    if changed or not recap(output):
        fail("site.yml run again (%s) changed %s: %s" % (name, changed or "(no recap)", changed_tasks(output)))
    return seconds


def changed_tasks(output):
    task, found = None, []
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line.split(" ***")[0].rstrip("* ")
        elif line.startswith("changed: ["):
            found.append("%s %s" % (line.split("]")[0] + "]", task))
    return found


def counter_fires():
    """A node's attempts are refused and recorded: by address, by name through a URL, and a bare lookup."""
    try:
        archive = socket.gethostbyname("deb.debian.org")
    except OSError:
        archive = "192.0.2.1"  # TEST-NET-1 (RFC 5737): any address off the internal network goes to the store
    tries = {
        "connect to %s:80" % archive: "import socket; socket.create_connection((%r, 80), timeout=3)" % archive,
        "fetch http://deb.debian.org/": "import urllib.request; urllib.request.urlopen('http://deb.debian.org/', timeout=3)",
    }
    for what, code in tries.items():
        started = time.monotonic()
        done = subprocess.run(["docker", "exec", PROBE_NODE, "python3", "-c", code], capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - started
        error = (done.stderr.strip().splitlines() or [""])[-1]
        outcome = "succeeded" if done.returncode == 0 else "failed"
        print("airgap-lab: %s from %s: %s in %.1f s (%s)" % (what, PROBE_NODE, outcome, elapsed, error), flush=True)
        if done.returncode == 0:
            fail("%s: %s reached the outside" % (what, PROBE_NODE))
    looked_up = subprocess.run(["docker", "exec", PROBE_NODE, "getent", "hosts", "example.com"],
                               capture_output=True, text=True, check=False)
    print("airgap-lab: getent hosts example.com on %s: exit %d %s" % (PROBE_NODE, looked_up.returncode, looked_up.stdout.strip()))
    if looked_up.returncode == 0:
        fail("%s resolved example.com: %s" % (PROBE_NODE, looked_up.stdout.strip()))

    packets, attempts, lookups, own = record()
    for line in describe(packets, attempts, lookups, own):
        print("  " + line)
    node_addresses = {a for a, name in lab_addresses().items() if name == PROBE_NODE}
    if not any(a["source"] == PROBE_NODE and a["destination"] == archive and str(a["port"]) == "80" for a in attempts):
        fail("the connection from %s to %s:80 was not recorded" % (PROBE_NODE, archive))
    for name in ("deb.debian.org", "example.com"):
        if not any(q["source"] in node_addresses and q["name"] == name for q in lookups):
            fail("the lookup of %s on %s was not recorded" % (name, PROBE_NODE))


# The negative runs: the bundle's variables less one that points a role at it (taken out of the inventory too, where
# the lab points the role at the store). Each stops, before any change and within seconds, on every host the role runs
# on, with the role's message naming the host and the variable to set.
# (the variables removed, the role, the hosts' group, the task that stops, what else the run is given)
WITHOUT = [
    (["preflight_apt_mirror", "preflight_apt_security_mirror"], "preflight", "gpu_cluster",
     "Stop where a package source does not answer", []),
    (["nvidia_container_toolkit_repo_mirror"], "nvidia_container_toolkit", "gpu_nodes",
     "Check that the package repositories answer", ["--tags", "nvidia_container_toolkit"]),
    # An installed prefix needs no installer: a node that still needs one is a new prefix.
    (["anaconda_installer_mirror"], "anaconda", "gpu_nodes",
     "Check that the installer's download site answers", ["--tags", "anaconda", "-e", "anaconda_prefix=/opt/airgap-check-conda"]),
    # Without its files, microk8s (installed from them, tracking no channel) would move to microk8s_channel from the
    # store. The heads' play stops, and with it the run: the workers' play never starts. upgrade.yml's plays are left
    # out: they would take the same change through a drain first.
    (["microk8s_offline_snaps"], "microk8s", "head",
     "Stop where the snap store does not answer", ["--tags", "microk8s", "--skip-tags", "rolling_upgrade"]),
]
BUNDLE_VARS = ROOT / "tests" / "fixtures" / "airgap_bundle.yml"


def group_hosts(group):
    listed = json.loads(subprocess.run(["ansible-inventory", "--list"] + INVENTORY, cwd=ROOT, env=environment(),
                                       capture_output=True, text=True, check=True).stdout)
    hosts, pending = set(), [group]
    while pending:
        entry = listed.get(pending.pop(), {})
        hosts.update(entry.get("hosts", []))
        pending.extend(entry.get("children", []))
    return sorted(hosts)


def drop_variables(path, removed):
    """Rewrite the YAML variables file path without the top-level keys removed; how many it dropped."""
    kept, dropped, inside = [], 0, False
    for line in path.read_text().splitlines(keepends=True):
        if re.match(r"^(%s):" % "|".join(removed), line):
            dropped, inside = dropped + 1, True
        elif not (inside and line[:1] in (" ", "-")):  # a value's further lines go with it
            inside = False
            kept.append(line)
    path.write_text("".join(kept))
    return dropped


def without(removed, role, group, task_name, extra):
    """site.yml with the bundle's variables, and the inventory, less the variables removed: it stops in role's task_name
    on every host of group, naming the host, the role and the variable (removed[0]), and changes nothing."""
    variable = removed[0]
    inventory = WORK / ("inventory-without-" + variable)
    shutil.rmtree(inventory, ignore_errors=True)
    shutil.copytree(LAB_INVENTORY, inventory)
    for path in sorted((inventory / "group_vars").glob("*.yml")):
        drop_variables(path, removed)
    bundle_vars = WORK / ("bundle-vars-without-%s.yml" % variable)
    shutil.copyfile(BUNDLE_VARS, bundle_vars)
    if drop_variables(bundle_vars, removed) != len(removed):
        fail("%s does not set %s" % (BUNDLE_VARS, ", ".join(removed)))
    nodes = group_hosts(group)
    code, output, elapsed = playbook("without-" + variable, ["-i", str(inventory), "-i", "tests/fixtures/airgap_hosts.yml"],
                                     "-e", "demo_cache_dir=%s" % (ROOT / ".cache" / "demo"),
                                     "-e", "environment_fixture_dir=%s" % (ROOT / "tests" / "fixtures" / "environments"),
                                     "-e", "@%s" % bundle_vars,
                                     *extra, timeout=NEGATIVE_TIMEOUT, env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
    if code is None:
        fail("without %s site.yml ran past %d s instead of stopping" % (variable, NEGATIVE_TIMEOUT))
    if code == 0:
        fail("without %s site.yml passed" % variable)
    messages, tasks, task = {}, {}, None
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):].split("]")[0]
        match = re.match(r"^fatal: \[([^\]]+)\]: FAILED! => (\{.*\})$", line)
        if match:
            messages[match.group(1)] = str(json.loads(match.group(2)).get("msg"))
            tasks[match.group(1)] = task
    expected = re.compile(r"^(?:\w+\.\w+\.)?%s : %s$" % (role, re.escape(task_name)))
    for node in nodes:
        message = messages.get(node, "")
        if not message.startswith("%s on %s: " % (role, node)) or variable not in message:
            print(output[-3000:])
            fail("without %s %s did not stop with %s's message naming the host and the variable: %r" % (variable, node, role, message))
        if not expected.match(tasks[node] or ""):
            fail("without %s %s stopped in TASK [%s], not in %s's check (%s)" % (variable, node, tasks[node], role, task_name))
    if recap(output) and any(stats.get("changed") for stats in recap(output).values()):
        fail("the run without %s changed something: %s" % (variable, changed_tasks(output)))
    print("airgap-lab: without %s: stopped in %.0f s, in TASK [%s], on %s; the message on %s:\n  %s"
          % (variable, elapsed, tasks[nodes[0]], ", ".join(nodes), nodes[0], messages[nodes[0]]), flush=True)
    require_bundle_sources(nodes[0])  # the converged lab's sources are still the bundle's
    packets, attempts, lookups, own = record()
    print("airgap-lab: what the nodes tried in that run (the checks' own look for the outside, refused):")
    for line in describe(packets, attempts, lookups, own, [WORK / ("without-%s.timed.log" % variable)]):
        print("  " + line)
    reset()
    return elapsed


def require_bundle_sources(node):
    sources = sh(node, "cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources 2>/dev/null")
    if "deb.debian.org" in sources or "http://sim-store/bundle/debian" not in sources:
        fail("%s's sources are not the bundle's:\n%s" % (node, sources))


def require_microk8s_from(files, source):
    """Every node of the cluster installed microk8s from files (snap ack, snap install FILE), not from a store: its copies
    of files ({name: sha256}, from source) are there, and the installed revision is theirs, tracking no channel."""
    if not any(name.endswith(".snap") for name in files) or not any(name.endswith(".assert") for name in files):
        fail("no microk8s .snap and .assert in %s: %s" % (source, sorted(files)))
    revision = next(name for name in files if name.endswith(".snap")).rsplit("_", 1)[1].split(".")[0]
    for node in group_hosts("gpu_cluster"):
        installed = sh(node, "cd /var/lib/dlinfra/microk8s/snaps && sha256sum microk8s_*.snap microk8s_*.assert; snap list microk8s")
        for name, digest in sorted(files.items()):
            if "%s  %s" % (digest, name) not in installed:
                fail("%s did not install microk8s from %s%s:\n%s" % (node, source, name, installed))
        columns = installed.splitlines()[-1].split()
        if columns[2] != revision or columns[3] != "-":
            fail("%s's microk8s is not %s's revision %s from its file (tracking -):\n%s" % (node, source, revision, installed))


def build_bundle(name):
    """playbooks/bundle.yml on the store; (the manifest's text, the run's recap of the store)."""
    manifest = WORK / "bundle-manifest.sha256"  # one path: fetch changes it only when the manifest differs
    log = WORK / ("%s.log" % name)
    started = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.call(["ansible-playbook", "playbooks/bundle.yml"] + INVENTORY
                               + ["-e", "bundle_host=%s" % STORE, "-e", "bundle_manifest=%s" % manifest],
                               cwd=ROOT, env=environment(), stdout=out, stderr=subprocess.STDOUT)
    output = log.read_text(errors="replace")
    print("airgap-lab: bundle.yml (%s): exit %d in %.0f s (log %s)" % (name, code, time.monotonic() - started, log), flush=True)
    if code != 0 or not manifest.exists():
        print(output[-3000:])
        fail("bundle.yml failed")
    return manifest.read_text(), recap(output).get(STORE, {}), time.monotonic() - started


def bundle_twice():
    """Step 1: the bundle, built twice on the store of the lab as it is, to the same manifest; (its manifest, times)."""
    times = {}
    (WORK / "bundle-manifest.sha256").unlink(missing_ok=True)
    first, stats, times["bundle"] = build_bundle("bundle-1")
    second, stats_again, times["bundle again"] = build_bundle("bundle-2")
    if first != second:
        fail("the second build's manifest differs from the first's:\n%s" % "\n".join(
            sorted(set(first.splitlines()) ^ set(second.splitlines()))[:20]))
    if stats_again.get("changed"):
        fail("the second build reported a change: %s" % stats_again)
    entries = [line.split(None, 1)[1] for line in first.splitlines()]
    debs = [path for path in entries if path.endswith(".deb")]
    for wanted in ("debian/dists/", "debian-security/dists/", "sim-store/vendor/libnvidia-container/gpgkey",
                   "sim-store/vendor/libnvidia-container/stable/deb/", "sim-store/vendor/miniforge/", "snaps/microk8s_",
                   "pypi/requirements/jupyterlab.lock", "pypi/simple/jupyterlab/index.html", "pypi/files/jupyterlab-"):
        if not any(path.startswith(wanted) for path in entries):
            fail("the bundle holds nothing under %s" % wanted)
    print("airgap-lab: the bundle: %d files (%d packages), the same manifest twice" % (len(entries), len(debs)), flush=True)
    copy = WORK / "bundle"
    shutil.rmtree(copy, ignore_errors=True)
    subprocess.run(["docker", "cp", "%s:%s" % (STORE, BUNDLE_DIR), str(copy)], check=True)
    return first, times


def fresh_lab_serving_the_bundle():
    """Step 2: a fresh air-gapped lab whose store serves the controller's copy of the bundle, its proxy stopped."""
    started = time.monotonic()
    for command in (["tests/harness/lab/demo.sh", "down"], ["tests/harness/lab/demo.sh", "lab"]):
        if subprocess.call(command, cwd=ROOT, env=environment()) != 0:
            fail(" ".join(command))
    sh(STORE, "systemctl disable --now apt-cacher-ng && ! systemctl is-active apt-cacher-ng")
    subprocess.run(["docker", "cp", str(WORK / "bundle"), "%s:%s" % (STORE, BUNDLE_DIR)], check=True)
    sh(STORE, "cd %s && sha256sum --quiet -c MANIFEST.sha256" % BUNDLE_DIR)
    return time.monotonic() - started


def converge_from_the_bundle(manifest):
    """Step 4: site.yml from the bundle, microk8s from its snap files, as two slices at once (one per cluster); one run
    over both then changes nothing; no outbound attempt."""
    times = {}
    slices = [start_playbook("bundle-site-" + cluster, INVENTORY + ["-e", "@%s" % BUNDLE_VARS, "--limit", cluster])
              for cluster in CLUSTERS]
    with concurrent.futures.ThreadPoolExecutor(len(slices)) as pool:  # each slice's own time
        results = list(pool.map(finish_playbook, slices))
    for cluster, (code, output, seconds) in zip(CLUSTERS, results):
        times["site from the bundle, --limit %s" % cluster] = seconds
        if code != 0:
            print(output[-4000:])
            fail("site.yml --limit %s failed on the fresh lab from the bundle" % cluster)
    for cluster in CLUSTERS:
        plan = json.loads((PLAN_DIR / cluster / ("%s.plan.json" % DATASET)).read_text())
        targets = sorted(set(group_hosts(cluster)) & set(group_hosts("stage_targets")))
        if sorted(plan["nodes"]) != targets or sorted(plan["assignment"]) != sorted(plan["shards"]):
            fail("%s's plan of %s does not place every shard on its own targets %s: %s"
                 % (cluster, DATASET, targets, sorted(plan["nodes"])))
    for node in group_hosts("gpu_cluster"):
        require_bundle_sources(node)
    require_microk8s_from({path[len("snaps/"):]: digest for digest, path in (line.split(None, 1) for line in manifest.splitlines())
                           if path.startswith("snaps/microk8s_")}, "the bundle's snaps/")
    # One run over both clusters finds nothing to change: the slices left the state one run leaves.
    times["site from the bundle again, both clusters"] = run_again("bundle-site-2", INVENTORY + ["-e", "@%s" % BUNDLE_VARS])
    times["pip from the bundle"] = pip_from_the_bundle()
    require_no_attempts(["bundle-site-" + cluster for cluster in CLUSTERS] + ["bundle-site-2"],
                        "while converging from the bundle")
    return times


def pip_from_the_bundle():
    """pip on a node, with the anaconda prefix's Python, takes every package of Jupyter's lock files from the bundle's
    package index, each checked against its hash (--require-hashes), as the anaconda role installs them there (an
    http:// index trusted, as the role trusts it)."""
    started = time.monotonic()
    names = sh(STORE, "ls %s/pypi/requirements" % BUNDLE_DIR).split()
    if "jupyterlab.lock" not in names:
        fail("the bundle holds no Jupyter lock file (pypi/requirements: %s)" % names)
    for name in names:
        got = sh(PROBE_NODE, "rm -rf /tmp/bundle-pip && /opt/anaconda3/bin/python -m pip download --quiet --no-deps "
                             "--require-hashes --only-binary :all: --index-url http://{s}/bundle/pypi/simple/ --trusted-host {s} "
                             "-r http://{s}/bundle/pypi/requirements/{n} -d /tmp/bundle-pip && ls /tmp/bundle-pip | wc -l"
                             .format(s=STORE, n=name)).split()[-1]
        print("airgap-lab: pip on %s took the %s packages of %s from the bundle's index" % (PROBE_NODE, got, name), flush=True)
    return time.monotonic() - started


def attempts_only():
    packets, attempts, lookups, own = record()
    for line in describe(packets, attempts, lookups, own):
        print("airgap: " + line)
    return 1 if packets or attempts or lookups else 0


def main():
    WORK.mkdir(parents=True, exist_ok=True)
    write_lab_inventory()
    if subprocess.run(["docker", "inspect", STORE], capture_output=True, check=False).returncode != 0:
        fail("no %s: this stage builds the bundle on the lab the as-a-user stage converged" % STORE)
    step("the offline bundle: built twice on the lab's store from what its converges fetched through the proxy")
    # The lab's stand-in for PyPI, which the bundle collects Jupyter's packages from (the workspace stage serves it too).
    subprocess.run([str(ROOT / "tests" / "harness" / "lab" / "store_jupyter_index.sh"), str(WORK / "pypi")], check=True)
    manifest, times = bundle_twice()

    step("the bundle, carried to a fresh air-gapped lab whose store serves it with its caching proxy stopped")
    times["fresh lab"] = fresh_lab_serving_the_bundle()

    step("a node's attempts to reach the outside fail at once, and are recorded (packets in the node, lookups on the store)")
    counter_fires()
    reset()

    step("site.yml converges from the bundle, and again changes nothing; the nodes tried to reach nothing but the store")
    times.update(converge_from_the_bundle(manifest))

    for case in WITHOUT:
        step("the bundle's variables without %s: site.yml stops in %s, naming the host and the variable" % (case[0][0], case[1]))
        times["without " + case[0][0]] = without(*case)

    print("\nairgap-lab: passed; " + ", ".join("%s %.0f s" % item for item in times.items()))
    return 0


def without_only():
    WORK.mkdir(parents=True, exist_ok=True)
    write_lab_inventory()
    reset()
    for case in WITHOUT:
        without(*case)
    return 0


if __name__ == "__main__":
    if "--attempts" in sys.argv[1:]:
        sys.exit(attempts_only())
    if "--without" in sys.argv[1:]:
        sys.exit(without_only())
    sys.exit(main())
