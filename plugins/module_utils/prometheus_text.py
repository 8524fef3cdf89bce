# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus' text exposition format (version 0.0.4): metric families rendered as text, written atomically.

What node_exporter's textfile collector reads: `# HELP` and `# TYPE` once per family, then one line per sample,
`name{label="value",...} value`. Label values escape backslash, double quote and newline; help text backslash and
newline. Stdlib only: it runs on the nodes.
"""

from __future__ import annotations

import math
import os
import re

KINDS = ("counter", "gauge", "untyped")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class MetricFamily(object):
    """One metric name with its type, help text and samples; a sample whose value is None is left out, so a reading
    the GPU does not report is absent rather than a made-up 0."""

    def __init__(self, name, kind, help_text):
        if not _METRIC_NAME.match(name) or name.startswith("__"):
            raise ValueError("%r is not a valid metric name" % name)
        if kind not in KINDS:
            raise ValueError("metric type %r is not one of %s" % (kind, ", ".join(KINDS)))
        self.name, self.kind, self.help_text = name, kind, help_text
        self.samples = []

    def add(self, labels, value):
        """labels: a sequence of (name, value) pairs, in the order they are written."""
        if value is None:
            return
        for label, _value in labels:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError("%r is not a valid label name (metric %s)" % (label, self.name))
        self.samples.append((tuple(labels), value))


def format_value(value):
    """1 -> '1', 0.5 -> '0.5', True -> '1', 1e21 -> '1e+21', NaN and infinities as Prometheus spells them."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def escape_label_value(text):
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render(families):
    """The text of the families that hold samples, in the order given; each name at most once."""
    lines, seen = [], set()
    for family in families:
        if not family.samples:
            continue
        if family.name in seen:
            raise ValueError("metric family %s is rendered twice" % family.name)
        seen.add(family.name)
        lines.append("# HELP %s %s" % (family.name, escape_help(family.help_text)))
        lines.append("# TYPE %s %s" % (family.name, family.kind))
        for labels, value in family.samples:
            label_text = ",".join('%s="%s"' % (name, escape_label_value(text)) for name, text in labels)
            lines.append("%s%s %s" % (family.name, "{%s}" % label_text if label_text else "", format_value(value)))
    return "\n".join(lines) + "\n" if lines else ""


def write_atomically(path, text, mode=0o644):
    """Write text to path through a temporary file in the same directory and a rename, so a reader (node_exporter
    scraping the textfile directory) sees the old file or the new one, never half of one. The temporary name ends
    in .tmp, which the textfile collector does not read."""
    directory, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, ".%s.%d.tmp" % (name, os.getpid()))
    try:
        with open(temporary, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
