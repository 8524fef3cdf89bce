"""The controller's files in a converged_state record: content and mode show, a missing file reads absent."""

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._converged import controller as cc


def test_a_file_reads_as_its_mode_and_digest_and_each_change_shows(tmp_path):
    config = tmp_path / "cluster_a.kubeconfig"
    config.write_text("apiVersion: v1\n")
    config.chmod(0o600)
    state = cc.controller_path_state(str(config))
    assert state.startswith("file 600 ") and len(state.split()[2]) == 64
    config.chmod(0o644)
    assert cc.controller_path_state(str(config)) != state
    config.chmod(0o600)
    config.write_text("apiVersion: v2\n")
    assert cc.controller_path_state(str(config)) != state


def test_a_missing_file_reads_absent_and_items_are_named_by_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cc.controller_path_items(["~/.kube/a.kubeconfig"]) == {"controller path ~/.kube/a.kubeconfig": "absent"}
    assert cc.controller_path_state(str(tmp_path)).startswith("dir ")
