# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_staging role run for real by ansible-playbook, three targets on local connections and a file:// source:
a target that fails while fetching does not stop the others, and a re-run completes it without touching them."""
import json
import pathlib
import subprocess
import sys

from shard_stores import file_source, free_ports, role_play

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]


def run(tmp_path):
    # Three nodes on one machine: each serves its peers on its own port of 127.0.0.1.
    hosts = "".join("    n%d: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}', shard_staging_root: %s/n%d, "
                    "shard_staging_index: '{{ shard_staging_root }}/datasets.json', "
                    "shard_staging_peer_address: 127.0.0.1, shard_staging_peer_port: %d, shard_staging_poll_interval: 1}\n"
                    % (i, tmp_path, i, port) for i, port in enumerate(free_ports(3)))
    (tmp_path / "hosts.yml").write_text("stage_targets:\n  hosts:\n" + hosts)
    command = [sys.executable, "-m", "ansible", "playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO_ROOT)


def held(tmp_path, node):
    directory = tmp_path / node / "ds"
    return sorted(p.name for p in directory.glob("*.tar")) if directory.exists() else []


def test_a_target_failing_mid_run_is_completed_by_a_rerun(tmp_path):
    source = file_source(tmp_path / "source", 12)
    dataset = {"name": "ds", "source": "file://%s/c-{00..11}.tar" % source, "index": source / "SHA256SUMS",
               "mode": "partition", "replicas": 2}
    (tmp_path / "play.yml").write_text(role_play(dataset))

    # n2's storage is gone after planning: where its dataset directory belongs there is a plain file.
    (tmp_path / "n2").write_text("not a directory")
    first = run(tmp_path)
    assert first.returncode != 0
    assert "failed: [n2]" in first.stdout and "failed: [n0]" not in first.stdout and "failed: [n1]" not in first.stdout, first.stdout
    plan = json.loads((tmp_path / ".shard_staging" / "ds.plan.json").read_text())
    planned = {node: sorted(s for s, nodes in plan["assignment"].items() if node in nodes) for node in ("n0", "n1", "n2")}
    assert held(tmp_path, "n0") == planned["n0"] and held(tmp_path, "n1") == planned["n1"]
    assert held(tmp_path, "n2") == [] and planned["n2"]
    before = {node: [(tmp_path / node / "ds" / name).stat().st_mtime_ns for name in planned[node]] for node in ("n0", "n1")}

    (tmp_path / "n2").unlink()
    second = run(tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert held(tmp_path, "n2") == planned["n2"]
    assert {node: [(tmp_path / node / "ds" / name).stat().st_mtime_ns for name in planned[node]] for node in ("n0", "n1")} == before
    recap = {line.split()[0]: line for line in second.stdout.splitlines() if line.startswith("n") and "ok=" in line}
    assert "changed=0" in recap["n0"] and "changed=0" in recap["n1"] and "changed=0" not in recap["n2"]
