# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shard_staging role run for real by ansible-playbook on four local targets in two clusters, a file:// source: each
cluster is planned apart, in its own directory; two slices by cluster at once (two ansible-playbook processes) end where
one run over both ends, also when one of them fails and is run again; a slice that takes part of a cluster is refused
before anything is written."""
import json
import pathlib
import subprocess
import sys
import time

from shard_stores import file_source, free_ports, role_play

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
CLUSTERS = {"cluster_x": ["n0", "n1"], "cluster_y": ["n2", "n3"]}


def lab(root, source):
    """An inventory of the four nodes (each serves its peers on its own port), its play, and the nodes' roots."""
    root.mkdir()
    hosts = "".join("        n%d: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}', "
                    "shard_staging_root: %s/n%d, shard_staging_index: '{{ shard_staging_root }}/datasets.json', "
                    "shard_staging_peer_address: 127.0.0.1, shard_staging_peer_port: %d, shard_staging_poll_interval: 1}\n"
                    % (i, root, i, port) for i, port in enumerate(free_ports(4)))
    clusters = "".join("    %s:\n      hosts: {%s}\n" % (name, ", ".join("%s: " % host for host in members))
                       for name, members in CLUSTERS.items())
    (root / "hosts.yml").write_text("all:\n  children:\n    stage_targets:\n      hosts:\n" + hosts
                                    + clusters)
    dataset = {"name": "ds", "source": "file://%s/c-{00..11}.tar" % source, "index": source / "SHA256SUMS",
               "mode": "partition", "replicas": 2}
    (root / "play.yml").write_text(role_play(dataset))
    return root


def start(root, *limit):
    command = [sys.executable, "-m", "ansible", "playbook", "-i", str(root / "hosts.yml"), str(root / "play.yml"), *limit]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)


def finish(process):
    output = process.communicate(timeout=300)[0]
    return process.returncode, output


def held(root, node):
    directory = root / node / "ds"
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.tar"))} if directory.exists() else {}


def assignment(root, cluster):
    return json.loads((root / ".shard_staging" / cluster / "ds.plan.json").read_text())["assignment"]


def test_two_slices_at_once_end_where_one_run_ends(tmp_path):
    source = file_source(tmp_path / "source", 12)

    one = lab(tmp_path / "one", source)
    code, output = finish(start(one))
    assert code == 0, output
    for cluster, members in CLUSTERS.items():
        # Each cluster holds the whole dataset, twice, on its own nodes.
        placed = assignment(one, cluster)
        assert sorted(placed) == ["c-%02d.tar" % i for i in range(12)]
        assert all(len(set(nodes)) == 2 and set(nodes) <= set(members) for nodes in placed.values()), placed
        assert "cluster %s: dataset ds: partition" % cluster in output
    assert not (one / ".shard_staging" / "ds.plan.json").exists()

    sliced = lab(tmp_path / "sliced", source)
    # Part of a cluster: refused before anything is written, naming the hosts and the fix.
    code, output = finish(start(sliced, "--limit", "n0,n2,n3"))
    flat = " ".join(output.split())
    assert code != 0
    assert ("cluster cluster_x: --limit takes n0 but not n1, and the staging plan places the cluster's shards on all its "
            "targets at once; fix: run the play on the whole cluster (--limit cluster_x)") in flat, output
    assert not (sliced / ".shard_staging").exists() and not (sliced / "n0").exists()

    # Both slices at once; n3's storage is gone (a plain file where its root belongs), so cluster_y's slice fails there.
    (sliced / "n3").write_text("not a directory")
    x, y = start(sliced, "--limit", "cluster_x"), start(sliced, "--limit", "cluster_y")
    (x_code, x_output), (y_code, y_output) = finish(x), finish(y)
    assert x_code == 0, x_output
    assert y_code != 0 and "failed: [n3]" in y_output and "failed: [n2]" not in y_output, y_output
    assert assignment(sliced, "cluster_x") == assignment(one, "cluster_x")
    assert held(sliced, "n0") == held(one, "n0") and held(sliced, "n1") == held(one, "n1")
    assert held(sliced, "n2") == held(one, "n2")
    staged_x = {path: path.stat().st_mtime_ns for path in (sliced / "n0" / "ds").glob("*.tar")}

    # The failed slice again, its storage back: it completes, the other cluster's nodes untouched.
    (sliced / "n3").unlink()
    time.sleep(0.01)
    code, output = finish(start(sliced, "--limit", "cluster_y"))
    assert code == 0, output
    assert assignment(sliced, "cluster_y") == assignment(one, "cluster_y")
    assert all(held(sliced, node) == held(one, node) for node in ("n0", "n1", "n2", "n3"))
    assert {path: path.stat().st_mtime_ns for path in (sliced / "n0" / "ds").glob("*.tar")} == staged_x
    recap = {line.split()[0]: line for line in output.splitlines() if line.startswith("n") and "ok=" in line}
    assert sorted(recap) == ["n2", "n3"] and "changed=0" in recap["n2"] and "changed=0" not in recap["n3"], output
