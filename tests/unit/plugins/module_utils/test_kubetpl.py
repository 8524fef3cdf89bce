# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubetpl end to end: run as the heads run it (a Python without Ansible, without site-packages), on the seeds'
commands and on a temporary worlds directory laid out as shard_staging writes it; the output is what
`microk8s kubectl apply -f -` reads, valid against the Kubernetes schemas."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.k8s_gpu_job import k8s_gpu_job
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.kubetpl import DEFAULT_IMAGE
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import make_plan

ROOT = pathlib.Path(__file__).resolve().parents[4]
COLLECTIONS = ROOT / "collections"
K8S_VERSION = "1.32"
IMAGE = "nvcr.io/nvidia/pytorch:24.10-py3"
# kubetpl's main() in an isolated Python that sees the standard library and the collection only: no Ansible, no PyYAML.
RUN = ("import sys; sys.path.insert(0, %r); "
       "from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.kubetpl import main; "
       "assert 'ansible' not in sys.modules; sys.exit(main(sys.argv[1:]))" % str(COLLECTIONS))


def kubetpl(*args, site=False, env=None):
    """(exit status, stdout, stderr) of kubetpl ARGS; site=True lets it see site-packages (PyYAML)."""
    flags = ["-I"] if site else ["-I", "-S"]
    done = subprocess.run([sys.executable, *flags, "-c", RUN, *args], capture_output=True, text=True, check=False,
                          env=env, timeout=60)
    return done.returncode, done.stdout, done.stderr


def items(stdout):
    document = json.loads(stdout)
    return document["items"] if document["kind"] == "List" else [document]


def valid(manifests):
    for manifest in manifests:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    return manifests


@pytest.fixture(name="staged")
def fixture_staged(tmp_path):
    """A worlds directory as shard_staging writes it on a head: yt8m-mini on three nodes (4, 2, 2 ranks)."""
    records = [{"name": "s-%03d.tar" % i, "url": "http://store/s-%03d.tar" % i, "size": 1000, "sha256": "0" * 64,
                "samples": 10} for i in range(32)]
    plan = make_plan({"name": "yt8m-mini", "mode": "partition"}, records,
                     {host: {"free_bytes": 1 << 40, "ranks": ranks} for host, ranks in
                      {"gpu1": 4, "gpu2": 2, "gpu3": 2}.items()})
    directory = tmp_path / "worlds" / "yt8m-mini"
    directory.mkdir(parents=True)
    for host, node in plan["nodes"].items():
        entry = {"world": node["world"], "dest": "/srv/ssd/yt8m-mini", "hostname": host, "gpus": node["ranks"]}
        (directory / ("%s.json" % host)).write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n")
    return tmp_path / "worlds", plan


def test_the_seeds_gpu_job_is_the_filters():
    """kubetpl job -G 1 -c nvidia-smi | kubectl apply -f -"""
    status, stdout, stderr = kubetpl("job", "-G", "1", "-c", "nvidia-smi")
    assert (status, stderr) == (0, "")
    assert valid(items(stdout)) == [k8s_gpu_job("nvidia-smi", DEFAULT_IMAGE, "nvidia-smi", 1)]


def test_the_seeds_cpu_pod():
    """kubetpl pod -l tmbdev/redis-server -c redis-server | kubectl apply -f -"""
    status, stdout, _stderr = kubetpl("pod", "-l", "tmbdev/redis-server", "-c", "redis-server")
    assert status == 0
    assert valid(items(stdout)) == [k8s_gpu_job("redis-server", "tmbdev/redis-server", "redis-server", 0, kind="Pod")]


def test_options_reach_the_manifest():
    status, stdout, _stderr = kubetpl("job", "-n", "smi-2", "-G", "2", "-c", "sh -c 'nvidia-smi -L'", "-e", "A=1",
                                      "--node-selector", "nvidia.com/gpu.present=true", "--namespace", "lab",
                                      "--backoff-limit", "0", "--cpu", "2", "--memory", "4Gi")
    assert status == 0
    assert valid(items(stdout)) == [k8s_gpu_job(
        "smi-2", DEFAULT_IMAGE, ["sh", "-c", "nvidia-smi -L"], 2, env={"A": "1"}, namespace="lab", backoff_limit=0,
        node_selector={"nvidia.com/gpu.present": "true"}, cpu="2", memory="4Gi")]


@pytest.mark.parametrize("args, kwargs", [
    (("--mig-profile", "3g.40gb"), {"mig_profile": "3g.40gb"}),
    (("--whole-gpus",), {"whole_gpus": True}),
])
def test_a_job_asks_for_a_mig_profile_or_for_whole_gpus(args, kwargs):
    status, stdout, _stderr = kubetpl("job", "-G", "1", "-c", "nvidia-smi", *args)
    assert status == 0
    assert valid(items(stdout)) == [k8s_gpu_job("nvidia-smi", DEFAULT_IMAGE, ["nvidia-smi"], 1, **kwargs)]


def test_the_image_comes_from_kubetpl_image_when_not_given():
    status, stdout, _stderr = kubetpl("job", "-c", "nvidia-smi", env={"KUBETPL_IMAGE": "registry.lab:5000/cuda:12"})
    assert status == 0 and items(stdout)[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.lab:5000/cuda:12"


def test_a_dataset_job_runs_on_every_node_that_holds_it(staged):
    worlds_dir, plan = staged
    status, stdout, stderr = kubetpl("job", "--dataset", "yt8m-mini", "-l", IMAGE, "-c", "train.py --epochs 3",
                                     "--worlds-dir", str(worlds_dir), "-e", "NCCL_DEBUG=INFO")
    assert (status, stderr) == (0, "")
    assert json.loads(stdout)["kind"] == "List"
    manifests = valid(items(stdout))
    assert [(m["kind"], m["metadata"]["name"]) for m in manifests] == [
        ("Service", "train-yt8m-mini"), ("Job", "train-yt8m-mini-0"), ("Job", "train-yt8m-mini-1"),
        ("Job", "train-yt8m-mini-2")]
    for job in manifests[1:]:
        spec = job["spec"]["template"]["spec"]
        command = spec["containers"][0]["command"]
        node_rank = int(next(word for word in command if word.startswith("--node-rank=")).split("=")[1])
        host = next(h for h, node in plan["nodes"].items() if node["world"]["node_rank"] == node_rank)
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": host}
        assert "--nproc-per-node=%d" % plan["nodes"][host]["ranks"] in command
        assert command[-3:] == ["train.py", "--epochs", "3"]
        assert {"name": "NCCL_DEBUG", "value": "INFO"} in spec["containers"][0]["env"]


def test_yaml_needs_pyyaml_and_is_the_same_manifests(staged):
    worlds_dir, _plan = staged
    args = ("job", "--dataset", "yt8m-mini", "-l", IMAGE, "-c", "train.py", "--worlds-dir", str(worlds_dir))
    status, _stdout, stderr = kubetpl(*args, "-o", "yaml")
    assert status == 2
    assert "kubetpl: -o yaml needs PyYAML, which this Python lacks; fix: install it (apt install python3-yaml)" in stderr
    status, stdout, _stderr = kubetpl(*args, "-o", "yaml", site=True)
    assert status == 0
    assert list(yaml.safe_load_all(stdout)) == items(kubetpl(*args)[1])


def without(worlds_dir, host):
    (worlds_dir / "yt8m-mini" / ("%s.json" % host)).unlink()


def another_plan(worlds_dir, host):
    path = worlds_dir / "yt8m-mini" / ("%s.json" % host)
    entry = json.loads(path.read_text())
    entry["world"]["plan_digest"] = "sha256:" + "1" * 64
    path.write_text(json.dumps(entry))


def more_ranks_than_gpus(worlds_dir, host):
    path = worlds_dir / "yt8m-mini" / ("%s.json" % host)
    entry = json.loads(path.read_text())
    entry["gpus"] = 1
    path.write_text(json.dumps(entry))


def broken(worlds_dir, host):
    (worlds_dir / "yt8m-mini" / ("%s.json" % host)).write_text("{")


@pytest.mark.parametrize("change, args, message", [
    (without, (), "kubetpl: dataset yt8m-mini: its plan has 3 nodes but the worlds given are of node ranks 0, 2 "
                  "(gpu1, gpu3); node rank 1 missing; fix: stage it on every node of its cluster"),
    (another_plan, (), "kubetpl: dataset yt8m-mini: its nodes hold different plans (gpu1, gpu3 hold sha256:"),
    (more_ranks_than_gpus, (), "kubetpl: gpu2: dataset yt8m-mini has 2 ranks on it but the node has 1 GPUs; fix: set "
                               "shard_staging_ranks_per_node to at most 1"),
    (broken, (), "kubetpl: dataset yt8m-mini: cannot read "),
    (None, ("-c", ""), "kubetpl: dataset yt8m-mini: the command is empty; fix: name the script"),
    (None, ("-G", "2"), "kubetpl: -G does not apply with --dataset: each node gets its ranks' GPUs"),
    (None, ("--node-selector", "a=b"), "kubetpl: --node-selector does not apply with --dataset"),
])
def test_a_dataset_job_is_refused_before_anything_is_printed(staged, change, args, message):
    worlds_dir, _plan = staged
    if change:
        change(worlds_dir, "gpu2")
    argv = ["job", "--dataset", "yt8m-mini", "-l", IMAGE, "--worlds-dir", str(worlds_dir)]
    if "-c" not in args:
        argv += ["-c", "train.py"]
    status, stdout, stderr = kubetpl(*argv, *args)
    assert (status, stdout) == (2, "")
    assert message in stderr, stderr


@pytest.mark.parametrize("args, message", [
    (("job", "--dataset", "imagenet", "-c", "train.py"),
     "kubetpl: dataset imagenet: no node's world in {dir}/imagenet (datasets here: yt8m-mini); fix: stage it with the "
     "shard_staging role"),
    (("job", "--dataset", "../etc", "-c", "train.py"), "kubetpl: --dataset '../etc' is not a dataset's name"),
    (("job", "-c", "x", "--port", "1234"), "kubetpl: --port applies to a job with --dataset only; fix: leave it out"),
    (("job", "-n", "Bad_Name", "-c", "x"), "kubetpl: name='Bad_Name' is not a DNS-1123 label"),
    (("pod", "-c", "x", "-e", "NOVALUE"), "kubetpl: -e 'NOVALUE' is not NAME=VALUE"),
    (("pod", "--dataset", "yt8m-mini"), "unrecognized arguments: --dataset"),
    (("job", "--dataset", "yt8m-mini", "-c", "train.py", "--whole-gpus"),
     "kubetpl: --whole-gpus does not apply with --dataset: each node's pod is pinned to it"),
    (("pod", "-G", "1", "--mig-profile", "3g"), "kubetpl: mig_profile='3g' is not a MIG profile name"),
])
def test_bad_input_is_refused(staged, args, message):
    worlds_dir, _plan = staged
    status, stdout, stderr = kubetpl(*args, "--worlds-dir", str(worlds_dir)) if args[0] == "job" else kubetpl(*args)
    assert (status, stdout) == (2, "")
    assert message.format(dir=worlds_dir) in stderr, stderr
