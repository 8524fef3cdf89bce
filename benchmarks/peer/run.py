# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark peer-assisted staging: one dataset replicated onto 1, 2 and 4 nodes, direct versus peer-assisted.

    .venv/bin/python benchmarks/peer/run.py --json benchmarks/peer/results/full.json   # full: 40 x 10 MiB, ~4 min
    .venv/bin/python benchmarks/peer/run.py --quick                                    # 8 x 1 MiB, correctness only

A private Docker network holds a store (nginx) and four nodes, every link limited with tc to the same rate. Each
node runs the engine (plugins/module_utils/_staging/transfer.py, through its CLI) with the settings the planner gives
it: direct, every node fetches every shard from the store; peer-assisted, each shard is fetched from the store by
one node and handed on by it to the others. Per (nodes, mode): the wall time until the last node finishes and the
bytes the store sent (from its access log). Exit status: 0 every target passed, 1 a target failed, 2 a
measurement failed (or the lab could not be set up).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "collections"))

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan import plan as shard_plan  # noqa: E402
# The engine's own check; the Docker engine, and so the runs' pids, are on this machine.
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.progress import pid_alive  # noqa: E402

MIB = 1 << 20
IMAGE = "dlinfra-test/debian:bookworm"
# Each run's containers and network carry its pid, so that two runs on one Docker engine (two checkouts' unit tests)
# do not remove each other's; a run removes what a killed run left behind (its label names a pid that is gone).
RUN_LABEL = "org.dlinfra.bench-peer.pid"
RUN_ID = os.getpid()
NETWORK = "dlinfra-bench-peer-%d" % RUN_ID
STORE = "bench-peer-store-%d" % RUN_ID
NODES = tuple("bench-peer-node%d-%d" % (number, RUN_ID) for number in range(1, 5))
NODE_COUNTS = (1, 2, 4)
MODES = ("direct", "peer")
MODE_LABELS = {"direct": "direct", "peer": "peer-assisted"}
PEER_PORT = 8473
PEER_WAIT_S = 120
PEER_LINGER_S = 30
CONCURRENCY = 8
ENGINE_MODULE = "ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer"
ENGINE_ROOT = "/opt/bench"
ENGINE_DIR = ENGINE_ROOT + "/ansible_collections/dlinfra/gpu_cluster/plugins/module_utils"
ENGINE_CONFIG = ENGINE_ROOT + "/config.json"
NODE_DEST = "/var/tmp/bench-dest"
WEB_ROOT = "/srv/bench"
DATASET_PATH = "dataset"
NGINX_CONF = "/etc/nginx/bench-peer.conf"
ACCESS_LOG = "/var/log/nginx/bench-peer-access.log"
SIZES = {"full": dict(shards=40, shard_mib=10), "quick": dict(shards=8, shard_mib=1)}
RUN_TIMEOUT_S = 900
INSTALL_TIMEOUT_S = 600
# Seconds of traffic at the link rate that the link check sends: long enough that the token bucket's burst does not count.
PROBE_SECONDS = {"full": 3, "quick": 1}
# A measured rate above this multiple of --rate means the limit is not in effect.
RATE_TOLERANCE = 1.15
SOURCE_BYTES_TARGET = 1.05
WALL_RATIO_TARGET = 1.5
STARTED = time.monotonic()

NGINX_CONFIG = r"""
worker_processes 2;
pid /run/bench-peer-nginx.pid;
error_log /var/log/nginx/bench-peer-error.log;
events { worker_connections 1024; }
http {
    log_format bench '$body_bytes_sent\t$status\t$request_method\t$http_user_agent\t$request_uri';
    access_log %(log)s bench;
    sendfile on;
    keepalive_timeout 65;
    keepalive_requests 100000;
    default_type application/octet-stream;
    server {
        listen 80 default_server;
        root %(root)s;
    }
}
"""

# Runs inside the store: random shards under the web root; prints [[name, size, sha256], ...].
WRITE_DATASET = r"""
import hashlib, json, os, sys
directory, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(directory, exist_ok=True)
records = []
for number in range(count):
    name = "shard-%06d.bin" % number
    digest = hashlib.sha256()
    with open(os.path.join(directory, name), "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(left, 4 << 20))
            digest.update(block)
            handle.write(block)
            left -= len(block)
    records.append([name, size, digest.hexdigest()])
print(json.dumps(records))
"""

# Runs inside a node: GET every URL at once, discard the bytes; prints {"bytes": ..., "seconds": ...}.
TIMED_FETCH = r"""
import json, sys, threading, time, urllib.request
received = []
def fetch(url):
    count = 0
    with urllib.request.urlopen(url, timeout=120) as response:
        while True:
            block = response.read(1 << 20)
            if not block:
                break
            count += len(block)
    received.append(count)
threads = [threading.Thread(target=fetch, args=(url,)) for url in sys.argv[1:]]
started = time.monotonic()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"bytes": sum(received), "seconds": time.monotonic() - started, "complete": len(received) == len(threads)}))
"""

# Runs inside a node: {name: size} of the staged files (dot files are the engine's journal and lock).
LIST_DEST = r"""
import json, os, sys
print(json.dumps({entry.name: entry.stat().st_size for entry in os.scandir(sys.argv[1]) if not entry.name.startswith(".")}))
"""


# Runs inside a node: the User-Agent the engine sends (the store's log is filtered on it), from whichever of the engine's
# modules defines it (module_utils/_staging/http.py today), so that moving the engine's modules around does not break this.
FIND_USER_AGENT = r"""
import importlib, sys
importlib.import_module("%s")
found = {module.USER_AGENT for name, module in list(sys.modules.items())
         if name.startswith("ansible_collections.dlinfra.gpu_cluster.") and isinstance(getattr(module, "USER_AGENT", None), str)}
if len(found) != 1:
    sys.exit("the engine's modules name %%d user agents: %%s" %% (len(found), sorted(found)))
print(found.pop())
"""


class BenchError(Exception):
    """The lab cannot be set up or a run went wrong: the figures cannot be trusted."""


def log(message):
    sys.stderr.write("[%6.1f s] %s\n" % (time.monotonic() - STARTED, message))
    sys.stderr.flush()


def docker(*args, stdin=None, timeout=120, check=True):
    try:
        done = subprocess.run(["docker", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise BenchError("the docker command is missing: run make docker") from None
    except subprocess.TimeoutExpired:
        raise BenchError("docker %s did not finish within %d s" % (" ".join(args[:3]), timeout)) from None
    if check and done.returncode:
        raise BenchError("docker %s failed (exit %d): %s" % (" ".join(args[:4]), done.returncode, done.stderr.strip()[-600:]))
    return done.stdout


def shell(container, script, timeout=120, check=True):
    return docker("exec", container, "sh", "-c", script, timeout=timeout, check=check)


def python(container, code, *args, timeout=120):
    return docker("exec", "-i", container, "python3", "-", *args, stdin=code, timeout=timeout)


def mbit(count_bytes, seconds):
    return count_bytes * 8 / seconds / 1e6


class Lab(object):
    """The store and the four nodes on their own network, with limited links."""

    def __init__(self, rate_mbit):
        self.rate_mbit = rate_mbit
        self.addresses = {}
        self.downlink = "not set up"
        self.link_check = {}
        self.user_agent = None

    @property
    def rate_bytes(self):
        return self.rate_mbit * 1e6 / 8

    def remove(self, run_ids=(RUN_ID,)):
        try:
            for run_id in run_ids:
                containers = docker("ps", "-aq", "--filter", "label=%s=%d" % (RUN_LABEL, run_id), check=False).split()
                if containers:
                    docker("rm", "-f", *containers, check=False, timeout=300)
                docker("network", "rm", "dlinfra-bench-peer-%d" % run_id, check=False)
        except BenchError as exc:
            log("could not remove the lab: %s" % exc)

    def remove_leftovers(self):
        """The containers and networks of earlier runs whose process is gone (killed before their own cleanup)."""
        labels = docker("ps", "-a", "--filter", "label=" + RUN_LABEL, "--format", '{{.Label "%s"}}' % RUN_LABEL,
                        check=False).split()
        gone = sorted({int(label) for label in labels if label.isdigit() and not pid_alive(int(label))})
        if gone:
            log("removing what killed runs %s left behind" % ", ".join(map(str, gone)))
            self.remove(gone)

    def create(self):
        docker("info", timeout=30)
        if docker("image", "inspect", IMAGE, check=False).strip() in ("", "[]"):
            raise BenchError("the image %s is missing: build it with make images" % IMAGE)
        self.remove_leftovers()
        docker("network", "create", "--label", "%s=%d" % (RUN_LABEL, RUN_ID), NETWORK)
        for name in (STORE,) + NODES:
            # No systemd: a plain sleeping process is all the engine and nginx need.
            docker("run", "-d", "--name", name, "--hostname", name, "--network", NETWORK, "--label", "%s=%d" % (RUN_LABEL, RUN_ID),
                   "--cap-add", "NET_ADMIN", IMAGE, "sleep", "infinity")
            self.addresses[name] = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name).strip()

    # -- the store -------------------------------------------------------------------------------

    def start_store(self, shard_count, shard_size):
        log("installing nginx in %s" % STORE)
        shell(STORE, "export DEBIAN_FRONTEND=noninteractive; apt-get update -q >/dev/null && "
                     "apt-get install -y -q --no-install-recommends nginx >/dev/null", timeout=INSTALL_TIMEOUT_S)
        log("writing %d shards of %.1f MiB into %s" % (shard_count, shard_size / MIB, STORE))
        written = python(STORE, WRITE_DATASET, "%s/%s" % (WEB_ROOT, DATASET_PATH), str(shard_count), str(shard_size), timeout=600)
        base = "http://%s/%s/" % (self.addresses[STORE], DATASET_PATH)
        records = [{"name": name, "url": base + name, "size": size, "sha256": digest} for name, size, digest in json.loads(written)]
        config = NGINX_CONFIG % {"log": ACCESS_LOG, "root": WEB_ROOT}
        docker("exec", "-i", STORE, "sh", "-c", "cat > %s" % NGINX_CONF, stdin=config)
        shell(STORE, "nginx -t -c %s 2>&1" % NGINX_CONF)
        docker("exec", "-d", STORE, "nginx", "-c", NGINX_CONF, "-g", "daemon off;")
        for _attempt in range(50):
            ready = shell(STORE, "python3 -c \"import urllib.request; urllib.request.urlopen('%s', timeout=2)\" 2>/dev/null && echo up"
                          % records[0]["url"], check=False)
            if ready.strip() == "up":
                return records
            time.sleep(0.2)
        raise BenchError("nginx in %s does not answer on %s" % (STORE, base))

    def store_bytes(self):
        """(bytes, requests) the store sent to the engine since the log was last truncated."""
        sent, requests = 0, 0
        for line in shell(STORE, "cat %s" % ACCESS_LOG).splitlines():
            fields = line.split("\t")
            if len(fields) == 5 and fields[3] == self.user_agent:
                sent += int(fields[0])
                requests += 1
        return sent, requests

    def truncate_log(self):
        # nginx appends (O_APPEND), so it keeps writing at the new end without being reopened.
        shell(STORE, ": > %s" % ACCESS_LOG)

    # -- the links -------------------------------------------------------------------------------

    def limit_links(self):
        """Egress tbf on every container's eth0 (its uplink); on each node also its downlink, shaped through an ifb
        device (tbf on what eth0 receives), or else policed; the first form the kernel supports is used."""
        rate = "%dmbit" % self.rate_mbit
        # Token bucket of 10 ms of traffic (at least 64 KiB): above the kernel's timer granularity at any rate used here.
        burst = max(64 * 1024, int(self.rate_bytes / 100))
        tbf = "tbf rate %s burst %d latency 50ms" % (rate, burst)
        for name in (STORE,) + NODES:
            shell(name, "tc qdisc replace dev eth0 root " + tbf)
        downlink_forms = (
            ("shaped (ifb + tbf)", "ip link add ifb0 type ifb && ip link set ifb0 up && tc qdisc add dev ifb0 root %s && "
             "tc qdisc add dev eth0 handle ffff: ingress && tc filter add dev eth0 parent ffff: protocol all prio 1 "
             "u32 match u32 0 0 action mirred egress redirect dev ifb0" % tbf),
            ("policed", "tc qdisc add dev eth0 handle ffff: ingress && tc filter add dev eth0 parent ffff: protocol all prio 1 "
             "u32 match u32 0 0 police rate %s burst %d drop" % (rate, burst)),
        )
        problems = []
        for label, script in downlink_forms:
            try:
                for node in NODES:
                    shell(node, "tc qdisc del dev eth0 ingress 2>/dev/null; ip link del ifb0 2>/dev/null; " + script)
                self.downlink = label
                return
            except BenchError as exc:
                problems.append("%s: %s" % (label, str(exc).rsplit(": ", 1)[-1]))
        for node in NODES:
            shell(node, "tc qdisc del dev eth0 ingress 2>/dev/null; ip link del ifb0 2>/dev/null; true")
        self.downlink = "not limited (%s)" % "; ".join(problems)
        log("WARNING: the nodes' downlinks cannot be limited here, only uplinks: " + "; ".join(problems))

    def check_links(self, probe_seconds):
        """Before any figure is trusted: one timed fetch store -> node1 (the store's uplink), then node1 fetching from
        the store and node2 at once (node1's downlink: the sum must stay at the rate)."""
        size = int(self.rate_bytes * probe_seconds)
        shell(STORE, "head -c %d /dev/urandom > %s/probe.bin" % (size, WEB_ROOT))
        node1, node2 = NODES[0], NODES[1]
        shell(node2, "mkdir -p /var/tmp/probe && head -c %d /dev/urandom > /var/tmp/probe/probe.bin" % size)
        docker("exec", "-d", node2, "sh", "-c", "echo $$ > /var/tmp/probe.pid; exec python3 -m http.server %d --bind %s --directory /var/tmp/probe"
               % (PEER_PORT, self.addresses[node2]))
        store_url = "http://%s/probe.bin" % self.addresses[STORE]
        peer_url = "http://%s:%d/probe.bin" % (self.addresses[node2], PEER_PORT)
        try:
            time.sleep(1.0)
            single = json.loads(python(node1, TIMED_FETCH, store_url))
            both = json.loads(python(node1, TIMED_FETCH, store_url, peer_url))
        finally:
            shell(node2, "kill $(cat /var/tmp/probe.pid); rm -rf /var/tmp/probe /var/tmp/probe.pid", check=False)
            shell(STORE, "rm -f %s/probe.bin" % WEB_ROOT, check=False)
        if not (single["complete"] and both["complete"]) or single["bytes"] != size or both["bytes"] != 2 * size:
            raise BenchError("the link check's fetches came back incomplete: %s, %s" % (single, both))
        uplink, downlink = mbit(single["bytes"], single["seconds"]), mbit(both["bytes"], both["seconds"])
        self.link_check = {"store_to_node_mbit": round(uplink, 1), "two_senders_to_node_mbit": round(downlink, 1)}
        log("link check at %d Mbit/s: store -> node %.0f Mbit/s; store + node -> node %.0f Mbit/s" % (self.rate_mbit, uplink, downlink))
        if uplink > RATE_TOLERANCE * self.rate_mbit:
            raise BenchError("the store's uplink carried %.0f Mbit/s with a limit of %d: tc is not limiting it" % (uplink, self.rate_mbit))
        if uplink < 0.7 * self.rate_mbit:
            log("WARNING: the store's uplink reached only %.0f of %d Mbit/s: the CPU, not the link, may set the pace" % (uplink, self.rate_mbit))
        limited_downlink = not self.downlink.startswith("not limited")
        if limited_downlink and downlink > RATE_TOLERANCE * self.rate_mbit:
            raise BenchError("node1 received %.0f Mbit/s from two senders with a %s downlink of %d Mbit/s: the limit is not in effect"
                             % (downlink, self.downlink, self.rate_mbit))

    # -- the engine ------------------------------------------------------------------------------

    def install_engine(self):
        # The whole of plugins/module_utils, packages of its own included (the engine's modules import each other).
        source = os.path.join(REPO, "plugins", "module_utils")
        sources = sorted(os.path.relpath(os.path.join(top, name), source) for top, dirs, names in os.walk(source)
                         for name in names if name.endswith(".py") and "__pycache__" not in top)
        for node in NODES:
            shell(node, "rm -rf %s && mkdir -p %s" % (ENGINE_ROOT, ENGINE_DIR))
            docker("cp", source + "/.", "%s:%s" % (node, ENGINE_DIR))
            # No __init__.py above module_utils: Python 3 imports each directory of the path as an implicit namespace package.
            agent = docker("exec", "-e", "PYTHONPATH=" + ENGINE_ROOT, node, "python3", "-c", FIND_USER_AGENT % ENGINE_MODULE).strip()
            if self.user_agent not in (None, agent):
                raise BenchError("the engine reports user agent %r on %s and %r elsewhere" % (agent, node, self.user_agent))
            self.user_agent = agent
        log("engine installed on %d nodes (%s), user agent %s" % (len(NODES), ", ".join(sources), self.user_agent))


# -- one run ---------------------------------------------------------------------------------------


def node_settings(lab, records, hosts, mode):
    """The plan for `hosts`, and each node's stage() keyword arguments under it."""
    nodes = {host: {"free_bytes": 1 << 50} for host in hosts}
    plan = shard_plan.make_plan({"name": "bench", "mode": "replicate", "peer_assist": mode == "peer"}, records, nodes)
    roles = shard_plan.peer_roles(plan)
    token = secrets.token_hex(16)
    settings = {}
    for host in hosts:
        config = {"shards": records, "dest": NODE_DEST, "concurrency": CONCURRENCY}
        role = roles.get(host)
        if role and (role["sources"] or role["downstream"]):
            upstream = sorted(set(role["sources"].values()))
            config["peer"] = dict(node=host, address=lab.addresses[host], port=PEER_PORT, token=token,
                                  peers={peer: "http://%s:%d" % (lab.addresses[peer], PEER_PORT) for peer in upstream},
                                  sources=role["sources"], downstream=role["downstream"], wait=PEER_WAIT_S, linger=PEER_LINGER_S)
        settings[host] = config
    return plan, settings


def run_once(lab, records, count, mode):
    hosts = NODES[:count]
    plan, settings = node_settings(lab, records, hosts, mode)
    for host in hosts:
        shell(host, "rm -rf %s" % NODE_DEST)
        docker("exec", "-i", host, "sh", "-c", "cat > %s" % ENGINE_CONFIG, stdin=json.dumps(settings[host]))
    lab.truncate_log()
    outputs = {host: (tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for host in hosts}
    command = ["docker", "exec", "-e", "PYTHONPATH=" + ENGINE_ROOT]
    started = time.monotonic()
    processes = {host: subprocess.Popen(command + [host, "python3", "-m", ENGINE_MODULE, ENGINE_CONFIG], stdout=outputs[host][0],
                                        stderr=outputs[host][1]) for host in hosts}
    ended = {}
    try:
        # Polled in this thread, so that Ctrl-C or SIGTERM gets here at once and the finally below ends the engines.
        while len(ended) < len(hosts):
            for host, process in processes.items():
                if host not in ended and process.poll() is not None:
                    ended[host] = time.monotonic()
            if time.monotonic() - started > RUN_TIMEOUT_S:
                raise BenchError("%s still running after %d s" % (", ".join(sorted(set(hosts) - set(ended))), RUN_TIMEOUT_S))
            time.sleep(0.02)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    wall = max(ended.values()) - started
    printed = {}
    for host, files in outputs.items():
        printed[host] = []
        for handle in files:
            handle.seek(0)
            printed[host].append(handle.read())
            handle.close()
    results = {host: engine_result(host, processes[host].returncode, *printed[host], expected=len(records)) for host in hosts}
    for host in hosts:
        check_holdings(host, records)
    sent, requests = lab.store_bytes()
    engine_source = sum(result.get("peers", {}).get("source_bytes", result["fetched_bytes"]) for result in results.values())
    if sent < engine_source:
        raise BenchError("the store's log shows %d bytes sent, the engines report %d bytes taken from it: the log missed requests"
                         % (sent, engine_source))
    return {
        "wall_s": round(wall, 3),
        "store_bytes": sent,
        "store_requests": requests,
        "engine_source_bytes": engine_source,
        "peer_bytes": sum(result.get("peers", {}).get("peer_bytes", 0) for result in results.values()),
        "planned_source_bytes": plan["transfer"]["source_bytes"],
        "given_up_peers": {host: result["peers"]["given_up"] for host, result in results.items() if result.get("peers", {}).get("given_up")},
        "node_elapsed_s": {host: result["elapsed"] for host, result in results.items()},
    }


def engine_result(host, returncode, out, err, expected):
    lines = out.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise BenchError("the engine on %s printed no result (exit %s): %s" % (host, returncode, (err or out).strip()[-600:]))
    if "error" in result:
        raise BenchError("the engine on %s refused to run: %s" % (host, result["error"]))
    if returncode or result["failed_shards"] or result["errors"]:
        raise BenchError("the engine on %s failed (exit %s): %s %s" % (host, returncode, result["failed_shards"][:3], result["errors"][:3]))
    if result["fetched"] != expected:
        raise BenchError("the engine on %s fetched %s shards into an empty directory, expected %d" % (host, result["fetched"], expected))
    return result


def check_holdings(host, records):
    """Every shard under its name with its size (the engine verified each sha256 before the rename)."""
    held = json.loads(python(host, LIST_DEST, NODE_DEST))
    wanted = {record["name"]: record["size"] for record in records}
    if held != wanted:
        missing = sorted(set(wanted) - set(held))
        wrong = sorted(name for name in set(wanted) & set(held) if held[name] != wanted[name])
        extra = sorted(set(held) - set(wanted))
        raise BenchError("%s does not hold the dataset: missing %s, wrong size %s, unexpected %s" % (host, missing[:3], wrong[:3], extra[:3]))


# -- the table and the targets ---------------------------------------------------------------------


def summarize(measured, dataset_bytes):
    """One row per (nodes, mode): median wall time, the largest store byte count of its runs, and the ratios."""
    rows = []
    for (count, mode), runs in measured.items():
        row = {"nodes": count, "mode": mode, "runs": runs}
        done = [run for run in runs if "error" not in run]
        if len(done) == len(runs):
            row["wall_s"] = round(statistics.median(run["wall_s"] for run in done), 3)
            row["store_bytes"] = max(run["store_bytes"] for run in done)
            row["source_ratio"] = round(row["store_bytes"] / dataset_bytes, 3)
            row["peer_bytes"] = max(run["peer_bytes"] for run in done)
        else:
            row["error"] = next(run["error"] for run in runs if "error" in run)
        rows.append(row)
    for row in rows:
        single = next((other for other in rows if other["nodes"] == 1 and other["mode"] == row["mode"] and "wall_s" in other), None)
        if "wall_s" in row and single:
            row["wall_ratio"] = round(row["wall_s"] / single["wall_s"], 2)
    return rows


def find_row(rows, count, mode):
    return next((row for row in rows if row["nodes"] == count and row["mode"] == mode), None)


def evaluate_targets(rows, quick):
    """[(name, verdict, evidence, enforced)]; verdict PASS, FAIL, 'n/a' (a figure is missing) or 'info'."""
    targets = []
    for count in NODE_COUNTS:
        row = find_row(rows, count, "peer")
        name = "peer-assisted, %d node%s: store bytes <= %.2fx the dataset" % (count, "" if count == 1 else "s", SOURCE_BYTES_TARGET)
        if row is None or "source_ratio" not in row:
            targets.append((name, "n/a", "a figure is missing", True))
        else:
            verdict = "PASS" if row["source_ratio"] <= SOURCE_BYTES_TARGET else "FAIL"
            targets.append((name, verdict, "%.3fx" % row["source_ratio"], True))
    last = NODE_COUNTS[-1]
    row = find_row(rows, last, "peer")
    name = "peer-assisted, %d nodes: wall time <= %.1fx the 1-node time" % (last, WALL_RATIO_TARGET)
    # With a few MiB the fixed costs (process start, docker exec) outweigh the transfer: quick mode reports, never fails on it.
    if row is None or "wall_ratio" not in row:
        targets.append((name, "n/a", "a figure is missing", not quick))
    else:
        targets.append((name, "PASS" if row["wall_ratio"] <= WALL_RATIO_TARGET else "FAIL", "%.2fx" % row["wall_ratio"], not quick))
    row = find_row(rows, last, "direct")
    evidence = "%.2fx" % row["wall_ratio"] if row and "wall_ratio" in row else "a figure is missing"
    targets.append(("direct, %d nodes: wall time vs the 1-node time (expected ~%dx)" % (last, last), "info", evidence, False))
    return targets


def format_table(rows):
    header = "%5s  %-13s %9s %12s %13s %12s %11s" % ("nodes", "mode", "wall s", "store MiB", "store/dataset", "peers MiB", "wall/1-node")
    lines = [header, "-" * len(header)]
    for row in rows:
        if "error" in row:
            lines.append("%5d  %-13s failed: %s" % (row["nodes"], MODE_LABELS[row["mode"]], row["error"]))
            continue
        ratio = "%.2fx" % row["wall_ratio"] if "wall_ratio" in row else "-"
        figures = (row["nodes"], MODE_LABELS[row["mode"]], row["wall_s"], row["store_bytes"] / MIB, row["source_ratio"], row["peer_bytes"] / MIB, ratio)
        lines.append("%5d  %-13s %9.2f %12.1f %12.3fx %12.1f %11s" % figures)
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 shards of 1 MiB: a smoke test; only the byte targets can fail")
    parser.add_argument("--runs", type=int, default=1, help="runs per (nodes, mode), the median wall time counts (default 1)")
    parser.add_argument("--rate", type=int, default=200, metavar="MBIT", help="every link's rate in Mbit/s (default 200)")
    parser.add_argument("--shards", type=int, help="shards in the dataset (default 40, quick 8)")
    parser.add_argument("--shard-mib", type=float, help="size of each shard in MiB (default 10, quick 1)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows and targets as JSON to PATH")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 9:
        parser.error("--runs must be between 1 and 9")
    if not 1 <= args.rate <= 10000:
        parser.error("--rate must be between 1 and 10000 Mbit/s")
    if (args.shards is not None and args.shards < 1) or (args.shard_mib is not None and args.shard_mib <= 0):
        parser.error("--shards and --shard-mib must be positive")
    return args


def measure(lab, records, runs):
    """Per node count, direct and peer-assisted in turn (the order flips every run), `runs` times each."""
    measured = {(count, mode): [] for count in NODE_COUNTS for mode in MODES}
    for count in NODE_COUNTS:
        for run in range(runs):
            for mode in (MODES if run % 2 == 0 else MODES[::-1]):
                try:
                    outcome = run_once(lab, records, count, mode)
                    log("%d node(s), %s, run %d: %.2f s, store sent %.1f MiB"
                        % (count, MODE_LABELS[mode], run + 1, outcome["wall_s"], outcome["store_bytes"] / MIB))
                except BenchError as exc:
                    outcome = {"error": str(exc)}
                    log("%d node(s), %s, run %d failed: %s" % (count, MODE_LABELS[mode], run + 1, exc))
                measured[(count, mode)].append(outcome)
    return measured


def main(argv=None):
    args = parse_args(argv)
    size_mode = "quick" if args.quick else "full"
    shard_count = args.shards or SIZES[size_mode]["shards"]
    shard_size = int((args.shard_mib or SIZES[size_mode]["shard_mib"]) * MIB)
    dataset_bytes = shard_count * shard_size
    lab = Lab(args.rate)
    # Ctrl-C and a plain kill both end in the finally below, which removes the containers and the network.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        log("creating %s, %s and %d nodes (%s)" % (NETWORK, STORE, len(NODES), IMAGE))
        lab.create()
        records = lab.start_store(shard_count, shard_size)
        lab.install_engine()
        lab.limit_links()
        lab.check_links(PROBE_SECONDS[size_mode])
        measured = measure(lab, records, args.runs)
    except BenchError as exc:
        sys.stderr.write("peer benchmark: %s\n" % exc)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("peer benchmark: interrupted\n")
        return 2
    finally:
        log("removing the containers and %s" % NETWORK)
        lab.remove()
    return report(lab, args, measured, dataset_bytes, shard_count, shard_size)


def report(lab, args, measured, dataset_bytes, shard_count, shard_size):
    rows = summarize(measured, dataset_bytes)
    targets = evaluate_targets(rows, args.quick)
    print("Peer benchmark, %s mode: %d shards x %.1f MiB (%.1f MiB), %d run(s) per row (median wall time, largest store bytes); "
          "%d CPUs" % ("quick" if args.quick else "full", shard_count, shard_size / MIB, dataset_bytes / MIB, args.runs, os.cpu_count()))
    print("Links: %d Mbit/s; uplinks (egress tbf) on the store and every node; node downlinks %s. Link check: store -> node %s Mbit/s, "
          "store + node -> node %s Mbit/s." % (args.rate, lab.downlink, lab.link_check.get("store_to_node_mbit"),
                                               lab.link_check.get("two_senders_to_node_mbit")))
    print("store MiB: the $body_bytes_sent of the engine's requests in the store's nginx log. wall/1-node: against the same mode's 1-node run.")
    print(format_table(rows))
    print()
    print("Targets:" if not args.quick else "Targets (quick mode: only the byte targets are enforced):")
    for name, verdict, evidence, enforced in targets:
        print("  %-4s  %-66s %s%s" % (verdict, name, evidence, "" if enforced or verdict == "info" else " (not enforced)"))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump({"mode": "quick" if args.quick else "full", "runs": args.runs, "rate_mbit": args.rate, "shards": shard_count,
                       "shard_bytes": shard_size, "dataset_bytes": dataset_bytes, "cpus": os.cpu_count(), "kernel": platform.release(),
                       "downlink": lab.downlink, "link_check": lab.link_check, "user_agent": lab.user_agent, "rows": rows,
                       "targets": [{"target": name, "verdict": verdict, "evidence": evidence, "enforced": enforced}
                                   for name, verdict, evidence, enforced in targets]}, handle, indent=2)
    if any("error" in row for row in rows):
        return 2
    if any(verdict in ("FAIL", "n/a") and enforced for _name, verdict, _evidence, enforced in targets):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
