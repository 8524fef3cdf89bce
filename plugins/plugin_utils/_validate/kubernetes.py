# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""validate's Kubernetes checks of a node, read from its cluster's first head: Ready, the GPU resources it advertises
(against its declared sharing, or its own labels), the device plugin's pod and a GPU Job. Pure Python, on the
controller."""

import json
import re

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.result import check, gpu_reason, ran


def _kubectl(head_raw, index):
    results = (head_raw or {}).get("kubectl") or []
    if len(results) <= index or not ran(results[index]) or results[index].get("rc") != 0:
        return None
    return json.loads(results[index]["stdout"]).get("items", [])


def _replicas(labels):
    """How many times a node advertises each GPU: its nvidia.com/gpu.replicas label where dlinfra.io/gpu.sharing says
    it is time-sliced, else 1."""
    replicas = str(labels.get("nvidia.com/gpu.replicas", "1"))
    if labels.get("dlinfra.io/gpu.sharing") != "time-sliced" or not replicas.isdigit() or int(replicas) < 1:
        return 1
    return int(replicas)


def _declared_resources_check(name, labels, node_allocatable, declared):
    """k8s.gpu_resources against the node's declared sharing: (resources {name: count}, sharing kind)."""
    resources, kind = declared
    label = labels.get("nvidia.com/gpu.present")
    have = {key: int(value) for key, value in node_allocatable.items()
            if key == "nvidia.com/gpu" or key.startswith("nvidia.com/mig-")}
    wanted = ", ".join("%d %s" % (count, key) for key, count in sorted(resources.items()))
    shown = ", ".join("%d %s" % (count, key) for key, count in sorted(have.items())) or "no GPU resource"
    problems = []
    if label != "true":
        problems.append("nvidia.com/gpu.present=%s" % label)
    if {key: count for key, count in have.items() if count} != resources:
        problems.append("%s allocatable where the declared sharing gives %s" % (shown, wanted))
    if labels.get("dlinfra.io/gpu.sharing", kind) != kind:
        problems.append("labelled dlinfra.io/gpu.sharing=%s where the declaration says %s"
                        % (labels["dlinfra.io/gpu.sharing"], kind))
    if problems:
        return check(name, "fail", "%s; run site.yml (microk8s) to relabel the node and give its device plugin the "
                     "declared config, then look at the plugin's pod on it" % "; ".join(problems), wanted, shown)
    return check(name, "pass", "labelled and %s allocatable, as the declared sharing (%s) gives" % (shown, kind),
                 wanted, shown)


def k8s_checks(host, raw, head, head_raw, gpu_count, declared=None):
    """Checks of host in its cluster's Kubernetes, read from the cluster's first head (head, head_raw). declared: the
    node's declared sharing (validate_sharing.declared_resources), None to read it from the node's labels."""
    names = ("k8s.node_ready", "k8s.gpu_resources", "k8s.device_plugin", "k8s.gpu_job")
    if head is None:
        return [check(name, "skip", "no host of the head group in this node's cluster") for name in names]
    nodes, pods = _kubectl(head_raw, 0), _kubectl(head_raw, 1)
    if nodes is None:
        why = "the head %s did not answer kubectl get nodes%s" % (head, "" if head_raw else " (it failed earlier in the run)")
        return [check(names[0], "fail", why + "; check MicroK8s there (microk8s status)")] + \
               [check(name, "skip", why) for name in names[1:]]
    node = next((n for n in nodes if n["metadata"]["name"] in (host.lower(), host.split(".")[0].lower())), None)
    if node is None:
        return [check(names[0], "fail", "%s is not a node of the cluster %s heads; run site.yml (microk8s) to join it"
                      % (host, head), "member", "absent")] + [check(name, "skip", "not a Kubernetes node") for name in names[1:]]
    ready = next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), "Unknown")
    unschedulable = node.get("spec", {}).get("unschedulable", False)
    checks = [check(names[0], "pass" if ready == "True" else "fail",
                    "Ready%s" % (" (cordoned)" if unschedulable else "") if ready == "True" else
                    "the node is NotReady (Ready=%s); look at the kubelet on it (microk8s inspect)" % ready, "True", ready)]
    if not raw["gpu_node"]:
        return checks + [check(name, "skip", "not a GPU node") for name in names[1:]]
    labels = node["metadata"].get("labels", {})
    if declared:
        checks.append(_declared_resources_check(names[1], labels, node["status"].get("allocatable", {}), declared))
        return checks + _plugin_and_job_checks(names, host, node, pods, head, head_raw, raw)
    allocatable = int(node["status"].get("allocatable", {}).get("nvidia.com/gpu", 0))
    label = labels.get("nvidia.com/gpu.present")
    # A time-sliced node (the microk8s role's labels) advertises each GPU once per replica.
    replicas = _replicas(labels)
    expected = gpu_count * replicas
    shared = " (%d GPU(s), time-sliced %d ways)" % (gpu_count, replicas) if replicas > 1 else ""
    ok = label == "true" and allocatable == expected
    checks.append(check(names[1], "pass" if ok else "fail",
                        "labelled and %d nvidia.com/gpu allocatable%s" % (allocatable, shared) if ok else
                        "nvidia.com/gpu.present=%s and %d nvidia.com/gpu allocatable, %d expected%s; check the "
                        "device plugin's pod on it" % (label, allocatable, expected, shared or
                                                       " (%d GPU(s) on the node)" % gpu_count),
                        "%d allocatable" % expected, "%d allocatable" % allocatable))
    return checks + _plugin_and_job_checks(names, host, node, pods, head, head_raw, raw)


def _plugin_and_job_checks(names, host, node, pods, head, head_raw, raw):
    """k8s.device_plugin and k8s.gpu_job of a GPU node."""
    checks = []
    if pods is None:
        checks.append(check(names[2], "fail", "the head %s did not answer kubectl get pods -A" % head))
    else:
        mine = [p for p in pods if p["metadata"]["name"].startswith("nvidia-device-plugin")
                and p.get("spec", {}).get("nodeName") == node["metadata"]["name"]]
        running = [p for p in mine if p.get("status", {}).get("phase") == "Running"]
        checks.append(check(names[2], "pass" if running else "fail",
                            "device plugin pod %s Running" % running[0]["metadata"]["name"] if running else
                            "no device plugin pod Running on this node (%s)" % (", ".join(
                                "%s %s" % (p["metadata"]["name"], p.get("status", {}).get("phase")) for p in mine) or "none"),
                            "Running", running and "Running" or "absent"))
    checks.append(gpu_job_check(raw, (head_raw or {}).get("gpu_jobs", {}).get(host)))
    return checks


def gpu_job_check(raw, job):
    reason = gpu_reason(raw)
    if reason:
        return check("k8s.gpu_job", "skip", reason)
    if not raw["expected"]["k8s_gpu_job"]:
        return check("k8s.gpu_job", "skip", "validate_k8s_gpu_job is false")
    if not raw["expected"]["gpu_container_image"]:
        return check("k8s.gpu_job", "skip", "validate_gpu_container_image is not set (an image with nvidia-smi)")
    if not job:
        return check("k8s.gpu_job", "fail", "no GPU job ran for this node")
    seen = len(re.findall(r"^GPU \d+:", job.get("log") or "", re.MULTILINE))
    if job.get("complete") and seen >= 1:
        return check("k8s.gpu_job", "pass", "a Job on this node ran nvidia-smi to completion and saw %d GPU(s)" % seen,
                     "Complete", "Complete")
    return check("k8s.gpu_job", "fail", "the GPU Job did not complete: %s" % (job.get("message") or "")[-300:],
                 "Complete", job.get("status"))
