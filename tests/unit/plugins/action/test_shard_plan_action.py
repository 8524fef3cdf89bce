# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_plan action: the plan it writes through a real ansible-playbook run, each target's report handed to it as
its reports argument. Its parts are tested under tests/unit/plugins/plugin_utils/_staging_plan/."""
import json
import pathlib
import subprocess
import sys
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext

from ansible_collections.dlinfra.gpu_cluster.plugins.action.shard_plan import ActionModule

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]


PLAYBOOK = """
- hosts: nodes
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        report:
          room:
            reserve_bytes: "{{ reserve | default(0) }}"
            results: [{item: {name: ds}, free_bytes: "{{ free }}", held_bytes: 0, total_bytes: 100000000}]
          peer_endpoint: {address: "10.0.0.{{ groups['nodes'].index(inventory_hostname) + 1 }}", port: 8473}
    - dlinfra.gpu_cluster.shard_plan:
        datasets: [{name: ds, source: "file://%(data)s/s-{000..019}.tar", index: "%(data)s/index.json", mode: "{{ mode }}", replicas: 2}]
        targets: "{{ groups['nodes'] }}"
        reports: "{{ dict(groups['nodes'] | zip(groups['nodes'] | map('extract', hostvars) | map(attribute='report'))) }}"
        plan_dir: "%(plans)s"
      run_once: true
      register: plan
    - ansible.builtin.copy:
        content: "{{ plan | to_json }}"
        dest: "%(plans)s/result.json"
        mode: "0644"
      run_once: true
      check_mode: false
"""


def run_plan(tmp_path, mode="auto", free=(10**7, 10**7, 10**7), reserve=0, check=False):
    data = tmp_path / "data"
    if not data.exists():
        data.mkdir()
        entries = [{"url": "s-%03d.tar" % i, "nsamples": 1, "filesize": 100000 + i} for i in range(20)]
        (data / "index.json").write_text(json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": entries}))
    plans = tmp_path / "plans"
    plans.mkdir(exist_ok=True)
    (tmp_path / "play.yml").write_text(PLAYBOOK % {"data": data, "plans": plans})
    host_line = "    n%d: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}', free: %d, reserve: %d, mode: %s}\n"
    (tmp_path / "hosts.yml").write_text("nodes:\n  hosts:\n" + "".join(host_line % (i, room, reserve, mode) for i, room in enumerate(free)))
    command = [sys.executable, "-m", "ansible", "playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    done = subprocess.run(command + (["--check", "--diff"] if check else []), capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    return done, json.loads((plans / "result.json").read_text()) if done.returncode == 0 else None


def test_check_mode_shows_the_plan_and_writes_none(tmp_path):
    done, result = run_plan(tmp_path, check=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert result["changed"] is True
    assert "dataset ds: replicate (on every node), 20 shards" in result["msg"]
    assert "dataset ds: no plan yet" in done.stdout
    assert not (tmp_path / "plans" / "ds.plan.json").exists()


def test_plan_is_written_once_then_unchanged(tmp_path):
    done, first = run_plan(tmp_path, mode="partition")
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((tmp_path / "plans" / "ds.plan.json").read_text())
    assert first["changed"] is True and plan["mode"] == "partition"
    assert first["datasets"]["ds"]["clusters"][""]["headroom"] == plan["headroom"] == 0.05  # a dataset that sets none: the default
    assert all(len(set(nodes)) == 2 for nodes in plan["assignment"].values())
    lists = first["datasets"]["ds"]["lists"]
    held = [json.loads(pathlib.Path(lists[host]).read_text()) for host in ("n0", "n1", "n2")]
    assert sum(len(shards) for shards in held) == 40
    # Two copies each: the first node of a shard's placement takes it from the source, the second from that node.
    total = sum(100000 + i for i in range(20))
    assert first["datasets"]["ds"]["clusters"][""]["transfer"] == {"peer_assist": True, "source_bytes": total, "peer_bytes": total}
    assert "fetch 40 copies (3.8 MiB: 1.9 MiB from the source, 1.9 MiB between peers)" in first["msg"]
    peers = {host: json.loads(pathlib.Path(first["datasets"]["ds"]["peer_lists"][host]).read_text()) for host in ("n0", "n1", "n2")}
    asked = {}
    for host, config in peers.items():
        assert (config["node"], config["port"]) == (host, 8473)
        assert config["address"] == "10.0.0.%d" % (int(host[1]) + 1)
        for shard, peer in config["sources"].items():
            assert plan["assignment"][shard] == [peer, host]
            assert config["peers"][peer] == "http://10.0.0.%d:8473" % (int(peer[1]) + 1)
            assert host in peers[peer]["downstream"]
            asked[shard] = host
    assert sorted(asked) == sorted(plan["assignment"])  # every shard's second copy comes from a peer
    done, second = run_plan(tmp_path, mode="partition")
    assert second["changed"] is False
    assert second["datasets"]["ds"]["changes"]["fetch_copies"] == 0


def test_a_dataset_too_big_for_the_nodes_fails_saying_it_must_be_streamed(tmp_path):
    done, _result = run_plan(tmp_path, free=(10**6, 10**6, 10**6), reserve=500000)
    assert done.returncode != 0
    assert "are missing. Stream it from distributed storage instead" in done.stdout, done.stdout


CLUSTER_PLAYBOOK = """
- hosts: nodes
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        report:
          room:
            results: [{item: {name: ds}, free_bytes: 10000000, held_bytes: 0, total_bytes: 100000000}]
            plan_dir: "{{ inventory_dir }}/.shard_staging"
    - dlinfra.gpu_cluster.shard_plan:
        datasets: [{name: ds, source: "file://%(data)s/s-{000..019}.tar", index: "%(data)s/index.json", mode: partition,
                    replicas: 1, peer_assist: false}]
        targets: "{{ ansible_play_hosts_all }}"
        reports: "{{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars) | map(attribute='report'))) }}"
        cluster_group_pattern: "^cluster_"
        plan_dir: /nonexistent/the-first-hosts
      run_once: true
"""


def test_each_clusters_plan_goes_where_its_first_target_says_whichever_host_runs_the_plan(tmp_path):
    """Hosts from two inventory sources in different directories: each cluster's plan lands in its own first target's
    plan_dir, in one run over both and in a run of one cluster alone."""
    data = tmp_path / "data"
    data.mkdir()
    entries = [{"url": "s-%03d.tar" % i, "nsamples": 1, "filesize": 100000 + i} for i in range(20)]
    (data / "index.json").write_text(json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": entries}))
    (tmp_path / "play.yml").write_text(CLUSTER_PLAYBOOK % {"data": data})
    local = "{ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}'}"
    sources = []
    for cluster, hosts in (("cluster_a", ("a1", "a2")), ("cluster_b", ("b1", "b2"))):
        source = tmp_path / cluster
        source.mkdir()
        (source / "hosts.yml").write_text("nodes:\n  children:\n    %s:\n      hosts:\n%s" % (
            cluster, "".join("        %s: %s\n" % (host, local) for host in hosts)))
        sources += ["-i", str(source / "hosts.yml")]
    command = [sys.executable, "-m", "ansible", "playbook", *sources, str(tmp_path / "play.yml")]
    for limit in ([], ["--limit", "cluster_b"]):
        done = subprocess.run(command + limit, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        for cluster, hosts in (("cluster_a", ["a1", "a2"]), ("cluster_b", ["b1", "b2"])):
            plan = json.loads((tmp_path / cluster / ".shard_staging" / cluster / "ds.plan.json").read_text())
            assert sorted(plan["nodes"]) == hosts


def make_action(args, check_mode=False):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    task.diff = False
    return ActionModule(task, mock.MagicMock(), PlayContext(), loader=None, templar=None, shared_loader_obj=None)


def index_dataset(tmp_path):
    entries = [{"url": "s-%d.tar" % i, "nsamples": 1, "filesize": 1000 + i} for i in range(4)]
    (tmp_path / "index.json").write_text(json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": entries}))
    return {"name": "ds", "source": "file://%s/s-{0..3}.tar" % tmp_path, "index": str(tmp_path / "index.json"),
            "mode": "partition", "replicas": 1, "peer_assist": False}


def report(free=10 ** 6, **extra):
    return dict({"room": {"reserve_bytes": 0, "results": [{"item": {"name": "ds"}, "free_bytes": free, "held_bytes": 0,
                                                           "total_bytes": 10 ** 7}]}}, **extra)


def test_the_action_plans_from_the_reports_it_is_handed_and_reads_no_host_variable(tmp_path):
    reports = {"n0": report(ranks={"set": 2}), "n1": report()}
    action = make_action({"datasets": [index_dataset(tmp_path)], "targets": ["n0", "n1"], "reports": reports,
                          "plan_dir": str(tmp_path / "plans")})
    result = action.run(task_vars={"groups": {}})  # no hostvars: a KeyError if the action looked there
    planned = result["datasets"]["ds"]
    assert result["changed"] is True and (tmp_path / "plans" / "ds.plan.json").exists()
    assert {host: node["ranks"] for host, node in planned["nodes"].items()} == {"n0": 2, "n1": 1}
    assert result["msg"] == planned["summary"]


def test_a_target_without_a_report_is_named(tmp_path):
    action = make_action({"datasets": [index_dataset(tmp_path)], "targets": ["n0", "n1"], "reports": {"n0": report()},
                          "plan_dir": str(tmp_path / "plans")})
    with pytest.raises(AnsibleActionFail, match=r"dataset 'ds': no space report from target n1: it is unreachable"):
        action.run(task_vars={"groups": {}})


@pytest.mark.parametrize("args, message", [
    ({"targets": ["n0"], "plan_dir": "/p"}, "shard_plan needs datasets"),
    ({"datasets": [], "targets": [], "plan_dir": "/p"}, "targets (a non-empty list of hosts)"),
    ({"datasets": [], "targets": ["n0"], "plan_dir": "/p", "reports": ["n0"]}, "reports must be a dict"),
    ({"datasets": [], "targets": ["n0"], "plan_dir": "/p", "reports": {"n0": {"ranks": {"set": 0}}}},
     "node 'n0': shard_staging_ranks_per_node is 0"),
])
def test_arguments_it_cannot_use_fail_the_task(args, message):
    with pytest.raises(AnsibleActionFail, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_action(args).run(task_vars={"groups": {}})
