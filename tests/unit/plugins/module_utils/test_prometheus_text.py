import os

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.prometheus_text import (
    MetricFamily,
    format_value,
    render,
    write_atomically,
)
from exposition_check import parse_exposition, promtool_check_metrics


@pytest.mark.parametrize("value, text", [
    (1, "1"), (0, "0"), (True, "1"), (False, "0"), (0.23, "0.23"), (700.0, "700"), (692.53, "692.53"),
    (150754820096, "150754820096"), (1e21, "1e+21"), (float("nan"), "NaN"), (float("inf"), "+Inf"), (-float("inf"), "-Inf"),
])
def test_format_value(value, text):
    assert format_value(value) == text


def test_render_escapes_label_values_and_help():
    family = MetricFamily("nvidia_driver_info", "gauge", 'a help with \\ and\nnewline')
    family.add((("model", 'NVIDIA "H200"\\x\nnext'),), 1)
    text = render([family])
    assert text == ('# HELP nvidia_driver_info a help with \\\\ and\\nnewline\n'
                    '# TYPE nvidia_driver_info gauge\n'
                    'nvidia_driver_info{model="NVIDIA \\"H200\\"\\\\x\\nnext"} 1\n')
    assert parse_exposition(text)["nvidia_driver_info"]["samples"] == [({"model": 'NVIDIA "H200"\\x\nnext'}, 1.0)]


def test_render_leaves_out_unknown_values_and_empty_families():
    known = MetricFamily("a_celsius", "gauge", "a")
    known.add((("gpu", "0"),), None)
    known.add((("gpu", "1"),), 35.0)
    empty = MetricFamily("b_watts", "gauge", "b")
    empty.add((), None)
    assert render([known, empty]) == '# HELP a_celsius a\n# TYPE a_celsius gauge\na_celsius{gpu="1"} 35\n'
    assert render([empty]) == ""


def test_render_refuses_a_family_twice():
    first, second = MetricFamily("x", "gauge", "x"), MetricFamily("x", "gauge", "x")
    first.add((), 1)
    second.add((), 2)
    with pytest.raises(ValueError, match="twice"):
        render([first, second])


@pytest.mark.parametrize("name, kind, label", [
    ("9lives", "gauge", "gpu"), ("a-b", "gauge", "gpu"), ("__reserved", "gauge", "gpu"), ("ok", "histogram", "gpu"),
    ("ok", "gauge", "bad-label"), ("ok", "gauge", "__name__"),
])
def test_names_types_and_labels_are_checked(name, kind, label):
    with pytest.raises(ValueError):
        MetricFamily(name, kind, "h").add(((label, "v"),), 1)


def test_write_atomically_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "nvidia_gpu.prom"
    target.write_text("old\n")
    write_atomically(str(target), "new\n")
    assert target.read_text() == "new\n"
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o644)
    assert sorted(os.listdir(tmp_path)) == ["nvidia_gpu.prom"]


def test_write_atomically_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "nvidia_gpu.prom"
    target.write_text("old\n")

    def failing_replace(*_args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_atomically(str(target), "new\n")
    assert target.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["nvidia_gpu.prom"]


@pytest.mark.parametrize("text, problem", [
    ("x 1", "newline"),
    ("# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\nx 2\n", "outside its family"),
    ("x 1\n", "outside its family"),
    ('# TYPE x gauge\nx{a="1",a="2"} 1\n', "twice"),
    ('# TYPE x gauge\nx{a="1"} 1\nx{a="1"} 2\n', "same series"),
    ('# TYPE x gauge\nx{a="\\q"} 1\n', "bad label"),
    ("# TYPE x gauge\nx one\n", "not a Prometheus float"),
    ("# TYPE x_total counter\nx_total -1\n", "below 0"),
])
def test_the_strict_check_catches_what_the_format_forbids(text, problem):
    with pytest.raises(AssertionError, match=problem):
        parse_exposition(text)


def test_promtool_agrees_with_the_strict_check_on_a_bad_counter_name(promtool):
    code, output = promtool_check_metrics(promtool, "# HELP x_bytes x\n# TYPE x_bytes counter\nx_bytes 1\n")
    assert code != 0 and "_total" in output
