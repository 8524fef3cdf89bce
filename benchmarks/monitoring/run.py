"""What GPU monitoring costs a node and a head, against issue 35's targets, on recorded nvidia-smi output (no GPU here).

  1. the collector, run as its timer runs it (python3 -IS, the collection's module_utils), on the recorded 8-GPU DGX
     A100 report and the H200 capture, with the recorded Xid log: CPU seconds and peak RSS per run (target <= 100 ms);
  2. Debian's node exporter serving the collector's file, scraped ten times: its RSS, plus the collector's peak
     (target < 50 MiB together);
  3. Debian's Prometheus started with a 1,000-node scrape configuration from the role's own filter (generated targets,
     nothing scraped) and the role's rules: seconds until it says it is ready (target < 5 s). Rounds alternate with a
     3-node configuration, so the ratio shows what the 1,000 targets add.

No other GPU exporter can run without a GPU (dcgm-exporter needs NVIDIA's DCGM and a device), so the collector is
compared with its target and with `cat` of the same report (the floor: starting a process that prints it).
Binaries come from Debian's archive with `apt-get download` (signed index) into .cache/monitoring-bench/.

  run.py [--rounds N] [--json PATH]
"""
import argparse
import json
import os
import pathlib
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.dlinfra.gpu_cluster.plugins.filter.gpu_monitoring import (  # noqa: E402
    gpu_monitoring_prometheus_config, gpu_monitoring_scrape_plan)

FIXTURES = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia_smi"
REPORTS = {"8x A100 (DGX A100)": FIXTURES / "dgx_a100_8x_a100_sxm4_80gb.xml", "1x H200": FIXTURES / "h200_580_capture.xml"}
RULES = ROOT / "roles" / "gpu_monitoring" / "files" / "prometheus" / "dlinfra-gpu.rules.yml"
CACHE = ROOT / ".cache" / "monitoring-bench"
# The node runs the collector with the distribution's python3 -IS (templates/dlinfra-gpu-metrics.j2).
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# It prints its own peak RSS last (VmHWM belongs to the process after exec; wait4's ru_maxrss keeps the forking
# parent's from before it).
COLLECTOR = ("import sys; sys.path.insert(0, %r); "
             "from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.gpu_metrics import main; "
             "code = main(sys.argv[1:]); "
             "sys.stderr.write([line for line in open('/proc/self/status') if line.startswith('VmHWM')][0]); "
             "sys.exit(code)" % str(ROOT / "collections"))


def binary(package, path):
    """The binary at path inside the Debian package, downloaded and unpacked once."""
    target = CACHE / package / path.lstrip("/")
    if not target.exists():
        with tempfile.TemporaryDirectory() as work:
            subprocess.run(["apt-get", "download", "-q", package], cwd=work, check=True, capture_output=True)
            deb = next(pathlib.Path(work).glob(package + "_*.deb"))
            (CACHE / package).mkdir(parents=True, exist_ok=True)
            subprocess.run(["dpkg-deb", "-x", str(deb), str(CACHE / package)], check=True)
    return target


def timed_child(argv):
    """(CPU seconds, peak RSS in MiB from a VmHWM line on stderr (0 without), stdout) of one process."""
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors)
        out = process.stdout.read()
        process.stdout.close()
        dummy, status, usage = os.wait4(process.pid, 0)  # reaped here, with its rusage: Popen must not wait on it
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        err = errors.read()
    if process.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (argv[0], process.returncode, err.decode()[-500:]))
    peak = re.search(rb"VmHWM:\s+(\d+) kB", err)
    return usage.ru_utime + usage.ru_stime, int(peak.group(1)) / 1024 if peak else 0.0, out


def collector_run(report, state):
    return timed_child([PYTHON, "-IS", "-c", COLLECTOR, "--command", "cat %s" % report,
                        "--kernel-log", str(FIXTURES / "dmesg_xid_79.txt"), "--state-file", str(state),
                        "--staging-index", "", "--textfile-directory", "-"])


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mib(pid):
    text = pathlib.Path("/proc/%d/status" % pid).read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) / 1024


def wait_http(url, process, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("%s exited %d" % (url, process.returncode))
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.read()
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("%s did not answer in %d s" % (url, timeout))


def node_exporter_rss(work, report):
    textfiles = work / "textfile"
    textfiles.mkdir(exist_ok=True)
    (textfiles / "nvidia_gpu.prom").write_bytes(collector_run(report, work / "xid-state.json")[2])
    port = free_port()
    process = subprocess.Popen([str(binary("prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")),
                                "--web.listen-address=127.0.0.1:%d" % port,
                                "--collector.textfile.directory=%s" % textfiles],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for dummy in range(10):
            body = wait_http("http://127.0.0.1:%d/metrics" % port, process)
        if b"nvidia_smi_up 1" not in body:
            raise RuntimeError("node exporter does not serve the collector's nvidia_smi_up 1")
        return rss_mib(process.pid)
    finally:
        process.terminate()
        process.wait()


def prometheus_config(work, nodes):
    hosts = ["head1"] + ["gpu%04d" % n for n in range(1, nodes + 1)]
    groups = {"all": hosts, "cluster_big": hosts, "head": ["head1"], "gpu_nodes": hosts[1:]}
    for rack in range(0, nodes, 40):
        groups["rack_r%02d" % (rack // 40)] = hosts[1 + rack:1 + rack + 40]
    settings = {"server_group": "gpu_monitoring_server", "head_group": "head", "cluster_group_pattern": "^cluster_",
                "rack_group_pattern": "^rack_", "role_groups": ["head", "gpu_nodes"], "interval": "15",
                "node_exporter_port": "9100", "rules_file": str(RULES), "alertmanager_url": ""}
    plan = gpu_monitoring_scrape_plan(hosts, groups, settings)
    config = gpu_monitoring_prometheus_config("head1", plan, groups, {}, {host: "" for host in hosts}, settings)
    path = work / ("prometheus-%d.yml" % nodes)
    path.write_text(json.dumps(config))  # JSON is YAML
    targets = sum(len(group["targets"]) for job in config["scrape_configs"] for group in job["static_configs"])
    return path, targets


def prometheus_ready(work, config):
    """Seconds from start until /-/ready answers 200 (the configuration and rules loaded)."""
    data = pathlib.Path(tempfile.mkdtemp(dir=work))
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen([str(binary("prometheus", "/usr/bin/prometheus")), "--config.file=%s" % config,
                                "--storage.tsdb.path=%s" % data, "--web.listen-address=127.0.0.1:%d" % port],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http("http://127.0.0.1:%d/-/ready" % port, process)
        return time.monotonic() - started
    finally:
        process.terminate()
        process.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    options = parser.parse_args(argv)
    results = {"collector": {}, "prometheus": {}}
    with tempfile.TemporaryDirectory() as name:
        work = pathlib.Path(name)
        for label, report in REPORTS.items():
            ours, floor, peaks = [], [], []
            for dummy in range(options.rounds * 4):  # alternating: ours, then the floor
                cpu, peak, dummy = collector_run(report, work / "xid-state.json")
                ours.append(cpu)
                peaks.append(peak)
                floor.append(timed_child(["cat", str(report)])[0])
            results["collector"][label] = {"cpu_ms_median": 1000 * statistics.median(ours),
                                           "cpu_ms_max": 1000 * max(ours), "peak_rss_mib": max(peaks),
                                           "cat_cpu_ms_median": 1000 * statistics.median(floor)}
        exporter = node_exporter_rss(work, REPORTS["8x A100 (DGX A100)"])
        results["node_exporter_rss_mib"] = exporter
        configs = {nodes: prometheus_config(work, nodes) for nodes in (3, 1000)}
        times = {nodes: [] for nodes in configs}
        prometheus_ready(work, configs[3][0])  # not counted: the first start reads the binary from disk
        for dummy in range(options.rounds):
            for nodes, (path, targets) in configs.items():
                times[nodes].append(prometheus_ready(work, path))
        for nodes, (path, targets) in configs.items():
            results["prometheus"][nodes] = {"targets": targets, "ready_s_median": statistics.median(times[nodes]),
                                            "ready_s_max": max(times[nodes])}

    for label, row in results["collector"].items():
        verdict = "met" if row["cpu_ms_max"] <= 100 else "NOT met"
        print("collector, %-20s CPU %6.1f ms median, %6.1f ms max (target <= 100 ms: %s); peak RSS %.1f MiB; "
              "cat of the same report %.1f ms"
              % (label, row["cpu_ms_median"], row["cpu_ms_max"], verdict, row["peak_rss_mib"], row["cat_cpu_ms_median"]))
    together = results["node_exporter_rss_mib"] + results["collector"]["8x A100 (DGX A100)"]["peak_rss_mib"]
    print("node exporter RSS %.1f MiB + collector %.1f MiB = %.1f MiB (target < 50 MiB: %s)"
          % (results["node_exporter_rss_mib"], together - results["node_exporter_rss_mib"], together,
             "met" if together < 50 else "NOT met"))
    small, big = results["prometheus"][3], results["prometheus"][1000]
    print("Prometheus ready: %d targets %.2f s, %d targets %.2f s median (%.2f s max; target < 5 s: %s); ratio %.2fx"
          % (small["targets"], small["ready_s_median"], big["targets"], big["ready_s_median"], big["ready_s_max"],
             "met" if big["ready_s_max"] < 5 else "NOT met", big["ready_s_median"] / small["ready_s_median"]))
    if options.json:
        pathlib.Path(options.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(options.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
