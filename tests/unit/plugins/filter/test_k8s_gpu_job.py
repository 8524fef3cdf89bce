import json
import os
import pathlib
import subprocess
import sys

import kubernetes_validate
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.k8s_gpu_job import k8s_gpu_job

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
K8S_VERSION = "1.31"
CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


def assert_valid(manifest):
    """Every manifest the filter makes must pass the Kubernetes schema, unknown fields included (strict)."""
    try:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail("%s manifest fails the Kubernetes %s schema at %s: %s"
                    % (manifest.get("kind"), K8S_VERSION, "/".join(map(str, exc.absolute_path)), exc.message))
    return manifest


def pod_spec(manifest):
    return manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]


def test_the_tutorials_gpu_job():
    """kubetpl job -G 1 -c nvidia-smi"""
    assert assert_valid(k8s_gpu_job("smi", CUDA, ["nvidia-smi"], 1)) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "smi"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "smi", "image": CUDA, "command": ["nvidia-smi"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        }}},
    }


def test_a_training_job_on_a_staged_dataset():
    manifest = assert_valid(k8s_gpu_job(
        "train-resnet", "registry.lab:5000/train:1.4", command="python train.py --data '/data/my shards'", gpus=8,
        node_selector={"kubernetes.io/hostname": "gpu07", "nvidia.com/gpu.present": True}, namespace="research",
        dataset_host_path="/srv/datasets/imagenet", dataset_mount_path="/data", env={"NCCL_DEBUG": "INFO", "WORLD": 8},
        backoff_limit=0, cpu="32", memory="256Gi"))
    assert manifest["metadata"] == {"name": "train-resnet", "namespace": "research"}
    assert manifest["spec"]["backoffLimit"] == 0
    spec = pod_spec(manifest)
    container = spec["containers"][0]
    assert container["command"] == ["python", "train.py", "--data", "/data/my shards"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"},
                                      "requests": {"cpu": "32", "memory": "256Gi"}}
    assert container["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "WORLD", "value": "8"}]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu07", "nvidia.com/gpu.present": "true"}
    assert container["volumeMounts"] == [{"name": "dataset", "mountPath": "/data", "readOnly": True}]
    assert spec["volumes"] == [{"name": "dataset", "hostPath": {"path": "/srv/datasets/imagenet", "type": "Directory"}}]


@pytest.mark.parametrize("kwargs, check", [
    ({"kind": "Pod"}, lambda m: m["apiVersion"] == "v1" and m["spec"]["restartPolicy"] == "Never"),
    ({"kind": "Pod", "restart_policy": "Always"}, lambda m: m["spec"]["restartPolicy"] == "Always"),
    ({"restart_policy": "OnFailure", "backoff_limit": 3},
     lambda m: pod_spec(m)["restartPolicy"] == "OnFailure" and m["spec"]["backoffLimit"] == 3),
    ({}, lambda m: "backoffLimit" not in m["spec"] and "command" not in pod_spec(m)["containers"][0]),
    ({"gpus": 4}, lambda m: pod_spec(m)["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "4"}}),
    ({"gpus": "2"}, lambda m: pod_spec(m)["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}),
    ({"gpus": 0}, lambda m: "resources" not in pod_spec(m)["containers"][0]
     and pod_spec(m)["containers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]),
    ({"gpus": 0, "env": {"NVIDIA_VISIBLE_DEVICES": "none"}},
     lambda m: pod_spec(m)["containers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]),
    ({"gpus": 0, "cpu": 2, "memory": "4Gi"}, lambda m: pod_spec(m)["containers"][0]["resources"]
     == {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}),
    ({"cpu": "500m"}, lambda m: pod_spec(m)["containers"][0]["resources"]["requests"] == {"cpu": "500m"}),
    ({"command": "sh -c 'nvidia-smi -L; sleep 1'"},
     lambda m: pod_spec(m)["containers"][0]["command"] == ["sh", "-c", "nvidia-smi -L; sleep 1"]),
    ({"command": ["sleep", 30]}, lambda m: pod_spec(m)["containers"][0]["command"] == ["sleep", "30"]),
    ({"dataset_host_path": "/mnt/ssd/ds", "dataset_mount_path": "/datasets/ds", "kind": "Pod"},
     lambda m: m["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/datasets/ds"),
    ({"node_selector": {"node-role.kubernetes.io/gpu": ""}},
     lambda m: pod_spec(m)["nodeSelector"] == {"node-role.kubernetes.io/gpu": ""}),
    ({"namespace": "ml-team-1", "kind": "Pod"}, lambda m: m["metadata"]["namespace"] == "ml-team-1"),
    ({"gpus": 2, "mig_profile": "3g.40gb"},
     lambda m: pod_spec(m)["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "2"}),
    ({"mig_profile": "1g.10gb+me"},
     lambda m: pod_spec(m)["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb.me": "1"}),
    ({"whole_gpus": True, "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
     lambda m: pod_spec(m)["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                               "dlinfra.io/gpu.sharing": "none"}),
])
def test_options_shape_a_valid_manifest(kwargs, check):
    manifest = assert_valid(k8s_gpu_job("job-1", CUDA, **dict({"command": None}, **kwargs)))
    assert check(manifest), json.dumps(manifest, indent=1)


@pytest.mark.parametrize("name", ["a", "smi", "x" * 63, "job-2-of-3", "0day"])
def test_good_names(name):
    assert assert_valid(k8s_gpu_job(name, CUDA))["metadata"]["name"] == name


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "Train_ResNet"}, "name='Train_ResNet' is not a DNS-1123 label; fix: use at most 63 lowercase letters"),
    ({"name": "x" * 64}, "is not a DNS-1123 label"),
    ({"name": "-smi"}, "name='-smi' is not a DNS-1123 label"),
    ({"name": ""}, "name='' is not a DNS-1123 label"),
    ({"image": ""}, "image='' is not an image reference; fix: pass e.g. image="),
    ({"image": "cuda 12"}, "image='cuda 12' is not an image reference"),
    ({"command": ""}, "command is empty; fix: leave it out to run the image's entrypoint"),
    ({"command": []}, "command is empty"),
    ({"command": "echo 'unclosed"}, "command=\"echo 'unclosed\" cannot be split into words"),
    ({"command": {"run": "x"}}, "command={'run': 'x'} is neither a string nor a list of strings"),
    ({"gpus": -1}, "gpus=-1 is not a whole number >= 0; fix: pass the count of nvidia.com/gpu"),
    ({"gpus": 1.5}, "gpus=1.5 is not a whole number >= 0"),
    ({"gpus": True}, "gpus=True is not a whole number >= 0"),
    ({"gpus": "two"}, "gpus='two' is not a whole number >= 0"),
    ({"kind": "Deployment"}, "kind='Deployment' is not one of Job, Pod"),
    ({"namespace": "ML"}, "namespace='ML' is not a DNS-1123 label"),
    ({"node_selector": ["gpu"]}, "node_selector=['gpu'] is not a dict; fix: pass label: value pairs"),
    ({"node_selector": {"bad key": "x"}}, "node_selector: key 'bad key' is not a label key"),
    ({"node_selector": {"Bad.Prefix/gpu": "x"}}, "node_selector: key 'Bad.Prefix/gpu' is not a label key"),
    ({"node_selector": {"gpu": "not ok"}}, "node_selector: value 'not ok' of 'gpu' is not a label value"),
    ({"node_selector": {"gpu": ["a"]}}, "node_selector: value ['a'] of 'gpu' is not a label value"),
    ({"env": "A=1"}, "env='A=1' is not a dict"),
    ({"env": ""}, "env='' is not a dict"),
    ({"node_selector": ""}, "node_selector='' is not a dict"),
    ({"env": {"1X": "a"}}, "env: '1X'='a' is not a variable"),
    ({"env": {"X": None}}, "env: 'X'=None is not a variable"),
    ({"kind": "Job", "restart_policy": "Always"}, "restart_policy='Always' is not allowed for a Job; fix: use one of Never, OnFailure"),
    ({"restart_policy": "never"}, "restart_policy='never' is not allowed for a Job"),
    ({"kind": "Pod", "backoff_limit": 2}, "backoff_limit applies to a Job only; fix: leave it out for kind='Pod'"),
    ({"backoff_limit": -1}, "backoff_limit=-1 is not a whole number >= 0"),
    ({"cpu": "lots"}, "cpu='lots' is not a Kubernetes quantity; fix: pass e.g. cpu='4' or '500m'"),
    ({"cpu": -2}, "cpu=-2 is not a Kubernetes quantity"),
    ({"memory": "32 GB"}, "memory='32 GB' is not a Kubernetes quantity; fix: pass e.g. memory='32Gi'"),
    ({"dataset_host_path": "srv/data"}, "dataset_host_path='srv/data' is not an absolute path; fix: pass a path that starts with '/'"),
    ({"dataset_host_path": "/srv/data", "dataset_mount_path": "data"}, "dataset_mount_path='data' is not an absolute path"),
    ({"mig_profile": "3g.40"}, "mig_profile='3g.40' is not a MIG profile name; fix: pass one such as '1g.10gb'"),
    ({"mig_profile": "3g.40gb", "gpus": 0}, "mig_profile='3g.40gb' with gpus=0 asks for no instance; fix: gpus=1"),
    ({"mig_profile": "3g.40gb", "whole_gpus": True}, "mig_profile and whole_gpus ask for a slice and for a whole GPU"),
    ({"whole_gpus": True, "node_selector": {"dlinfra.io/gpu.sharing": "mig"}},
     "node_selector sets dlinfra.io/gpu.sharing=mig and whole_gpus asks for dlinfra.io/gpu.sharing=none"),
])
def test_bad_input_names_the_argument_and_the_fix(kwargs, message):
    args = dict({"name": "job", "image": CUDA}, **kwargs)
    with pytest.raises(AnsibleFilterError) as raised:
        k8s_gpu_job(args.pop("name"), args.pop("image"), **args)
    assert str(raised.value).startswith("k8s_gpu_job: ")
    assert message in str(raised.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(AnsibleFilterError) as raised:
        k8s_gpu_job("Bad_Name", "", gpus=-1, kind="Pod", backoff_limit=1, dataset_host_path="rel")
    message = str(raised.value)
    for start in ("name='Bad_Name'", "image=''", "gpus=-1", "backoff_limit applies", "dataset_host_path='rel'"):
        assert "; " + start in message or message.startswith("k8s_gpu_job: " + start), start
    assert message.count("; fix: ") == 5


@pytest.mark.parametrize("breakage", [
    lambda m: pod_spec(m)["containers"][0].update(gpus=1),  # a field Kubernetes does not have (strict)
    lambda m: pod_spec(m)["containers"][0].update(command="nvidia-smi"),  # command must be a list
    lambda m: pod_spec(m)["containers"][0].pop("name"),  # a container needs a name
    lambda m: pod_spec(m)["volumes"][0]["hostPath"].pop("path"),
    lambda m: m["spec"].update(backoffLimit="never"),
    lambda m: pod_spec(m)["containers"][0]["volumeMounts"][0].update(readOnly="yes"),
])
def test_the_schema_check_can_fail(breakage):
    """The validator used above rejects manifests with the mistakes a template makes, so passing it means something."""
    manifest = assert_valid(k8s_gpu_job("smi", CUDA, "nvidia-smi", dataset_host_path="/srv/ds"))
    breakage(manifest)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_filter_runs_in_a_playbook_by_fqcn(tmp_path):
    """Through a real play: the filter is found by its FQCN, its dict reaches a module intact, bad input fails the task."""
    playbook = tmp_path / "play.yml"
    playbook.write_text("""\
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: "{{ out }}/job.json"
        content: "{{ 'smi' | dlinfra.gpu_cluster.k8s_gpu_job(image='%(image)s', command=['nvidia-smi'], gpus=1) | to_json }}"
    - ansible.builtin.copy:
        dest: "{{ out }}/pod.json"
        content: >-
          {{ 'train' | dlinfra.gpu_cluster.k8s_gpu_job('%(image)s', 'python train.py', 2,
               kind='Pod', node_selector={'nvidia.com/gpu.present': true}, dataset_host_path='/srv/ds') | to_json }}
    - ansible.builtin.debug:
        msg: "{{ 'Bad_Name' | dlinfra.gpu_cluster.k8s_gpu_job(image='%(image)s', gpus=-1) }}"
""" % {"image": CUDA})
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    out = subprocess.run([sys.executable, "-m", "ansible", "playbook", "-i", "localhost,", "-c", "local",
                          "-e", "out=%s" % tmp_path, "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                         capture_output=True, text=True, check=False, cwd=REPO_ROOT, env=env)
    log = out.stdout + out.stderr
    assert (tmp_path / "pod.json").exists(), log
    job = assert_valid(json.loads((tmp_path / "job.json").read_text()))
    assert job == k8s_gpu_job("smi", CUDA, ["nvidia-smi"], 1), log
    pod = assert_valid(json.loads((tmp_path / "pod.json").read_text()))
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["spec"]["containers"][0]["command"] == ["python", "train.py"]
    assert out.returncode == 2, log
    assert "k8s_gpu_job: name='Bad_Name' is not a DNS-1123 label" in log
    assert "gpus=-1 is not a whole number >= 0" in log
