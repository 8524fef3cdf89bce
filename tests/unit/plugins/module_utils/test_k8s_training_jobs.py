# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The data-placed multi-node training job (k8s_training_jobs) from the worlds of real staging plans (make_plan): valid
for the Kubernetes of MicroK8s' pinned channel, each node's pod pinned to it with its node rank and ranks, and every
refusal naming the host, the dataset and the fix."""

from __future__ import annotations

import copy
import pathlib
import re
import shlex

import kubernetes_validate
import pytest
import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_jobs import ManifestError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_training_jobs import training_job
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan

ROOT = pathlib.Path(__file__).resolve().parents[4]
# The Kubernetes minor of the microk8s role's pinned channel (a test below keeps the two the same).
K8S_VERSION = "1.32"
IMAGE = "nvcr.io/nvidia/pytorch:24.10-py3"
GIB = 1 << 30


def plan(ranks, dataset="yt8m-mini", mode="partition", shards=24):
    records = [{"name": "s-%03d.tar" % i, "url": "http://store/s-%03d.tar" % i, "size": 1000, "sha256": "0" * 64,
                "samples": 10} for i in range(shards)]
    return make_plan({"name": dataset, "mode": mode}, records,
                     {host: {"free_bytes": 100 * GIB, "ranks": count} for host, count in ranks.items()})


def nodes_of(the_plan, dest="/srv/ssd/yt8m-mini", **extra):
    """The entries kubetpl reads from a head: each node's world.json, where its dataset is, and more per host."""
    return [dict({"world": node["world"], "dest": dest}, **extra.get(host, {}))
            for host, node in sorted(the_plan["nodes"].items(), reverse=True)]


def assert_valid(manifests):
    for manifest in manifests:
        try:
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail("%s %s fails the Kubernetes %s schema at %s: %s" % (
                manifest["kind"], manifest["metadata"]["name"], K8S_VERSION, "/".join(map(str, exc.absolute_path)),
                exc.message))
    return manifests


def torchrun_options(container):
    """torchrun's --name=value options, and what follows them (the user's command)."""
    argv = container["command"]
    assert argv[0] == "torchrun"
    options = dict(word[2:].split("=", 1) for word in argv[1:] if word.startswith("--") and "=" in word)
    return options, argv[1 + len(options):]


def env_of(container):
    return {var["name"]: var["value"] for var in container["env"]}


def test_the_kubernetes_version_is_microk8s_pinned_minor():
    defaults = yaml.safe_load((ROOT / "roles" / "microk8s" / "defaults" / "main.yml").read_text())
    assert defaults["microk8s_channel"].split("/")[0] == K8S_VERSION


def test_each_node_that_holds_the_dataset_runs_its_ranks_there():
    """Three nodes with 4, 2 and 2 ranks, one known to Kubernetes by another name: a Service and a Job per node, each
    pod pinned to the node whose world gives its node rank, torchrun numbering the ranks as the plan does."""
    the_plan = plan({"dgx02": 2, "dgx01": 4, "ws03": 2})
    given = nodes_of(the_plan, ws03={"hostname": "ws03.lab", "dest": "/mnt/nvme/yt8m-mini"},
                     dgx01={"gpus": 4}, dgx02={"gpus": 8})
    manifests = assert_valid(training_job("train", IMAGE, "train.py --epochs 3", "yt8m-mini", given))
    service, jobs = manifests[0], manifests[1:]
    assert [job["kind"] for job in jobs] == ["Job"] * 3 and service["kind"] == "Service"
    worlds = {host: node["world"] for host, node in the_plan["nodes"].items()}
    by_rank = {world["node_rank"]: host for host, world in worlds.items()}
    base = 0
    for job in jobs:
        spec = job["spec"]["template"]["spec"]
        container = spec["containers"][0]
        options, command = torchrun_options(container)
        host = by_rank[int(options["node-rank"])]
        world, entry = worlds[host], next(n for n in given if n["world"]["node"] == host)
        assert job["metadata"]["name"] == "train-%d" % world["node_rank"]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": entry.get("hostname", host)}
        assert options == {"nnodes": "3", "nproc-per-node": str(len(world["ranks"])), "node-rank": str(world["node_rank"]),
                           "rdzv-backend": "static", "master-addr": "train-0.train", "master-port": "29500"}
        assert command == ["train.py", "--epochs", "3"]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": str(len(world["ranks"]))}}
        # torchrun's static rendezvous gives node R's local rank L the global rank (ranks of the nodes before R) + L:
        # the global rank the node's world.json gives the list of local rank L.
        assert [base + local for local in range(len(world["ranks"]))] == [r["global_rank"] for r in world["ranks"]]
        base += len(world["ranks"])
        assert spec["volumes"][0] == {"name": "dataset", "hostPath": {"path": entry["dest"], "type": "Directory"}}
        assert container["volumeMounts"][0] == {"name": "dataset", "mountPath": entry["dest"], "readOnly": True}
        assert env_of(container) == {
            "DLINFRA_DATASET": "yt8m-mini", "DLINFRA_HANDOFF": entry["dest"],
            "DLINFRA_RANK_LIST": entry["dest"] + "/ranks/rank-%04d.txt", "DLINFRA_WORLD": entry["dest"] + "/world.json",
            "DLINFRA_PLAN_DIGEST": world["plan_digest"], "DLINFRA_NODE_RANK": str(world["node_rank"]),
            "DLINFRA_FIRST_RANK": str(world["ranks"][0]["global_rank"])}
        # Each local rank's list, as the hand-off names it.
        assert [env_of(container)["DLINFRA_RANK_LIST"] % r["local_rank"] for r in world["ranks"]] == [
            entry["dest"] + "/" + r["list"] for r in world["ranks"]]
        assert spec["restartPolicy"] == "OnFailure" and job["spec"]["backoffLimit"] == 6
    assert base == worlds["dgx01"]["world_size"] == 8
    assert [job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for job in jobs] == [
        "dgx01", "dgx02", "ws03.lab"]


def test_the_headless_service_names_node_0s_pod_for_the_rendezvous():
    manifests = assert_valid(training_job("train", IMAGE, ["train.py"], "yt8m-mini", nodes_of(plan({"a": 2, "b": 2}))))
    service, jobs = manifests[0], manifests[1:]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"] == [{"name": "rendezvous", "port": 29500, "protocol": "TCP"}]
    for job in jobs:
        template = job["spec"]["template"]
        assert set(service["spec"]["selector"].items()) <= set(template["metadata"]["labels"].items())
        assert template["spec"]["subdomain"] == service["metadata"]["name"]
        assert template["spec"]["hostname"] == job["metadata"]["name"]
        assert template["spec"]["hostNetwork"] is True
        assert template["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    node0 = jobs[0]["spec"]["template"]["spec"]
    options, _command = torchrun_options(node0["containers"][0])
    assert options["master-addr"] == "%s.%s" % (node0["hostname"], node0["subdomain"])
    # Only node 0 listens; on the node's network its port is a host port the scheduler accounts for.
    assert node0["containers"][0]["ports"] == [{"name": "rendezvous", "containerPort": 29500, "protocol": "TCP"}]
    assert "ports" not in jobs[1]["spec"]["template"]["spec"]["containers"][0]


def test_nccl_reads_the_nodes_own_config_and_shared_memory_is_not_the_containers_64_mib():
    job = training_job("train", IMAGE, "train.py", "yt8m-mini", nodes_of(plan({"a": 1})))[1]
    spec = job["spec"]["template"]["spec"]
    assert {"name": "nccl-conf", "hostPath": {"path": "/etc/nccl.conf", "type": "File"}} in spec["volumes"]
    assert {"name": "nccl-conf", "mountPath": "/etc/nccl.conf", "readOnly": True} in spec["containers"][0]["volumeMounts"]
    assert {"name": "shm", "emptyDir": {"medium": "Memory"}} in spec["volumes"]


@pytest.mark.parametrize("kwargs, check", [
    ({"namespace": "research"}, lambda ms: all(m["metadata"]["namespace"] == "research" for m in ms)),
    ({"host_network": False}, lambda ms: all("hostNetwork" not in m["spec"]["template"]["spec"]
                                             and "dnsPolicy" not in m["spec"]["template"]["spec"] for m in ms[1:])),
    ({"nccl_conf": None}, lambda ms: [v["name"] for v in ms[1]["spec"]["template"]["spec"]["volumes"]] == ["dataset", "shm"]),
    ({"nccl_conf": "/opt/site/nccl.conf"},
     lambda ms: ms[1]["spec"]["template"]["spec"]["volumes"][2]["hostPath"]["path"] == "/opt/site/nccl.conf"),
    ({"port": 29600}, lambda ms: "--master-port=29600" in ms[1]["spec"]["template"]["spec"]["containers"][0]["command"]
     and ms[0]["spec"]["ports"][0]["port"] == 29600),
    ({"backoff_limit": 0}, lambda ms: ms[1]["spec"]["backoffLimit"] == 0),
    ({"cpu": "16", "memory": "64Gi"}, lambda ms: ms[1]["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2"}, "requests": {"cpu": "16", "memory": "64Gi"}}),
    ({"env": {"NCCL_DEBUG": "INFO", "DLINFRA_HANDOFF": "/elsewhere"}},
     lambda ms: env_of(ms[1]["spec"]["template"]["spec"]["containers"][0])["NCCL_DEBUG"] == "INFO"
     and env_of(ms[1]["spec"]["template"]["spec"]["containers"][0])["DLINFRA_HANDOFF"] == "/elsewhere"),
    ({"command": "-m trainer.main --data \"$DLINFRA_HANDOFF\""},
     lambda ms: ms[1]["spec"]["template"]["spec"]["containers"][0]["command"][-4:]
     == ["-m", "trainer.main", "--data", "$DLINFRA_HANDOFF"]),
])
def test_options_shape_valid_manifests(kwargs, check):
    args = dict({"command": "train.py"}, **kwargs)
    manifests = assert_valid(training_job("train", IMAGE, args.pop("command"), "yt8m-mini",
                                          nodes_of(plan({"a": 2, "b": 2})), **args))
    assert check(manifests)


def test_a_replicated_dataset_and_a_single_node_make_a_job_too():
    given = nodes_of(plan({"n1": 8}, dataset="ds", mode="replicate"))
    manifests = assert_valid(training_job("x", IMAGE, "train.py", "ds", given))
    assert [m["metadata"]["name"] for m in manifests] == ["x", "x-0"]
    assert "--nnodes=1" in manifests[1]["spec"]["template"]["spec"]["containers"][0]["command"]


def with_world(given, host, **changes):
    given = copy.deepcopy(given)
    for entry in given:
        if entry["world"]["node"] == host:
            entry["world"].update(changes)
    return given


THREE = nodes_of(plan({"dgx01": 2, "dgx02": 2, "dgx03": 2}))
OTHER_PLAN = nodes_of(plan({"dgx01": 2, "dgx02": 2, "dgx03": 2}, shards=30))


@pytest.mark.parametrize("given, kwargs, message", [
    ([], {}, re.escape("dataset yt8m-mini: no node's world is given; fix: stage it (shard_staging) on the cluster")),
    (THREE[:1] + OTHER_PLAN[1:], {},
     re.escape("dataset yt8m-mini: its nodes hold different plans (dgx01, dgx02 hold sha256:") + ".*"
     + re.escape("; dgx03 holds sha256:") + ".*" + re.escape("); fix: re-run shard_staging (playbooks/shard_staging.yml)")),
    ([n for n in THREE if n["world"]["node"] != "dgx02"], {},
     re.escape("dataset yt8m-mini: its plan has 3 nodes but the worlds given are of node ranks 0, 2 (dgx01, dgx03); "
               "node rank 1 missing; fix: stage it on every node of its cluster and give every node's world (the "
               "rendezvous node is dgx01)")),
    ([n for n in THREE if n["world"]["node"] != "dgx01"], {}, "node rank 0 missing"),
    (THREE + THREE[:1], {}, re.escape("dataset yt8m-mini: the world of dgx03 is given more than once; fix: give each "
                                      "node's world once")),
    (with_world(THREE, "dgx02", ranks=THREE[1]["world"]["ranks"][:1]), {},
     re.escape("dataset yt8m-mini: its plan's world has 6 ranks but the nodes given (dgx01, dgx02, dgx03) hold 5; "
               "fix: re-run shard_staging")),
    (THREE, {"command": ""}, re.escape("dataset yt8m-mini: the command is empty; fix: name the script and its arguments "
                                       "that torchrun runs on every rank, e.g. command='train.py --epochs 3'")),
    (THREE, {"command": None}, "dataset yt8m-mini: the command is empty"),
    (THREE, {"command": []}, "dataset yt8m-mini: the command is empty"),
    (THREE, {"command": "train.py 'unclosed"}, "cannot be split into words"),
    ([dict(THREE[0], gpus=1)] + THREE[1:], {},
     re.escape("dgx03: dataset yt8m-mini has 2 ranks on it but the node has 1 GPUs; fix: set "
               "shard_staging_ranks_per_node to at most 1 for it (or leave it unset: its GPU count) and re-run "
               "shard_staging")),
    ([dict(THREE[0], gpus="two")] + THREE[1:], {}, re.escape("dgx03: gpus='two' is not a whole number")),
    (with_world(THREE, "dgx02", dataset="imagenet"), {},
     re.escape("dgx02: its world is of dataset 'imagenet', not yt8m-mini; fix: give the worlds of yt8m-mini only")),
    ([dict(THREE[0], world={k: v for k, v in THREE[0]["world"].items() if k != "plan_digest"})] + THREE[1:], {},
     re.escape("dgx03: its world of dataset yt8m-mini lacks plan_digest; fix: re-run shard_staging")),
    (with_world(THREE, "dgx01", ranks=[]), {}, "dgx01: its world of dataset yt8m-mini has no ranks numbered 0, 1, ..."),
    (with_world(THREE, "dgx01", plan_digest=None), {},
     re.escape("dgx01: its world of dataset yt8m-mini names no node, rendezvous or plan_digest; fix: re-run")),
    (with_world(THREE, "dgx01", node_rank="0"), {}, "dgx01: its world of dataset yt8m-mini has no whole node_rank"),
    ([{"dest": "/srv"}], {}, "dataset yt8m-mini: entry 0 is not a node's {'world': ..., 'dest': ...}; fix: re-run"),
    ([dict(THREE[0], dest="srv/ssd")] + THREE[1:], {},
     re.escape("dgx03: dest='srv/ssd' of dataset yt8m-mini is not an absolute path; fix: give the directory")),
    ([dict(THREE[0], hostname="DGX 03")] + THREE[1:], {},
     re.escape("dgx03: hostname='DGX 03' is not a node's kubernetes.io/hostname label; fix: give the name Kubernetes "
               "knows the node by")),
    (THREE, {"name": "9train"}, re.escape("name='9train' is not a Service name that leaves room for the nodes' Jobs")),
    (THREE, {"name": "t" * 62}, re.escape("; fix: start with a letter and use lowercase letters, digits and '-', "
                                          "starting and ending with a letter or digit, at most 61 characters")),
    (THREE, {"image": "py torch"}, "image='py torch' is not an image reference"),
    (THREE, {"namespace": "Research"}, "namespace='Research' is not a DNS-1123 label"),
    (THREE, {"port": 0}, "port=0 is not a port; fix: pass a free TCP port of node 0"),
    (THREE, {"backoff_limit": -1}, "backoff_limit=-1 is not a whole number >= 0"),
    (THREE, {"nccl_conf": "nccl.conf"}, "nccl_conf='nccl.conf' is not an absolute path"),
    (THREE, {"env": {"1X": "a"}}, "env: '1X'='a' is not a variable"),
    (THREE, {"cpu": "lots"}, "cpu='lots' is not a Kubernetes quantity"),
    (THREE, {"dataset": ""}, "dataset='' is not a dataset's name"),
])
def test_bad_input_is_refused_naming_the_host_the_dataset_and_the_fix(given, kwargs, message):
    args = dict({"name": "train", "image": IMAGE, "command": "train.py", "dataset": "yt8m-mini"}, **kwargs)
    with pytest.raises(ManifestError) as raised:
        training_job(args.pop("name"), args.pop("image"), args.pop("command"), args.pop("dataset"), given, **args)
    assert re.search(message, str(raised.value)), str(raised.value)
    assert "fix: " in str(raised.value)


def test_every_problem_is_reported_at_once():
    given = [dict(THREE[0], gpus=1), dict(THREE[1], dest="rel")] + THREE[2:]
    with pytest.raises(ManifestError) as raised:
        training_job("Train", "", "", "yt8m-mini", given, port="x")
    starts = ["dgx03: dataset yt8m-mini has 2 ranks", "dgx02: dest='rel'", "name='Train'", "image=''",
              "dataset yt8m-mini: the command is empty", "port='x'"]
    assert len(raised.value.problems) == len(starts)
    for problem, start in zip(raised.value.problems, starts):
        assert problem.startswith(start) and "; fix: " in problem
    assert str(raised.value) == "; ".join(raised.value.problems)


def test_the_user_command_is_not_run_in_a_shell():
    """A string command is split like a shell would, without expanding anything; torchrun gets the words."""
    command = "train.py --name 'a b' --glob '*.tar'"
    job = training_job("train", IMAGE, command, "yt8m-mini", nodes_of(plan({"a": 1})))[1]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-5:] == shlex.split(command)


def test_a_cpu_job_requests_no_gpu_and_ignores_the_gpu_counts():
    nodes = nodes_of(plan({"gpu1": 2, "gpu2": 2}), gpu1={"gpus": 0}, gpu2={"gpus": 0})
    with pytest.raises(ManifestError, match="GPUs"):
        training_job("yt8m", IMAGE, "train.py", "yt8m-mini", nodes)
    manifests = training_job("yt8m", IMAGE, "train.py", "yt8m-mini", nodes, gpus=False)
    assert_valid(manifests)
    for job in manifests[1:]:
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
        assert env_of(container)["NVIDIA_VISIBLE_DEVICES"] == "void"
