# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes manifests for GPU workloads: the checks of their inputs and a one-container Job or Pod (``gpu_job``).

Private to the collection: its public faces are the ``k8s_gpu_job`` filter and the ``kubetpl`` command that the
microk8s role installs on the heads (module_utils/kubetpl.py). Both run this code, so it is stdlib only and runs on
Python 3.9 and later without Ansible: bad input raises ManifestError, which each face turns into its own error.
"""

import re
import shlex


class ManifestError(ValueError):
    """Input a manifest cannot be made from; ``problems`` lists each, with its fix, and str() joins them with '; '."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# A label key is an optional DNS-1123 subdomain prefix and '/', then a name; a value is a name or empty.
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?\d+)?$")
RESTART_POLICIES = {"Job": ("Never", "OnFailure"), "Pod": ("Never", "OnFailure", "Always")}
# A MIG GPU instance profile as nvidia-smi names it: compute slices, memory, optional media extensions.
MIG_PROFILE = re.compile(r"^[1-7]g\.[0-9]+gb(\+me)?$")
# The label the microk8s role puts on GPU nodes: none, mig or time-sliced.
SHARING_LABEL = "dlinfra.io/gpu.sharing"
NAME_FIX = "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"


def _label_key_problem(key):
    prefix, name = key.rpartition("/")[::2]
    if not LABEL_NAME.match(name) or (prefix and (len(prefix) > 253 or not LABEL_PREFIX.match(prefix))):
        return "key %r is not a label key" % key
    return None


def _scalar_text(value):
    """Label and env values are strings in the API; YAML's true/3 become 'true'/'3'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _node_selector(node_selector, problems):
    if not isinstance(node_selector, dict):
        problems.append("node_selector=%r is not a dict; fix: pass label: value pairs, e.g. "
                        "{'nvidia.com/gpu.present': 'true'}" % (node_selector,))
        return {}
    selector = {}
    for key, value in node_selector.items():
        text = _scalar_text(value)
        problem = _label_key_problem(str(key))
        if problem is None and (text is None or (text and not LABEL_NAME.match(text))):
            problem = "value %r of %r is not a label value" % (value, key)
        if problem:
            problems.append("node_selector: %s; fix: keys are [prefix/]name and values at most 63 letters, digits, "
                            "'-', '_' or '.', starting and ending with a letter or digit" % problem)
        else:
            selector[str(key)] = text
    return selector


def _env(env, problems):
    if not isinstance(env, dict):
        problems.append("env=%r is not a dict; fix: pass NAME: value pairs, e.g. {'NCCL_DEBUG': 'INFO'}" % (env,))
        return []
    result = []
    for name, value in env.items():
        text = _scalar_text(value)
        if not ENV_NAME.match(str(name)) or text is None:
            problems.append("env: %r=%r is not a variable; fix: names of letters, digits, '_', '-' or '.' not starting "
                            "with a digit, and string or number values" % (name, value))
        else:
            result.append({"name": str(name), "value": text})
    return result


def _gpus(gpus, problems):
    if isinstance(gpus, str) and gpus.isdigit():
        gpus = int(gpus)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        problems.append("gpus=%r is not a whole number >= 0; fix: pass the count of nvidia.com/gpu to request, e.g. "
                        "gpus=1 (0 for a CPU-only workload)" % (gpus,))
        return 0
    return gpus


def _argv(command):
    """(argv or None for the image's entrypoint, problem or None); a string is split like a shell would, unexpanded."""
    if command is None:
        return None, None
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return None, ("command=%r cannot be split into words (%s); fix: pass a list, e.g. ['sh', '-c', '...']"
                          % (command, exc))
    elif isinstance(command, (list, tuple)) and all(_scalar_text(word) is not None and not isinstance(word, bool)
                                                    for word in command):
        argv = [str(word) for word in command]
    else:
        return None, ("command=%r is neither a string nor a list of strings; fix: pass e.g. command=['nvidia-smi', '-L']"
                      % (command,))
    if not argv:
        return None, "command is empty; fix: leave it out to run the image's entrypoint, or name a program"
    return argv, None


def _absolute_path(argument, path, problems):
    if not isinstance(path, str) or not path.startswith("/"):
        problems.append("%s=%r is not an absolute path; fix: pass a path that starts with '/'" % (argument, path))
        return False
    return True


def _quantities(cpu, memory, problems):
    """{"cpu": ..., "memory": ...} of those given, as Kubernetes quantities (strings)."""
    quantities = {}
    for argument, value, example in (("cpu", cpu, "'4' or '500m'"), ("memory", memory, "'32Gi'")):
        if value is None:
            continue
        text = _scalar_text(value)
        if isinstance(value, bool) or text is None or not QUANTITY.match(text):
            problems.append("%s=%r is not a Kubernetes quantity; fix: pass e.g. %s=%s" % (argument, value, argument, example))
        else:
            quantities[argument] = text
    return quantities


def mig_resource(profile):
    """The device plugin's resource for a MIG profile (its mixed strategy): '3g.40gb' -> 'nvidia.com/mig-3g.40gb',
    '1g.10gb+me' -> 'nvidia.com/mig-1g.10gb.me' (Kubernetes names allow no '+'); None for a name that is no profile."""
    if not isinstance(profile, str) or not MIG_PROFILE.match(profile):
        return None
    return "nvidia.com/mig-" + profile.replace("+", ".")


def _gpu_resource(gpus, mig_profile, whole_gpus, problems):
    """(the resource the GPUs are asked as, the node labels that asking adds)."""
    if mig_profile is None:
        return "nvidia.com/gpu", {SHARING_LABEL: "none"} if whole_gpus else {}
    resource = mig_resource(mig_profile)
    if resource is None:
        problems.append("mig_profile=%r is not a MIG profile name; fix: pass one such as '1g.10gb' or '3g.40gb' "
                        "(nvidia-smi mig -lgip lists a GPU's)" % (mig_profile,))
    if whole_gpus:
        problems.append("mig_profile and whole_gpus ask for a slice and for a whole GPU; fix: pass one of them")
    if not gpus:
        problems.append("mig_profile=%r with gpus=0 asks for no instance; fix: gpus=1 (the instances to request)"
                        % (mig_profile,))
    return resource or "nvidia.com/gpu", {}


def gpu_job(name, image, command=None, gpus=1, node_selector=None, kind="Job", namespace=None,
            dataset_host_path=None, dataset_mount_path="/data", env=None, backoff_limit=None,
            restart_policy="Never", cpu=None, memory=None, mig_profile=None, whole_gpus=False):
    """Return a batch/v1 Job or v1 Pod (a dict) running one container; raise ManifestError on bad input.

    gpus: how many of nvidia.com/gpu to ask for, or of the MIG profile's resource (mig_profile, the device plugin's
    mixed strategy). whole_gpus: run only where GPUs are not shared (the node label dlinfra.io/gpu.sharing=none, which
    the microk8s role writes)."""
    problems = []
    if not isinstance(name, str) or not DNS1123_LABEL.match(name):
        problems.append("name=%r is not a DNS-1123 label; fix: %s" % (name, NAME_FIX))
    if kind not in RESTART_POLICIES:
        problems.append("kind=%r is not one of Job, Pod; fix: kind='Job' (runs to completion, retried) or kind='Pod'"
                        % (kind,))
    if namespace is not None and (not isinstance(namespace, str) or not DNS1123_LABEL.match(namespace)):
        problems.append("namespace=%r is not a DNS-1123 label; fix: %s (or leave it out for the default namespace)"
                        % (namespace, NAME_FIX))
    if not isinstance(image, str) or not image or any(c.isspace() for c in image):
        problems.append("image=%r is not an image reference; fix: pass e.g. image='nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04'"
                        % (image,))

    argv, problem = _argv(command)
    if problem:
        problems.append(problem)
    gpus = _gpus(gpus, problems)
    resource, sharing_selector = _gpu_resource(gpus, mig_profile, whole_gpus, problems)
    selector = _node_selector(node_selector, problems) if node_selector is not None else {}
    for label, value in sharing_selector.items():
        if selector.get(label, value) != value:
            problems.append("node_selector sets %s=%s and whole_gpus asks for %s=%s; fix: leave it out of "
                            "node_selector" % (label, selector[label], label, value))
    selector = dict(selector, **sharing_selector)
    env_vars = _env(env, problems) if env is not None else []

    policies = RESTART_POLICIES.get(kind, RESTART_POLICIES["Pod"])
    if restart_policy not in policies:
        problems.append("restart_policy=%r is not allowed for a %s; fix: use one of %s"
                        % (restart_policy, kind, ", ".join(policies)))
    if backoff_limit is not None:
        if kind == "Pod":
            problems.append("backoff_limit applies to a Job only; fix: leave it out for kind='Pod'")
        elif isinstance(backoff_limit, bool) or not isinstance(backoff_limit, int) or backoff_limit < 0:
            problems.append("backoff_limit=%r is not a whole number >= 0; fix: pass the retries before the Job fails, "
                            "e.g. backoff_limit=0" % (backoff_limit,))

    quantities = _quantities(cpu, memory, problems)

    mount = None
    if dataset_host_path is not None:
        if _absolute_path("dataset_host_path", dataset_host_path, problems) and \
                _absolute_path("dataset_mount_path", dataset_mount_path, problems):
            mount = (dataset_host_path, dataset_mount_path)

    if problems:
        raise ManifestError(problems)

    limits = dict(quantities)
    if gpus:
        limits[resource] = str(gpus)
    elif not any(var["name"] == "NVIDIA_VISIBLE_DEVICES" for var in env_vars):
        # Without a GPU request, CUDA images (NVIDIA_VISIBLE_DEVICES=all) would see every GPU of the node.
        env_vars.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})

    container = {"name": name, "image": image}
    if argv is not None:
        container["command"] = argv
    if env_vars:
        container["env"] = env_vars
    if limits:
        container["resources"] = {"limits": limits}
        if quantities:
            container["resources"]["requests"] = dict(quantities)
    pod_spec = {"restartPolicy": restart_policy, "containers": [container]}
    if selector:
        pod_spec["nodeSelector"] = selector
    if mount:
        container["volumeMounts"] = [{"name": "dataset", "mountPath": mount[1], "readOnly": True}]
        # Directory: the pod fails to start on a node where the dataset was not staged, instead of seeing an empty dir.
        pod_spec["volumes"] = [{"name": "dataset", "hostPath": {"path": mount[0], "type": "Directory"}}]

    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
    job_spec = {"template": {"spec": pod_spec}}
    if backoff_limit is not None:
        job_spec["backoffLimit"] = backoff_limit
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}
