"""Reading sysfs attribute files: absent, unreadable or empty is None."""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._rdma.sysfs_files import (
    entries,
    numbered_entries,
    read_int,
    read_text,
)


def test_read_text_and_int(tmp_path):
    (tmp_path / "lid").write_text("0x1a\n")
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "word").write_text("ACTIVE\n")
    assert read_text(str(tmp_path / "lid")) == "0x1a"
    assert read_text(str(tmp_path / "empty")) is None
    assert read_text(str(tmp_path / "absent")) is None
    assert read_text(str(tmp_path)) is None  # a directory: OSError
    assert read_int(str(tmp_path / "lid"), 16) == 26
    assert read_int(str(tmp_path / "word")) is None
    assert read_int(str(tmp_path / "absent")) is None


def test_entries_in_order(tmp_path):
    for name in ("10", "2", "1", "gid_attrs"):
        (tmp_path / name).mkdir()
    assert numbered_entries(str(tmp_path)) == [1, 2, 10]
    assert entries(str(tmp_path)) == ["1", "10", "2", "gid_attrs"]
    assert numbered_entries(str(tmp_path / "absent")) == [] and entries(str(tmp_path / "absent")) == []
