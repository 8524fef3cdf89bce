# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No task value of 4 or more lines of Jinja decides anything: a choice with several branches, a list of problems or a
plan is a tested filter in plugins/filter over plugin_utils (nvidia_driver's preflight is the pattern). Long Jinja
that only formats (a message, a file's body, a filter's arguments) may stay, named in ALLOWED with the reason.

A value counts when it is a scalar holding ``{{`` or ``{%``, or a ``when:``/``that:`` list (or condition), in
roles/*/{tasks,handlers,vars,defaults}/*.yml or playbooks/*.yml, and its text spans 4 or more lines (a block scalar's
lines after its ``|``/``>`` header). Templates (templates/*.j2) are out of scope.
"""

import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
FILES = sorted([path for folder in ("tasks", "handlers", "vars", "defaults")
                for path in ROOT.glob("roles/*/%s/*.yml" % folder)] + list(ROOT.glob("playbooks/*.yml")))
LONGEST = 3
CONDITIONS = ("when", "that", "failed_when", "changed_when", "until")
TASK_LISTS = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")

FORMATS_MESSAGE = "formats the message"
FORMATS_SCRIPT = "formats a shell script"
FORMATS_FILE = "formats a file's body"
FORMATS_URL = "formats a URL from a setting or its default"
PASSES_ARGUMENTS = "passes the arguments of a filter that decides"
ASSEMBLES = "assembles a list or record from settings, parts at most switched on or off by flags (no choice of values)"
GUARDS = "a flat AND of one-line conditions, each on its own line (no branches)"

# (file, task name ('' in vars and defaults), key): why its Jinja may stay.
ALLOWED = {
    ("playbooks/inventory_check.yml", "Stop unless the site group and at least one function group hold hosts",
     "fail_msg"): FORMATS_MESSAGE,
    ("playbooks/inventory_check.yml", "Stop where --limit takes some of a cluster's hosts without its first head",
     "__limit_problems"): PASSES_ARGUMENTS,
    ("roles/anaconda/tasks/group.yml", "Share the prefix and the package caches with group {{ anaconda_group }}",
     "cmd"): FORMATS_SCRIPT,
    ("roles/anaconda/tasks/install.yml", "Say the installer failed, and what the prefix holds now",
     "msg"): FORMATS_MESSAGE,
    ("roles/anaconda/tasks/jupyter.yml", "Write each user's service environment and Jupyter server configuration",
     "jupyter_server_config.json"): PASSES_ARGUMENTS,
    ("roles/anaconda/tasks/preflight.yml", "Check that the installer's download site answers", "fix"): FORMATS_MESSAGE,
    ("roles/bundle/tasks/collect.yml",
     "Copy what the proxy cached, without its own records (acng's .head files and _* directories)",
     "cmd"): FORMATS_SCRIPT,
    ("roles/bundle/tasks/report.yml", "Say what the bundle holds", "msg"): FORMATS_MESSAGE,
    ("roles/gpu_monitoring/tasks/verify.yml",
     "Check that node exporter read the collector's file and nvidia-smi answered where GPUs are",
     "fail_msg"): FORMATS_MESSAGE,
    ("roles/gpu_monitoring/tasks/verify_server.yml",
     "Prometheus scrapes node exporter on every host of this run it is given", "fail_msg"): FORMATS_MESSAGE,
    ("roles/microk8s/tasks/install.yml", "Stop where the snap store does not answer", "msg"): FORMATS_MESSAGE,
    ("roles/microk8s/vars/main.yml", "", "__microk8s_observed"): PASSES_ARGUMENTS,
    ("roles/nccl/tasks/install_dnf.yml", "Fail when the pinned NCCL is not available", "msg"): FORMATS_MESSAGE,
    ("roles/nccl/tasks/preflight.yml",
     "Stop where the driver branch planned for this node cannot run the NCCL build's CUDA release",
     "__nccl_cuda_problem"): PASSES_ARGUMENTS,
    ("roles/nccl/tasks/validate.yml", "Report the bus bandwidth", "msg"): FORMATS_MESSAGE,
    ("roles/nvidia_container_toolkit/tasks/configure_containerd.yml", "Write the drop-in with the nvidia runtime",
     "content"): PASSES_ARGUMENTS,
    ("roles/nvidia_container_toolkit/tasks/configure_containerd.yml", "Import the drop-in from the main config",
     "__nvidia_container_toolkit_wanted"): PASSES_ARGUMENTS,
    ("roles/nvidia_container_toolkit/tasks/preflight.yml", "Check that the package repositories answer",
     "fix"): FORMATS_MESSAGE,
    ("roles/nvidia_container_toolkit/tasks/repository.yml", "Stop unless the key is the pinned one",
     "fail_msg"): FORMATS_MESSAGE,
    ("roles/nvidia_container_toolkit/tasks/resolve_version.yml", "Fail when the pinned version is not available",
     "msg"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/install.yml", "Check that NVIDIA's CUDA repository answers", "fix"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/install_apt.yml", "Fail when the pinned driver is not available",
     "msg"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/install_apt.yml", "Note what check mode cannot simulate", "msg"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/install_dnf.yml", "Fail when the pinned driver is not available",
     "msg"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/preflight.yml", "Say which driver this node gets", "msg"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/verify.yml", "The DKMS module is built for every installed kernel",
     "fail_msg"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/verify.yml", "Report the driver", "msg"): FORMATS_MESSAGE,
    ("roles/preflight/tasks/proxy.yml", "Stop where a package source does not answer", "msg"): FORMATS_MESSAGE,
    ("roles/preflight/tasks/validate.yml", "Fail once, listing every problem with its host and fix",
     "__preflight_problems"): PASSES_ARGUMENTS,
    ("roles/host_firewall/tasks/service.yml", "Say what happened and what the node does by itself", "msg"):
        FORMATS_MESSAGE,
    ("roles/host_firewall/tasks/verify.yml",
     "Check the table drops what the rules do not let in, lets SSH in, loads at boot and stays without a timer",
     "that"): GUARDS,
    ("roles/remote_desktop/tasks/install.yml", "Stop where the X server cannot start, naming the libraries and the fix",
     "msg"): FORMATS_MESSAGE,
    ("roles/rolling_upgrade/tasks/change.yml", "Stop with the node cordoned", "msg"): FORMATS_MESSAGE,
    ("roles/rolling_upgrade/tasks/change.yml", "Stop the run before the version reaches more nodes",
     "msg"): FORMATS_MESSAGE,
    ("roles/rolling_upgrade/tasks/drain.yml",
     "Stop before more than rolling_upgrade_max_unavailable nodes of the cluster are out", "fail_msg"): FORMATS_MESSAGE,
    ("roles/rolling_upgrade/tasks/drain.yml", "Stop while GPU processes still run, unless forced",
     "__rolling_upgrade_why"): FORMATS_MESSAGE,
    ("roles/rolling_upgrade/tasks/drain.yml", "Stop where the drain did not finish",
     "__rolling_upgrade_why"): FORMATS_MESSAGE,
    ("roles/rolling_upgrade/tasks/main.yml", "Say what a real run would do to the node", "msg"): FORMATS_MESSAGE,
    ("roles/rolling_upgrade/tasks/plan.yml", "Say what will happen to the node", "msg"): FORMATS_MESSAGE,
    ("roles/shard_staging/tasks/worlds.yml", "Write the node's world of the dataset on the cluster's heads",
     "content"): FORMATS_FILE,
    ("roles/validate/tasks/gpu_job.yml", "Run the GPU job on {{ __validate_job_host }}", "__validate_job"): PASSES_ARGUMENTS,
    ("roles/anaconda/vars/main.yml", "", "__anaconda_condarc"): ASSEMBLES,
    ("roles/anaconda/vars/main.yml", "", "__anaconda_managed_paths"): ASSEMBLES,
    ("roles/anaconda/vars/main.yml", "", "__anaconda_pip_install"): ASSEMBLES,
    ("roles/anaconda/vars/main.yml", "", "__anaconda_jupyter_homes"): ASSEMBLES,
    ("roles/bundle/tasks/preflight.yml", "Check the bundle's variables", "that"): GUARDS,
    ("roles/gpu_monitoring/vars/main.yml", "", "paths"): ASSEMBLES,
    ("roles/microk8s/vars/main.yml", "", "__microk8s_offline"): ASSEMBLES,
    ("roles/microk8s/vars/main.yml", "", "__microk8s_view_reads"): ASSEMBLES,
    ("roles/microk8s/vars/main.yml", "", "__microk8s_managed_paths"): ASSEMBLES,
    ("roles/nccl/vars/main.yml", "", "__nccl_tests_make_vars"): ASSEMBLES,
    ("roles/nccl/vars/main.yml", "", "__nccl_conf"): ASSEMBLES,
    ("roles/nccl/tasks/record.yml", "Record the packages, their pins and holds, nccl.conf and the driver plan the CUDA "
     "match read", "paths"): ASSEMBLES,
    ("roles/nccl/tasks/gpudirect.yml", "Stop, naming the module and the fix", "msg"): FORMATS_MESSAGE,
    ("roles/nvidia_container_toolkit/tasks/preflight.yml", "Check that the package repositories answer",
     "__nvidia_container_toolkit_sources"): ASSEMBLES,
    ("roles/nvidia_container_toolkit/vars/main.yml", "", "__nvidia_container_toolkit_engine_install"): ASSEMBLES,
    ("roles/nvidia_container_toolkit/vars/main.yml", "",
     "__nvidia_container_toolkit_engines_simulated"): PASSES_ARGUMENTS,
    ("roles/nvidia_driver/tasks/install_apt.yml", "Install the driver packages at the pinned version",
     "name"): ASSEMBLES,
    ("roles/nvidia_driver/tasks/install_dnf.yml", "Install the driver packages at the pinned version",
     "name"): ASSEMBLES,
    ("roles/nvidia_driver/vars/main.yml", "", "__nvidia_driver_swap_args"): ASSEMBLES,
    ("roles/nvidia_driver/vars/main.yml", "", "__nvidia_driver_cuda_repo_url"): FORMATS_URL,
    ("roles/preflight/vars/main.yml", "", "__preflight_managed_paths"): ASSEMBLES,
    ("roles/shard_staging/tasks/worlds.yml", "Read the node's host name, Kubernetes' name for it", "when"): GUARDS,
    ("roles/train/tasks/run.yml", "Report each rank's figures", "__train_report"): FORMATS_MESSAGE,
    ("roles/validate/tasks/gpu_job.yml", "Keep the result", "__validate_gpu_jobs"): ASSEMBLES,
    ("roles/validate/tasks/kubernetes.yml", "Run nvidia-smi in a Kubernetes Job on each GPU node whose GPUs answer",
     "when"): GUARDS,
    ("roles/validate/tasks/report.yml", "Cordon nodes whose GPU checks failed, uncordon those that recovered",
     "when"): GUARDS,
    ("roles/anaconda/tasks/preflight.yml", "Fail once, listing every problem with its host and fix",
     "__anaconda_problems"): ASSEMBLES,
    ("roles/nvidia_container_toolkit/tasks/install.yml", "The toolkit reports the pinned version",
     "fail_msg"): FORMATS_MESSAGE,
    ("roles/nvidia_driver/tasks/preflight.yml",
     "Plan each node's driver branch and kernel module flavour from its GPUs and its cluster's",
     "__nvidia_driver_plans"): PASSES_ARGUMENTS,
    ("roles/rolling_upgrade/tasks/mig.yml", "Write the script that makes the instances again at boot",
     "content"): FORMATS_SCRIPT,
}


class _AnyTagLoader(yaml.SafeLoader):
    """Ansible YAML (!unsafe, !vault) read as plain nodes."""


def _lines(source, node):
    """How many lines ``node``'s text spans in ``source``, a block scalar's header line not counted."""
    text = source[node.start_mark.index:node.end_mark.index].rstrip()
    return text.count("\n") + 1 - (1 if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">") else 0)


def _is_jinja(node):
    return isinstance(node, yaml.ScalarNode) and ("{{" in node.value or "{%" in node.value)


def _values(node, source, task="", key="", in_task_list=False):
    """(task name, key, lines) of each value of 4 or more lines under ``node``."""
    if isinstance(node, yaml.MappingNode):
        if in_task_list:
            task = next((value.value for name, value in node.value
                         if name.value == "name" and isinstance(value, yaml.ScalarNode)), "")
        for name, value in node.value:
            yield from _values(value, source, task, name.value, name.value in TASK_LISTS)
    elif isinstance(node, yaml.SequenceNode):
        if key in CONDITIONS and node.value and _lines(source, node) > LONGEST:
            yield task, key, _lines(source, node)
        else:
            for item in node.value:
                yield from _values(item, source, task, key, in_task_list)
    elif isinstance(node, yaml.ScalarNode) and (_is_jinja(node) or key in CONDITIONS) \
            and _lines(source, node) > LONGEST:
        yield task, key, _lines(source, node)


def _long_in(source):
    root = yaml.compose(source, Loader=_AnyTagLoader)  # noqa: S506 (a SafeLoader)
    return [] if root is None else list(_values(root, source, in_task_list=isinstance(root, yaml.SequenceNode)))


def long_values(path):
    relative = str(path.relative_to(ROOT))
    return [(relative, task, key, lines) for task, key, lines in _long_in(path.read_text())]


def test_the_files_are_found():
    assert any(str(path.relative_to(ROOT)).startswith("playbooks/") for path in FILES)
    assert len({path.parts[-3] for path in FILES}) >= 10


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_long_jinja_only_formats(path):
    """A value of more than LONGEST lines that ALLOWED does not name decides: move it into a tested filter."""
    found = [value for value in long_values(path) if value[:3] not in ALLOWED]
    assert found == []


def test_each_allowed_value_is_still_long():
    """An entry whose value was shortened, moved or renamed goes from ALLOWED."""
    found = {value[:3] for path in FILES for value in long_values(path)}
    assert sorted(set(ALLOWED) - found) == []


def test_the_reasons_are_one_line():
    assert all(reason and "\n" not in reason for reason in ALLOWED.values())


@pytest.mark.parametrize("text, expected", [
    pytest.param("- name: A\n  debug:\n    msg: >-\n      {{ a\n      b\n      c }}\n", [], id="three-lines"),
    pytest.param("- name: A\n  debug:\n    msg: >-\n      {{ a\n      b\n      c\n      d }}\n",
                 [("A", "msg", 4)], id="four-lines"),
    pytest.param("- name: A\n  debug:\n    msg: >-\n      a\n      b\n      c\n      d\n", [], id="no-jinja"),
    pytest.param("- name: A\n  debug:\n  when:\n    - a\n    - b\n    - c\n    - d\n", [("A", "when", 4)],
                 id="when-list"),
    pytest.param("- name: A\n  block:\n    - name: B\n      package:\n        name: \"{{ a\n          b\n          c\n"
                 "          d }}\"\n", [("B", "name", 4)], id="in-a-block-not-the-module-name"),
    pytest.param("x: >-\n  {{ a\n  b\n  c\n  d }}\n", [("", "x", 4)], id="vars-file"),
])
def test_a_long_value_is_found(text, expected):
    assert _long_in(text) == expected
