"""The `validate` stage of make test: validate.yml on the simulated lab that as-a-user left converged.

  1. healthy: the run passes, every node carries every check of its kind (pass or skip, none failing), report.json
     validates against its schema, junit.xml has one test case per node x check, and report.html renders in headless
     Chromium (tests/harness/lab/check_report_html.py; the screenshot is kept in .cache/validate/).
  2. faults, each on its own node and check, injected together: a deleted shard (sim-gpu1), a truncated shard
     (sim-gpu2), a wrong driver version expected for the gpu_nodes group, containerd stopped (sim-gpu2), the head
     NotReady in the MicroK8s test double. Exactly those checks fail, and junit.xml fails exactly them. With
     validate_cordon_failed the nodes with a failed GPU check are cordoned and labelled; a node cordoned by someone
     else (the head) is left alone.
  3. GPU facts from recorded nvidia-smi output: test doubles of nvidia-smi and dmesg on sim-gpu1 print a real H100
     report and a clean kernel log, then the same report with a degraded PCIe link and a log with Xid errors: between
     the two runs (of the GPU phase, --tags validate_gpu) exactly gpu.pcie_link and gpu.xid on sim-gpu1 change, from
     pass to fail.
  4. healthy again, with every fault removed: the GPU and Kubernetes phases, from which validate decides the cordons,
     give run 1's statuses, and the nodes validate cordoned are uncordoned.
  The healthy run 1 and the validate_training tag run (5) set validate_training_dataset: training.ddp runs the
  train role's reference job (Debian's PyTorch, gloo) over both GPU nodes' ranks and passes from their own output: each
  sample read once across the world, equal steps, the all-reduce right; the report carries each rank's samples/s.
  5. each tag the role documents, alone (--tags validate_gpu, ..., validate_report): the run passes, its report holds
     every check of run 1, those of its phase with run 1's statuses and the others skipped as not read: together they
     read the whole lab again after the faults (no false positives over repeated runs). The runs go side by side:
     validate is read-only and no two phases read the same thing.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from xml.etree import ElementTree

import jsonschema

from lab import FIXTURES, ROOT, USER_INVENTORY, Stage, lab_setting

WORK = ROOT / ".cache" / "validate"
DATASET = "yt8m-mini"
TRAINING = ("-e", "validate_training_dataset=" + DATASET)  # the runs that run training.ddp's job
# The runs on recorded nvidia-smi output read the GPU phase alone: what they compare is its checks (the others report
# skipped, not read, in both), and step 5 shows that the phase alone reads as in a full run. The run after the faults
# also reads the Kubernetes phase: validate cordons and uncordons from what the two tell (tasks/report.yml).
GPU_ONLY = ("--tags", "validate_gpu")
CORDONS = ("--tags", "validate_gpu,validate_kubernetes", "-e", "validate_cordon_failed=true")
DOUBLE_DIR = "/usr/local/lib/dlinfra-validate-test-double"
COLLECTOR = "dlinfra-gpu-metrics"  # gpu_monitoring's collector unit on each node
KUBECTL = ["/snap/bin/microk8s", "kubectl"]
CORDON_LABEL = "dlinfra.io/validate-failed"
OPEN_LISTENER = "dlinfra-validate-fault-listener"  # a transient unit: python3's http.server on 0.0.0.0:8999


# What says which phase a check belongs to (a stdlib-only module of the collection, loaded from its file).
_SPEC = importlib.util.spec_from_file_location("validate_phases",
                                               ROOT / "plugins" / "plugin_utils" / "_validate" / "phases.py")
phases = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(phases)

STAGE = Stage("validate-lab")
step, fail, sh = STAGE.step, STAGE.fail, STAGE.sh


def start(name, *extra):
    """Start validate.yml in the background; what finish() takes."""
    report_dir = WORK / name
    command = ["ansible-playbook", "playbooks/validate.yml", "-i", str(WORK / "inventory"),
               "-e", "demo_cache_dir=%s" % (ROOT / ".cache" / "demo"),
               "-e", "environment_fixture_dir=%s" % (ROOT / "tests" / "fixtures" / "environments"),
               "-e", "validate_report_dir=%s" % report_dir] + list(extra)
    with open(WORK / (name + ".log"), "w") as log:
        return name, subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), time.monotonic()


def validate(name, *extra):
    """Run validate.yml; (exit status, report.json as a dict, report directory)."""
    return finish(start(name, *extra))


def finish(run):
    name, process, started = run
    report_dir = WORK / name
    code = process.wait()
    print("validate-lab: run %s: exit %d in %.0f s (log %s)"
          % (name, code, time.monotonic() - started, WORK / (name + ".log")), flush=True)
    if not (report_dir / "report.json").exists():
        print((WORK / (name + ".log")).read_text()[-4000:])
        fail("run %s wrote no report.json" % name)
    return code, json.loads((report_dir / "report.json").read_text()), report_dir


def statuses(report):
    return {(c["node"], c["check"]): c["status"] for c in report["checks"]}


def failing(report):
    return {key for key, status in statuses(report).items() if status == "fail"}


def junit_failures(report_dir):
    tree = ElementTree.parse(report_dir / "junit.xml")
    cases = tree.getroot().iter("testcase")
    return {(case.get("classname"), case.get("name")) for case in cases if case.find("failure") is not None}


def check_files(report, report_dir):
    schema = json.loads((ROOT / "docs" / "validate_report.schema.json").read_text())
    jsonschema.validate(report, schema)
    cases = list(ElementTree.parse(report_dir / "junit.xml").getroot().iter("testcase"))
    if len(cases) != len(report["checks"]):
        fail("junit.xml has %d test cases for %d checks" % (len(cases), len(report["checks"])))
    if junit_failures(report_dir) != failing(report):
        fail("junit.xml fails %s, report.json %s" % (sorted(junit_failures(report_dir)), sorted(failing(report))))


def expect_healthy(code, report, report_dir, name):
    check_files(report, report_dir)
    bad = sorted(failing(report))
    if code != 0 or bad:
        fail("run %s: exit %d, failing: %s" % (name, code, "; ".join(
            "%s %s: %s" % (c["node"], c["check"], c["message"]) for c in report["checks"] if c["status"] == "fail")))
    kinds = {}
    for node in report["nodes"]:
        ids = {c["check"] for c in report["checks"] if c["node"] == node["name"]}
        kinds.setdefault(tuple(sorted(set(node["groups"]) & {"gpu_nodes", "head", "stage_targets"})), set()).add(frozenset(ids))
    for groups, sets in kinds.items():
        if len(sets) != 1:
            fail("run %s: nodes of the same kind (%s) carry different checks" % (name, ", ".join(groups)))
    counts = {s: sum(1 for c in report["checks"] if c["status"] == s) for s in ("pass", "skip")}
    print("validate-lab: run %s healthy: %d passed, %d skipped, none failed" % (name, counts["pass"], counts["skip"]))


def expect_training(report):
    """training.ddp passed on both GPU nodes over one world of 4 gloo ranks, with each rank's figures."""
    found = {c["node"]: c for c in report["checks"] if c["check"] == "training.ddp"}
    for host in ("sim-gpu1", "sim-gpu2"):
        if found.get(host, {}).get("status") != "pass" or "of a world of 4 (gloo)" not in found[host]["message"]:
            fail("healthy-1: training.ddp on %s: %s" % (host, found.get(host)))
    ranks = report["measurements"]["training"]
    if sorted(item["rank"] for item in ranks) != [0, 1, 2, 3] or not all(
            item["state"] == "done" and (item["samples_per_s"] or 0) > 0 for item in ranks):
        fail("healthy-1: the report's per-rank training figures: %s" % ranks)
    print("validate-lab: training.ddp passed on sim-gpu1 and sim-gpu2: %s"
          % "; ".join("rank %(rank)s %(samples_per_s)s samples/s, %(step_time_s)s s a step" % item for item in ranks))


def node_state(name):
    node = json.loads(sh("sim-head", " ".join(KUBECTL + ["get", "node", name, "-o", "json"])))
    return bool(node.get("spec", {}).get("unschedulable")), node["metadata"]["labels"].get(CORDON_LABEL)


def set_ready(host, ready):
    script = ("import json; p='/srv/microk8s-test-double/cluster.json'; s=json.load(open(p)); "
              "[c['nodes'][%r].__setitem__('ready', %s) for c in s['clusters'].values() if %r in c['nodes']]; "
              "json.dump(s, open(p, 'w'))" % (host, ready, host))
    sh("sim-head", "python3 -c \"%s\"" % script)


def install_gpu_doubles(xml_fixture, dmesg_text):
    """TEST DOUBLES of nvidia-smi and dmesg on sim-gpu1, ahead of the real ones on PATH: they print recorded output."""
    host = "sim-gpu1"
    sh(host, "mkdir -p %s" % DOUBLE_DIR)
    subprocess.run(["docker", "cp", str(FIXTURES / xml_fixture), "%s:%s/nvidia-smi.xml" % (host, DOUBLE_DIR)], check=True)
    (WORK / "dmesg.txt").write_text(dmesg_text)
    subprocess.run(["docker", "cp", str(WORK / "dmesg.txt"), "%s:%s/dmesg.txt" % (host, DOUBLE_DIR)], check=True)
    for tool, output in (("nvidia-smi", "nvidia-smi.xml"), ("dmesg", "dmesg.txt")):
        sh(host, "printf '#!/bin/sh\\n# TEST DOUBLE (validate_lab.py): prints recorded output\\ncat %s/%s\\n' > "
                 "/usr/local/bin/%s && chmod 755 /usr/local/bin/%s" % (DOUBLE_DIR, output, tool, tool))


def remove_gpu_doubles():
    sh("sim-gpu1", "rm -rf /usr/local/bin/nvidia-smi /usr/local/bin/dmesg %s" % DOUBLE_DIR)


def collected(up, timeout=120):
    """Run sim-gpu1's GPU metrics collector now and wait until the lab's Prometheus holds its nvidia_smi_up as UP.
    monitoring.up compares that series with what nvidia-smi answers validate, and the doubles have just changed the
    answer: left to the collector's timer and the scrape interval, the series catches up at some moment during or after
    the next validate run, and monitoring.up would pass or fail by that timing."""
    sh("sim-gpu1", "systemctl start %s.service" % COLLECTOR)
    query = "https://127.0.0.1:9090/api/v1/query?query=nvidia_smi_up%7Bnode%3D%22sim-gpu1%22%7D"
    # Prometheus answers over HTTPS with the lab's password (inventories/sim), its certificate from the lab's CA.
    ask = ("import base64, ssl, urllib.request as r; "
           "q = r.Request('%s', headers={'Authorization': 'Basic ' + base64.b64encode(b'prometheus:%s').decode()}); "
           "print(r.urlopen(q, context=ssl.create_default_context(cafile='/etc/ssl/dlinfra-lab/ca.crt')).read().decode())"
           % (query, lab_setting("gpu_monitoring_web_password")))
    deadline, seen = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        answer = sh("sim-head", "python3 -c \"%s\"" % ask, check=False)
        try:
            seen = [sample["value"][1] for sample in json.loads(answer)["data"]["result"]]
        except (ValueError, KeyError):
            seen = answer.strip()[:200]
        if seen == [str(up)]:
            return
        time.sleep(2)
    fail("Prometheus on sim-head still holds nvidia_smi_up %s for sim-gpu1 after %d s, not %d" % (seen, timeout, up))


def main():
    if not (USER_INVENTORY / "hosts.yml").exists():
        fail("%s is missing: this stage runs on the lab the as-a-user stage converged" % USER_INVENTORY)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    shutil.copytree(USER_INVENTORY, WORK / "inventory", symlinks=True)
    dest = "/srv/ssd/%s" % DATASET
    plan = json.loads((WORK / "inventory" / ".shard_staging" / "cluster_sim" / ("%s.plan.json" % DATASET)).read_text())
    on = {host: sorted(n for n, hosts in plan["assignment"].items() if host in hosts) for host in ("sim-gpu1", "sim-gpu2")}

    step("1. the healthy lab")
    code, healthy, report_dir = validate("healthy-1", *TRAINING)
    expect_healthy(code, healthy, report_dir, "healthy-1")
    expect_training(healthy)
    subprocess.run([str(ROOT / "tests" / "harness" / "setup" / "ensure_chromium.sh")], check=True, stdout=subprocess.DEVNULL)
    if subprocess.call([sys.executable, str(ROOT / "tests" / "harness" / "lab" / "check_report_html.py"), str(report_dir)]) != 0:
        fail("report.html did not render as it should in headless Chromium (above)")

    step("2. faults, one per node and check")
    deleted, truncated = on["sim-gpu1"][0], on["sim-gpu2"][0]
    sh("sim-gpu1", "cp -p %s/%s /tmp/validate-kept.tar && rm %s/%s" % (dest, deleted, dest, deleted))
    sh("sim-gpu2", "cp -p %s/%s /tmp/validate-kept.tar && truncate -s 4096 %s/%s" % (dest, truncated, dest, truncated))
    sh("sim-gpu2", "systemctl stop containerd")
    # A web server anyone may read, as a user might leave one running.
    sh("sim-gpu1", "systemd-run --unit %s python3 -m http.server 8999 --bind 0.0.0.0 >/dev/null 2>&1" % OPEN_LISTENER)
    set_ready("sim-head", False)
    # The group's variables as a directory, so that the fault is one more file in it.
    group_dir = WORK / "inventory" / "group_vars" / "gpu_nodes"
    group_dir.mkdir()
    shutil.move(str(group_dir.with_suffix(".yml")), str(group_dir / "main.yml"))
    fault_vars = group_dir / "validate_fault.yml"
    fault_vars.write_text('validate_expected_driver_version: "535"\n')
    sh("sim-head", " ".join(KUBECTL + ["cordon", "sim-head"]))  # by someone else: validate must leave it so
    code, faulty, report_dir = validate("faults", "-e", "validate_cordon_failed=true")
    check_files(faulty, report_dir)
    wanted = {("sim-gpu1", "dataset.%s.placement" % DATASET), ("sim-gpu2", "dataset.%s.placement" % DATASET),
              ("sim-gpu1", "gpu.driver_version"), ("sim-gpu2", "gpu.driver_version"),
              ("sim-gpu2", "runtime.containerd"), ("sim-head", "k8s.node_ready"), ("sim-gpu1", "security.listeners")}
    if failing(faulty) != wanted:
        fail("faults: expected exactly %s to fail; failing: %s" % (sorted(wanted), sorted(failing(faulty))))
    if code == 0:
        fail("faults: validate.yml exited 0 with failed checks (validate_fail_on_error)")
    for host in ("sim-gpu1", "sim-gpu2"):
        if node_state(host) != (True, "gpu.driver_version"):
            fail("faults: %s not cordoned with %s=gpu.driver_version: %s" % (host, CORDON_LABEL, node_state(host)))
    print("validate-lab: exactly the %d injected faults failed; junit.xml agrees; sim-gpu1 and sim-gpu2 cordoned" % len(wanted))

    sh("sim-gpu1", "mv /tmp/validate-kept.tar %s/%s" % (dest, deleted))
    sh("sim-gpu2", "mv /tmp/validate-kept.tar %s/%s" % (dest, truncated))
    sh("sim-gpu2", "systemctl start containerd")
    sh("sim-gpu1", "systemctl stop %s" % OPEN_LISTENER)
    set_ready("sim-head", True)
    fault_vars.unlink()

    step("3. GPU facts from recorded nvidia-smi output (test doubles on sim-gpu1)")
    kernel_log = (FIXTURES / "dmesg_xid_79.txt").read_text()
    clean_log = "".join(line for line in kernel_log.splitlines(True) if "Xid" not in line)
    try:
        install_gpu_doubles("h100_80gb_hbm3_single_580_capture.xml", clean_log)
        collected(1)
        baseline = validate("gpu-healthy", *GPU_ONLY)[1]
        install_gpu_doubles("h100_80gb_hbm3_degraded_pcie_link.xml", kernel_log)
        collected(1)
        degraded = validate("gpu-degraded", *GPU_ONLY)[1]
    finally:
        remove_gpu_doubles()
    collected(0)
    before, after = statuses(baseline), statuses(degraded)
    changed = {key for key in before if before[key] != after.get(key)} | (set(after) - set(before))
    wanted = {("sim-gpu1", "gpu.pcie_link"), ("sim-gpu1", "gpu.xid")}
    if changed != wanted or any(before[key] != "pass" or after[key] != "fail" for key in wanted):
        fail("GPU facts: expected exactly %s to go from pass to fail; changed: %s" % (
            sorted(wanted), sorted("%s %s: %s -> %s" % (k + (before.get(k), after.get(k))) for k in changed)))
    print("validate-lab: the degraded link and the Xid errors turned exactly gpu.pcie_link and gpu.xid red on sim-gpu1")

    step("4. the healthy lab again, validate's cordons lifted (the GPU and Kubernetes phases; step 5 reads every phase)")
    code, again, report_dir = validate("healthy-2", *CORDONS)
    expect_healthy(code, again, report_dir, "healthy-2")
    read = {key: status for key, status in statuses(again).items()
            if phases.phase_of(key[1]) in ("validate_gpu", "validate_kubernetes", None)}
    if not read or read != {key: statuses(healthy)[key] for key in read}:
        fail("healthy-2 differs from healthy-1: %s" % sorted(k for k in read if read[k] != statuses(healthy).get(k)))
    for host in ("sim-gpu1", "sim-gpu2"):
        if node_state(host) != (False, None):
            fail("healthy-2: %s still cordoned or labelled: %s" % (host, node_state(host)))
    if node_state("sim-head") != (True, None):
        fail("healthy-2: validate uncordoned sim-head, which someone else cordoned")
    sh("sim-head", " ".join(KUBECTL + ["uncordon", "sim-head"]))

    step("5. each documented tag alone, on the lab as healthy as in step 1")
    tag_runs(statuses(healthy))
    print("validate-lab: passed; the reports are under %s" % WORK)


def tag_runs(full):
    """validate.yml --tags TAG for each tag of the role's tasks/main.yml, side by side; full: run 1's statuses."""
    tags = list(phases.PHASES) + ["validate_report"]
    started = time.monotonic()
    for run in [start("tag-" + tag, "--tags", tag, *(TRAINING if tag == "validate_training" else ())) for tag in tags]:
        tag = run[0][len("tag-"):]
        code, report, report_dir = finish(run)
        check_files(report, report_dir)
        if code != 0:
            fail("--tags %s: exit %d (log %s)" % (tag, code, WORK / ("tag-%s.log" % tag)))
        if set(statuses(report)) != set(full):
            fail("--tags %s: the report's checks differ from a full run's: %s"
                 % (tag, sorted(set(statuses(report)) ^ set(full))))
        wrong = []
        for item in report["checks"]:
            key, phase = (item["node"], item["check"]), phases.phase_of(item["check"])
            if phase in (tag, None):
                if item["status"] != full[key]:
                    wrong.append("%s %s: %s, a full run %s" % (key + (item["status"], full[key])))
            elif item["status"] != "skip" or item["message"] != phases.not_read_reason(phase):
                wrong.append("%s %s: %s (%s), expected skipped as not read" % (key + (item["status"], item["message"])))
        if wrong:
            fail("--tags %s: %s" % (tag, "; ".join(wrong)))
    print("validate-lab: each of %s alone passed with its phase's checks only, %d runs side by side in %.0f s"
          % (", ".join(tags), len(tags), time.monotonic() - started))


if __name__ == "__main__":
    os.environ.setdefault("ANSIBLE_NOCOLOR", "1")
    main()
