# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Kubernetes Job or Pod manifest for a GPU workload from a few arguments (the tutorial's `kubetpl job -G 1`).

The manifest and its checks are module_utils/k8s_jobs.py's, which the heads' kubetpl runs too."""

from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.k8s_jobs import ManifestError, gpu_job


def k8s_gpu_job(name, image, command=None, gpus=1, node_selector=None, kind="Job", namespace=None,
                dataset_host_path=None, dataset_mount_path="/data", env=None, backoff_limit=None,
                restart_policy="Never", cpu=None, memory=None, mig_profile=None, whole_gpus=False):
    """Return a batch/v1 Job or v1 Pod (a dict) running one container; raise AnsibleFilterError on bad input."""
    try:
        return gpu_job(name, image, command=command, gpus=gpus, node_selector=node_selector, kind=kind,
                       namespace=namespace, dataset_host_path=dataset_host_path, dataset_mount_path=dataset_mount_path,
                       env=env, backoff_limit=backoff_limit, restart_policy=restart_policy, cpu=cpu, memory=memory,
                       mig_profile=mig_profile, whole_gpus=whole_gpus)
    except ManifestError as exc:
        raise AnsibleFilterError("k8s_gpu_job: %s" % exc)


class FilterModule:
    def filters(self):
        return {"k8s_gpu_job": k8s_gpu_job}
