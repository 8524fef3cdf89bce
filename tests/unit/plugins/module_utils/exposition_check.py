# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of Prometheus' text exposition format for the collector tests: a strict parser written from the format's
specification (independent of the writer under test), and promtool's own check. The tests take promtool from the
session fixture of tests/unit/conftest.py, which fetches it when it is not at hand (never a skip decided at collection).
"""

from __future__ import annotations

import math
import re
import subprocess

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_HELP = re.compile(r"^# HELP (%s) (.*)$" % _NAME)
_TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % _NAME)
_SAMPLE = re.compile(r"^(%s)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$" % _NAME)
_LABEL_PAIR = re.compile(r'(%s)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)' % _LABEL)
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_exposition(text):
    """{name: {"type", "help", "samples": [(labels dict, float)]}}; AssertionError on anything the format forbids:
    a sample before its family's TYPE, a family split in two, HELP or TYPE twice, a bad name, label or value, a
    label twice on one sample, the same series twice, a missing final newline."""
    assert text.endswith("\n"), "the exposition does not end with a newline"
    families, current, closed, series = {}, None, set(), set()
    for number, line in enumerate(text[:-1].split("\n"), 1):
        where = "line %d: %r" % (number, line)
        assert line.strip(), "%s: empty line" % where
        help_match, type_match = _HELP.match(line), _TYPE.match(line)
        if help_match or type_match:
            name = (help_match or type_match).group(1)
            assert name not in closed, "%s: family %s appears a second time" % (where, name)
            if current is not None and current != name:
                closed.add(current)
            current = name
            family = families.setdefault(name, {"type": None, "help": None, "samples": []})
            key = "help" if help_match else "type"
            assert family[key] is None, "%s: second %s for %s" % (where, key.upper(), name)
            assert not family["samples"], "%s: %s after samples of %s" % (where, key.upper(), name)
            family[key] = help_match.group(2) if help_match else type_match.group(2)
            continue
        assert not line.startswith("#"), "%s: a comment that is neither HELP nor TYPE" % where
        match = _SAMPLE.match(line)
        assert match, "%s: not a sample line" % where
        name, label_text, value_text = match.group(1), match.group(2), match.group(3)
        assert name == current, "%s: sample of %s outside its family (%s)" % (where, name, current)
        assert families[name]["type"] is not None, "%s: sample before the TYPE of %s" % (where, name)
        labels, position = {}, 0
        while label_text and position < len(label_text):
            pair = _LABEL_PAIR.match(label_text, position)
            assert pair, "%s: bad label at %r" % (where, label_text[position:])
            assert pair.group(1) not in labels, "%s: label %s twice" % (where, pair.group(1))
            labels[pair.group(1)] = re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], pair.group(2))
            position = pair.end()
        assert value_text in ("NaN", "+Inf", "-Inf") or re.match(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$", value_text), \
            "%s: value %r is not a Prometheus float" % (where, value_text)
        value = float(value_text)
        identity = (name, tuple(sorted(labels.items())))
        assert identity not in series, "%s: the same series twice" % where
        series.add(identity)
        if families[name]["type"] == "counter":
            assert not math.isnan(value) and value >= 0, "%s: a counter below 0" % where
        families[name]["samples"].append((labels, value))
    return families


def promtool_check_metrics(promtool, text):
    """(exit code, output) of `promtool check metrics` on text, promtool the binary's path (the fixture's)."""
    completed = subprocess.run([promtool, "check", "metrics"], input=text.encode(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=60, check=False)
    return completed.returncode, completed.stdout.decode(errors="replace")
