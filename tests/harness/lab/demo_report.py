"""Print the closing report of `make demo` from the report.json that demo_report.yml wrote (run by demo.sh report).

Short, aligned tables: the Kubernetes nodes, the staged datasets, the conda environments, and the GPU job tried
with a server-side dry run.
"""
import json
import os
import sys


def table(rows, indent="  "):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(indent + "  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
                     for row in rows)


def size(count):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return ("%d %s" % (count, unit)) if unit == "B" else ("%.1f %s" % (count, unit))
        count /= 1024.0
    return str(count)


def node_rows(nodes):
    rows = [("NODE", "ROLE", "READY", "nvidia.com/gpu.present", "ALLOCATABLE nvidia.com/gpu")]
    for node in nodes:
        labels = node["metadata"].get("labels", {})
        role = "control-plane" if "node.kubernetes.io/microk8s-controlplane" in labels else "worker"
        ready = next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), "Unknown")
        gpus = node["status"].get("allocatable", {}).get("nvidia.com/gpu", "-")
        rows.append((node["metadata"]["name"], role, ready, labels.get("nvidia.com/gpu.present", "-"), gpus))
    return rows


def main(path):
    with open(path) as handle:
        report = json.load(handle)
    here = os.getcwd()
    cluster = report["cluster"]
    nodes = cluster["nodes"]
    version = nodes[0]["status"]["nodeInfo"]["kubeletVersion"] if nodes else "?"
    gpu_mechanism = ("nvidia addon" if cluster["addons"].get("nvidia") == "enabled" else "device plugin / none")
    print("Kubernetes: MicroK8s %s, cluster %s, %d nodes, GPUs through the %s"
          % (version, cluster["cluster"] or "-", len(nodes), gpu_mechanism))
    print(table(node_rows(nodes)))

    print("\nStaged datasets")
    rows = [("DATASET", "NODE", "SHARDS", "BYTES", "DIRECTORY")]
    notes = []
    for dataset in report["datasets"]:
        name = dataset["name"]
        per_node = {host: next(s for s in staged if s["dataset"] == name) for host, staged in report["staged"].items()}
        for host, staged in sorted(per_node.items()):
            rows.append((name, host, len(staged["shards"]), size(staged["bytes"]), staged["dir"]))
        unique = set().union(*(set(s["shards"]) for s in per_node.values()))
        copies = sum(len(s["shards"]) for s in per_node.values()) / float(len(unique) or 1)
        ranks = sorted(os.path.basename(p) for p in next(iter(per_node.values()))["handover"]
                       if os.path.basename(os.path.dirname(p)) == "ranks")
        notes.append("%s: %d shards, %s cop%s of each on the nodes (mode %s, replicas %s)"
                     % (name, len(unique), "%g" % copies, "y" if copies == 1 else "ies", dataset.get("mode", "auto"),
                        dataset.get("replicas", 1)))
        notes.append("  on each node, in its directory: shards.txt (local paths), sources.txt (URLs), ranks/%s"
                     % (" ".join(ranks) or "-"))
    print(table(rows))
    for note in notes:
        print("  " + note)

    print("\nConda environments")
    rows = [("NODE", "CONDA", "PREFIX", "ENVIRONMENTS")]
    for host, conda in sorted(report["conda"].items()):
        envs = ["base" if env == conda["prefix"] else os.path.basename(env) for env in conda["envs"]]
        rows.append((host, "%s (%s)" % (conda["conda"], conda["flavor"].strip()), conda["prefix"], ", ".join(envs)))
    print(table(rows))

    job = cluster["job"]
    manifest = os.path.abspath(job["manifest"])
    print("\nTraining job for %s on the nodes that hold it (%s): %s"
          % (job["dataset"], job["kubetpl"], os.path.relpath(manifest, here) if manifest.startswith(here + os.sep) else manifest))
    rows = [("JOB", "NODE", "TORCHRUN", "GPUS", "DATASET")]
    for item in job["object"].get("items", [job["object"]]):
        if item["kind"] != "Job":
            continue
        spec = item["spec"]["template"]["spec"]
        container = spec["containers"][0]
        torchrun = [word for word in container.get("command", []) + container.get("args", [])
                    if word.startswith(("--nnodes", "--nproc-per-node", "--node-rank"))]
        volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
        mounts = ["%s at %s" % (volumes[mount["name"]]["hostPath"]["path"], mount["mountPath"])
                  for mount in container.get("volumeMounts", []) if "hostPath" in volumes.get(mount["name"], {})]
        rows.append((item["metadata"]["name"], spec.get("nodeSelector", {}).get("kubernetes.io/hostname", "(any)"),
                     " ".join(torchrun), container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0),
                     ", ".join(mounts[:1]) or "-"))
    print(table(rows))
    print("  $ %s\n%s" % (job["command"], "\n".join("  " + line for line in job["output"].splitlines())))
    return 0 if str(job["rc"]) == "0" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
