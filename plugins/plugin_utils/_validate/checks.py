# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The validate role's evaluator: what each node showed (the role's __validate_raw) -> checks and measurements.

Every check of a node is present in the result as pass, fail or skip with a reason, never left out. The GPU
checks are validate_gpu's, the driver's validate_driver's, the Kubernetes ones kubernetes.py's, the check record
validate_result's; this file holds the runtime, NCCL, storage and dataset checks and puts the report together. Pure
Python, run on the controller by the validate_report action.
"""

import base64
import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._nccl.nccl_tests import nccl_busbw
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import gpu as validate_gpu
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.driver import driver_checks, installed_driver, node_driver
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.kubernetes import k8s_checks
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import (
    check, consistency, gpu_reason, ran, version_matches, versions_in_names)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import monitoring as validate_monitoring
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.fabric import (
    fabric_checks, node_fabric, transport_check)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.security import listeners_check
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import sharing as validate_sharing
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.training import training_checks

_CONTAINERD_NVIDIA = re.compile(r"runtimes\.nvidia\]")


def _output(result):
    return ((result.get("stdout") or "") + "\n" + (result.get("stderr") or result.get("msg") or "")).strip()


def runtime_checks(host, raw):
    checks = []
    docker = raw.get("docker") or {}
    if not ran(docker):
        checks.append(check("runtime.docker", "skip", "Docker is not installed on this node"))
    elif docker.get("rc") != 0:
        checks.append(check("runtime.docker", "fail", "docker info failed: %s; start Docker (systemctl start docker)"
                            % _output(docker)[:300]))
    else:
        runtimes = sorted(json.loads(docker["stdout"] or "{}"))
        status = "pass" if "nvidia" in runtimes else "fail"
        checks.append(check("runtime.docker", status, "Docker's runtimes: %s%s" % (", ".join(runtimes), "" if status == "pass"
                            else "; run site.yml (nvidia_container_toolkit) to register the nvidia runtime"),
                            "nvidia", ", ".join(runtimes)))
    containerd = raw.get("containerd") or {}
    if not ran(containerd):
        checks.append(check("runtime.containerd", "skip", "containerd is not installed on this node"))
    elif containerd.get("rc") != 0:
        checks.append(check("runtime.containerd", "fail", "containerd config dump failed: %s" % _output(containerd)[:300]))
    elif raw.get("containerd_active") != "active":
        checks.append(check("runtime.containerd", "fail", "containerd is installed but not running (systemctl is-active: %s);"
                            " start it: systemctl start containerd, and read journalctl -u containerd if it stops"
                            % (raw.get("containerd_active") or "unknown"), "active", raw.get("containerd_active")))
    else:
        found = bool(_CONTAINERD_NVIDIA.search(containerd.get("stdout") or ""))
        checks.append(check("runtime.containerd", "pass" if found else "fail",
                            "the nvidia runtime is in containerd's merged configuration" if found else
                            "containerd has no nvidia runtime; run site.yml (nvidia_container_toolkit)",
                            "nvidia runtime", "present" if found else "absent"))
    template = raw.get("microk8s_template") or {}
    if not ran(template) or "content" not in template:
        checks.append(check("runtime.microk8s", "skip", "MicroK8s' containerd template is not on this node"))
    else:
        found = bool(_CONTAINERD_NVIDIA.search(base64.b64decode(template["content"]).decode("utf-8", "replace")))
        checks.append(check("runtime.microk8s", "pass" if found else "fail",
                            "MicroK8s' containerd template has the nvidia runtime" if found else
                            "MicroK8s' containerd template has no nvidia runtime; run site.yml (nvidia_container_toolkit)",
                            "nvidia runtime", "present" if found else "absent"))
    checks.append(cdi_check(raw))
    checks.append(gpu_container_check(raw))
    return checks


def cdi_check(raw):
    reason = gpu_reason(raw)
    if reason:
        return check("runtime.cdi", "skip", reason + "; the CDI spec is generated once the GPUs answer")
    driver = raw["gpu"].get("driver_version")
    if not (raw.get("cdi_spec") or {}).get("exists"):
        return check("runtime.cdi", "fail", "no CDI spec; run site.yml (nvidia_container_toolkit) to generate it",
                     "spec for driver %s" % driver, "absent")
    recorded = raw.get("cdi_recorded") or {}
    version = base64.b64decode(recorded["content"]).decode().strip() if "content" in recorded else None
    if version != driver:
        return check("runtime.cdi", "fail", "the CDI spec was generated for driver %s, driver %s is loaded; run site.yml "
                     "(nvidia_container_toolkit) to regenerate it" % (version, driver), driver, version)
    return check("runtime.cdi", "pass", "CDI spec generated for the loaded driver %s" % driver, driver, version)


def gpu_container_check(raw):
    reason = gpu_reason(raw)
    if reason:
        return check("runtime.gpu_container", "skip", reason)
    if not raw["expected"]["gpu_container_image"]:
        return check("runtime.gpu_container", "skip", "validate_gpu_container_image is not set (an image with nvidia-smi)")
    result = raw.get("gpu_container") or {}
    if not ran(result):
        return check("runtime.gpu_container", "skip", "Docker does not answer on this node (see runtime.docker)")
    seen = len(re.findall(r"^GPU \d+:", result.get("stdout") or "", re.MULTILINE))
    want = raw["gpu"]["gpu_count"]
    if result.get("rc") == 0 and seen == want:
        return check("runtime.gpu_container", "pass", "a container sees all %d GPU(s)" % want, want, seen)
    return check("runtime.gpu_container", "fail", "a container with --gpus all saw %d of %d GPU(s): %s"
                 % (seen, want, _output(result)[-300:]), want, seen)


def nccl_checks(host, raw, cluster_versions):
    measured = (versions_in_names(raw.get("nccl_libs") or []) or [None])[-1]
    expected = raw["expected"]["nccl_version"]
    if measured is None:
        version = check("nccl.version", "fail" if expected else "skip",
                        "NCCL (libnccl.so.*) is not installed; run site.yml (nccl)" if expected else
                        "NCCL is not installed and no version is expected", expected or None, None)
    elif expected and not version_matches(expected, measured):
        version = check("nccl.version", "fail", "NCCL %s installed, %s expected; run site.yml (nccl)" % (measured, expected),
                        expected, measured)
    else:
        version = check("nccl.version", "pass" if expected else "skip", "NCCL %s%s" % (
            measured, " as expected" if expected else " installed; set nccl_version to check it"), expected or None, measured)
    return [version, consistency("nccl.consistency", "NCCL", host, measured, cluster_versions)]


def busbw_check(name, result, floor, reason):
    """(check, measured GB/s or None) from an all_reduce_perf run; reason says why it did not run (None: it ran)."""
    if reason:
        return check(name, "skip", reason), None
    try:
        figures = nccl_busbw(result.get("stdout") or "")
    except AnsibleFilterError as error:
        return check(name, "fail", "all_reduce_perf gave no usable result (rc %s): %s" % (result.get("rc"), error),
                     ">= %s GB/s" % floor, None), None
    measured = figures["largest"]
    if result.get("rc") != 0:
        return check(name, "fail", "all_reduce_perf exited with %s" % result.get("rc"), ">= %s GB/s" % floor, measured), measured
    if measured < floor:
        return check(name, "fail", "all-reduce bus bandwidth %s GB/s at %d B over %d rank(s) is below the floor %s GB/s; "
                     "check nccl.conf, the NVLink and NIC links, and rerun with nccl_debug: INFO"
                     % (measured, figures["largest_size"], figures["ranks"], floor), ">= %s GB/s" % floor, measured), measured
    return check(name, "pass", "all-reduce bus bandwidth %s GB/s over %d rank(s)" % (measured, figures["ranks"]),
                 ">= %s GB/s" % floor, measured), measured


def nccl_bandwidth(raw, floor, cluster_first):
    """Checks nccl.busbw (this node's GPUs), nccl.busbw_multinode (the cluster's GPU nodes, measured from its first GPU
    node, whose raw data is cluster_first) and nccl.transport (what that run went over), with their measurements."""
    reason = gpu_reason(raw)
    if not reason and not raw.get("allreduce_bin"):
        reason = "nccl-tests is not installed (all_reduce_perf); set nccl_tests_install: true"
    single_reason = reason or ("one GPU: an all-reduce over one rank moves no data" if raw["gpu"]["gpu_count"] < 2 else None)
    single, single_value = busbw_check("nccl.busbw", raw.get("allreduce") or {}, floor, single_reason)
    if not raw["expected"]["nccl_multinode"]:
        multi_reason = "validate_nccl_multinode is false"
    else:
        multi_reason = reason or (None if ran((cluster_first or {}).get("allreduce_multinode")) else
                                  "the cluster's first GPU node did not run the multi-node all-reduce")
    multi, multi_value = busbw_check("nccl.busbw_multinode", (cluster_first or {}).get("allreduce_multinode") or {},
                                     floor, multi_reason)
    transport = transport_check(cluster_first, raw["expected"], multi_reason)
    return [single, multi, transport], (single_value, single_reason), (multi_value, multi_reason)


# ---- storage and datasets --------------------------------------------------------------------------------------

def storage_checks(raw):
    names = ("storage.free_space", "storage.seq_write", "storage.seq_read")
    expected = raw["expected"]
    measurement = {"path": expected["storage_path"], "read_mbps": None, "write_mbps": None,
                   "floor_read_mbps": expected["storage_min_read_mbps"], "floor_write_mbps": expected["storage_min_write_mbps"],
                   "free_bytes": None, "size_bytes": None}
    if not raw["stage_target"]:
        return [check(name, "skip", "not a stage target") for name in names], None
    df = raw.get("df") or {}
    if df.get("rc") != 0:
        why = "%s cannot be read (%s); run site.yml (shard_staging creates it) or set validate_storage_path" % (
            expected["storage_path"], _output(df)[:200])
        return [check(names[0], "fail", why)] + [check(name, "skip", "the staging filesystem cannot be read")
                                                 for name in names[1:]], measurement
    size, free = (int(n) for n in df["stdout"].splitlines()[-1].split())
    measurement.update(size_bytes=size, free_bytes=free)
    percent = 100.0 * free / size if size else 0.0
    floor = expected["storage_min_free_percent"]
    checks = [check(names[0], "pass" if percent >= floor else "fail",
                    "%.1f%% free of %s" % (percent, human_bytes(size)) if percent >= floor else
                    "only %.1f%% free on %s; free space or lower the datasets' footprint" % (percent, expected["storage_path"]),
                    ">= %g%% free" % floor, "%.1f%% free" % percent)]
    if not raw.get("fio_installed"):
        return checks + [check(name, "fail", "fio is not installed; run site.yml (preflight installs it)")
                         for name in names[1:]], measurement
    runs = {r.get("item"): r for r in raw.get("fio") or []}
    for name, mode, floor in ((names[1], "write", expected["storage_min_write_mbps"]),
                              (names[2], "read", expected["storage_min_read_mbps"])):
        result = runs.get(mode) or {}
        try:
            mbps = round(json.loads(result["stdout"])["jobs"][0][mode]["bw_bytes"] / 1e6, 1)
        except (KeyError, ValueError, IndexError, TypeError):
            checks.append(check(name, "fail", "fio --rw=%s failed: %s" % (mode, _output(result)[-300:]), ">= %g MB/s" % floor))
            continue
        measurement[mode + "_mbps"] = mbps
        message = "sequential %s %.1f MB/s" % (mode, mbps)
        if mbps < floor:
            message += " is below validate_storage_min_%s_mbps; check the SSD (nvme smart-log) and its mount options" % mode
        checks.append(check(name, "pass" if mbps >= floor else "fail", message, ">= %g MB/s" % floor, "%.1f MB/s" % mbps))
    return checks, measurement


def dataset_checks(raw, name):
    ids = ["dataset.%s.%s" % (name, kind) for kind in ("placement", "checksums", "ranks")]
    if not raw["stage_target"]:
        return [check(i, "skip", "not a stage target") for i in ids], None
    result = next((r for r in raw.get("datasets") or [] if (r.get("item") or {}).get("name") == name), None)
    if not ran(result) or result.get("failed"):
        why = (result or {}).get("msg") or "the dataset was not checked on this node"
        return [check(ids[0], "fail", why)] + [check(i, "skip", why) for i in ids[1:]], None
    if result.get("plan_missing"):
        why = "no plan at %s: run site.yml (shard_staging) first" % result.get("plan")
        return [check(ids[0], "fail", why)] + [check(i, "skip", "no plan") for i in ids[1:]], None
    planned, present = result["planned"], result["present"]
    problems = (["missing: " + ", ".join(result["missing"][:5])] if result["missing"] else []) + \
        (["wrong size: " + ", ".join("%s (%d B, planned %d B)" % (w["name"], w["actual"], w["expected"])
                                     for w in result["wrong_size"][:5])] if result["wrong_size"] else []) + \
        (["not planned here: " + ", ".join(result["unplanned"][:5])] if result["unplanned"] else [])
    checks = [check(ids[0], "fail" if problems else "pass",
                    "%s; run site.yml (shard_staging) to restage" % "; ".join(problems) if problems else
                    "%d planned shard(s), %d bytes, all present with the planned size" % (planned["shards"], planned["bytes"]),
                    "%d shards" % planned["shards"], "%d shards" % present["shards"])]
    if not result["sampled"]:
        checks.append(check(ids[1], "skip", "no shard present with its planned size to re-hash"))
    else:
        bad = result["checksum_mismatch"]
        checks.append(check(ids[1], "fail" if bad else "pass",
                            "sha256 differs from the plan: %s; delete them and run site.yml to fetch them again" % ", ".join(bad)
                            if bad else "sha256 of %d sampled shard(s) match the plan" % len(result["sampled"]),
                            "%d matching" % len(result["sampled"]), "%d matching" % (len(result["sampled"]) - len(bad))))
    ranks = result["ranks"]
    rank_problems = [what + ": " + ", ".join(ranks[key][:5]) for what, key in (
        ("planned but in no rank list", "missing"), ("listed but not planned here", "unplanned"),
        ("listed more than once", "duplicates")) if ranks[key]]
    if planned["shards"] and not ranks["files"]:
        rank_problems.insert(0, "no ranks/rank-NNNN.txt")
    checks.append(check(ids[2], "fail" if rank_problems else "pass",
                        "; ".join(rank_problems) + "; run site.yml (shard_staging) to rewrite the lists" if rank_problems else
                        "%d rank list(s) cover the node's %d shard(s) once each" % (len(ranks["files"]), planned["shards"]),
                        "cover %d shards" % planned["shards"], None))
    return checks, {"planned_shards": planned["shards"], "planned_bytes": planned["bytes"],
                    "present_shards": present["shards"], "present_bytes": present["bytes"]}


def dataset_balance_check(host, name, plan, limit):
    """dataset.NAME.balance of one node: its bytes per rank against the plan's average (max ``limit``). Every rank of a
    data-parallel epoch waits for the most loaded one."""
    check_id = "dataset.%s.balance" % name
    info = ((plan or {}).get("nodes") or {}).get(host)
    if not plan:
        return check(check_id, "skip", "no plan for the dataset")
    if plan.get("mode") == "replicate":
        return check(check_id, "skip", "replicated: every node holds the whole dataset")
    if info is None or "ranks" not in info:
        why = "the plan has no ranks for this node (not a target, or planned by an older version): run site.yml " \
              "(shard_staging) to plan it again"
        return check(check_id, "skip", why)
    nodes = plan["nodes"].values()
    average = sum(node["bytes"] + node["streamed_bytes"] for node in nodes) / max(1, sum(node["ranks"] for node in nodes))
    per_rank = (info["bytes"] + info["streamed_bytes"]) / info["ranks"]
    ratio = round(per_rank / average, 4) if average else 1.0
    expected = "<= %g x the average" % limit
    if ratio <= limit:
        return check(check_id, "pass", "%s per rank over %d rank(s), %.3f x the average" % (human_bytes(int(per_rank)), info["ranks"], ratio),
                     expected, "%.3f" % ratio)
    capped = " It is capped by its free space: free space under dest, or lower the dataset's headroom." if info.get("capped") else ""
    return check(check_id, "fail", "%s per rank over %d rank(s) is %.3f x the average (validate_dataset_balance_max %g): every "
                 "epoch waits for this node. Its share follows shard_staging_ranks_per_node (else its GPU count); run site.yml "
                 "(shard_staging) to plan again.%s" % (human_bytes(int(per_rank)), info["ranks"], ratio, limit, capped),
                 expected, "%.3f" % ratio)


def placement_figures(plan, host, counts):
    """A node's placement row: present vs planned, plus its ranks, bytes per rank and fair share where the plan has them."""
    info = ((plan or {}).get("nodes") or {}).get(host) or {}
    if "rank_bytes" in info:
        counts = dict(counts, ranks=info["ranks"], rank_bytes=info["rank_bytes"], fair_bytes=int(info.get("fair_bytes") or 0))
    return counts


# ---- the report ------------------------------------------------------------------------------------------------

def _gpu_options(raw):
    options = {"kernel_module_managed": raw["expected"]["kernel_module_managed"]}
    reason = gpu_reason(raw)
    for key, result, tool in (("dcgm", raw.get("dcgm"), "dcgmi"), ("bandwidth", raw.get("nvbandwidth"), "nvbandwidth")):
        if reason:
            options[key], options[key + "_reason"] = None, reason
        elif not ran(result):
            options[key], options[key + "_reason"] = None, "%s is not installed" % tool
        else:
            options[key], options[key + "_reason"] = result, None
    return options


def _training(host, raw, nodes, cluster_hosts, cluster_plans):
    """training.ddp and training.samples_per_second of a GPU staging target, over its cluster's world."""
    world = {h: nodes[h] for h in cluster_hosts if nodes[h]["gpu_node"] and nodes[h]["stage_target"]}
    plan = cluster_plans.get(raw["expected"].get("training_dataset") or "") or {}
    return training_checks(host, raw, world, plan.get("mode") == "replicate")


def evaluate(nodes, plans, gpu_models, inventory, generated):
    """The report (schema: docs/validate_report.schema.json, without summary) from every node's raw data.

    nodes: host -> the role's __validate_raw, None for a host that failed or was unreachable before it was read.
    plans: cluster ('' for nodes in no cluster group) -> dataset name -> its plan (shard_plan's JSON), or None where
    there is none: shard_staging plans each cluster apart.
    """
    report = {"schema_version": 1, "generated": generated, "inventory": inventory, "nodes": [], "checks": [],
              "measurements": {"nccl_busbw": [], "disk": [], "gpus": [], "datasets": [], "training": []}}
    by_cluster = {}
    for host, raw in nodes.items():
        if raw:
            by_cluster.setdefault(raw["cluster"], []).append(host)
    driver_versions = {c: {h: installed_driver(nodes[h]) for h in hosts if nodes[h]["gpu_node"]} for c, hosts in by_cluster.items()}
    nccl_versions = {c: {h: (versions_in_names(nodes[h].get("nccl_libs") or []) or [None])[-1]
                         for h in hosts if nodes[h]["gpu_node"]} for c, hosts in by_cluster.items()}
    placement = {}
    scraped, answering = validate_monitoring.scraped(nodes), validate_monitoring.servers(nodes)
    for host in sorted(nodes):
        raw = nodes[host]
        if not raw:
            report["nodes"].append({"name": host, "cluster": None, "rack": None, "groups": [], "driver": None,
                                    "fabric": None, "sharing": None})
            report["checks"].append(dict(check("node.reachable", "fail", "%s failed or was unreachable before validate read "
                                               "it; see the run's output above the report" % host), node=host))
            continue
        gpu = raw.get("gpu") if raw["gpu_node"] and ran(raw.get("gpu")) else {}
        report["nodes"].append({"name": host, "cluster": raw["cluster"], "rack": raw["rack"], "groups": raw["groups"],
                                "driver": node_driver(gpu), "fabric": node_fabric(raw) if raw["gpu_node"] else None,
                                "sharing": validate_sharing.declared_layout(
                                    host, gpu, raw["expected"].get("gpu_sharing_layout")) if raw["gpu_node"] else None})
        checks = [check("node.reachable", "pass", "read")]
        cluster_hosts = by_cluster[raw["cluster"]]
        head = next((h for h in cluster_hosts if nodes[h]["first_head"]), None)
        gpu_count = gpu.get("gpu_count", 0)
        if raw["gpu_node"]:
            model = (gpu.get("gpus") or [{}])[0].get("name")
            thresholds = validate_gpu.thresholds_for(model, gpu_models, raw["expected"]["gpu_thresholds"]) if model else {}
            checks += validate_gpu.gpu_checks(gpu, raw["expected"]["gpus"], thresholds, _gpu_options(raw))
            checks.append(validate_sharing.sharing_check(host, gpu, raw["expected"].get("gpu_sharing_layout"),
                                                         validate_gpu.unusable(gpu)))
            checks += driver_checks(host, raw, driver_versions[raw["cluster"]])
            checks += runtime_checks(host, raw)
            checks += nccl_checks(host, raw, nccl_versions[raw["cluster"]])
            checks += fabric_checks(host, raw)
            floor = raw["expected"]["nccl_min_busbw"] or float(thresholds.get("allreduce_busbw_gbps") or 0)
            first_gpu = next((nodes[h] for h in cluster_hosts if nodes[h]["gpu_node"]), None)
            bw_checks, single, multi = nccl_bandwidth(raw, floor, first_gpu)
            checks += bw_checks
            report["measurements"]["nccl_busbw"].append(
                {"scope": "node", "name": host, "busbw_gbps": single[0], "floor_gbps": floor,
                 "status": bw_checks[0]["status"], "reason": single[1]})
            if first_gpu is raw:
                report["measurements"]["nccl_busbw"].append(
                    {"scope": "cluster", "name": raw["cluster"] or host, "busbw_gbps": multi[0], "floor_gbps": floor,
                     "status": bw_checks[1]["status"], "reason": multi[1]})
            report["measurements"]["gpus"].append({"node": host, "cluster": raw["cluster"], "rack": raw["rack"],
                                                   "count": gpu_count, "model": model})
        checks += k8s_checks(host, raw, head, nodes.get(head), gpu_count, validate_sharing.declared_resources(
            host, gpu, raw["expected"].get("gpu_sharing_layout")) if raw["gpu_node"] else None)
        checks.append(validate_monitoring.monitoring_check(
            host, raw, scraped, answering, gpu.get("driver_state") == "ok" and gpu_count > 0 if gpu else None,
            raw["expected"].get("prometheus_port", 9090), raw["expected"].get("prometheus_window", "1m"),
            validate_monitoring.refusing(nodes)))
        checks.append(listeners_check(raw))
        storage, disk = storage_checks(raw)
        checks += storage
        if disk:
            report["measurements"]["disk"].append(dict(disk, node=host))
        cluster_plans = plans.get(raw["cluster"] or "") or {}
        if raw["gpu_node"] and raw["stage_target"]:
            found, per_rank = _training(host, raw, nodes, cluster_hosts, cluster_plans)
            checks += found
            report["measurements"]["training"] += [dict(item, cluster=raw["cluster"]) for item in per_rank]
        for name in raw["expected"]["datasets"]:
            found, counts = dataset_checks(raw, name)
            checks += found
            if raw["stage_target"]:
                checks.append(dataset_balance_check(host, name, cluster_plans.get(name),
                                                    raw["expected"].get("dataset_balance_max", 1.05)))
            if counts:
                placement.setdefault((name, raw["cluster"] or ""), {})[host] = placement_figures(cluster_plans.get(name), host, counts)
        for item in checks:
            report["checks"].append(dict(item, node=host))
    for (name, cluster), per_node in sorted(placement.items()):
        plan = (plans.get(cluster) or {}).get(name) or {}
        report["measurements"]["datasets"].append(
            {"name": name, "cluster": cluster or None, "mode": plan.get("mode") or "unknown", "replicas": int(plan.get("replicas") or 1),
             "shard_count": int(plan.get("shard_count") or 0), "total_bytes": int(plan.get("total_bytes") or 0),
             "balance": plan.get("balance"), "nodes": per_node})
    return report
